"""The table generalist, ``make_policy("generalist", config)``: one network maps any farm's
parameters to a priority table, zero-shot.

:class:`GeneralistPolicy` (``policy``) dispatches by the table that the table network
(``table_net``, numpy; its torch twin ``table_torch``) computes from the farm's parameters; the
weights ship in ``models/generalist_table.npz`` (:data:`SHIPPED_MODEL`). They are trained by
distillation of ``best-priority`` (``labels``: the teacher and its pairs; ``table_train``: the
main network; ``exact_expert``: the small-farm expert, on exact labels, optionally from tables
polished on each farm by ``polish``), all through one command line, ``run``
(``python train.py table-generalist``).

Imports are lazy, so that the policy is built without importing torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["SHIPPED_MODEL", "GeneralistPolicy", "generalist_table"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(
            importlib.import_module("serverfarm_gym.agents.table_generalist.policy"), name
        )
    raise AttributeError(
        f"module 'serverfarm_gym.agents.table_generalist' has no attribute {name!r}"
    )
