"""serverfarm_gym.evaluation.efficiency: the one measurement API. Each route against the exact CTMC value of the
same policy, the routes against each other on the same sample paths, the warm-up rule and the
argument checks."""

from __future__ import annotations

import numpy as np
import pytest

from serverfarm_gym.baselines.pas import pas_table
from serverfarm_gym.baselines.registry import make_policy
from serverfarm_gym.baselines.solvers.ctmc import evaluate_policy
from serverfarm_gym.envs.scenarios import load_scenario
from serverfarm_gym.evaluation.efficiency import (
    Estimate,
    Window,
    as_predictor,
    consecutive_seeds,
    measure,
    replication_seeds,
)
from tests.helpers.stats import ALPHA


@pytest.mark.parametrize("mode", ["server", "group"])
def test_vector_route_matches_the_exact_efficiency(mode):
    """PAS evaluated in 16 lockstep replications agrees with its exact CTMC efficiency within
    the replications' Student-t interval at confidence 1 - ALPHA."""
    config = load_scenario("tiny")
    exact = float(evaluate_policy(config, pas_table(config)).efficiency)
    win = Window.for_farm(config, 4_000, pas_warmup=True)
    est = measure(
        make_policy("pas", config, mode), config, win, consecutive_seeds(5, 16),
        action_mode=mode, method="vector",
    )  # fmt: skip
    assert est.replications == 16 and est.epochs == 64_000 and est.route == "vector"
    assert abs(est.efficiency - exact) <= est.interval(1 - ALPHA)
    assert est.interval(0.95) == pytest.approx(est.ci95)


def test_auto_picks_exact_builtin_vector_env():
    tiny, p100 = load_scenario("tiny"), load_scenario("paper-100")
    est = measure(make_policy("pas", tiny, "server"), tiny)
    assert est.route == "exact" and est.ci95 == 0.0 and est.mean_response_time > 0
    assert est.efficiency == pytest.approx(float(evaluate_policy(tiny, pas_table(tiny)).efficiency))
    seeds = consecutive_seeds(3, 2)
    assert measure(make_policy("pas", p100), p100, 300, seeds).route == "builtin"
    first = as_predictor(lambda obs, masks: np.argmax(masks, axis=1))
    pas_warmed = Window(200, 50, 300)
    assert measure(first, p100, pas_warmed, seeds).route == "vector"
    assert measure(first, p100, Window(200, 50), seeds).route == "env"
    # the cost objective is simulated even where the chain is solvable
    assert measure(make_policy("pas", tiny), tiny, 300, seeds, objective="cost").route == "builtin"


def test_builtin_route_follows_the_env_routes_sample_path():
    """Without a PAS warm-up the compiled dispatcher's window is the single env's: PAS gives the
    same per-replication values on both routes."""
    config = load_scenario("tiny")
    pas, win, seeds = make_policy("pas", config), Window(2_000, 200), replication_seeds(4, 3)
    fast = measure(pas, config, win, seeds, method="builtin")
    stepped = measure(pas, config, win, seeds, method="env")
    np.testing.assert_allclose(fast.per_replication, stepped.per_replication, rtol=1e-12)
    assert fast.mean_response_time == pytest.approx(stepped.mean_response_time, rel=1e-12)


@pytest.mark.parametrize(
    ("scenario", "objective"),
    [("tiny", "energy"), ("paper-100", "energy"), ("speed-scaling", "energy"),
     ("geo-us-eu", "cost"), ("lognormal", "energy")],
)  # fmt: skip
def test_builtin_route_follows_the_vector_routes_sample_path(scenario, objective):
    """With a PAS warm-up, the simulator's own PAS over the same window and seeds follows the
    vector env's sample path with PAS's per-server actions: the same per-replication values to
    float rounding (state-dependent rates, time-varying prices, general sizes included)."""
    if scenario == "lognormal":
        config = load_scenario("paper-100").with_job_size({"distribution": "lognormal", "scv": 4})
    else:
        config = load_scenario(scenario)
    kw = {"objective": objective, "action_mode": "server"}
    args = (config, Window(2_000, 300, 1_500), consecutive_seeds(77, 3))
    stepped = measure(make_policy("pas", config, "server"), *args, method="vector", **kw)
    fast = measure(make_policy("pas", config, "server"), *args, method="builtin", **kw)
    np.testing.assert_allclose(fast.per_replication, stepped.per_replication, rtol=1e-12)


def test_the_one_warmup_rule():
    """50 mean job durations from the empty farm, at least 10% of the horizon; after a PAS
    warm-up the policy's own transient, 10 durations, at least 500 epochs."""
    tiny, p100 = (
        load_scenario("tiny"),
        load_scenario("paper-100"),
    )  # 2.5 / 119.6 epochs per duration
    assert Window.for_farm(tiny, 1_500) == Window(1_500, 150)
    assert Window.for_farm(tiny, 100) == Window(100, 125)
    assert Window.for_farm(p100, 20_000) == Window(20_000, 5_982)
    assert Window.for_farm(p100, 20_000, pas_warmup=True) == Window(20_000, 1_197, 5_982)
    assert Window.for_farm(tiny, 20_000, pas_warmup=True) == Window(20_000, 500, 2_000)
    assert Window.for_farm(tiny, 100, warmup=7, pas_warmup=40) == Window(100, 7, 40)


@pytest.mark.filterwarnings("ignore::serverfarm_gym.envs.server_farm.InvalidActionWarning")
def test_bad_arguments_name_the_field():
    config = load_scenario("tiny")
    first = lambda obs, masks: np.argmax(masks, axis=1)  # noqa: E731
    with pytest.raises(ValueError, match="masked action"):
        measure(lambda obs, masks: np.argmin(masks, axis=1), config, Window(50, 0, 10),
                consecutive_seeds(0, 2), method="vector")  # fmt: skip
    with pytest.raises(ValueError, match="masked action"):
        measure(lambda obs, masks: np.argmin(masks, axis=1), config, Window(50, 0),
                consecutive_seeds(0, 2), method="env")  # fmt: skip
    with pytest.raises(ValueError, match="pas_warmup"):
        Window(100, 0, -1)
    with pytest.raises(ValueError, match="horizon"):
        Window(0, 0)
    with pytest.raises(ValueError, match="method"):
        measure(first, config, method="fast")
    with pytest.raises(ValueError, match="'builtin'"):
        measure(first, config, method="builtin")
    with pytest.raises(ValueError, match="'exact'"):
        measure(first, load_scenario("paper-100"), method="exact")
    with pytest.raises(ValueError, match="seeds"):
        measure(first, config, seeds=[])
    with pytest.raises(ValueError, match="objective"):
        measure(first, config, objective="carbon")


def test_estimate_round_trips_through_json():
    config = load_scenario("tiny")
    est = measure(make_policy("pas", config), config, 500, replication_seeds(1, 3), method="env")
    back = Estimate.from_dict(est.as_dict())
    assert back.as_dict() == est.as_dict() and back.route == "env"
    np.testing.assert_array_equal(back.per_replication, est.per_replication)
    assert len(est.per_replication) == 3 and est.epochs == 1_500
