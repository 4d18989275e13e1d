"""Deterministic checks of the simulator: bookkeeping invariants at every decision epoch,
built-in dispatchers against their documented rules, seeding, misuse errors."""

from __future__ import annotations

import copy
import pickle
import queue
import subprocess
import sys
import textwrap
import threading
from dataclasses import replace

import numpy as np
import pytest
from scipy import stats as sps

from serverfarm_gym.envs.config import FarmConfig, farm_from_dict
from serverfarm_gym.envs.scenarios import PRESETS, load_preset, random_farm
from serverfarm_gym.envs.simulator import FarmSimulator, SimStats
from tests.helpers.env import masked_choice, reference_priority
from tests.helpers.farms import pas_table, random_scenario_dict
from tests.helpers.invariants import check_sim_invariants
from tests.helpers.stats import ALPHA

SMALL_PRESETS = [p for p in PRESETS if p != "large-10k"]


def _configs() -> list[FarmConfig]:
    out = [load_preset(p) for p in SMALL_PRESETS]
    out += [random_farm(s) for s in (0, 3, 5)]
    out += [farm_from_dict(random_scenario_dict(s, time_varying=True)) for s in (1, 2)]
    out += [farm_from_dict(random_scenario_dict(s, general_sizes=True)) for s in (3, 4)]
    return out


CONFIGS = _configs()


@pytest.mark.parametrize("general", [False, True], ids=["fast", "general"])
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.name)
def test_step_api_invariants(config: FarmConfig, general: bool) -> None:
    """Masked random assignments through next_epoch/assign; invariants before and after each."""
    sim = FarmSimulator(config, seed=1, force_general=general)
    rng = np.random.default_rng(2)
    check_sim_invariants(sim)
    last_t = -1.0
    for _ in range(150):
        j = sim.next_epoch()
        assert 0 <= j < config.n_job_types and sim.pending_job_type == j
        assert sim.time > last_t
        last_t = sim.time
        check_sim_invariants(sim)
        sim.assign(masked_choice(rng, sim.server_mask(j)))
        assert sim.pending_job_type == -1
        check_sim_invariants(sim)


@pytest.mark.parametrize("policy", ["pas", "random"])
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.name)
def test_run_invariants(config: FarmConfig, policy: str) -> None:
    general = not config.all_exponential
    sim = FarmSimulator(config, seed=3, force_general=general)
    table = pas_table(config) if policy == "pas" else None
    pol = "priority" if policy == "pas" else "random"
    last = sim.stats()
    for n in (1, 1, 7, 100, 2_000):
        st = sim.run(n, pol, table)
        assert st.epochs == n and int(st.accepted.sum()) == n
        assert st.time > 0
        check_sim_invariants(sim)
        now = sim.stats()
        assert now.time > last.time
        # run() returns exactly the difference of the cumulative snapshots
        d = now - last
        assert d.time == pytest.approx(st.time) and d.departures == st.departures
        np.testing.assert_array_equal(d.arrivals, st.arrivals)
        last = now
    # the step API and run() interleave
    j = sim.next_epoch()
    sim.assign(masked_choice(np.random.default_rng(0), sim.server_mask(j)))
    sim.run(10, pol, table)
    check_sim_invariants(sim)


def test_large_farm_invariants() -> None:
    c = load_preset("large-10k")
    sim = FarmSimulator(c, seed=0)
    sim.run(20_000, "priority", pas_table(c))
    check_sim_invariants(sim)
    j = sim.next_epoch()
    check_sim_invariants(sim)
    sim.assign(int(np.flatnonzero(sim.server_mask(j))[-1]))
    check_sim_invariants(sim)


def test_level_sets_refuse_groups_beyond_the_tree_depth() -> None:
    from serverfarm_gym.envs.simulator import _level_sets

    with pytest.raises(ValueError, match=r"groups\[1\]\.count: at most 16,777,216"):
        _level_sets(np.array([10, 64**4 + 1]), np.array([2, 2]), 3)


def test_level_sets_with_multi_level_trees() -> None:
    """Groups of 2,000-6,000 servers (bitset trees of 2 and 3 levels): the level sets stay exact
    under PAS (non-full minima), a level-dependent table (per-level minima) and random."""
    c = load_preset("paper-100").scaled(200)
    sim = FarmSimulator(c, seed=5)
    jsq_like = -np.tile(np.arange(c.max_buffer + 1, dtype=np.float64), (c.n_groups, 1))
    for policy, table in (("priority", pas_table(c)), ("priority", jsq_like), ("random", None)):
        sim.run(30_000, policy, table)
        check_sim_invariants(sim)
    for _ in range(200):  # the step API on the same state
        j = sim.next_epoch()
        sim.assign(int(np.flatnonzero(sim.server_mask(j))[-1]))
    check_sim_invariants(sim)


# ---------------------------------------------------------------------------------------------
# built-in dispatchers = their documented rules
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("general", [False, True], ids=["fast", "general"])
@pytest.mark.parametrize("seed", range(6))
def test_builtin_priority_equals_reference_rule(seed: int, general: bool) -> None:
    """Same seed: run(n, "priority", T) and the step API driven by the reference rule consume the
    same random numbers, so they must produce the same trajectory (ties included)."""
    c = CONFIGS[seed % len(CONFIGS)] if seed < 3 else random_farm(seed)
    rng = np.random.default_rng(seed)
    table = rng.integers(0, 3, size=(c.n_groups, c.max_buffer + 1)).astype(np.float64)  # ties
    if seed == 0:
        table = pas_table(c)
    a = FarmSimulator(c, seed=seed, force_general=general)
    b = FarmSimulator(c, seed=seed, force_general=general)
    n = 1_500
    sa = a.run(n, "priority", table)
    for _ in range(n):
        j = b.next_epoch()
        b.assign(reference_priority(c, b.occ, j, table))
    sb = b.stats()
    np.testing.assert_array_equal(a.occ, b.occ)
    for f in ("arrivals", "accepted", "blocked"):
        np.testing.assert_array_equal(getattr(sa, f), getattr(sb, f))
    assert (sa.departures, sa.epochs) == (sb.departures, sb.epochs)
    for f in ("time", "work", "energy", "cost"):
        assert getattr(sa, f) == pytest.approx(getattr(sb, f), rel=1e-9), f


def test_builtin_random_is_uniform_over_the_mask() -> None:
    """run(1, "random") from a fixed state: the job lands on a uniformly random available
    non-full server (chi-square per job type). Service is so slow (rate 1e-9) that no departure
    happens within the test, so the state before the dispatch is known exactly."""
    tiny = load_preset("tiny")
    # below the validated range (serverfarm_gym.envs.validation.VALUE_MIN) on purpose, hence built directly
    slow = tuple(replace(g, service_rate=(1e-9,) * g.buffer) for g in tiny.groups)
    c = replace(tiny, groups=slow)
    sim = FarmSimulator(c, seed=0)
    rng = np.random.default_rng(1)
    hits: dict[tuple[int, tuple[bool, ...]], np.ndarray] = {}
    for _ in range(2_500):
        sim.reset()
        while sim.occ[0] < c.groups[0].buffer:  # fill server 0 (the gpu jobs go elsewhere)
            j = sim.next_epoch()
            sim.assign(0 if sim.server_mask(j)[0] else masked_choice(rng, sim.server_mask(j)))
        before = sim.occ.copy()
        st = sim.run(1, "random")  # (blocked arrivals may come first)
        assert st.departures == 0 and st.accepted.sum() == 1
        j = int(np.flatnonzero(st.accepted)[0])  # the dispatched job's type
        diff = sim.occ - before
        assert diff.sum() == 1 and diff.min() == 0
        s = int(np.argmax(diff))
        allowed = c.server_availability[j] & (before < c.buffers[c.server_group])
        assert allowed[s], (j, before, s)
        hits.setdefault((j, tuple(allowed)), np.zeros(c.n_servers, dtype=np.int64))[s] += 1
    tested = 0
    for (_, allowed), h in hits.items():
        if h.sum() >= 50 and sum(allowed) > 1:  # chi-square needs >= 5 expected per cell
            assert sps.chisquare(h[list(allowed)]).pvalue > ALPHA, hits
            tested += 1
    assert tested >= 2


# ---------------------------------------------------------------------------------------------
# seeding and reset
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("general", [False, True], ids=["fast", "general"])
def test_same_seed_same_run(general: bool) -> None:
    c = load_preset("speed-scaling")
    T = pas_table(c)
    a, b = (
        FarmSimulator(c, seed=42, force_general=general),
        FarmSimulator(c, seed=42, force_general=general),
    )
    assert _stats_equal(a.run(5_000, "random"), b.run(5_000, "random"))
    assert _stats_equal(a.run(3_000, "priority", T), b.run(3_000, "priority", T))
    c2 = FarmSimulator(c, seed=43, force_general=general)
    assert not _stats_equal(c2.run(5_000, "random"), FarmSimulator(c, seed=42).run(5_000, "random"))
    # reset(seed) restarts the same trajectory; a Generator is accepted as the seed
    first = FarmSimulator(c, seed=7, force_general=general).run(2_000, "random")
    a.reset(7)
    assert _stats_equal(a.run(2_000, "random"), first)
    a.reset(np.random.default_rng(7))
    assert _stats_equal(a.run(2_000, "random"), first)


def _stats_equal(x: SimStats, y: SimStats) -> bool:
    return (
        x.time == y.time
        and x.work == y.work
        and x.energy == y.energy
        and x.cost == y.cost
        and x.departures == y.departures
        and x.epochs == y.epochs
        and all(
            np.array_equal(getattr(x, f), getattr(y, f))
            for f in ("arrivals", "accepted", "blocked")
        )
    )


@pytest.mark.parametrize("general", [False, True], ids=["fast", "general"])
def test_reset_empties_the_farm(general: bool) -> None:
    c = load_preset("tiny")
    sim = FarmSimulator(c, seed=0, force_general=general)
    sim.run(500, "random")
    sim.next_epoch()
    sim.reset()
    assert sim.time == 0 and sim.jobs_in_system == 0 and sim.pending_job_type == -1
    assert sim.interval == 0
    np.testing.assert_array_equal(sim.level_counts[:, 0], [g.count for g in c.groups])
    st = sim.stats()
    assert st.epochs == 0 and st.arrivals.sum() == 0 and st.energy == 0
    check_sim_invariants(sim)
    sim.run(100, "random")  # a fresh run works after a reset mid-decision
    check_sim_invariants(sim)


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
@pytest.mark.parametrize("general", [False, True], ids=["fast", "general"])
def test_copies_are_independent_and_continue_identically(general: bool, how: str) -> None:
    """A deep copy (or pickle round trip) of a simulator is a snapshot: it continues exactly as
    the original would (same state, same random stream state), and neither affects the other.
    (The original stays alive throughout: a copy that still pointed into it could otherwise
    touch freed memory.)"""
    c = load_preset("tiny")
    sim = FarmSimulator(c, seed=0, force_general=general)
    sim.run(300, "random")
    j = sim.next_epoch()
    dup = copy.deepcopy(sim) if how == "deepcopy" else pickle.loads(pickle.dumps(sim))
    assert dup.pending_job_type == j and dup.time == sim.time
    np.testing.assert_array_equal(dup.occ, sim.occ)
    for x in (sim, dup):
        x.assign(int(np.flatnonzero(x.server_mask(j))[0]))
    a = sim.run(1_000, "random")
    b = dup.run(1_000, "random")
    assert _stats_equal(a, b), (a, b)
    assert _stats_equal(sim.stats(), dup.stats())
    check_sim_invariants(dup)
    # and they are independent: advancing one leaves the other where it was
    before = dup.stats()
    sim.run(100, "random")
    assert _stats_equal(dup.stats(), before)


# ---------------------------------------------------------------------------------------------
# misuse
# ---------------------------------------------------------------------------------------------
def test_misuse_errors() -> None:
    c = load_preset("tiny")
    sim = FarmSimulator(c, seed=0)
    with pytest.raises(ValueError, match="policy"):
        sim.run(10, "pas")
    with pytest.raises(ValueError, match="table"):
        sim.run(10, "priority")
    with pytest.raises(ValueError, match=r"table.*shape"):
        sim.run(10, "priority", np.zeros((2, 2)))
    with pytest.raises(RuntimeError, match="next_epoch"):
        sim.assign(0)
    j = sim.next_epoch()
    with pytest.raises(RuntimeError, match="assign"):
        sim.next_epoch()
    with pytest.raises(RuntimeError, match="assign"):
        sim.run(1, "random")
    for bad in (-1, c.n_servers):
        with pytest.raises(ValueError, match="cannot take"):
            sim.assign(bad)
    if j == 1:  # gpu jobs may not use the slow group (servers 0, 1)
        with pytest.raises(ValueError, match="cannot take"):
            sim.assign(0)
    sim.assign(int(np.flatnonzero(sim.server_mask(j))[0]))
    # fill server 3 to its buffer, then it is masked
    while sim.occ[3] < c.groups[1].buffer:
        j = sim.next_epoch()
        sim.assign(3 if sim.server_mask(j)[3] else int(np.flatnonzero(sim.server_mask(j))[0]))
    j = sim.next_epoch()
    assert not sim.server_mask(j)[3]
    with pytest.raises(ValueError, match="cannot take"):
        sim.assign(3)
    assert sim.server_at_level(1, c.groups[1].buffer) in (2, 3)


def test_simstats_arithmetic() -> None:
    z = np.zeros(2, dtype=np.int64)
    empty = SimStats(0.0, 0.0, 0.0, 0.0, z, z, z, 0, 0)
    assert empty.throughput == empty.power == empty.efficiency == empty.blocking == 0.0
    assert empty.cost_efficiency == 0.0
    np.testing.assert_array_equal(empty.blocking_per_type, [0.0, 0.0])
    s = SimStats(10.0, 4.0, 8.0, 16.0, np.array([5, 0]), np.array([4, 0]), np.array([1, 0]), 3, 4)
    assert (s.throughput, s.power, s.efficiency, s.cost_efficiency) == (0.4, 0.8, 0.5, 0.25)
    assert s.blocking == 0.2
    np.testing.assert_array_equal(s.blocking_per_type, [0.2, 0.0])
    d = s - empty
    assert d.time == 10.0 and d.epochs == 4
    assert set(s.as_dict()) >= {"throughput", "power", "efficiency", "blocking", "epochs"}


# ---------------------------------------------------------------------------------------------
# interval boundaries
# ---------------------------------------------------------------------------------------------
_HANG_SCRIPT = textwrap.dedent(
    """
    from serverfarm_gym.envs.config import farm_from_dict
    from serverfarm_gym.envs.simulator import FarmSimulator

    def farm(L):
        return farm_from_dict({
            "groups": [{"name": "g", "count": 2, "service_rate": 1.0, "busy_power": 2.0,
                        "idle_power": 1.0, "buffer": 2}],
            "job_types": [{"name": "j", "arrival_rate": [1.0, 2.0], "groups": ["g"]}],
            "interval_length": L,
        })

    for general in (False, True):  # compile / load the kernels with a safe length first
        FarmSimulator(farm(0.5), seed=0, force_general=general).run(100, "random")
    print("warm", flush=True)
    for L in (0.7, 0.1, 1 / 3, 0.3):
        for general in (False, True):
            sim = FarmSimulator(farm(L), seed=0, force_general=general)
            sim.run(2_000, "random")
            assert sim.time > 100 * L, (L, general, sim.time)
    print("ok", flush=True)
    """
)


def test_interval_boundaries_do_not_hang() -> None:
    """Time-varying farms must advance past every interval boundary.

    The kernels compute the next boundary as ``(floor(t / L) + 1) * L``; once t equals a
    boundary ``m * L`` whose quotient rounds down (``(3 * 0.7) / 0.7 < 3``), that is t itself and
    the loop never advances. Run in a subprocess, because a compiled infinite loop cannot be
    interrupted; the subprocess first loads the kernels (may compile: generous timeout), then
    gets a few seconds for what takes milliseconds.
    """
    proc = subprocess.Popen(
        [sys.executable, "-c", _HANG_SCRIPT],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()

    def line(timeout: float) -> str | None:
        try:
            return lines.get(timeout=timeout).strip()
        except queue.Empty:
            return None

    def stop() -> str:
        hung = proc.poll() is None
        proc.kill()
        proc.wait()
        return "still running" if hung else proc.stderr.read()[-3000:]

    try:
        if line(600) != "warm":
            pytest.fail(f"the subprocess could not load the kernels: {stop()}")
        if line(5) != "ok":
            pytest.fail(
                "FarmSimulator.run on a time-varying farm with interval_length in (0.7, 0.1, "
                "1/3, 0.3) did not finish 2,000 epochs in 5 s (the boundary arithmetic in "
                f"envs/kernels/dispatch.py, next_boundary, does not advance past t = m * L): {stop()}"
            )
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@pytest.mark.parametrize("general", [False, True], ids=["fast", "general"])
def test_zero_rate_interval(general: bool) -> None:
    """A schedule may have intervals without arrivals (config: "at least one interval must have
    a positive value"). With an empty farm the total event rate is then 0; the fast kernel
    computes ``dt = standard_exponential() / total`` (envs/kernels/exponential.py, loop_exponential) and
    raises ZeroDivisionError instead of jumping to the next interval boundary."""
    c = farm_from_dict(
        {
            "groups": [
                {"name": "g", "count": 1, "service_rate": 1.0, "busy_power": 1.0,
                 "idle_power": 0.0, "buffer": 1}
            ],
            "job_types": [{"name": "j", "arrival_rate": [0.0, 1.0], "groups": ["g"]}],
            "interval_length": 0.25,
        }
    )  # fmt: skip
    sim = FarmSimulator(c, seed=0, force_general=general)
    sim.run(500, "random")
    check_sim_invariants(sim)
    for _ in range(50):
        sim.next_epoch()
        assert sim.interval == 1  # arrivals only happen in the interval with a positive rate
        check_sim_invariants(sim)
        sim.assign(0)
