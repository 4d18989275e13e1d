"""The generalist: one permutation-invariant token network (``network``) acting on any farm
(:class:`GeneralistPolicy`, ``policy``), trained by PPO with domain randomisation (``train``),
distilled from the exact optimum (``oracle``), validated on held-out farms (``validate``),
checked per farm against PAS (``guard``), with its command line (``run``) and an RLlib module
(``rllib_module``)."""

from agents.generalist.policy import SHIPPED_MODEL, GeneralistPolicy
from agents.generalist.train import LABEL_COLUMNS, GeneralistConfig, GeneralistTrainer

__all__ = [
    "LABEL_COLUMNS",
    "SHIPPED_MODEL",
    "GeneralistConfig",
    "GeneralistPolicy",
    "GeneralistTrainer",
]
