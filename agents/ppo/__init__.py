"""The masked PPO: the algorithm (``serverfarm_gym.agents.ppo.ppo``), a trained model behind the
common ``predict`` interface (:class:`PPOAgent`, ``serverfarm_gym.agents.ppo.agent``) and ``train.py``'s default
run (``serverfarm_gym.agents.ppo.run``). Importing this package does not import torch."""

from serverfarm_gym.agents.ppo.agent import (
    MASKED_LOGIT,
    PPOAgent,
    atomic_write_json,
    model_predictor,
    numpy_predictor,
    policy_architecture,
    read_sidecar,
    sidecar_path,
    write_sidecar,
)

__all__ = [
    "MASKED_LOGIT",
    "PPOAgent",
    "atomic_write_json",
    "model_predictor",
    "numpy_predictor",
    "policy_architecture",
    "read_sidecar",
    "sidecar_path",
    "write_sidecar",
]
