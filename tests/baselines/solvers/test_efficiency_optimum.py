"""Exact optimum on the aggregated chain (baselines/solvers/efficiency_optimum.py): LP, policy iteration,
brute force, size refusal, and the OptimalPolicy decoder (baselines/optimal_policy.py)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from serverfarm_gym.baselines.optimal_policy import OptimalPolicy
from serverfarm_gym.baselines.solvers.efficiency_optimum import (
    AggregatedSpace,
    brute_force,
    estimate_size,
    evaluate_aggregated,
    solve,
    solve_lp,
    solve_pi,
)
from serverfarm_gym.envs.config import FarmConfig, farm_from_dict
from serverfarm_gym.envs.observation import group_action, hist_offsets, level_offsets
from tests.helpers.exact import REFERENCE, random_small_farm, reference_farm, wide_farm_dict


def random_farms(n: int, max_states: int = 1500) -> list[FarmConfig]:
    out, seed = [], 0
    while len(out) < n:
        c = random_small_farm(seed)
        seed += 1
        if estimate_size(c)[0] <= max_states:
            out.append(c)
    return out


RANDOM = random_farms(20)


# ---------------------------------------------------------------------------------------------
# sizes and refusal
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cfg", [*RANDOM[:8], reference_farm("tiny")], ids=lambda c: c.name)
def test_estimate_size_matches_built_space(cfg):
    n_states, n_vars = estimate_size(cfg)
    space = AggregatedSpace(cfg)
    assert space.n_states == n_states
    assert n_states + int(space.valid.sum()) == n_vars
    # histograms round-trip through the state index; state 0 is the empty farm
    for s in range(0, n_states, max(1, n_states // 50)):
        assert space.index_of(space.counts_of(s)) == s
    assert np.all(space.counts_of(0)[:, 0] == [g.count for g in cfg.groups])


def test_too_large_instances_are_refused_with_count_and_limit():
    big = reference_farm("tiny").scaled(30)
    n_states, n_vars = estimate_size(big)
    with pytest.raises(ValueError, match=rf"{n_vars:,} variables.*max_variables=20000"):
        solve_lp(big, max_variables=20_000)
    with pytest.raises(ValueError, match=rf"{n_states:,} states.*max_states=1000"):
        solve_pi(big, max_states=1000)
    with pytest.raises(ValueError, match="max_states"):
        OptimalPolicy(big, method="pi", max_states=1000)
    # huge farms are refused from the estimate, without enumerating anything
    huge = reference_farm("tiny").scaled(10_000)
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="above the limit"):
        solve(huge)
    assert time.perf_counter() - t0 < 1.0


def test_non_exponential_and_time_varying_farms_are_refused():
    cfg = reference_farm("tiny")
    with pytest.raises(ValueError, match="exponential"):
        solve_pi(cfg.with_job_size({"distribution": "erlang", "k": 2}))
    d = cfg.to_dict()
    d["job_types"][0]["arrival_rate"] = [1.0, 2.0]
    with pytest.raises(ValueError, match="arrival_rates="):
        solve_pi(farm_from_dict(d))
    # explicit rates for one interval are accepted
    assert solve_pi(farm_from_dict(d), arrival_rates=[1.5, 1.0]).value == pytest.approx(
        REFERENCE["tiny"][2], rel=1e-9
    )


# ---------------------------------------------------------------------------------------------
# values
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_reference_optima(name):
    cfg, expected = reference_farm(name), REFERENCE[name][2]
    lp, pi = solve_lp(cfg), solve_pi(cfg)
    assert lp.value == pytest.approx(expected, rel=1e-7)
    assert pi.value == pytest.approx(expected, rel=1e-7)
    # the LP's policy, evaluated exactly, attains the LP value
    assert lp.info["policy_value"] == pytest.approx(expected, rel=1e-7)


@pytest.mark.parametrize("cfg", RANDOM, ids=lambda c: c.name)
def test_lp_and_policy_iteration_agree(cfg):
    lp, pi = solve_lp(cfg), solve_pi(cfg)
    assert pi.value == pytest.approx(lp.value, rel=1e-7)
    assert lp.info["policy_value"] == pytest.approx(lp.value, rel=1e-7)
    hist = np.array(pi.info["history"])
    assert np.all(np.diff(hist) >= -1e-12 * hist[-1])  # eta never decreases
    # PI's deterministic policy evaluates to its value
    assert evaluate_aggregated(pi.space, pi.actions)[0] == pytest.approx(pi.value, rel=1e-12)


def test_policy_iteration_iterative_solver_agrees_with_lu():
    # 2 groups with 3 levels each: a 6-dimensional lattice, where LU fills in badly
    cfg = farm_from_dict(
        {
            "groups": [
                {"name": "a", "count": 5, "service_rate": 1.0, "busy_power": 2.0,
                 "idle_power": 1.0, "buffer": 3},
                {"name": "b", "count": 4, "service_rate": [1.2, 2.0, 2.5],
                 "busy_power": [3.0, 4.0, 5.5], "idle_power": 0.5, "buffer": 3},
            ],
            "job_types": [{"name": "x", "arrival_rate": 5.0, "groups": ["a", "b"]},
                          {"name": "y", "arrival_rate": 1.0, "groups": ["b"]}],
        }
    )  # fmt: skip
    direct = solve_pi(cfg, linear_solver="direct")
    itr = solve_pi(cfg, linear_solver="iterative")
    assert itr.info["linear_solver"] == "iterative" and itr.info["lu_fallbacks"] == 0
    assert itr.value == pytest.approx(direct.value, rel=1e-9)


# tiny farms with at most a few thousand deterministic policies
TINY = [
    farm_from_dict(
        {"groups": [{"name": "a", "count": 1, "service_rate": 1.0, "busy_power": 3.0,
                     "idle_power": 0.2, "buffer": 2},
                    {"name": "b", "count": 1, "service_rate": [1.0, 1.8], "busy_power": [2.0, 4.5],
                     "idle_power": 1.0, "buffer": 2}],
         "job_types": [{"name": "x", "arrival_rate": 1.3, "groups": ["a", "b"]}]}
    ),
    farm_from_dict(
        {"groups": [{"name": "a", "count": 2, "service_rate": [1.0, 1.5], "busy_power": [2.0, 4.0],
                     "idle_power": 0.5, "buffer": 2}],
         "job_types": [{"name": "x", "arrival_rate": 2.0, "groups": ["a"]}]}
    ),
    farm_from_dict(
        {"groups": [{"name": "a", "count": 2, "service_rate": 1.0, "busy_power": 2.0,
                     "idle_power": 1.0, "buffer": 1},
                    {"name": "b", "count": 1, "service_rate": [0.8, 2.0], "busy_power": [1.5, 3.0],
                     "idle_power": 0.3, "buffer": 2}],
         "job_types": [{"name": "x", "arrival_rate": 1.5, "groups": ["a", "b"]},
                       {"name": "y", "arrival_rate": 0.7, "groups": ["b"]}]}
    ),
]  # fmt: skip


@pytest.mark.parametrize("cfg", TINY, ids=["two-singles", "one-group-dvfs", "mixed"])
def test_brute_force_equals_lp(cfg):
    best, _act = brute_force(cfg)
    lp = solve_lp(cfg)
    assert lp.value == pytest.approx(best, rel=1e-9)
    assert solve_pi(cfg).value == pytest.approx(best, rel=1e-9)


# ---------------------------------------------------------------------------------------------
# the policy
# ---------------------------------------------------------------------------------------------
def _server_obs(cfg: FarmConfig, occ: np.ndarray, j: int) -> np.ndarray:
    onehot = np.eye(cfg.n_job_types)[j]
    return np.concatenate([occ / cfg.buffers[cfg.server_group], onehot]).astype(np.float32)


def _group_obs(cfg: FarmConfig, counts: np.ndarray, j: int) -> np.ndarray:
    off = hist_offsets(cfg)
    h = np.zeros(off[-1])
    for k, g in enumerate(cfg.groups):
        h[off[k] : off[k + 1]] = counts[k, : g.buffer + 1] / g.count
    return np.concatenate([h, np.eye(cfg.n_job_types)[j]]).astype(np.float32)


@pytest.mark.parametrize("name", ["tiny", "speed-scaling"])
def test_optimal_policy_acts_by_its_table(name):
    cfg = reference_farm(name)
    sol = solve_pi(cfg)  # deterministic
    rng = np.random.default_rng(0)
    srv = OptimalPolicy(cfg, "server", solution=sol)
    grp = OptimalPolicy(cfg, "group", solution=sol)
    assert srv.name == "optimal" and srv.builtin is None and srv.value == sol.value
    radix = cfg.buffers[cfg.server_group] + 1
    for _ in range(300):
        occ = rng.integers(0, radix)
        j = int(rng.integers(cfg.n_job_types))
        counts = np.zeros((cfg.n_groups, cfg.max_buffer + 1), dtype=np.int64)
        np.add.at(counts, (cfg.server_group, occ), 1)
        s = sol.space.index_of(counts)
        a = sol.actions[s, j]
        mask = (occ < cfg.buffers[cfg.server_group]) & cfg.server_availability[j]
        if a < 0:
            assert not mask.any()
            continue
        k, b = int(sol.space.act_k[a]), int(sol.space.act_b[a])
        # server mode: the smallest-index server of group k holding b jobs
        lo, hi = cfg.group_offsets[k], cfg.group_offsets[k + 1]
        expect = lo + int(np.flatnonzero(occ[lo:hi] == b)[0])
        assert srv.act(_server_obs(cfg, occ, j), mask) == expect
        # group mode: group_action(k, b), via predict with a batch
        gmask = np.zeros(int(level_offsets(cfg)[-1]), dtype=bool)
        gmask[sol.space.valid[s, j]] = True
        acts, _ = grp.predict(_group_obs(cfg, counts, j)[None], action_masks=gmask[None])
        assert acts[0] == group_action(cfg, k, b)


def test_randomised_decisions_are_sampled_unless_argmax():
    cfg = reference_farm("tiny")
    sol = solve_lp(cfg)
    assert not sol.is_randomized  # a vertex of the LP: deterministic here
    # make one decision randomised by hand: the empty farm, type 0, split over two actions
    s, j = 0, 0
    valid = np.flatnonzero(sol.space.valid[s, j])
    sol.probs[s, j] = 0.0
    sol.probs[s, j, valid[:2]] = [0.25, 0.75]
    assert sol.is_randomized
    counts = sol.space.counts_of(s)
    sampled = OptimalPolicy(cfg, "group", seed=1, solution=sol)
    picks = [sampled.choose(counts, j, deterministic=True) for _ in range(400)]
    frac = np.mean(np.array(picks) == valid[1])
    # binomial(400, 0.75): 5 sigma = 0.108
    assert abs(frac - 0.75) < 0.11
    argmax = OptimalPolicy(cfg, "group", seed=1, solution=sol, argmax=True)
    assert {argmax.choose(counts, j, deterministic=True) for _ in range(50)} == {valid[1]}
    assert len({argmax.choose(counts, j, deterministic=False) for _ in range(200)}) == 2


def test_solution_for_another_farm_is_rejected():
    sol = solve_pi(reference_farm("tiny"))
    with pytest.raises(ValueError, match="different scenario"):
        OptimalPolicy(reference_farm("public-3"), solution=sol)


@pytest.mark.slow
def test_policy_iteration_scales_to_1e5_states():
    # 2 groups x 24 servers x 3 levels: 105,625 aggregated states (4-dimensional lattice)
    cfg = farm_from_dict(
        {
            "groups": [
                {"name": "a", "count": 24, "service_rate": 1.0, "busy_power": 2.0,
                 "idle_power": 1.0, "buffer": 2},
                {"name": "b", "count": 24, "service_rate": 1.6, "busy_power": 3.0,
                 "idle_power": 0.4, "buffer": 2},
            ],
            "job_types": [{"name": "x", "arrival_rate": 20.0, "groups": ["a", "b"]},
                          {"name": "y", "arrival_rate": 6.0, "groups": ["a"]}],
        }
    )  # fmt: skip
    assert estimate_size(cfg)[0] > 1e5
    t0 = time.process_time()
    sol = solve_pi(cfg)
    assert time.process_time() - t0 < 120
    hist = np.array(sol.info["history"])
    assert np.all(np.diff(hist) >= -1e-12 * hist[-1])


def test_a_refusal_of_an_astronomical_farm_shows_the_magnitude():
    # 10,000 groups: the aggregated LP's size has thousands of digits (the message printed all
    # of them, and Python cannot print past 4,300)
    from serverfarm_gym.envs.config import farm_from_dict

    cfg = farm_from_dict(wide_farm_dict(10_000, 1, 10_000))
    with pytest.raises(ValueError, match=r"the aggregated LP has about 10\^30\d\d variables") as e:
        solve(cfg)
    assert len(str(e.value)) < 400
