"""Smoke tests of the benchmark scripts (``--quick``), the SimPy reference model, and regression
checks that the speed work (packed buffers, fused env step, level sets) changed results only
where it changed the algorithm.

No timing assertions here: speed is measured by the scripts in ``benchmarks/`` (BENCHMARKS.md).
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

from serverfarm_gym import envs  # noqa: F401  (registers the env ids)
from serverfarm_gym.envs.config import FarmConfig, farm_from_dict
from serverfarm_gym.envs.scenarios import load_scenario
from serverfarm_gym.envs.simulator import FarmSimulator

# ---------------------------------------------------------------------------------------------
# regression: fixed seeds, exact numbers
# ---------------------------------------------------------------------------------------------
# "original": recorded with the code before the speed work (commit 1b92d24) and still reproduced
# bit for bit. "level sets": re-recorded when the per-(group, level) heaps became unordered
# arrays + bitset trees (envs/kernels/level_sets.py). The dispatchers choose the same server
# in the same state, but a uniformly drawn member of a level is now the one at that position of
# the unordered array instead of the heap, so runs whose next state depends on *which* server of
# a level was drawn (a departure of the exponential kernel followed by a smallest-index PAS
# choice; the random dispatcher of the general kernel, whose servers carry job clocks) follow
# another (equally distributed) path. Where the identity does not matter -- the random
# dispatcher with exponential sizes (only the level counts evolve), PAS with general sizes
# (departures come from the job clocks) -- the original numbers still come out exactly.
# Distributional correctness is what the theory tests (tests/envs/test_simulator_theory.py) check.
#
# sim.run(3000, policy) from seed 7: (time, work, energy, cost, arrivals, blocked, departures,
# jobs in system at the end); must match exactly (same floating-point operations, same draws)
RUNS = {
    ("tiny", "priority", False): (  # level sets
        1201.2056070484844,
        3047.64554796834,
        9195.75420286136,
        9195.75420286136,
        [1789, 1214],
        [0, 3],
        2995,
        5,
    ),
    ("tiny", "priority", True): (  # original
        1206.2688682944997,
        3065.0842823176317,
        9278.060723983785,
        9278.060723983785,
        [1798, 1215],
        [6, 7],
        2995,
        5,
    ),
    ("tiny", "random", False): (  # original
        1199.964041371545,
        3014.325980421706,
        9927.532635584206,
        9927.532635584206,
        [1738, 1269],
        [0, 7],
        2999,
        1,
    ),
    ("tiny", "random", True): (  # level sets
        1205.4941582482063,
        3002.9063876257164,
        9963.116077202696,
        9963.116077202696,
        [1796, 1215],
        [1, 10],
        2997,
        3,
    ),
    ("paper-100", "priority", False): (  # level sets
        31.583723431944296,
        2809.8755618376476,
        7508.983235422334,
        7508.983235422334,
        [1258, 896, 532, 314],
        [0, 0, 0, 0],
        2765,
        235,
    ),
    ("paper-100", "priority", True): (  # original
        31.13202097733004,
        2834.5216253520884,
        7501.028621753816,
        7501.028621753816,
        [1280, 909, 464, 347],
        [0, 0, 0, 0],
        2760,
        240,
    ),
    ("paper-100", "random", False): (  # original
        32.010316540906075,
        2893.357071888059,
        7905.264347090316,
        7905.264347090316,
        [1250, 881, 491, 378],
        [0, 0, 0, 0],
        2856,
        144,
    ),
    ("paper-100", "random", True): (  # level sets
        31.29569094928199,
        2815.466617909326,
        7716.786330669611,
        7716.786330669611,
        [1274, 906, 482, 338],
        [0, 0, 0, 0],
        2835,
        165,
    ),
    ("tv", "priority", False): (  # level sets
        1135.4136876707144,
        3001.424939324825,
        8999.163626324857,
        12792.55111622971,
        [1853, 1170],
        [15, 8],
        2991,
        9,
    ),
    ("tv", "priority", True): (  # original
        1127.327444638806,
        2998.0250608990727,
        9002.988327197625,
        12756.840845179528,
        [1887, 1153],
        [27, 13],
        2998,
        2,
    ),
    ("tv", "random", False): (  # original
        1130.4481870681875,
        3011.298633288537,
        9596.846988445954,
        13451.310456326704,
        [1822, 1197],
        [1, 18],
        2998,
        2,
    ),
    ("tv", "random", True): (  # level sets
        1130.5783072912714,
        3028.8400532935243,
        9696.623179718694,
        13408.877905159185,
        [1865, 1160],
        [4, 21],
        2998,
        2,
    ),
}
# 600 env steps (warmup_epochs=50, max_episode_steps=300, reset(seed=3), actions from
# default_rng(1): every 7th uniform over all actions (often masked -> fallback), else uniform over
# the mask): (sum of rewards, sum of all observation entries, invalid actions, sum of job types,
# then the last info's efficiency, eta, time, blocking)
TRAJECTORIES = {
    ("paper-100", "ServerFarm-v0", ()): (  # level sets
        -75.88035625140768,
        14028.76677724719,
        37,
        545,
        0.1513513513513503,
        0.3843278454241323,
        0.008916091961498673,
        0.0,
    ),
    ("paper-100", "ServerFarmGroup-v0", ()): (  # level sets
        -90.99300054486757,
        3606.000067766756,
        52,
        531,
        0.14693877551020457,
        0.38373813452107725,
        0.01174384853754551,
        0.0,
    ),
    ("tv", "ServerFarm-v0", (("objective", "cost"),)): (  # level sets
        -14.823112819957368,
        1814.0000130236149,
        21,
        217,
        0.33333333333332227,
        0.2339745104970576,
        0.04756794406216258,
        0.0,
    ),
    ("tv", "ServerFarmGroup-v0", (("objective", "cost"),)): (  # level sets
        -13.502897887675196,
        2404.0,
        55,
        202,
        0.3333333333333345,
        0.23400668522578238,
        0.9217280949164781,
        0.0,
    ),
    ("tiny-det", "ServerFarm-v0", ()): (  # original
        -55.461273840307555,
        1057.6666778326035,
        14,
        244,
        0.3846153846153868,
        0.32534698018145064,
        0.5371964698467693,
        0.0,
    ),
    ("tiny-det", "ServerFarmGroup-v0", ()): (  # original
        -44.92060915210415,
        1803.0,
        59,
        245,
        0.3846153846153755,
        0.3256908062391029,
        0.045908917652909054,
        0.0,
    ),
}


def _time_varying() -> FarmConfig:
    d = load_scenario("tiny").to_dict()
    d["name"] = "tv"
    d["interval_length"] = 5.0
    d["groups"][0]["price"] = [1.0, 2.0, 0.5]
    d["groups"][1]["price"] = [0.7, 1.0, 3.0]
    d["job_types"][0]["arrival_rate"] = [1.5, 3.0, 0.5]
    return farm_from_dict(d)


def _scenario(name: str) -> FarmConfig:
    if name == "tv":
        return _time_varying()
    if name == "tiny-det":
        return load_scenario("tiny").with_job_size({"distribution": "deterministic"})
    return load_scenario(name)


@pytest.mark.parametrize("key", list(RUNS), ids=lambda k: "-".join(map(str, k)))
def test_sim_run_unchanged(key: tuple[str, str, bool]) -> None:
    name, policy, general = key
    c = _scenario(name)
    table = np.repeat(c.group_efficiency[:, None], c.max_buffer + 1, axis=1)
    sim = FarmSimulator(c, seed=7, force_general=general)
    st = sim.run(3000, policy, table if policy == "priority" else None)
    got = (st.time, st.work, st.energy, st.cost, st.arrivals.tolist(), st.blocked.tolist(),
           st.departures, int(sim.occ.sum()))  # fmt: skip
    assert got == RUNS[key]


@pytest.mark.parametrize("key", list(TRAJECTORIES), ids=lambda k: f"{k[0]}-{k[1]}")
def test_env_trajectory_unchanged(key: tuple) -> None:
    name, env_id, kw = key
    env = gym.make(env_id, scenario=_scenario(name), warmup_epochs=50, max_episode_steps=300,
                   **dict(kw))  # fmt: skip
    obs, info = env.reset(seed=3)
    rng = np.random.default_rng(1)
    rsum, osum, ninv, jobs = 0.0, float(obs.astype(np.float64).sum()), 0, 0
    for t in range(600):
        if t % 7 == 0:
            a = int(rng.integers(env.action_space.n))
        else:
            a = int(rng.choice(np.flatnonzero(env.unwrapped.action_masks())))
        obs, r, term, trunc, info = env.step(a)
        rsum += r
        osum += float(obs.astype(np.float64).sum())
        ninv += info["invalid_action"]
        jobs += info["job_type"]
        if term or trunc:
            obs, info = env.reset()
    got = (rsum, osum, ninv, jobs, info["efficiency"], info["eta"], info["time"], info["blocking"])
    want = TRAJECTORIES[key]
    # a step keeps the rates W, P, C incrementally instead of re-summing them over all servers
    # (O(1) per step; the original re-summed them in server mode): identical trajectory
    # (observations, decisions, times, statistics), rewards equal up to float rounding
    assert got[1:] == want[1:]
    assert math.isclose(got[0], want[0], rel_tol=1e-12)


# ---------------------------------------------------------------------------------------------
# the SimPy reference model agrees with the compiled simulator
# ---------------------------------------------------------------------------------------------
TINY_PAS_EFFICIENCY = 0.3273379092816369  # exact (CTMC), shared/data/reference-farms.yaml


def _batch_means(values: np.ndarray) -> tuple[float, float]:
    """Mean and standard error of batch means."""
    return float(values.mean()), float(values.std(ddof=1) / math.sqrt(len(values)))


@pytest.mark.parametrize("model", ["job", "memoryless"])
def test_simpy_reference_matches_compiled_and_exact_efficiency(model: str) -> None:
    from benchmarks.simpy_reference import SimpyFarm

    c = load_scenario("tiny")
    farm = SimpyFarm(c, seed=5, model=model)
    farm.run(2_000)  # warm-up
    res = farm.run(40_000, n_batches=20)
    s_mean, s_se = _batch_means(res.batch_efficiency)

    table = np.repeat(c.group_efficiency[:, None], c.max_buffer + 1, axis=1)
    sim = FarmSimulator(c, seed=6)
    sim.run(2_000, "priority", table)
    effs = np.array([sim.run(2_000, "priority", table).efficiency for _ in range(20)])
    c_mean, c_se = _batch_means(effs)
    # 4.5 standard errors: a false alarm about once in 150,000 runs
    assert abs(s_mean - c_mean) <= 4.5 * math.hypot(s_se, c_se), (s_mean, c_mean)
    assert abs(s_mean - TINY_PAS_EFFICIENCY) <= 4.5 * s_se
    assert abs(c_mean - TINY_PAS_EFFICIENCY) <= 4.5 * c_se
    assert res.epochs == 40_000 and res.events > res.epochs


def test_simpy_reference_rejects_what_it_does_not_model() -> None:
    from benchmarks.simpy_reference import SimpyFarm

    with pytest.raises(ValueError, match="exponential"):
        SimpyFarm(load_scenario("tiny").with_job_size({"distribution": "deterministic"}))
    with pytest.raises(ValueError, match="model"):
        SimpyFarm(load_scenario("tiny"), model="fast")


# ---------------------------------------------------------------------------------------------
# every benchmark script runs (--quick); no timing is asserted
# ---------------------------------------------------------------------------------------------
def test_bench_simulation_quick(tmp_path) -> None:
    from benchmarks import bench_simulation

    out = bench_simulation.main(["--quick", "--json", str(tmp_path / "sim.json")])
    assert (tmp_path / "sim.json").exists()
    assert out["compiled"]["paper-100 x1"]["per_cpu_second"] > 0
    assert out["simpy"]["paper-100 x1"]["per_cpu_second"] > 0
    assert out["floor"]["per_cpu_second"] > 0


def test_bench_env_step_quick() -> None:
    from benchmarks import bench_env_step

    out = bench_env_step.main(["--quick", "--profile", "--steps", "500"])
    assert out["server_vs_cartpole"] > 0 and out["group_big_vs_100"] > 0
    assert "total per step, with sample()" in out["profile_ns"]


def test_bench_vector_quick() -> None:
    from benchmarks import bench_vector

    out = bench_vector.main(["--quick"])
    assert out["rates"]["native"]["per_cpu_second"] > 0


def test_bench_memory_quick() -> None:
    from benchmarks import bench_memory

    out = bench_memory.main(["--quick"])
    runs = out["runs"]
    assert all(r["peak_mib"] > 0 for r in runs.values())
    assert runs["FarmSimulator.run (PAS)"]["servers"] == 10_000


def test_bench_exact_quick() -> None:
    from benchmarks import bench_exact
    from serverfarm_gym.baselines.solvers import ctmc

    before = dict(ctmc.DIRECT_LU_OPTIONS)
    out = bench_exact.main(["--quick"])
    assert len(out["runs"]) == 2 and all(r["cpu_s"] > 0 for r in out["runs"])
    # the reference factorisation gives the same stationary efficiency, to rounding
    assert all(r["efficiency_rel_diff"] < 1e-12 for r in out["runs"])
    assert before == ctmc.DIRECT_LU_OPTIONS  # the options are restored
