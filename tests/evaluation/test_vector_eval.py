"""Batched evaluation in the native vector env (evaluation/vector_eval.py) against the exact CTMC
value of the same policy, and its argument checks."""

from __future__ import annotations

import numpy as np
import pytest

from baselines.pas import pas_table
from baselines.registry import make_policy
from baselines.solvers.ctmc import evaluate_policy
from envs.scenarios import load_scenario
from evaluation.vector_eval import as_predictor, builtin_efficiency, vector_efficiency
from tests.helpers.stats import ALPHA


@pytest.mark.parametrize("mode", ["server", "group"])
def test_pas_matches_its_exact_efficiency(mode):
    """PAS evaluated in 16 lockstep replications agrees with its exact CTMC efficiency within
    the replications' Student-t interval at confidence 1 - ALPHA."""
    config = load_scenario("tiny")
    exact = float(evaluate_policy(config, pas_table(config)).efficiency)
    est = vector_efficiency(
        make_policy("pas", config, mode), config, mode, n_epochs=4_000, replications=16, seed=5
    )
    assert est.replications == 16 and est.epochs == 64_000
    assert abs(est.efficiency - exact) <= est.interval(1 - ALPHA)
    assert est.interval(0.95) == pytest.approx(est.ci95)


def test_a_callable_predictor_and_masked_choices_are_refused():
    config = load_scenario("tiny")
    first_valid = as_predictor(lambda obs, masks: np.argmax(masks, axis=1))
    est = vector_efficiency(first_valid, config, "server", n_epochs=200, replications=2)
    assert np.isfinite(est.efficiency)
    with pytest.raises(RuntimeError, match="masked action"):
        vector_efficiency(
            lambda obs, masks: np.argmin(masks, axis=1), config, "server", n_epochs=50,
            replications=2, warmup_epochs=0, policy_warmup=0,
        )  # fmt: skip
    with pytest.raises(ValueError, match="replications"):
        vector_efficiency(first_valid, config, "server", replications=1)


@pytest.mark.parametrize(
    ("scenario", "objective"),
    [("tiny", "energy"), ("paper-100", "energy"), ("speed-scaling", "energy"),
     ("geo-us-eu", "cost"), ("lognormal", "energy")],
)  # fmt: skip
def test_builtin_efficiency_is_the_vector_env_measure_of_pas(scenario, objective):
    """The simulator's own PAS over the same window and seeds follows the vector env's sample
    path with PAS's per-server actions: the same per-replication values to float rounding
    (state-dependent rates, time-varying prices, general sizes included)."""
    if scenario == "lognormal":
        config = load_scenario("paper-100").with_job_size({"distribution": "lognormal", "scv": 4})
    else:
        config = load_scenario(scenario)
    kw = dict(n_epochs=2_000, replications=3, warmup_epochs=1_500, policy_warmup=300, seed=77,
              objective=objective)  # fmt: skip
    stepped = vector_efficiency(make_policy("pas", config, "server"), config, "server", **kw)
    fast = builtin_efficiency(config, pas_table(config), **kw)
    np.testing.assert_allclose(fast.per_replication, stepped.per_replication, rtol=1e-12)
