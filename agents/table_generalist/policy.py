"""The generalist: one priority table per farm, computed by the shipped network (no search).

:class:`GeneralistPolicy` (``make_policy("generalist", config)``) reads the farm's parameters,
runs the table network (:mod:`serverfarm_gym.agents.table_generalist.table_net`) once over the farm's usable
(group, level) entries and dispatches by the resulting table exactly as every priority-table
policy does (:class:`serverfarm_gym.baselines.priority.PriorityPolicy`): in server mode the compiled simulator
runs it natively (``builtin = "priority"``), in group mode the vectorised table rule. Nothing is
measured, searched or trained on the farm: the policy is the network alone, zero-shot.

It is numpy only (no torch import): building it for a 10,000-server farm is one small forward
pass. The weights are ``models/generalist_table.npz`` (+ ``.json``), trained by
``python train.py table-generalist`` (:mod:`serverfarm_gym.agents.table_generalist.run`). The
per-decision token network of ``make_policy("generalist-checked", ...)`` is another package,
:mod:`serverfarm_gym.agents.token_generalist`.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from serverfarm_gym.agents.table_generalist.table_net import (
    expert_prefix,
    expert_scores,
    feature_farm,
    load_weights,
    table_features,
    table_from_scores,
)
from serverfarm_gym.baselines.priority import PriorityPolicy
from serverfarm_gym.envs.config import FarmConfig

__all__ = ["SHIPPED_MODEL", "GeneralistPolicy", "generalist_table"]

#: the model shipped with the package (``make_policy("generalist", config)`` loads it)
SHIPPED_MODEL = Path(__file__).with_name("models") / "generalist_table.npz"


@lru_cache(maxsize=8)
def _weights(path: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    return load_weights(path)


def generalist_table(
    config: FarmConfig,
    model: str | Path | None = None,
    weights: dict[str, np.ndarray] | None = None,
) -> np.ndarray:
    """float64[K, Bmax+1]: the network's priority table for ``config`` (from ``weights`` when
    given, else from the file ``model``, default the shipped one), read from the features of
    ``feature_farm(config)`` (the farm, or its ~100-server twin above 200 servers), by the
    model's small-farm expert where it has one and the farm is in its range
    (:func:`serverfarm_gym.agents.table_generalist.table_net.expert_prefix`), else by its main network."""
    w = weights if weights is not None else _weights(str(Path(model or SHIPPED_MODEL)))[0]
    x, group, level = table_features(feature_farm(config))
    scores = expert_scores(w, x, group, expert_prefix(w, config))
    return table_from_scores(config, scores, group, level)


class GeneralistPolicy(PriorityPolicy):
    """The network's table for ``config`` as a priority-table policy.

    Args:
        config, action_mode, seed: as every policy (``seed`` is unused: deterministic).
        model: a ``.npz`` file written by :func:`serverfarm_gym.agents.table_generalist.table_net.save_weights`
            (default: the shipped model).
        weights: in-memory weights instead of a file.
    """

    name = "generalist"
    builtin = "priority"

    def __init__(
        self,
        config: FarmConfig,
        action_mode: str = "server",
        seed: int | None = None,
        model: str | Path | None = None,
        weights: dict[str, np.ndarray] | None = None,
    ) -> None:
        table = generalist_table(config, model, weights)
        super().__init__(config, action_mode, seed, table=table)
