"""SLO baselines (baselines/slo_priority.py): best static order and best mix of two orders."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from serverfarm_gym.baselines.registry import make_policy
from serverfarm_gym.baselines.slo_priority import (
    _Simulated,
    best_order_mix,
    best_static_order,
    candidate_tables,
    order_evaluator,
    order_points,
)
from serverfarm_gym.baselines.solvers.efficiency_optimum import solve_lp
from serverfarm_gym.baselines.solvers.slo_optimum import (
    SLOInfeasibleError,
    min_response_time,
    solve_slo,
)
from serverfarm_gym.envs.config import farm_from_dict
from tests.helpers.exact import reference_farm

# the unconstrained optimum of tiny (shared reference data); a static order attains it
TINY_OPTIMUM = 0.3289309341181227


@pytest.fixture(scope="module")
def tiny():
    cfg = reference_farm("tiny")
    measure, method = order_evaluator(cfg)
    assert method == "exact"
    return cfg, measure, order_points(cfg, measure)


def with_slo(config, D):
    d = config.to_dict()
    d["slo"] = {"mean_response_time": D}
    return farm_from_dict(d)


def test_candidates_are_every_strict_order_on_small_farms():
    cfg = reference_farm("tiny")  # 2 groups x buffer 3: 6 usable pairs
    tables = candidate_tables(cfg)
    assert len(tables) == 720
    assert len({t.tobytes() for t in tables}) == 720
    # a capped search: per group order, pack/spread per group (4) and level-major (1)
    capped = candidate_tables(cfg, max_orders=100)
    assert len(capped) == 2 * (4 + 1)
    assert len({t.tobytes() for t in capped}) == len(capped)


def test_loose_slo_order_is_the_unconstrained_optimum(tiny):
    _, _, points = tiny
    assert best_static_order(points, 1e6).efficiency == pytest.approx(TINY_OPTIMUM, rel=1e-9)


def test_orders_and_mixes_meet_the_slo_below_the_optimum(tiny):
    cfg, measure, points = tiny
    lo, hi = min_response_time(cfg), solve_lp(cfg).mean_response_time
    for w in (0.8, 0.4):
        D = lo + w * (hi - lo)
        static = best_static_order(points, D)
        mix = best_order_mix(points, D, measure)
        opt = solve_slo(cfg, D).value
        assert static.mean_response_time <= D and mix.mean_response_time <= D
        assert static.efficiency <= mix.efficiency <= opt * (1 + 1e-9)
        # the mix's reported values are its exact ones
        assert measure(mix.first, mix.second, mix.p) == pytest.approx(
            (mix.efficiency, mix.mean_response_time), rel=1e-12
        )


def test_infeasible_slo_for_orders(tiny):
    _, _, points = tiny
    with pytest.raises(SLOInfeasibleError, match=r"no static priority order meets it"):
        best_static_order(points, 0.1)


def test_registered_policies_read_the_scenario_slo():
    cfg = with_slo(reference_farm("tiny"), 1.0)
    pr = make_policy("slo-priority", cfg)
    mx = make_policy("slo-mix", cfg, seed=1)
    assert pr.builtin == "priority" and pr.mean_response_time <= 1.0
    assert mx.mean_response_time <= 1.0 and mx.efficiency >= pr.efficiency
    acts, _ = mx.predict(np.zeros((3, mx.n_actions + cfg.n_job_types)), deterministic=True)
    assert acts.shape == (3,)


@pytest.mark.slow
def test_simulated_mix_matches_the_exact_mix(tiny):
    """The run-length simulation of a per-arrival mix reproduces its exact values (8 seeds,
    99.9% Student-t intervals)."""
    cfg, measure, points = tiny
    D = 0.5 * (min_response_time(cfg) + solve_lp(cfg).mean_response_time)
    mix = best_order_mix(points, D, measure)
    assert 0 < mix.p < 1
    vals = np.array(
        [_Simulated(cfg, 60_000, seed)(mix.first, mix.second, mix.p) for seed in range(8)]
    )
    half = stats.t.ppf(0.9995, 7) * vals.std(axis=0, ddof=1) / np.sqrt(8)
    want = np.array([mix.efficiency, mix.mean_response_time])
    assert np.all(np.abs(vals.mean(axis=0) - want) <= half), (vals.mean(axis=0), want, half)


def test_swap_search_improves_a_farm_too_large_to_enumerate():
    """pas-gap has 10 usable (group, level) pairs (10! orders): the swap passes find a better
    order meeting the SLO than the enumerated families (measured: 0.539 -> 0.632)."""
    from serverfarm_gym.baselines.slo_priority import swap_search
    from serverfarm_gym.envs.scenarios import load_scenario

    cfg = load_scenario("pas-gap")
    measure, _ = order_evaluator(cfg)
    points = order_points(cfg, measure)
    extra = swap_search(cfg, points, 0.8, measure)
    before = best_static_order(points, 0.8).efficiency
    after = best_static_order(points + extra, 0.8)
    assert after.efficiency > before and after.mean_response_time <= 0.8
    assert after.efficiency <= solve_slo(cfg, 0.8).value


def test_simulated_mix_at_its_ends_is_the_pure_order(tiny):
    """A mix with weight 0 or 1 is one order (the bisection measures its ends): the same sample
    path as the order alone (common random numbers), not a crash in the geometric draw."""
    cfg, _, points = tiny
    a, b = points[0].table, points[-1].table
    sim = _Simulated(cfg, 5_000, seed=3)
    assert sim(a, b, 0.0) == sim(b)
    assert sim(a, b, 1.0) == sim(a)


def test_simulated_search_keeps_the_searched_table_when_it_meets_the_slo():
    """On a farm measured by simulation the best order meeting a loose SLO is at least as
    efficient as best-priority's table, measured on the same sample path (it is a candidate)."""
    from serverfarm_gym.baselines.best_priority import BestPriorityPolicy
    from serverfarm_gym.baselines.slo_priority import slo_baselines
    from serverfarm_gym.envs.scenarios import load_scenario

    cfg = load_scenario("tiny").scaled(8)
    measure, method = order_evaluator(cfg)
    assert method == "simulated"
    eff, et = measure(BestPriorityPolicy(cfg).priority_table())
    static, _, method = slo_baselines(cfg, 2.0 * et)
    assert method == "simulated"
    assert static.efficiency >= eff and static.mean_response_time <= 2.0 * et
