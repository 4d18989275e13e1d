"""Helpers shared by the test modules (imported as ``from tests.helpers import ...``; fixtures
live in ``tests/conftest.py``, and no test module imports another).

* statistics: :func:`batch_run` simulates independent-ish batches of a long run, and
  :func:`ratio_ci` turns per-batch numerators/denominators into a ratio estimate with a
  confidence half-width from the batch-means method (delta method, Student-t quantile).
  Every statistical assertion in the suite goes through :func:`assert_within_ci`, so no
  tolerance is ever a hand-picked constant.
* scenarios: :func:`random_scenario_dict` is a seeded builder of random *valid* scenario dicts that
  exercises what :func:`envs.scenarios.random_farm` does not (per-level rate/power lists, prices,
  time-varying arrival rates, per-type general job sizes); :func:`pas_table`;
  :func:`random_dyadic_farm` (efficiencies that tie exactly across groups) with random
  occupancies and the documented observations/masks for them; :func:`random_small_farm` and the
  :data:`REFERENCE` farms with exact optima (:func:`reference_farm`).
* invariants: :func:`check_sim_invariants` asserts every bookkeeping identity the simulator must
  satisfy at any point (conservation of jobs, heap/histogram consistency, energy/work bounds, mask).
* reference rules: the env's observation and mask from the documentation (:func:`expected_obs`,
  :func:`expected_mask`) and the priority dispatcher's rule (:func:`reference_priority`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from scipy import stats as sps

from envs.config import FarmConfig, farm_from_dict
from envs.observation import (
    counts_from_occupancy,
    hist_offsets,
    level_offsets,
    n_actions,
    n_interval_features,
    obs_size,
)
from envs.scenarios import random_farm
from envs.server_farm import ServerFarmEnv
from envs.simulator import FarmSimulator, SimStats

#: two-sided error probability of every statistical check (about a 4-sigma normal tolerance)
ALPHA = 1e-4

#: interval lengths whose integer multiples divide back exactly in binary floating point; the
#: simulator's interval-boundary arithmetic hangs for others (see test_simulator_invariants.py,
#: test_interval_boundaries_do_not_hang), so generic tests stay on these until that is fixed
SAFE_INTERVALS = (0.25, 0.5, 1.0, 2.0)


# ---------------------------------------------------------------------------------------------
# statistics
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Batches:
    """Per-batch totals of a simulation run (each array has one entry per batch)."""

    time: np.ndarray
    work: np.ndarray
    energy: np.ndarray
    cost: np.ndarray
    arrivals: np.ndarray  # [n_batches, J]
    accepted: np.ndarray  # [n_batches, J]
    blocked: np.ndarray  # [n_batches, J]
    departures: np.ndarray

    @classmethod
    def from_stats(cls, runs: list[SimStats]) -> Batches:
        return cls(
            time=np.array([r.time for r in runs]),
            work=np.array([r.work for r in runs]),
            energy=np.array([r.energy for r in runs]),
            cost=np.array([r.cost for r in runs]),
            arrivals=np.array([r.arrivals for r in runs], dtype=np.float64),
            accepted=np.array([r.accepted for r in runs], dtype=np.float64),
            blocked=np.array([r.blocked for r in runs], dtype=np.float64),
            departures=np.array([r.departures for r in runs], dtype=np.float64),
        )


def pas_table(config: FarmConfig) -> np.ndarray:
    """PAS priority table: mu_k / (eps_k - eps0_k), the same at every level."""
    return np.repeat(config.group_efficiency[:, None], config.max_buffer + 1, axis=1)


def batch_run(
    config: FarmConfig,
    *,
    seed: int,
    policy: str = "priority",
    table: np.ndarray | None = None,
    n_batches: int = 30,
    batch_epochs: int = 20_000,
    warmup_epochs: int = 5_000,
    force_general: bool = False,
) -> Batches:
    """Run ``warmup_epochs`` (discarded; the farm starts empty) then ``n_batches`` consecutive
    batches of ``batch_epochs`` decision epochs. ``policy="pas"`` is the priority dispatcher
    with :func:`pas_table`."""
    if policy == "pas":
        policy, table = "priority", pas_table(config)
    sim = FarmSimulator(config, seed=seed, force_general=force_general)
    if warmup_epochs:
        sim.run(warmup_epochs, policy, table)
    return Batches.from_stats([sim.run(batch_epochs, policy, table) for _ in range(n_batches)])


def ratio_ci(num: np.ndarray, den: np.ndarray, alpha: float = ALPHA) -> tuple[float, float]:
    """Ratio estimate ``sum(num) / sum(den)`` and its two-sided ``1 - alpha`` CI half-width.

    Batch means with the delta method: the residuals ``num_i - r den_i`` are (approximately)
    i.i.d. with mean 0 across long batches, so ``se(r) = sd(residuals) / (sqrt(n) mean(den))``;
    the quantile is Student's t with n - 1 degrees of freedom.
    """
    num, den = np.asarray(num, dtype=np.float64), np.asarray(den, dtype=np.float64)
    n = num.shape[0]
    if n < 2:
        raise ValueError("ratio_ci: need at least two batches")
    r = float(num.sum() / den.sum())
    resid = num - r * den
    se = math.sqrt(float(np.sum(resid**2)) / (n * (n - 1))) / float(den.mean())
    return r, float(sps.t.ppf(1.0 - alpha / 2.0, n - 1)) * se


def mean_ci(x: np.ndarray, alpha: float = ALPHA) -> tuple[float, float]:
    """Sample mean of (approximately) i.i.d. values and its ``1 - alpha`` t half-width."""
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[0]
    se = float(x.std(ddof=1)) / math.sqrt(n)
    return float(x.mean()), float(sps.t.ppf(1.0 - alpha / 2.0, n - 1)) * se


def assert_within_ci(estimate: tuple[float, float], exact: float, what: str) -> None:
    """Assert |estimate - exact| <= half-width, with a message giving the numbers."""
    est, half = estimate
    assert abs(est - exact) <= half, (
        f"{what}: simulated {est:.6g} +- {half:.3g} (CI, alpha={ALPHA}) "
        f"does not contain the exact value {exact:.6g} (off by {abs(est - exact) / max(half, 1e-300):.2f} half-widths)"
    )


def assert_same_within_ci(a: tuple[float, float], b: tuple[float, float], what: str) -> None:
    """Two independent estimates agree: |a - b| <= sqrt(ha^2 + hb^2) (same quantile for both)."""
    half = math.hypot(a[1], b[1])
    assert abs(a[0] - b[0]) <= half, (
        f"{what}: {a[0]:.6g} +- {a[1]:.3g} vs {b[0]:.6g} +- {b[1]:.3g} differ by "
        f"{abs(a[0] - b[0]):.3g} > {half:.3g}"
    )


# ---------------------------------------------------------------------------------------------
# scenarios
# ---------------------------------------------------------------------------------------------
JOB_SIZES: tuple[dict[str, Any], ...] = (
    {"distribution": "exponential"},
    {"distribution": "deterministic"},
    {"distribution": "erlang", "k": 3},
    {"distribution": "hyperexponential", "scv": 5.0},
    {"distribution": "lognormal", "scv": 2.0},
    {"distribution": "pareto", "alpha": 2.5},
)


def random_scenario_dict(
    seed: int,
    *,
    time_varying: bool | None = None,
    general_sizes: bool | None = None,
    per_level: bool | None = None,
) -> dict[str, Any]:
    """A seeded random valid scenario dict (1-3 groups, 1-3 job types, counts 1-4, buffers 1-3).

    ``None`` for a flag means "decide at random". Per-level lists use increasing rates and powers
    (speed scaling); time-varying scenarios give every job type a 2-3 interval schedule (one
    interval may have rate 0) and some groups a price schedule.
    """
    rng = np.random.default_rng(seed)
    if time_varying is None:
        time_varying = bool(rng.random() < 0.4)
    if general_sizes is None:
        general_sizes = bool(rng.random() < 0.5)
    if per_level is None:
        per_level = bool(rng.random() < 0.5)
    n_int = int(rng.integers(2, 4)) if time_varying else 1
    K, J = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    groups = []
    for k in range(K):
        buf = int(rng.integers(1, 4))
        eps0 = round(float(rng.uniform(0.0, 1.5)), 3)
        if per_level and rng.random() < 0.7:
            mu: Any = np.round(np.cumsum(rng.uniform(0.2, 1.5, buf)), 3).tolist()
            eps: Any = np.round(eps0 + np.cumsum(rng.uniform(0.2, 2.0, buf)), 3).tolist()
        else:
            mu = round(float(rng.uniform(0.3, 3.0)), 3)
            eps = round(eps0 + float(rng.uniform(0.2, 3.0)), 3)
        g: dict[str, Any] = {
            "name": f"g{k}",
            "count": int(rng.integers(1, 5)),
            "service_rate": mu,
            "busy_power": eps,
            "idle_power": eps0,
            "buffer": buf,
        }
        if time_varying and rng.random() < 0.5:
            g["price"] = np.round(rng.uniform(0.2, 2.0, n_int), 3).tolist()
        elif rng.random() < 0.3:
            g["price"] = round(float(rng.uniform(0.2, 2.0)), 3)
        groups.append(g)
    jobs = []
    for j in range(J):
        sub = [f"g{k}" for k in range(K) if rng.random() < 0.6] or [f"g{int(rng.integers(K))}"]
        if time_varying:
            rate: Any = np.round(rng.uniform(0.2, 3.0, n_int), 3).tolist()
            if rng.random() < 0.3:
                rate[int(rng.integers(n_int))] = 0.0
        else:
            rate = round(float(rng.uniform(0.2, 3.0)), 3)
        jt: dict[str, Any] = {"name": f"j{j}", "arrival_rate": rate, "groups": sub}
        if general_sizes and rng.random() < 0.5:
            jt["job_size"] = dict(JOB_SIZES[int(rng.integers(len(JOB_SIZES)))])
        jobs.append(jt)
    d: dict[str, Any] = {"name": f"rand-{seed}", "groups": groups, "job_types": jobs}
    if general_sizes:
        d["job_size"] = dict(JOB_SIZES[int(rng.integers(1, len(JOB_SIZES)))])
    if time_varying:
        d["interval_length"] = float(SAFE_INTERVALS[int(rng.integers(len(SAFE_INTERVALS)))])
    return d


def masked_choice(rng: np.random.Generator, mask: np.ndarray) -> int:
    """A uniformly random index where ``mask`` is True (the mask must not be empty)."""
    idx = np.flatnonzero(mask)
    assert idx.size > 0, "empty action mask at a decision epoch"
    return int(idx[rng.integers(idx.size)])


# ---------------------------------------------------------------------------------------------
# invariants
# ---------------------------------------------------------------------------------------------
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
    """Local indices in a bitset tree of ``envs.kernels`` after checking that every word above
    the leaves has exactly the bits of the non-empty words below it."""
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
    """The simulator's level sets (``envs.kernels``, "level sets") agree with the occupancies:
    each (group, level) array holds exactly that level's servers with ``hpos`` pointing back,
    each bitset tree holds the same servers (and the non-full tree the servers below B_k) with
    consistent upper levels, and the cached non-full minimum is the smallest non-full server."""
    from envs import kernels as kn

    c, ib, occ = sim.config, sim._ib, sim.occ
    sets = ib[ib[kn.O_SETS] : ib[kn.O_SETS] + ib[kn.H_NSET]]
    K, C, LM = (int(x) for x in sets[[kn.S_K, kn.S_C, kn.S_LM]])

    def view(slot: int, n: int) -> np.ndarray:
        return sets[sets[slot] : sets[slot] + n]

    nfmin, tbase = view(kn.S_NFMIN, K), view(kn.S_TBASE, K * C).reshape(K, C)
    nlev, lvoff, goff = (
        view(kn.S_NLEV, K),
        view(kn.S_LVOFF, K * LM).reshape(K, LM),
        view(kn.S_GOFF, K),
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
        assert nfmin[k] == (nonfull[0] if nonfull.size else kn.NO_SERVER), k


# ---------------------------------------------------------------------------------------------
# random farms with exactly tying efficiencies, their states and documented encodings
# ---------------------------------------------------------------------------------------------
def random_dyadic_farm(
    rng: np.random.Generator,
    n_groups: int | None = None,
    max_count: int = 4,
    max_buffer: int = 4,
    state_dependent: float = 0.0,
    n_types: int | None = None,
) -> FarmConfig:
    """A random farm whose efficiencies tie exactly across groups now and then.

    Rates and power differences are drawn from small dyadic sets so that mu/(eps - eps0) takes few,
    exactly representable values. ``state_dependent`` is the probability that a group gets
    non-decreasing per-level rates and powers instead of the on/off model.
    """
    K = int(n_groups or rng.integers(2, 6))
    groups = []
    for k in range(K):
        buf = int(rng.integers(1, max_buffer + 1))
        idle = float(rng.choice([0.0, 0.5, 1.0]))
        if rng.random() < state_dependent and buf > 1:
            mu = np.cumsum(rng.choice([0.25, 0.5, 1.0], size=buf))
            eps = idle + np.cumsum(rng.choice([0.25, 0.5, 1.0, 2.0], size=buf))
            mu_v, eps_v = [float(x) for x in mu], [float(x) for x in eps]
        else:
            mu_v = float(rng.choice([1.0, 2.0, 4.0]))
            eps_v = idle + float(rng.choice([1.0, 2.0, 4.0]))
        groups.append(
            {
                "name": f"g{k}",
                "count": int(rng.integers(1, max_count + 1)),
                "service_rate": mu_v,
                "busy_power": eps_v,
                "idle_power": idle,
                "buffer": buf,
            }
        )
    J = int(n_types or rng.integers(1, 4))
    types = []
    for j in range(J):
        sub = [g["name"] for g in groups if rng.random() < 0.6] or [
            groups[int(rng.integers(K))]["name"]
        ]
        types.append({"name": f"j{j}", "arrival_rate": float(rng.uniform(0.5, 3.0)), "groups": sub})
    return farm_from_dict({"name": "random", "groups": groups, "job_types": types})


def random_occupancy(rng: np.random.Generator, config: FarmConfig) -> np.ndarray:
    """int64[S] occupancies, biased towards full and empty servers (where rules matter)."""
    B = config.buffers[config.server_group]
    occ = rng.integers(0, B + 1)
    u = rng.random(config.n_servers)
    occ = np.where(u < 0.25, B, np.where(u < 0.45, 0, occ))
    return occ.astype(np.int64)


def server_obs(config: FarmConfig, occ: np.ndarray, j: int) -> np.ndarray:
    obs = np.zeros(obs_size(config, "server"), dtype=np.float32)
    obs[: config.n_servers] = occ / config.buffers[config.server_group]
    obs[config.n_servers + j] = 1.0
    return obs


def group_obs(config: FarmConfig, occ: np.ndarray, j: int) -> np.ndarray:
    counts = counts_from_occupancy(config, occ)
    off = hist_offsets(config)
    obs = np.zeros(obs_size(config, "group"), dtype=np.float32)
    for k, g in enumerate(config.groups):
        obs[off[k] : off[k + 1]] = counts[k, : g.buffer + 1] / g.count
    obs[-config.n_job_types + j] = 1.0
    return obs


def valid_server_mask(config: FarmConfig, occ: np.ndarray, j: int) -> np.ndarray:
    return config.server_availability[j] & (occ < config.buffers[config.server_group])


def valid_group_mask(config: FarmConfig, occ: np.ndarray, j: int) -> np.ndarray:
    counts = counts_from_occupancy(config, occ)
    m = np.zeros(n_actions(config, "group"), dtype=bool)
    off = level_offsets(config)
    for k, g in enumerate(config.groups):
        if config.availability[j, k]:
            m[off[k] : off[k + 1]] = counts[k, : g.buffer] > 0
    return m


# ---------------------------------------------------------------------------------------------
# small farms for the exact solvers
# ---------------------------------------------------------------------------------------------
# exact optimal efficiencies of the reference farms (independent solver, copied from the shared
# reference data; never read at run time)
REFERENCE = {
    "tiny": (
        [("slow", 2, 1.0, 2.0, 1.0, 3), ("fast", 2, 2.0, 5.0, 1.0, 3)],
        [("web", 1.5, ["slow", "fast"]), ("gpu", 1.0, ["fast"])],
        0.3289309341181227,
    ),
    "public-1": (
        [("g0", 2, 1.457, 4.805, 0.94, 1), ("g1", 1, 1.343, 3.192, 0.896, 2),
         ("g2", 2, 1.577, 1.095, 0.181, 2)],
        [("j0", 6.7136, ["g1", "g2"]), ("j1", 0.2403, ["g0", "g2"]), ("j2", 0.3085, ["g1"])],
        0.593175867673168,
    ),
    "public-2": (
        [("g0", 1, 0.758, 2.031, 1.257, 1), ("g1", 1, 0.925, 4.382, 1.349, 2),
         ("g2", 2, 0.686, 1.193, 0.285, 2)],
        [("j0", 1.3252, ["g0", "g1", "g2"])],
        0.26601006909497354,
    ),
    "public-3": (
        [("g0", 1, 0.888, 2.307, 1.163, 2), ("g1", 1, 2.228, 4.512, 1.073, 3)],
        [("j0", 0.7294, ["g0"]), ("j1", 0.0248, ["g0", "g1"]), ("j2", 1.1796, ["g1"])],
        0.35437184448997305,
    ),
    "speed-scaling": (
        [("dvfs", 2, [1.0, 1.6, 2.0], [2.0, 3.5, 5.5], 1.0, 3), ("fixed", 2, 1.5, 3.0, 1.2, 2)],
        [("a", 2.0, ["dvfs", "fixed"]), ("b", 0.8, ["dvfs"])],
        0.3624534239921697,
    ),
}  # fmt: skip


def reference_farm(name: str) -> FarmConfig:
    groups, jobs, _ = REFERENCE[name]
    return farm_from_dict(
        {
            "name": name,
            "groups": [
                {
                    "name": n,
                    "count": c,
                    "service_rate": mu,
                    "busy_power": e,
                    "idle_power": e0,
                    "buffer": b,
                }
                for n, c, mu, e, e0, b in groups
            ],
            "job_types": [{"name": n, "arrival_rate": r, "groups": g} for n, r, g in jobs],
        }
    )


def random_small_farm(seed: int, max_count: int = 3, max_buffer: int = 3) -> FarmConfig:
    """A seeded random farm: 1-3 groups (some with per-level speed scaling), 1-3 job types."""
    rng = np.random.default_rng(seed)
    K = int(rng.integers(1, 4))
    groups = []
    for k in range(K):
        B = int(rng.integers(1, max_buffer + 1))
        e0 = float(rng.uniform(0.0, 1.5))
        if rng.random() < 0.3:  # speed scaling: increasing rate and power per level
            mu = np.cumsum(rng.uniform(0.3, 1.5, B)).tolist()
            eps = (e0 + np.cumsum(rng.uniform(0.3, 2.0, B))).tolist()
        else:
            mu, eps = float(rng.uniform(0.5, 2.5)), e0 + float(rng.uniform(0.5, 4.0))
        groups.append(
            {"name": f"g{k}", "count": int(rng.integers(1, max_count + 1)), "service_rate": mu,
             "busy_power": eps, "idle_power": e0, "buffer": B}
        )  # fmt: skip
    J = int(rng.integers(1, 4))
    cap = sum(g["count"] * np.max(g["service_rate"]) for g in groups)
    w = rng.dirichlet(np.ones(J)) * rng.uniform(0.3, 1.3) * cap
    jobs = []
    for j in range(J):
        avail = [g["name"] for g in groups if rng.random() < 0.6] or [groups[j % K]["name"]]
        jobs.append({"name": f"j{j}", "arrival_rate": float(w[j]), "groups": avail})
    return farm_from_dict({"name": f"random-{seed}", "groups": groups, "job_types": jobs})


# ---------------------------------------------------------------------------------------------
# the env: documented encodings (independent of the env's implementation)
# ---------------------------------------------------------------------------------------------
ENV_IDS = {"server": "ServerFarm-v0", "group": "ServerFarmGroup-v0"}


def make_env(scenario: Any, mode: str, **kw: Any) -> gym.Env:
    return gym.make(ENV_IDS[mode], scenario=scenario, **kw)


def random_env_configs() -> list[FarmConfig]:
    """Random farms for the env tests; the last two are time-varying with general job sizes."""
    return [random_farm(s) for s in range(4)] + [
        farm_from_dict(random_scenario_dict(s, time_varying=True, general_sizes=True))
        for s in (11, 12)
    ]


def expected_obs(env: ServerFarmEnv) -> np.ndarray:
    c, sim, j = env.config, env.sim, env.unwrapped._job
    if env.action_mode == "server":
        state = sim.occ / c.buffers[c.server_group]
    else:
        hoff = hist_offsets(c)
        state = np.zeros(int(hoff[-1]))
        for k, g in enumerate(c.groups):
            occ = sim.occ[c.group_offsets[k] : c.group_offsets[k + 1]]
            state[hoff[k] : hoff[k + 1]] = np.bincount(occ, minlength=g.buffer + 1) / g.count
    iv = np.zeros(n_interval_features(c))
    if iv.size:
        iv[sim.interval] = 1.0
    return np.concatenate([state, iv, np.eye(c.n_job_types)[j]]).astype(np.float32)


def expected_mask(env: ServerFarmEnv) -> np.ndarray:
    c, sim, j = env.config, env.sim, env.unwrapped._job
    if env.action_mode == "server":
        return expected_server_mask(c, sim.occ, j)
    loff = level_offsets(c)
    mask = np.zeros(int(loff[-1]), dtype=bool)
    for k, g in enumerate(c.groups):
        occ = sim.occ[c.group_offsets[k] : c.group_offsets[k + 1]]
        for b in range(g.buffer):
            mask[loff[k] + b] = k in c.job_types[j].groups and bool(np.any(occ == b))
    return mask


# ---------------------------------------------------------------------------------------------
# built-in dispatchers: their documented rules
# ---------------------------------------------------------------------------------------------
def reference_priority(config: FarmConfig, occ: np.ndarray, j: int, table: np.ndarray) -> int:
    """Argmax of table[k(s), n_s] over available non-full servers, ties to the smallest index."""
    sg = config.server_group
    ok = config.server_availability[j] & (occ < config.buffers[sg])
    score = np.where(ok, table[sg, occ], -np.inf)
    return int(np.argmax(score))  # first maximum = smallest index


#: env options both environment checkers (Gymnasium's and SB3's) are run with; not
#: invalid_action="raise": the checkers step with unmasked random actions
CHECKER_OPTIONS = (
    {"objective": "cost"},
    {"warmup_epochs": 200, "warmup_policy": "random"},
    {"reward_eta": 0.3, "reward_scale": 10.0, "eta_tau": 50.0},
)


# ---------------------------------------------------------------------------------------------
# scripts (train.py, evaluate.py, ...): exit codes and run directories
# ---------------------------------------------------------------------------------------------
def exit_code(call: Callable[[], Any]) -> int:
    """The exit status of a script's main: its return value, or the SystemExit it raises."""
    try:
        rc = call()
    except SystemExit as e:
        return int(e.code)
    return rc if isinstance(rc, int) else 0


def resume_run(main: Callable[[list[str]], Any], out: Path, total: int) -> Any:
    """``train.py --resume`` of the run in ``out`` up to ``total`` steps (``main`` is train.main,
    passed in so that this module imports without the train extra)."""
    return main(
        ["--output-dir", str(out), "--resume", "--total-timesteps", str(total), "--no-progress-bar"]
    )


def best_sidecar(out: Path) -> dict:
    """The JSON sidecar of a run's best model."""
    return json.loads((out / "best_model.json").read_text())
