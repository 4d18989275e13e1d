"""Learned dispatchers behind the common ``predict`` interface (see ``baselines.base``).

``agents.ppo.PPOAgent.load(path)`` loads a MaskablePPO model saved by ``train.py`` together with
its JSON sidecar (scenario and action mode). Importing this package does not import torch or
stable-baselines3; loading a model does.
"""

from agents.ppo import (
    EfficiencyEstimate,
    PPOAgent,
    References,
    TrainingWrapper,
    exact_efficiency,
    measure_efficiency,
    reference_efficiencies,
    rollout_efficiency,
)

__all__ = [
    "EfficiencyEstimate",
    "PPOAgent",
    "References",
    "TrainingWrapper",
    "exact_efficiency",
    "measure_efficiency",
    "reference_efficiencies",
    "rollout_efficiency",
]
