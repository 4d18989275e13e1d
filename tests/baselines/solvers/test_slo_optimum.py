"""The SLO-constrained optimum (baselines/solvers/slo_optimum.py) and the ``slo:`` scenario
field."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from serverfarm_gym.baselines.registry import make_policy
from serverfarm_gym.baselines.solvers.aggregated import (
    AggregatedSpace,
    aggregated_response_time,
    evaluate_aggregated,
)
from serverfarm_gym.baselines.solvers.efficiency_optimum import solve_lp
from serverfarm_gym.baselines.solvers.slo_optimum import (
    SLOInfeasibleError,
    min_response_time,
    solve_slo,
)
from serverfarm_gym.envs.config import ConfigError, farm_from_dict
from tests.helpers.exact import random_small_farm, reference_farm

# unconstrained optima of the reference farms (independent exact solver; shared reference data)
OPTIMUM = {
    "tiny": 0.3289309341181227,
    "public-1": 0.593175867673168,
    "public-2": 0.26601006909497354,
    "public-3": 0.35437184448997305,
}


def with_slo(config, D):
    d = config.to_dict()
    d["slo"] = {"mean_response_time": D}
    return farm_from_dict(d)


def micro_farm():
    """Two single servers (buffer 2) and two job types: few enough deterministic policies to
    enumerate, with a binding trade-off between the efficient and the fast server."""
    return farm_from_dict(
        {
            "name": "micro",
            "groups": [
                {"name": "eco", "count": 1, "service_rate": 1.0, "busy_power": 1.5,
                 "idle_power": 0.3, "buffer": 2},
                {"name": "fast", "count": 1, "service_rate": 3.0, "busy_power": 6.0,
                 "idle_power": 0.5, "buffer": 2},
            ],
            "job_types": [
                {"name": "a", "arrival_rate": 1.2, "groups": ["eco", "fast"]},
                {"name": "b", "arrival_rate": 0.4, "groups": ["eco", "fast"]},
            ],
        }
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# the scenario field
# ---------------------------------------------------------------------------------------------
def test_slo_field_round_trips_and_scales():
    cfg = with_slo(reference_farm("tiny"), 1.5)
    assert cfg.slo.mean_response_time == 1.5
    assert farm_from_dict(cfg.to_dict()) == cfg
    assert cfg.scaled(3).slo == cfg.slo
    assert reference_farm("tiny").slo is None


@pytest.mark.parametrize(
    ("slo", "match"),
    [
        ({"mean_response_time": 0}, r"slo\.mean_response_time: must be > 0"),
        ({"mean_response_time": "fast"}, r"slo\.mean_response_time: expected a number"),
        ({"mean_response_time": float("inf")}, r"slo\.mean_response_time: must be finite"),
        ({}, r"slo\.mean_response_time: missing"),
        ({"mean_response_time": 1, "p99": 3}, r"slo: unknown key\(s\) \['p99'\]"),
        (2.0, r"slo: expected a mapping"),
    ],
)
def test_bad_slo_is_refused_naming_the_field(slo, match):
    d = reference_farm("tiny").to_dict()
    d["slo"] = slo
    with pytest.raises(ConfigError, match=match):
        farm_from_dict(d)


# ---------------------------------------------------------------------------------------------
# the LP
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(OPTIMUM))
def test_loose_slo_is_the_unconstrained_optimum(name):
    sol = solve_slo(reference_farm(name), 1e6)
    assert sol.value == pytest.approx(OPTIMUM[name], rel=1e-9)
    assert sol.info["policy_value"] == pytest.approx(OPTIMUM[name], rel=1e-9)
    assert not sol.info["binding"]


@pytest.mark.parametrize("name", ["tiny", "public-1", "public-3"])
def test_binding_slo_is_met_exactly_with_one_randomised_pair(name):
    cfg = reference_farm(name)
    free = solve_lp(cfg)
    lo = min_response_time(cfg)
    assert lo < free.mean_response_time
    previous = free.value
    for w in (0.8, 0.5, 0.2):
        D = lo + w * (free.mean_response_time - lo)
        sol = solve_slo(cfg, D)
        # the policy's exact stationary values are the LP's: value, and E[T] = D (binding)
        assert sol.info["policy_value"] == pytest.approx(sol.value, rel=1e-8)
        assert sol.info["mean_response_time"] == pytest.approx(D, rel=1e-7)
        assert sol.info["randomised_pairs"] <= 1
        assert sol.value <= previous * (1 + 1e-10)  # tighter SLO, never better
        previous = sol.value


def test_infeasible_slo_names_the_smallest_response_time():
    cfg = reference_farm("tiny")
    lo = min_response_time(cfg)
    with pytest.raises(
        SLOInfeasibleError, match=r"slo\.mean_response_time 0\.5 cannot be met"
    ) as e:
        solve_slo(cfg, 0.5)
    assert e.value.min_response_time == pytest.approx(lo, rel=1e-12)
    assert f"{lo:.6g}" in str(e.value)
    solve_slo(cfg, lo * (1 + 1e-6))  # just above it: feasible


def _deterministic_points(space: AggregatedSpace):
    ss, jj = np.nonzero(space.has_vacancy)
    choices = [np.nonzero(space.valid[s, j])[0] for s, j in zip(ss, jj, strict=True)]
    act = np.full(space.has_vacancy.shape, -1, dtype=np.int64)
    for combo in itertools.product(*choices):
        act[ss, jj] = combo
        yield act.copy(), (ss, jj)


def _evaluate(space, probs):
    eff, pi = evaluate_aggregated(space, probs)
    return eff, aggregated_response_time(space, pi)[2]


def _onehot(space, act):
    p = np.zeros((*act.shape, space.n_actions))
    s, j = np.nonzero(act >= 0)
    p[s, j, act[s, j]] = 1.0
    return p


def _best_by_brute_force(space, D):
    """max efficiency s.t. E[T] <= D over deterministic policies and their one-pair mixes: for
    each policy and each (state, type) switched to another action, the mixing weight meeting
    E[T] = D is found by bisection (E[T] is monotone in it: a rank-one change of the chain)."""
    best = -np.inf
    for act, (ss, jj) in _deterministic_points(space):
        base = _onehot(space, act)
        eff0, t0 = _evaluate(space, base)
        if t0 <= D:
            best = max(best, eff0)
        for s, j in zip(ss, jj, strict=True):
            for a in np.nonzero(space.valid[s, j])[0]:
                if a == act[s, j]:
                    continue
                other = base.copy()
                other[s, j] = 0.0
                other[s, j, a] = 1.0
                _, t1 = _evaluate(space, other)
                if (t0 - D) * (t1 - D) >= 0:
                    continue  # no mix of the two crosses D
                lo, hi = 0.0, 1.0  # weight of `other`; t(lo) and t(hi) on opposite sides
                for _ in range(50):
                    q = 0.5 * (lo + hi)
                    _, tq = _evaluate(space, (1 - q) * base + q * other)
                    if (tq - D) * (t0 - D) > 0:
                        lo = q
                    else:
                        hi = q
                q = hi if t1 <= D else lo
                best = max(best, _evaluate(space, (1 - q) * base + q * other)[0])
    return best


@pytest.mark.slow
def test_lp_equals_brute_force_over_policies_and_one_pair_mixes():
    cfg = micro_farm()
    space = AggregatedSpace(cfg)
    lo = min_response_time(cfg)
    free = solve_lp(cfg)
    for w in (0.3, 0.7):
        D = lo + w * (free.mean_response_time - lo)
        sol = solve_slo(cfg, D)
        assert sol.info["binding"]
        assert _best_by_brute_force(space, D) == pytest.approx(sol.value, rel=1e-7)


@pytest.mark.parametrize("seed", range(3))
def test_response_time_floor_is_a_deterministic_policy_bound(seed):
    """No deterministic policy has a smaller E[T] than min_response_time (sampled policies)."""
    cfg = random_small_farm(seed, max_count=2, max_buffer=2)
    space = AggregatedSpace(cfg)
    lo = min_response_time(space)
    rng = np.random.default_rng(seed)
    for _ in range(30):
        w = rng.random(space.valid.shape) * space.valid
        act = np.where(space.has_vacancy, np.argmax(w, axis=2), -1)
        assert _evaluate(space, act)[1] >= lo * (1 - 1e-9)


# ---------------------------------------------------------------------------------------------
# the policy
# ---------------------------------------------------------------------------------------------
def test_slo_optimal_policy_reads_the_scenario_slo():
    cfg = with_slo(reference_farm("tiny"), 0.9)
    pol = make_policy("slo-optimal", cfg, seed=3)
    assert pol.slo == 0.9
    assert pol.mean_response_time == pytest.approx(0.9, rel=1e-7)
    with pytest.raises(ValueError, match=r"no SLO; add `slo: \{mean_response_time: D\}`"):
        make_policy("slo-optimal", reference_farm("tiny"))


def test_the_dual_price_is_the_optimums_sensitivity_to_the_slo():
    """``info["dual_price"]`` mu of the SLO row: by the envelope theorem the optimum moves with
    D as ``d rho* / dD = mu sum_m z(m) Lambda(m) = mu rho*`` (admitted = served work); checked
    by a central difference of step 1e-4 (its error O(h^2 rho''') is below 1e-8 relative here,
    the LP's tolerance 1e-10 / h below 1e-6)."""
    from serverfarm_gym.envs.scenarios import load_scenario

    farm = load_scenario("tiny-slo")
    opt = solve_slo(farm)
    mu, h = opt.info["dual_price"], 1e-4
    assert mu > 0 and opt.info["binding"]
    slope = (solve_slo(farm, 0.9 + h).value - solve_slo(farm, 0.9 - h).value) / (2 * h)
    assert slope == pytest.approx(mu * opt.value, rel=1e-6)
    assert solve_slo(farm, 5.0).info["dual_price"] == 0.0  # a slack SLO has no price
