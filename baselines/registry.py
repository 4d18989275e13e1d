"""Policy registry: one name per baseline, ``make_policy(name, config)`` builds it.

``POLICIES`` maps names to classes. ``"optimal"`` (``baselines.optimum.OptimalPolicy``, the exact
optimum of small farms) is imported only when looked up, so the registry works without it.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import Any

from baselines.base import Policy
from baselines.heuristics import (
    FirstFitPolicy,
    JSQPolicy,
    MEESFPolicy,
    RandomPolicy,
    SlowestFirstPolicy,
)
from baselines.pas import PASPolicy, PriceAwarePASPolicy
from baselines.whittle import WhittlePolicy
from envs.config import FarmConfig
from envs.scenarios import load_scenario

__all__ = ["POLICIES", "make_policy"]


class _Registry(Mapping[str, type[Policy]]):
    """Read-only name -> class mapping; entries given as ``"module:attr"`` are imported on lookup."""

    def __init__(self, entries: dict[str, type[Policy] | str]):
        self._entries = entries

    def __getitem__(self, name: str) -> type[Policy]:
        entry = self._entries[name]
        if isinstance(entry, str):
            module, attr = entry.split(":")
            entry = getattr(importlib.import_module(module), attr)
        return entry

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"POLICIES({list(self._entries)})"


POLICIES: Mapping[str, type[Policy]] = _Registry(
    {
        "pas": PASPolicy,
        "pas-price": PriceAwarePASPolicy,
        "whittle": WhittlePolicy,
        "random": RandomPolicy,
        "jsq": JSQPolicy,
        "meesf": MEESFPolicy,
        "slowest": SlowestFirstPolicy,
        "first-fit": FirstFitPolicy,
        "optimal": "baselines.optimum:OptimalPolicy",
        "pdr-pas": "baselines.pdr_pas:PDRPASPolicy",
    }
)


def make_policy(
    name: str,
    config: FarmConfig | str | Mapping[str, Any],
    action_mode: str = "server",
    seed: int | None = None,
    **kw: Any,
) -> Policy:
    """Build the policy ``name`` for ``config`` (a FarmConfig, preset name, file path or dict).

    Extra keyword arguments go to the policy's constructor (e.g. ``interval`` for ``"pas-price"``,
    ``eta`` for ``"whittle"``).
    """
    if name not in POLICIES:
        raise ValueError(f"policy: unknown policy {name!r}; valid policies are {sorted(POLICIES)}")
    cls = POLICIES[name]
    return cls(load_scenario(config), action_mode=action_mode, seed=seed, **kw)
