"""The generalist: one network for every farm. The shipped policy (``policy``,
:class:`GeneralistPolicy`) computes a farm's priority table with the table network
(``table_net``), trained by distillation of ``best-priority`` (``table_train``; its small-farm
expert, read on farms the exact teacher reaches, by ``exact_expert``). The per-decision
token network (``network``, ``token_policy``), its PPO trainer (``train``), optimum distillation
(``oracle``), validation (``validate``), per-farm check (``guard``), command line (``run``) and
RLlib module (``rllib_module``) are kept for ``generalist-checked`` and ``train.py --generalist``.

Imports are lazy, so that the shipped policy is built without importing torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "LABEL_COLUMNS",
    "SHIPPED_MODEL",
    "TOKEN_MODEL",
    "GeneralistConfig",
    "GeneralistPolicy",
    "GeneralistTrainer",
    "TokenGeneralistPolicy",
]

_WHERE = {
    "SHIPPED_MODEL": "policy",
    "GeneralistPolicy": "policy",
    "TOKEN_MODEL": "token_policy",
    "TokenGeneralistPolicy": "token_policy",
    "LABEL_COLUMNS": "train",
    "GeneralistConfig": "train",
    "GeneralistTrainer": "train",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(
            importlib.import_module(f"serverfarm_gym.agents.generalist.{_WHERE[name]}"), name
        )
    raise AttributeError(f"module 'serverfarm_gym.agents.generalist' has no attribute {name!r}")
