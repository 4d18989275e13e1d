"""PPO learns from nothing, measured exactly: a CI check that fails when learning regresses.

The lean trainer (train.py's default) with the settings train.py derives for the farm
(``serverfarm_gym.agents.ppo.algorithm.recommended``), from a random initialisation (no clone), on pas-gap in group
actions (6 servers, where PAS is 2.7% below the optimum): after 16,384 env steps (8 updates,
about 3 CPU-s) the best exactly evaluated policy of the run (what train.py's exact best-model
selection keeps) must reach 99% of the exact optimum, i.e. close most of PAS's gap.

The share is chosen from the measured seed spread of exactly this run (``python -m
experiments.from_scratch --scenarios pas-gap --trainers lean --seeds 10 --steps 16384 --out
results/from_scratch_ci``): over seeds 0-9 the best policy reached 99.37% to 99.94% of the
optimum (seed 0: 99.68%; IQM of the final gap 0.40%), so 99% sits 0.37 points below the worst
seed and 0.68 below seed 0, far above PAS's 97.26% and every random start (60-84%). Why not ``tiny``:
there the derived discount (a horizon of one mean job duration, gamma 0.6) is biased and lean
PPO from scratch settles at 96% of the optimum, below PAS (docs/learning.md), so a test there
would pin a known weakness rather than learning.
"""

from __future__ import annotations

import pytest

pytest.importorskip("sb3_contrib")

from experiments.from_scratch import run_lean
from serverfarm_gym.envs.scenarios import load_scenario
from serverfarm_gym.evaluation.references import optimum_solution

SHARE = 0.99  # of the exact optimum (docstring: the seed spread behind it)
STEPS = 16_384


def test_lean_ppo_from_scratch_reaches_99_percent_of_the_optimum_on_pas_gap() -> None:
    config = load_scenario("pas-gap")
    sol, _ = optimum_solution(config)
    curve = run_lean(config, seed=0, steps=STEPS)
    shares = [eff / float(sol.value) for _, _, eff in curve]
    assert [s for s, _, _ in curve][-1] == STEPS and len(curve) == 9  # step 0 + 8 updates
    assert shares[0] < 0.9  # a random start, far below PAS (97.3%)
    assert max(shares) >= SHARE, shares
    assert max(shares) <= 1.0 + 1e-9  # the optimum bounds every policy
