"""The token generalist behind ``make_policy("generalist-checked", config)``: one per-decision
network for every farm, checked against PAS on each farm it is built for.

The network (``network``: a Transformer over one token per group of the current state,
anchored to PAS) acts through :class:`TokenGeneralistPolicy` (``token_policy``; weights
``models/generalist.pt``, :data:`TOKEN_MODEL`) behind the per-farm check of ``guard``
(:class:`~serverfarm_gym.agents.token_generalist.guard.GuardedGeneralistPolicy`). It is trained
by PPO over sampled farms (``train``: :class:`GeneralistTrainer`) and distillation of the exact
optimum (``oracle``), validated exactly against PAS (``validate``), all through one command
line, ``run`` (``python train.py token-generalist``); ``rllib_module`` is the same network as an
RLlib module.

Imports are lazy, so that importing the package does not import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "LABEL_COLUMNS",
    "TOKEN_MODEL",
    "GeneralistConfig",
    "GeneralistTrainer",
    "GuardedGeneralistPolicy",
    "TokenGeneralistPolicy",
]

_WHERE = {
    "TOKEN_MODEL": "token_policy",
    "TokenGeneralistPolicy": "token_policy",
    "GuardedGeneralistPolicy": "guard",
    "LABEL_COLUMNS": "train",
    "GeneralistConfig": "train",
    "GeneralistTrainer": "train",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        module = importlib.import_module(f"serverfarm_gym.agents.token_generalist.{_WHERE[name]}")
        return getattr(module, name)
    raise AttributeError(
        f"module 'serverfarm_gym.agents.token_generalist' has no attribute {name!r}"
    )
