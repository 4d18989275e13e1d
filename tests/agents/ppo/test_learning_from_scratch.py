"""PPO learns from nothing, measured exactly: a CI check that fails when learning regresses.

The PPO trainer (train.py's default) with the settings train.py derives for the farm
(``serverfarm_gym.agents.ppo.config.recommended``), from a random initialisation (no clone), on pas-gap in group
actions (6 servers, where PAS is 2.7% below the optimum): after 16,384 env steps (8 updates,
about 3 CPU-s) the best exactly evaluated policy of the run (what train.py's exact best-model
selection keeps) must reach 98% of the exact optimum, i.e. close most of PAS's gap.

The share is chosen from the measured seed spread of exactly this run (``python -m
experiments.studies.from_scratch --scenarios pas-gap --trainers ppo --seeds 10 --steps 16384 --out
results/from_scratch_ci``, the average-reward advantage): over seeds 0-9 the best policy reached
98.53% to 99.45% of the optimum (seed 0: 99.09%), so 98% sits 0.53 points below the worst seed
and 1.09 below seed 0, above PAS's 97.26% and every random start (60-84%). tiny is checked by
``python train.py`` and ``run_report --check`` in CI (docs/learning.md).
"""

from __future__ import annotations

import pytest

pytest.importorskip("sb3_contrib")

from experiments.studies.from_scratch import run_ppo
from serverfarm_gym.envs.scenarios import load_scenario
from serverfarm_gym.evaluation.references import optimum_solution

SHARE = 0.98  # of the exact optimum (docstring: the seed spread behind it)
STEPS = 16_384


def test_ppo_from_scratch_reaches_98_percent_of_the_optimum_on_pas_gap() -> None:
    config = load_scenario("pas-gap")
    sol, _ = optimum_solution(config)
    curve = run_ppo(config, seed=0, steps=STEPS)
    shares = [eff / float(sol.value) for _, _, eff in curve]
    assert [s for s, _, _ in curve][-1] == STEPS and len(curve) == 9  # step 0 + 8 updates
    assert shares[0] < 0.9  # a random start, far below PAS (97.3%)
    assert max(shares) >= SHARE, shares
    assert max(shares) <= 1.0 + 1e-9  # the optimum bounds every policy
