"""The one policy registry: every policy name, built-in or learned, and ``make_policy`` to build it.

``POLICIES`` maps a name to what builds it. Two kinds of entries:

* a policy class (PAS, Whittle, the heuristics, the exact optimum, ...): ``make_policy("pas",
  config)`` calls ``cls(config, action_mode=..., seed=..., **kwargs)``;
* an entry that takes an argument, written ``"name:ARG"`` (``"ppo:runs/tiny/best_model.zip"``):
  ``make_policy("ppo:PATH", config)`` calls ``target.from_spec(ARG, config, action_mode, seed)``
  (or ``target(ARG, config, action_mode, seed)`` for a plain loader function).

Learned policies live in a higher layer (``agents``), so their entries are ``"module:attr"``
strings (``"ppo": "serverfarm_gym.agents.ppo:PPOAgent"``) imported by :mod:`importlib` only when such a name is
built: nothing below ``agents`` imports it, and torch is only imported when a model is loaded.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from serverfarm_gym.baselines.best_priority import BestPriorityPolicy
from serverfarm_gym.baselines.heuristics import (
    FirstFitPolicy,
    JSQPolicy,
    MEESFPolicy,
    RandomPolicy,
    SlowestFirstPolicy,
)
from serverfarm_gym.baselines.optimal_policy import OptimalPolicy, SLOOptimalPolicy
from serverfarm_gym.baselines.pas import PASPolicy, PriceAwarePASPolicy
from serverfarm_gym.baselines.pdr_pas import PDRPASPolicy
from serverfarm_gym.baselines.slo_priority import SLOMixPolicy, SLOPriorityPolicy
from serverfarm_gym.baselines.whittle import WhittlePolicy
from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.scenarios import load_scenario

#: the modules of the ``train`` extra (pyproject.toml) that learned policies import
TRAIN_EXTRA_MODULES = ("torch", "stable_baselines3", "sb3_contrib")

__all__ = [
    "POLICIES",
    "TRAIN_EXTRA_MODULES",
    "PolicyEntry",
    "check_policy_name",
    "is_builtin_name",
    "make_policy",
    "policy_names",
    "register_policy",
]


@dataclass(frozen=True)
class PolicyEntry:
    """What a registered name builds.

    Attributes:
        target: a class or loader function, or ``"module:attr"`` naming one (imported on use).
        argument: None for a policy built from the farm alone; else what follows ``name:`` in
            the policy's name (``"PATH"`` for ``ppo:PATH``), shown in the list of valid names.
    """

    target: type | Callable[..., Any] | str
    argument: str | None = None

    def resolve(self) -> Any:
        if not isinstance(self.target, str):
            return self.target
        module, _, attr = self.target.partition(":")
        return getattr(importlib.import_module(module), attr)


class _Registry(Mapping[str, Any]):
    """Read-only name -> class (or loader) mapping; ``"module:attr"`` entries import on lookup."""

    def __init__(self, entries: dict[str, PolicyEntry]):
        self._entries = entries

    def entry(self, name: str) -> PolicyEntry:
        return self._entries[name]

    def add(self, name: str, entry: PolicyEntry) -> None:
        self._entries[name] = entry

    def __getitem__(self, name: str) -> Any:
        return self._entries[name].resolve()

    def __contains__(self, name: object) -> bool:  # without importing lazy entries
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"POLICIES({list(self._entries)})"


POLICIES: _Registry = _Registry(
    {
        "pas": PolicyEntry(PASPolicy),
        "pas-price": PolicyEntry(PriceAwarePASPolicy),
        "whittle": PolicyEntry(WhittlePolicy),
        "random": PolicyEntry(RandomPolicy),
        "jsq": PolicyEntry(JSQPolicy),
        "meesf": PolicyEntry(MEESFPolicy),
        "slowest": PolicyEntry(SlowestFirstPolicy),
        "first-fit": PolicyEntry(FirstFitPolicy),
        "optimal": PolicyEntry(OptimalPolicy),
        "pdr-pas": PolicyEntry(PDRPASPolicy),
        "best-priority": PolicyEntry(BestPriorityPolicy),
        # under the scenario's mean-response-time SLO (slo: {mean_response_time: D})
        "slo-optimal": PolicyEntry(SLOOptimalPolicy),
        "slo-priority": PolicyEntry(SLOPriorityPolicy),
        "slo-mix": PolicyEntry(SLOMixPolicy),
        # learned policies: a higher layer, found by name only
        "ppo": PolicyEntry("serverfarm_gym.agents.ppo:PPOAgent", argument="PATH"),
        # the shipped farm-agnostic networks, any farm. "generalist": the table network alone
        # (agents/generalist/models/generalist_table.npz; zero-shot: one forward pass maps the
        # farm to a priority table, nothing measured on the farm); "generalist-checked": the
        # per-decision token network (generalist.pt, up to 8 groups and buffers of 8) plus its
        # per-farm check against PAS (it measures candidates on the farm's own chain or
        # simulator when built and reports that check's CPU time, check_cpu_seconds)
        "generalist": PolicyEntry("serverfarm_gym.agents.generalist.policy:GeneralistPolicy"),
        "generalist-checked": PolicyEntry(
            "serverfarm_gym.agents.generalist.guard:GuardedGeneralistPolicy"
        ),
    }
)


def register_policy(
    name: str, target: type | Callable[..., Any] | str, argument: str | None = None
) -> None:
    """Add (or replace) ``name`` in :data:`POLICIES`.

    Without ``argument``, ``target`` is a class built as ``cls(config, action_mode=, seed=, **kw)``.
    With one (e.g. ``"PATH"``), the name is used as ``"name:ARG"`` and ``target`` has a
    ``from_spec(arg, config, action_mode, seed)`` classmethod or is such a function. For process
    pools and Ray the target must be importable by name (a module-level object or a string).
    """
    if not name or ":" in name or not name.replace("-", "").replace("_", "").isalnum():
        raise ValueError(f"name: must be a non-empty word without ':', got {name!r}")
    POLICIES.add(name, PolicyEntry(target, argument))


def policy_names() -> list[str]:
    """Every valid policy name: ``"pas"``, ..., and ``"ppo:PATH"`` for entries with an argument."""
    out = []
    for name in sorted(POLICIES):
        arg = POLICIES.entry(name).argument
        out.append(name if arg is None else f"{name}:{arg}")
    return out


def is_builtin_name(name: str) -> bool:
    """True for a registered name used on its own (not ``name:ARG``): the baselines."""
    return name in POLICIES and POLICIES.entry(name).argument is None


def _split(spec: str) -> tuple[str, str] | None:
    """(name, argument) of a valid ``"name:ARG"`` spec, else None."""
    prefix, sep, arg = spec.partition(":")
    if sep and prefix in POLICIES and POLICIES.entry(prefix).argument is not None:
        return prefix, arg
    return None


def check_policy_name(spec: str) -> None:
    """Raise ValueError (listing the valid names) unless ``spec`` is a valid policy name."""
    if is_builtin_name(spec):
        return
    split = _split(spec)
    if split is None:
        if spec in POLICIES:  # e.g. "ppo" without its path
            arg = POLICIES.entry(spec).argument
            raise ValueError(f"policy {spec!r}: give an argument, e.g. {spec}:{arg}")
        raise ValueError(f"policy: unknown policy {spec!r}; valid policies are {policy_names()}")
    name, arg = split
    if not arg:
        raise ValueError(
            f"policy {spec!r}: give an argument after '{name}:', "
            f"e.g. {name}:{POLICIES.entry(name).argument}"
        )


def make_policy(
    name: str,
    config: FarmConfig | str | Mapping[str, Any],
    action_mode: str = "server",
    seed: int | None = None,
    **kw: Any,
) -> Any:
    """Build the policy ``name`` for ``config`` (a FarmConfig, preset name, file path or dict).

    ``name`` is a registered name (``"pas"``, ``"whittle"``, ...) or ``"name:ARG"`` for entries
    that take an argument (``"ppo:runs/tiny/best_model.zip"`` loads a trained agent). Extra
    keyword arguments go to the policy's constructor (e.g. ``interval`` for ``"pas-price"``,
    ``eta`` for ``"whittle"``).

    Raises:
        ValueError: unknown name (the message lists the valid ones), or a policy that cannot be
            built for this farm (e.g. a model trained for another farm).
        ModuleNotFoundError: a policy that needs the ``train`` extra (torch, stable-baselines3,
            sb3-contrib) on an install without it; the message names the extra.
    """
    check_policy_name(name)
    cfg = load_scenario(config)
    try:
        if is_builtin_name(name):
            return POLICIES[name](cfg, action_mode=action_mode, seed=seed, **kw)
        prefix, arg = _split(name)  # type: ignore[misc]  # checked above
        target = POLICIES[prefix]
        build = getattr(target, "from_spec", target)
        return build(arg, cfg, action_mode, seed, **kw)
    except ModuleNotFoundError as e:
        # a learned policy on a core install: say which extra brings what it imports
        if (e.name or "").split(".")[0] not in TRAIN_EXTRA_MODULES:
            raise
        raise ModuleNotFoundError(
            f"policy {name!r}: needs {e.name}, which is not installed; install the 'train' "
            "extra: pip install 'serverfarm-gym[train]'",
            name=e.name,
        ) from e
