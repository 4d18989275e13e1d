"""The lean masked PPO: the algorithm (``agents.ppo.algorithm``), a trained model behind the
common ``predict`` interface (:class:`PPOAgent`, ``agents.ppo.agent``) and ``train.py``'s default
training loop (``agents.ppo.train``). Importing this package does not import torch."""

from agents.ppo.agent import (
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
