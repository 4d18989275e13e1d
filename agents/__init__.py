"""Learned dispatchers and how they are trained (the layer above ``evaluation``).

* ``agents.ppo``: :class:`~agents.ppo.PPOAgent` (a trained MaskablePPO model behind the common
  ``predict`` interface of ``baselines.base``) and its JSON sidecar. ``PPOAgent.load(path)``
  reads the weights without unpickling anything; ``make_policy("ppo:PATH", config)`` finds it by
  name through the one policy registry.
* ``agents.wrappers``: :class:`~agents.wrappers.TrainingWrapper`, the reward PPO learns from.
* ``agents.callbacks``: evaluation, checkpoint and logging callbacks of ``train.py``.

Measuring a policy (exactly or by simulation) is ``evaluation.measure`` / ``evaluation.exact``.
Importing this package does not import torch or stable-baselines3; loading a model does.
"""

from agents.ppo import PPOAgent, model_predictor, write_sidecar
from agents.wrappers import TrainingWrapper

__all__ = ["PPOAgent", "TrainingWrapper", "model_predictor", "write_sidecar"]
