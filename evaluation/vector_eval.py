"""Efficiency of any batched policy (learned or not) in the native vector env.

One :class:`~envs.vector.ServerFarmVectorEnv` holds all replications; every decision epoch is one
compiled vector step and *one* call of the policy on the whole batch of observations (for a
neural policy: one forward pass for all replications). This replaces the per-decision loop over
single envs that cost 400 of the 962 s of a 100-server training run.

The protocol is that of the training evaluations (``rollout_efficiency``): each replication is
warmed up by PAS (compiled, inside the env's reset; the farm starts empty), then the policy runs
``policy_warmup`` epochs that are not measured, then ``n_epochs`` measured epochs. Each
replication's efficiency is its work / energy over the measured window (read from the env's
``info``, never from the reward), and the estimate is their mean with the Student-t interval of
``evaluation.stats``. Replication ``i`` uses the stream ``seed + i`` (as a single env reset with
``seed + i``), so two policies evaluated with the same seed see common random numbers in their
warm-ups.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from envs.config import FarmConfig
from envs.simulator import FarmSimulator
from envs.vector import ServerFarmVectorEnv
from evaluation.harness import epochs_per_duration
from evaluation.measure import EfficiencyEstimate
from evaluation.stats import mean_ci

__all__ = [
    "VectorEstimate",
    "as_predictor",
    "builtin_efficiency",
    "suggest_replications",
    "vector_efficiency",
]

#: maps (obs float32[n, d], masks bool[n, A]) to actions int64[n], deterministically
Predictor = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class VectorEstimate(EfficiencyEstimate):
    """An :class:`evaluation.measure.EfficiencyEstimate` plus the per-replication values."""

    per_replication: np.ndarray = field(default_factory=lambda: np.empty(0), repr=False)

    def interval(self, confidence: float) -> float:
        """Half-width of the Student-t interval at another confidence level."""
        half = mean_ci(self.per_replication, confidence)[1]
        return math.inf if half is None else half


def as_predictor(policy: Any) -> Predictor:
    """A deterministic batched predictor from anything with the common
    ``predict(obs, action_masks=..., deterministic=True)`` (baselines' policies, ``PPOAgent``,
    an SB3 model), or a plain callable ``f(obs, masks)``."""
    if hasattr(policy, "predict"):

        def predict(obs: np.ndarray, masks: np.ndarray) -> np.ndarray:
            acts, _ = policy.predict(obs, deterministic=True, action_masks=masks)
            return np.asarray(acts, dtype=np.int64).reshape(-1)

        return predict
    if callable(policy):
        return policy
    raise ValueError("policy: expected an object with predict(obs, action_masks=...) or a callable")


def default_policy_warmup(config: FarmConfig) -> int:
    """Unmeasured policy epochs per replication: 10 mean job durations, at least 500."""
    return max(500, math.ceil(10 * epochs_per_duration(config)))


def suggest_replications(config: FarmConfig, total_epochs: int, lo: int = 4, hi: int = 64) -> int:
    """Replications for a budget of ``total_epochs`` measured epochs: as many as keep each
    replication's unmeasured policy warm-up at most a quarter of its measured window (more
    replications batch better, but each repeats the warm-up: on a 10,000-server farm the warm-up
    is 120,000 epochs), within ``[lo, hi]``."""
    r = int(total_epochs // (4 * default_policy_warmup(config)))
    return int(min(hi, max(lo, r)))


def vector_efficiency(
    policy: Any,
    config: FarmConfig,
    action_mode: str,
    n_epochs: int = 20_000,
    replications: int = 8,
    warmup_epochs: int | None = None,
    policy_warmup: int | None = None,
    seed: int = 10_000,
    objective: str = "energy",
) -> VectorEstimate:
    """Efficiency of the deterministic masked ``policy`` over ``replications`` replications.

    Args:
        policy: see :func:`as_predictor`.
        config, action_mode: the farm and the action encoding the policy expects.
        n_epochs: measured decision epochs per replication.
        replications: independent replications (>= 2 for an interval); all run in lockstep.
        warmup_epochs: PAS warm-up epochs (default 50 mean job durations, >= 2,000).
        policy_warmup: unmeasured policy epochs after it (default 10 durations, >= 500).
        seed: replication ``i`` uses stream ``seed + i``.
        objective: ``"energy"`` (work / energy) or ``"cost"`` (work / cost).
    """
    warmup_epochs, policy_warmup = _window(config, n_epochs, replications, warmup_epochs,
                                           policy_warmup)  # fmt: skip
    predict = as_predictor(policy)
    venv = ServerFarmVectorEnv(
        replications, config, action_mode=action_mode, reward_eta=0.0, objective=objective,
        warmup_epochs=warmup_epochs, max_episode_steps=None,
    )  # fmt: skip
    obs, _ = venv.reset(seed=seed)
    work = np.zeros(replications)
    energy = np.zeros(replications)
    key = "cost" if objective == "cost" else "energy"
    for t in range(policy_warmup + n_epochs):
        masks = venv.action_masks()
        acts = predict(obs, masks)
        if not masks[np.arange(replications), acts].all():
            raise RuntimeError("policy chose a masked action; it must respect action_masks")
        obs, _, _, _, info = venv.step(acts)
        if t >= policy_warmup:
            work += info["work"]
            energy += info[key]
    return _estimate(work / energy, n_epochs)


def _window(
    config: FarmConfig,
    n_epochs: int,
    replications: int,
    warmup_epochs: int | None,
    policy_warmup: int | None,
) -> tuple[int, int]:
    """Check the window and fill in the default warm-ups: (PAS warm-up, policy warm-up)."""
    if replications < 2:
        raise ValueError(f"replications: at least 2 are needed for an interval, got {replications}")
    if n_epochs < 1:
        raise ValueError(f"n_epochs: must be >= 1, got {n_epochs}")
    if warmup_epochs is None:
        warmup_epochs = max(2_000, math.ceil(50 * epochs_per_duration(config)))
    if policy_warmup is None:
        policy_warmup = default_policy_warmup(config)
    return int(warmup_epochs), int(policy_warmup)


def _estimate(per_rep: np.ndarray, n_epochs: int) -> VectorEstimate:
    """Mean and Student-t 95% half-width of the per-replication efficiencies."""
    mean, half = mean_ci(per_rep, 0.95)
    return VectorEstimate(
        mean, math.inf if half is None else half, "simulation", n_epochs * len(per_rep),
        len(per_rep), per_rep,
    )  # fmt: skip


def builtin_efficiency(
    config: FarmConfig,
    table: np.ndarray,
    n_epochs: int = 20_000,
    replications: int = 8,
    warmup_epochs: int | None = None,
    policy_warmup: int | None = None,
    seed: int = 10_000,
    objective: str = "energy",
) -> VectorEstimate:
    """What :func:`vector_efficiency` measures for the priority-table policy ``table`` with
    per-server actions (PAS: ``baselines.pas.pas_table``), computed by the compiled simulator's
    own dispatcher instead of a policy call per step.

    The env's server-action step and ``FarmSimulator.run`` share the kernel: replication ``i``
    is ``FarmSimulator(config, seed + i)`` run for the warm-up, the unmeasured epochs and one
    more (the env's reset stops at the first decision, which the policy's first step then
    makes), then ``n_epochs`` measured epochs: the same sample path, so the two measures agree
    to float rounding (``tests/evaluation/test_vector_eval.py``) and a policy measured in the
    vector env on the same seed is paired with this one. Why: on 10,000 servers a per-server
    policy call and a 10,000-wide observation per step cost ~3 ms per step of 16 replications
    (about 7 CPU minutes per final measurement); the simulator runs the same window in seconds.
    """
    warmup_epochs, policy_warmup = _window(config, n_epochs, replications, warmup_epochs,
                                           policy_warmup)  # fmt: skip
    per_rep = np.empty(replications)
    for i in range(replications):
        sim = FarmSimulator(config, seed=seed + i)
        sim.run(warmup_epochs + policy_warmup + 1, "priority", table)
        st = sim.run(n_epochs, "priority", table)
        per_rep[i] = st.cost_efficiency if objective == "cost" else st.efficiency
    return _estimate(per_rep, n_epochs)
