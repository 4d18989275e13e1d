"""One number for one deterministic policy: its efficiency, exact when the per-server chain can be
solved, else simulated with the harness's window and seeds; and the reference points (PAS, the
optimum, the relaxation bound) it is compared with. Used by training (``agents.ppo_sb3.callbacks``,
``train.py``), where a policy is measured many times and one number with its interval is wanted.

* :func:`measure_efficiency`: :func:`exact_efficiency` (``evaluation.exact``) when solvable,
  else :func:`simulated_efficiency`: independent replications of ``evaluation.rollout.rollout``
  (the harness's measurement window: the policy itself dispatches the warm-up) with the harness's
  replication seeds and Student-t interval.
* :func:`reference_efficiencies`: PAS (exact, or the compiled simulator with the same window),
  the optimum and the bound (``evaluation.references.reference_values``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from baselines.pas import PASPolicy
from envs.config import FarmConfig
from envs.scenarios import load_scenario
from evaluation.exact import (
    EXACT_MAX_STATES,
    Predictor,
    as_predictor,
    exact_evaluation,
    exact_solvable,
)
from evaluation.harness import default_warmup, epochs_per_duration
from evaluation.references import reference_values
from evaluation.rollout import replication_seeds, rollout, simulate_builtin
from evaluation.stats import mean_ci

__all__ = [
    "EfficiencyEstimate",
    "References",
    "exact_efficiency",
    "measure_efficiency",
    "pas_efficiency",
    "reference_efficiencies",
    "simulated_efficiency",
    "steady_state_warmup",
]


@dataclass(frozen=True)
class EfficiencyEstimate:
    """An efficiency with its 95% CI half-width (0 when exact) and how it was obtained."""

    efficiency: float
    ci95: float
    method: str  # "exact" or "simulation"
    epochs: int = 0  # decision epochs measured in total (0 when exact)
    replications: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "efficiency": self.efficiency,
            "ci95": self.ci95,
            "method": self.method,
            "epochs": self.epochs,
            "replications": self.replications,
        }


def steady_state_warmup(config: FarmConfig, horizon: int) -> int:
    """Warm-up long enough for the farm (which starts empty) to reach steady state: the harness's
    default (10% of the horizon), at least the 50 mean job durations that
    ``evaluation.harness.window_warnings`` asks for."""
    return max(default_warmup(horizon), math.ceil(50 * epochs_per_duration(config)))


def exact_efficiency(
    policy: Any, config: FarmConfig, action_mode: str, max_states: int = EXACT_MAX_STATES
) -> EfficiencyEstimate | None:
    """Exact long-run efficiency of a deterministic policy or predictor (None if the chain is not
    solvable: see ``evaluation.exact.exact_unsupported_reason``)."""
    if not exact_solvable(config, max_states):
        return None
    res = exact_evaluation(policy, config, action_mode, max_states)
    return EfficiencyEstimate(float(res.efficiency), 0.0, "exact")


class _MemoPolicy:
    """A predictor as a ``predict`` policy whose decisions are memoised per observation (small
    farms revisit few states, so a rollout costs about as much as the env steps)."""

    def __init__(self, predict: Predictor, action_mode: str, cache_size: int):
        self._predict = predict
        self.action_mode = action_mode
        self._cache: dict[bytes, int] = {}
        self._size = cache_size

    def predict(
        self, obs: np.ndarray, action_masks: np.ndarray | None = None, deterministic: bool = True
    ) -> tuple[int, None]:
        key = np.asarray(obs).tobytes()
        a = self._cache.get(key)
        if a is None:
            a = int(self._predict(np.asarray(obs)[None], np.asarray(action_masks)[None])[0])
            if len(self._cache) < self._size:
                self._cache[key] = a
        return a, None


def simulated_efficiency(
    policy: Any,
    config: FarmConfig,
    action_mode: str,
    n_epochs: int = 20_000,
    replications: int = 8,
    warmup: int | None = None,
    seed: int = 10_000,
    cache_size: int = 200_000,
) -> EfficiencyEstimate:
    """Efficiency of the deterministic policy in ``replications`` independent env rollouts
    (``evaluation.rollout.rollout``: the policy dispatches ``warmup`` epochs, default
    :func:`steady_state_warmup`, then ``n_epochs`` measured ones), seeds
    ``replication_seeds(seed, replications)``, mean and Student-t 95% half-width.

    Raises:
        ValueError: bad counts, or the policy chose a masked action.
    """
    if replications < 1 or n_epochs < 1:
        raise ValueError("replications and n_epochs: must be >= 1")
    warmup = steady_state_warmup(config, n_epochs) if warmup is None else int(warmup)
    memo = _MemoPolicy(as_predictor(policy), action_mode, cache_size)
    effs = np.empty(replications)
    for r, s in enumerate(replication_seeds(seed, replications)):
        res = rollout(memo, config, n_epochs, warmup, s, action_mode=action_mode)
        if res.invalid_actions:
            raise ValueError("policy: chose a masked action; it must respect action_masks")
        effs[r] = res.stats.efficiency
    return _estimate(effs, n_epochs)


def _estimate(per_replication: np.ndarray, n_epochs: int) -> EfficiencyEstimate:
    mean, half = mean_ci(per_replication, 0.95)
    n = len(per_replication)
    return EfficiencyEstimate(
        mean, math.inf if half is None else half, "simulation", n_epochs * n, n
    )


def measure_efficiency(
    policy: Any,
    config: FarmConfig,
    action_mode: str,
    exact: bool = True,
    **simulation_kwargs: Any,
) -> EfficiencyEstimate:
    """:func:`exact_efficiency` when solvable (and ``exact``), else :func:`simulated_efficiency`
    (keyword arguments: ``n_epochs``, ``replications``, ``warmup``, ``seed``)."""
    if exact:
        est = exact_efficiency(policy, config, action_mode)
        if est is not None:
            return est
    return simulated_efficiency(policy, config, action_mode, **simulation_kwargs)


@dataclass(frozen=True)
class References:
    """Efficiencies a learned policy is compared with (None, with the reason, when not
    computable: the exact optimum only exists for small farms)."""

    pas: EfficiencyEstimate
    optimum: float | None
    optimum_note: str
    upper_bound: float | None
    upper_bound_note: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "pas": self.pas.as_dict(),
            "optimum": self.optimum,
            "optimum_note": self.optimum_note,
            "upper_bound": self.upper_bound,
            "upper_bound_note": self.upper_bound_note,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> References:
        return cls(
            EfficiencyEstimate(**d["pas"]),
            d["optimum"],
            d["optimum_note"],
            d["upper_bound"],
            d["upper_bound_note"],
        )


def pas_efficiency(
    config: FarmConfig, n_epochs: int = 200_000, replications: int = 8, seed: int = 20_000
) -> EfficiencyEstimate:
    """PAS's efficiency: exact (CTMC) when solvable, else the compiled simulator with the
    harness's window (:func:`steady_state_warmup`) and seeds, with a 95% CI."""
    pas = PASPolicy(config)
    if exact_solvable(config):
        return exact_efficiency(pas, config, "server")  # type: ignore[return-value]
    table = pas.priority_table()
    warmup = steady_state_warmup(config, n_epochs)
    effs = np.array(
        [
            simulate_builtin(config, "priority", n_epochs, warmup, s, table).stats.efficiency
            for s in replication_seeds(seed, replications)
        ]
    )
    return _estimate(effs, n_epochs)


def reference_efficiencies(config: FarmConfig | str, **pas_kwargs: Any) -> References:
    """PAS, the exact optimum and the relaxation upper bound of a scenario."""
    config = load_scenario(config)
    refs = reference_values(config, compute_optimum=True)
    opt, bound = refs["optimum"], refs["upper_bound"]
    return References(
        pas_efficiency(config, **pas_kwargs),
        None if opt is None else float(opt["efficiency"]),
        f"not computable ({refs['optimum_reason']})" if opt is None else f"exact ({opt['source']})",
        None if bound is None else float(bound["efficiency"]),
        bound["source"] if bound is not None else f"not computable: {refs['upper_bound_reason']}",
    )
