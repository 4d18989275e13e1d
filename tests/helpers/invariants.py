"""The simulator's invariants: :func:`check_sim_invariants` asserts every bookkeeping identity the
simulator must satisfy at any point (conservation of jobs, level sets and histograms, energy and
work bounds, the mask), :func:`check_level_sets` the compiled level sets against the
occupancies."""

from __future__ import annotations

import math

import numpy as np

from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.kernels import layout
from serverfarm_gym.envs.simulator import FarmSimulator


def expected_server_mask(config: FarmConfig, occ: np.ndarray, j: int) -> np.ndarray:
    """bool[S]: servers of type j's groups that are not full, computed from scratch."""
    sg = config.server_group
    avail = np.array([sg_k in config.job_types[j].groups for sg_k in sg])
    return avail & (occ < config.buffers[sg])


def check_sim_invariants(sim: FarmSimulator) -> None:
    """Assert every identity that must hold at any point of a simulation (see module doc)."""
    c = sim.config
    occ = sim.occ
    sg = c.server_group
    st = sim.stats()
    pending = sim.pending_job_type

    # occupancy within buffers; histogram = occupancy counts (and nothing beyond B_k)
    assert np.all(occ >= 0) and np.all(occ <= c.buffers[sg]), f"occupancy {occ} out of buffers"
    counts = np.zeros_like(sim.level_counts)
    np.add.at(counts, (sg, occ), 1)
    assert np.array_equal(counts, sim.level_counts), (counts, sim.level_counts)
    # the per-(group, level) sets hand out the smallest-index server at each level
    for k in range(c.n_groups):
        lo, hi = int(c.group_offsets[k]), int(c.group_offsets[k + 1])
        for b in range(c.groups[k].buffer + 1):
            at = np.flatnonzero(occ[lo:hi] == b)
            assert sim.server_at_level(k, b) == (lo + int(at[0]) if at.size else -1)
    check_level_sets(sim)

    # job conservation: every arrival is accepted, blocked, or (one) pending decision
    pend = np.zeros(c.n_job_types, dtype=np.int64)
    if pending >= 0:
        pend[pending] = 1
    assert np.array_equal(st.arrivals, st.accepted + st.blocked + pend), (
        st.arrivals,
        st.accepted,
        st.blocked,
        pending,
    )
    assert int(st.accepted.sum()) == st.departures + int(occ.sum())
    assert st.epochs == int(st.accepted.sum()) + (1 if pending >= 0 else 0)

    # energy and work are integrals of bounded rates
    t = st.time
    tol = 1e-9 * (1.0 + t)
    idle = float(sum(g.count * g.idle_power for g in c.groups))
    peak_power = float(sum(g.count * max(g.busy_power) for g in c.groups))
    peak_mu = float(sum(g.count * max(g.service_rate) for g in c.groups))
    assert st.energy >= idle * t - tol * (1 + idle), (st.energy, idle * t)
    assert st.energy <= peak_power * t + tol * (1 + peak_power), (st.energy, peak_power * t)
    assert -tol <= st.work <= peak_mu * t + tol * (1 + peak_mu), (st.work, peak_mu * t)
    pmin, pmax = float(c.prices.min()), float(c.prices.max())
    assert pmin * st.energy - tol * (1 + pmin) <= st.cost <= pmax * st.energy + tol * (1 + pmax)

    # interval index follows the clock
    if c.is_time_varying:
        expect = math.floor(t / c.interval_length + 1e-9) % c.n_intervals
        assert sim.interval == expect or math.isclose(
            t / c.interval_length, round(t / c.interval_length), abs_tol=1e-9
        ), (sim.interval, t)

    # at a decision epoch: the mask is exactly the available non-full servers, never empty, and
    # the arriving type has a positive rate in the current interval
    if pending >= 0:
        mask = sim.server_mask(pending)
        assert np.array_equal(mask, expected_server_mask(c, occ, pending))
        assert mask.any(), "decision epoch with no available non-full server"
        assert c.arrival_rates[sim.interval, pending] > 0
        lm = sim.level_mask(pending)
        for k in range(c.n_groups):
            for b in range(c.max_buffer + 1):
                want = (
                    k in c.job_types[pending].groups
                    and b < c.groups[k].buffer
                    and bool(np.any(occ[c.group_offsets[k] : c.group_offsets[k + 1]] == b))
                )
                assert lm[k, b] == want, (k, b, lm)


def _tree_members(sets: np.ndarray, base: int, lvoff: np.ndarray, nlev: int, r: int) -> np.ndarray:
    """Local indices in a bitset tree (``serverfarm_gym.envs.kernels.level_sets``) after checking that every word
    above the leaves has exactly the bits of the non-empty words below it."""
    n = [-(-r // 64)]
    while n[-1] > 1:
        n.append(-(-n[-1] // 64))
    assert len(n) == nlev, (len(n), nlev)
    words = [
        sets[base + lvoff[lv] : base + lvoff[lv] + n[lv]].astype(np.uint64) for lv in range(nlev)
    ]
    for lv in range(1, nlev):
        bits = np.unpackbits(words[lv].view(np.uint8), bitorder="little")[: n[lv - 1]]
        assert np.array_equal(bits.astype(bool), words[lv - 1] != 0), f"tree level {lv}"
    leaf = np.unpackbits(words[0].view(np.uint8), bitorder="little")
    assert not leaf[r:].any(), "bits beyond the group's servers"
    return np.flatnonzero(leaf[:r])


def check_level_sets(sim: FarmSimulator) -> None:
    """The simulator's level sets (``serverfarm_gym.envs.kernels.level_sets``) agree with the occupancies:
    each (group, level) array holds exactly that level's servers with ``hpos`` pointing back,
    each bitset tree holds the same servers (and the non-full tree the servers below B_k) with
    consistent upper levels, and the cached non-full minimum is the smallest non-full server."""
    c, ib, occ = sim.config, sim._ib, sim.occ
    sets = ib[ib[layout.O_SETS] : ib[layout.O_SETS] + ib[layout.H_NSET]]
    K, C, LM = (int(x) for x in sets[[layout.S_K, layout.S_C, layout.S_LM]])

    def view(slot: int, n: int) -> np.ndarray:
        return sets[sets[slot] : sets[slot] + n]

    nfmin, tbase = view(layout.S_NFMIN, K), view(layout.S_TBASE, K * C).reshape(K, C)
    nlev, lvoff, goff = (
        view(layout.S_NLEV, K),
        view(layout.S_LVOFF, K * LM).reshape(K, LM),
        view(layout.S_GOFF, K),
    )
    for k in range(K):
        lo, hi = int(c.group_offsets[k]), int(c.group_offsets[k + 1])
        assert goff[k] == lo
        bk = c.groups[k].buffer
        for b in range(bk + 1):
            want = np.flatnonzero(occ[lo:hi] == b) + lo
            base, size = int(sim._hbase[k, b]), int(sim.level_counts[k, b])
            arr = sim._hdata[base : base + size].astype(np.int64)
            assert np.array_equal(np.sort(arr), want), (k, b)
            assert np.array_equal(sim._hpos[arr], np.arange(size)), (k, b)
            got = _tree_members(sets, int(tbase[k, b]), lvoff[k], int(nlev[k]), hi - lo) + lo
            assert np.array_equal(got, want), (k, b)
        nonfull = np.flatnonzero(occ[lo:hi] < bk) + lo
        got = _tree_members(sets, int(tbase[k, C - 1]), lvoff[k], int(nlev[k]), hi - lo) + lo
        assert np.array_equal(got, nonfull), k
        assert nfmin[k] == (nonfull[0] if nonfull.size else layout.NO_SERVER), k
