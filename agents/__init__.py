"""Learned dispatchers and how they are trained (the layer above ``evaluation``).

One package per algorithm, on top of what they share:

* ``serverfarm_gym.agents.common``: checkpoints and atomic writes, the run directory and its checks, safe
  loading of models and sidecars (``artefacts``), the settings derived from the farm and the run
  report (the paired model selection is ``serverfarm_gym.evaluation.paired``).
* ``serverfarm_gym.agents.ppo``: the masked PPO (``ppo``), the loaded model behind the common
  ``predict`` interface (:class:`~serverfarm_gym.agents.ppo.PPOAgent`, ``agent``) and ``train.py``'s default
  run (``run``).
* ``serverfarm_gym.agents.ppo_sb3``: the sb3-contrib MaskablePPO route (``train``), its reward wrapper
  (:class:`~serverfarm_gym.agents.ppo_sb3.wrappers.TrainingWrapper`) and callbacks.
* ``serverfarm_gym.agents.table_generalist``: the ``generalist`` policy, one table network that
  maps any farm to a priority table (``policy``, ``table_net``), and its training by
  distillation of ``best-priority`` (``run``: ``train.py table-generalist``).
* ``serverfarm_gym.agents.token_generalist``: the ``generalist-checked`` policy, one per-decision
  token network for every farm (``network``, ``token_policy``) behind a per-farm check
  (``guard``), and its training by PPO and optimum distillation (``run``: ``train.py
  token-generalist``).

Imports go one way: ``common`` < ``ppo`` < ``ppo_sb3`` and ``ppo`` < ``token_generalist``;
``table_generalist`` needs neither.
Measuring a policy (exactly or by simulation) is ``serverfarm_gym.evaluation.efficiency`` / ``serverfarm_gym.evaluation.exact``.
Importing this package does not import torch or stable-baselines3; loading a model does.
"""

from serverfarm_gym.agents.ppo import PPOAgent, model_predictor, write_sidecar
from serverfarm_gym.agents.ppo_sb3.wrappers import TrainingWrapper

__all__ = ["PPOAgent", "TrainingWrapper", "model_predictor", "write_sidecar"]
