"""Exact long-run performance of any policy, by solving its per-server CTMC (``serverfarm_gym.baselines.solvers.ctmc``).

A stationary deterministic policy (anything with ``predict(obs, action_masks=...,
deterministic=True)``, learned or not) is asked once for every state of the per-server chain and
every arriving job type, with the observation and mask the env would show it there
(``serverfarm_gym.envs.observation.encode_occupancy``, the encoding of the env's compiled step). Its decisions
define the chain's generator; the stationary distribution gives efficiency, throughput, power and
blocking with no sampling error. Priority-table policies (PAS, Whittle, the heuristics) and the
uniformly random policy go straight to ``serverfarm_gym.baselines.solvers.ctmc.evaluate_policy``'s own routes (same
decisions, no forward passes).

Only possible when the chain is exactly Markov and small: exponential job sizes, constant rates
(:func:`exact_unsupported_reason` says why not otherwise).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, cast

import numpy as np

from serverfarm_gym.baselines.solvers.aggregated import AggregatedSpace, aggregated_response_time
from serverfarm_gym.baselines.solvers.ctmc import (
    CTMCResult,
    GeneratorSolver,
    evaluate_policy,
    full_states,
    n_full_states,
)
from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.observation import encode_occupancy, level_offsets

__all__ = [
    "EXACT_MAX_STATES",
    "Predictor",
    "as_predictor",
    "cost_efficiency",
    "exact_evaluation",
    "exact_solvable",
    "exact_table_solvable",
    "exact_unsupported_reason",
    "overall_blocking",
    "policy_decisions",
    "randomised_exact",
]

#: the largest per-server state space solved by default (sparse solve; about 1 s at this size)
EXACT_MAX_STATES = 50_000

#: a predictor maps (obs float32[n, d], masks bool[n, A]) to actions int64[n], deterministically
Predictor = Callable[[np.ndarray, np.ndarray], np.ndarray]

_BATCH = 8192  # bounded forward-pass batches keep memory flat


def exact_unsupported_reason(config: FarmConfig, max_states: int = EXACT_MAX_STATES) -> str | None:
    """Why the per-server chain of ``config`` cannot be solved exactly, or None if it can."""
    if not config.all_exponential:
        return (
            "job sizes are not exponential (the per-server chain is only Markov for exponential "
            "sizes); use the simulated evaluation"
        )
    if config.is_time_varying:
        return (
            "arrival rates or prices vary in time (the chain assumes constant rates); use the "
            "simulated evaluation"
        )
    # decimal digits first: the exact count of a large farm is a huge integer (large-10k:
    # 6,000 digits, past Python's int-to-str limit) that is slow to build and cannot be printed
    digits = sum(g.count * math.log10(g.buffer + 1) for g in config.groups)
    if digits > math.log10(max_states) + 1:
        return (
            f"the per-server chain has about 10^{digits:.0f} states, above the limit "
            f"{max_states} (prod_k (B_k+1)^R_k); use the simulated evaluation or a smaller farm"
        )
    n = n_full_states(config)
    if n > max_states:
        return (
            f"the per-server chain has {n} states, above the limit {max_states} "
            "(prod_k (B_k+1)^R_k); use the simulated evaluation or a smaller farm"
        )
    return None


def exact_solvable(config: FarmConfig, max_states: int = EXACT_MAX_STATES) -> bool:
    """True when the per-server CTMC of ``config`` is exactly Markov and at most ``max_states``."""
    return exact_unsupported_reason(config, max_states) is None


def exact_table_solvable(config: FarmConfig, max_states: int = EXACT_MAX_STATES) -> bool:
    """True when a priority table's exact evaluation (the aggregated chain of
    :mod:`serverfarm_gym.baselines.solvers.aggregated`) covers ``config``: :func:`exact_solvable` and no
    group sleeps (the chain has no setup states). The farms the small-farm expert is trained,
    tuned and measured on."""
    return not config.has_sleep and exact_solvable(config, max_states)


def as_predictor(policy: Any) -> Predictor:
    """The deterministic batch predictor of ``policy``: an object with ``predict(obs,
    action_masks=..., deterministic=True)`` (batched if it supports batches, else row by row), or
    already a function ``(obs, masks) -> actions``."""
    predict = getattr(policy, "predict", None)
    if predict is None:
        if callable(policy):
            return cast(Predictor, policy)
        raise ValueError(
            f"policy: expected an object with a predict() method or a function (obs, masks) -> "
            f"actions, got {type(policy).__name__}"
        )

    def run(obs: np.ndarray, masks: np.ndarray) -> np.ndarray:
        acts, _ = predict(obs, action_masks=masks, deterministic=True)
        acts = np.asarray(acts, dtype=np.int64).reshape(-1)
        if acts.size == obs.shape[0]:
            return acts
        # a policy written for one observation at a time
        return np.array(
            [
                int(np.asarray(predict(o, action_masks=m, deterministic=True)[0]).reshape(-1)[0])
                for o, m in zip(obs, masks, strict=True)
            ],
            dtype=np.int64,
        )

    return run


def policy_decisions(
    predict: Predictor, config: FarmConfig, action_mode: str, states: np.ndarray
) -> np.ndarray:
    """int64[N, J]: the server each state's type-j arrival is sent to (-1: blocked).

    Raises:
        ValueError: the predictor chose a masked action (it must respect ``action_masks``).
    """
    occ = np.asarray(states, dtype=np.int64)
    N, J = occ.shape[0], config.n_job_types
    out = np.full((N, J), -1, dtype=np.int64)
    for j in range(J):
        obs, masks = encode_occupancy(config, action_mode, occ, j)
        ok = masks.any(axis=1)
        if not ok.any():
            continue
        acts = np.empty(N, dtype=np.int64)
        for lo in range(0, N, _BATCH):
            sl = slice(lo, min(N, lo + _BATCH))
            acts[sl] = predict(obs[sl], masks[sl])
        rows = np.flatnonzero(ok)
        a = acts[rows]
        if ((a < 0) | (a >= masks.shape[1])).any() or not masks[rows, a.clip(0)].all():
            raise ValueError("policy: chose a masked action; it must respect action_masks")
        if action_mode == "server":
            out[rows, j] = a
        else:
            loff = level_offsets(config)
            k = np.searchsorted(loff, a, side="right") - 1
            b = a - loff[k]
            # the env sends a group-mode action to the smallest-index server of group k at level b
            hit = (config.server_group[None, :] == k[:, None]) & (occ[rows] == b[:, None])
            out[rows, j] = np.argmax(hit, axis=1)
    return out


def _randomised_reason(policy: Any) -> str | None:
    if callable(getattr(policy, "aggregated_probs", None)):
        return (
            "its decisions are randomised per arrival (a mix of two orders), so no deterministic "
            "chain represents it; serverfarm_gym.evaluation.exact.randomised_exact gives its exact value"
        )
    sol = getattr(policy, "solution", None)
    if (
        sol is not None
        and getattr(sol, "is_randomized", False)
        and not getattr(policy, "argmax", 0)
    ):
        return (
            "its decisions are randomised (an LP optimum that mixes actions), so no deterministic "
            "chain represents it; its exact value is the optimum"
        )
    return None


def exact_evaluation(
    policy: Any,
    config: FarmConfig,
    action_mode: str | None = None,
    max_states: int = EXACT_MAX_STATES,
) -> CTMCResult:
    """Exact stationary performance of ``policy`` on ``config`` (see the module doc).

    Args:
        policy: an object with ``predict`` (its ``action_mode`` attribute, if any, picks the
            encoding) or a predictor function ``(obs, masks) -> actions``.
        action_mode: encoding for a policy without an ``action_mode`` attribute (default server).
        max_states: refuse larger per-server chains.

    Raises:
        ValueError: the chain cannot be solved exactly (the message says why: too many states
            with the count and the limit, non-exponential sizes, time-varying rates), or the
            policy's decisions are randomised, or it chose a masked action.
    """
    why = exact_unsupported_reason(config, max_states)
    if why is None:
        why = _randomised_reason(policy)
    if why is not None:
        raise ValueError(f"scenario {config.name!r}: exact evaluation not possible: {why}")
    mode = getattr(policy, "action_mode", None) or action_mode or "server"
    kind = getattr(policy, "builtin", None)
    if kind == "random":
        # uniform over the available non-full servers in both action modes (RandomPolicy)
        return evaluate_policy(config, "random", max_states=max_states)
    if (
        kind == "priority"
        and mode == "server"
        and callable(getattr(policy, "priority_table", None))
    ):
        # the decisions of the built-in priority dispatcher: ties to the smallest server index
        table = np.asarray(policy.priority_table(), dtype=np.float64)
        return evaluate_policy(config, "priority", table, max_states=max_states)
    states, strides = full_states(config)
    choice = policy_decisions(as_predictor(policy), config, mode, states)

    def rule(occ: np.ndarray, j: int) -> int:
        return int(choice[int(occ @ strides), j])

    return evaluate_policy(config, rule, max_states=max_states)


def cost_efficiency(config: FarmConfig, result: CTMCResult) -> float:
    """Work per unit of money of an exact result (constant prices: those of interval 0)."""
    sg = config.server_group
    power = (result.occupancy_dist * config.power_table[sg]).sum(axis=1)  # [S]
    cost = float(power @ config.prices[0, sg])
    return result.throughput / cost if cost > 0 else 0.0


def overall_blocking(config: FarmConfig, result: CTMCResult) -> float:
    """Share of all arrivals blocked (the per-type probabilities weighted by the rates)."""
    lam = config.arrival_rates[0]
    return float(lam @ result.blocking / lam.sum()) if lam.sum() > 0 else 0.0


def randomised_exact(policy: Any, config: FarmConfig) -> dict[str, Any] | None:
    """Exact metrics of a *randomised symmetric* policy on the aggregated chain, or None when
    ``policy`` is not one: an LP solution that mixes actions (``optimal``, ``slo-optimal``: its
    ``solution.probs``) or a policy with ``aggregated_probs(space) -> float[N, J, A]`` (``slo-mix``).
    Its per-server chain has no deterministic decision table, but its symmetric one is exact.

    Returns ``{"efficiency", "throughput", "power", "cost_efficiency", "blocking" (float[J]),
    "mean_response_time", "n_states"}``.
    """
    sol = getattr(policy, "solution", None)
    if sol is not None and sol.probs is not None and _randomised_reason(policy) is not None:
        space, probs = sol.space, sol.probs
    elif callable(getattr(policy, "aggregated_probs", None)):
        space = AggregatedSpace(config)
        probs = policy.aggregated_probs(space)
    else:
        return None
    pi = GeneratorSolver(space.generator(probs)).stationary()
    cost = np.zeros(space.n_states)
    for k, gs in enumerate(space.groups):
        group_power = (gs.comps @ config.power_table[k, : gs.B + 1])[space.cidx[:, k]]
        cost += config.prices[0, k] * group_power
    thr, pw = float(pi @ space.W), float(pi @ space.P)
    return {
        "efficiency": thr / pw,
        "throughput": thr,
        "power": pw,
        "cost_efficiency": thr / float(pi @ cost),
        "blocking": pi @ (~space.has_vacancy).astype(np.float64),
        "mean_response_time": aggregated_response_time(space, pi)[2],
        "n_states": int(space.n_states),
    }
