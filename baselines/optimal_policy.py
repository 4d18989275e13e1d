"""The exact optima as policies: :class:`OptimalPolicy` (``optimal``) plays a solution of
:mod:`serverfarm_gym.baselines.solvers.efficiency_optimum` and :class:`SLOOptimalPolicy` (``slo-optimal``) one of
:mod:`serverfarm_gym.baselines.solvers.slo_optimum`, decoded from the observation through the ``Policy``
interface. The solvers compute; these classes only act on what they computed.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from serverfarm_gym.baselines.base import Policy
from serverfarm_gym.baselines.solvers.efficiency_optimum import (
    DEFAULT_MAX_LP_VARIABLES,
    OptimumSolution,
    solve,
)
from serverfarm_gym.baselines.solvers.slo_optimum import slo_of, solve_slo
from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.observation import (
    counts_from_occupancy,
    decode_group_obs,
    decode_server_obs,
    group_action,
    level_offsets,
)

__all__ = ["OptimalPolicy", "SLOOptimalPolicy"]


class OptimalPolicy(Policy):
    """The exact optimal symmetric policy, decoded from the observation.

    Args:
        config: the farm (exponential sizes; small enough for the solver).
        action_mode: ``"server"`` or ``"group"``.
        seed: seed of the generator used to sample randomised decisions.
        solution: a precomputed :class:`OptimumSolution` (else solved here with ``method``).
        method: ``"lp"`` (default; possibly randomised ``y / z``) or ``"pi"`` (deterministic).
        argmax: how ``deterministic=True`` treats a randomised decision. ``False`` (default):
            still **sample** from ``y / z``, so that ``predict``'s default reproduces the LP
            value (argmax of a randomised optimum can be suboptimal). ``True``: take the most
            probable action (ties: smallest k, then b). ``deterministic=False`` always samples.
            Decisions that are not randomised are the same either way.
        **solver_kwargs: passed to the solver (e.g. ``max_variables``, ``max_states``).

    The chosen ``(k, b)`` becomes, in server mode, the smallest-index server of group k holding
    b jobs that the mask allows; in group mode ``group_action(config, k, b)``. If the mask rules
    it out (a mask inconsistent with the observation), the next most probable allowed action is
    used; if nothing is allowed (blocking), the first allowed action or 0.
    """

    name = "optimal"
    builtin = None

    def __init__(
        self,
        config: FarmConfig,
        action_mode: str = "server",
        seed: int | None = None,
        *,
        solution: OptimumSolution | None = None,
        method: str = "lp",
        argmax: bool = False,
        **solver_kwargs,
    ):
        super().__init__(config, action_mode, seed)
        self.solution = solution if solution is not None else solve(config, method, **solver_kwargs)
        if self.solution.space.config is not config and (
            self.solution.space.config.to_dict() != config.to_dict()
        ):
            raise ValueError("solution: was solved for a different scenario than config")
        self.argmax = bool(argmax)
        self.value = self.solution.value
        self._space = self.solution.space
        self._lvl_off = level_offsets(config)

    def action_probs(self, counts: np.ndarray, job_type: int) -> np.ndarray:
        """float64[A] probabilities over group-mode actions (k, b) in the histogram state."""
        s = self._space.index_of(counts)
        sol = self.solution
        if sol.probs is not None:
            return sol.probs[s, job_type].copy()
        p = np.zeros(self._space.n_actions)
        a = sol.actions[s, job_type]
        if a >= 0:
            p[a] = 1.0
        return p

    def choose(self, counts: np.ndarray, job_type: int, deterministic: bool = True) -> int:
        """The group-mode action index chosen in a histogram state (-1 if it must block)."""
        p = self.action_probs(counts, job_type)
        if p.sum() <= 0:
            return -1
        randomized = p.max() < 1.0 - 1e-9
        if randomized and not (deterministic and self.argmax):
            return int(self.rng.choice(p.size, p=p / p.sum()))
        return int(np.argmax(p))

    def act(self, obs: np.ndarray, mask: np.ndarray, deterministic: bool = True) -> int:
        c = self.config
        mask = np.asarray(mask, dtype=bool)
        if self.action_mode == "server":
            occ, j = decode_server_obs(c, obs)
            counts = counts_from_occupancy(c, occ)
        else:
            occ = None
            counts, j = decode_group_obs(c, obs)
        a = self.choose(counts, j, deterministic)
        if a < 0:
            return int(np.argmax(mask)) if mask.any() else 0
        order = [a, *np.argsort(-self.action_probs(counts, j), kind="stable").tolist()]
        for cand in order:
            k, b = int(self._space.act_k[cand]), int(self._space.act_b[cand])
            if self.action_mode == "group":
                ga = group_action(c, k, b)
                if mask[ga]:
                    return ga
                continue
            lo, hi = c.group_offsets[k], c.group_offsets[k + 1]
            hit = np.nonzero((occ[lo:hi] == b) & mask[lo:hi])[0]
            if hit.size:
                return int(lo + hit[0])
        return int(np.argmax(mask)) if mask.any() else 0


@lru_cache(maxsize=16)
def _cached(config: FarmConfig, D: float, max_variables: int) -> OptimumSolution:
    return solve_slo(config, D, max_variables=max_variables)


class SLOOptimalPolicy(OptimalPolicy):
    """``slo-optimal``: the exact SLO-constrained optimum, played as a randomised policy.

    Args:
        config: the farm (exponential sizes, small; its ``slo:`` gives D unless ``slo`` does).
        action_mode, seed: as every policy; ``seed`` seeds the generator that samples the
            randomised decision(s), so a run is reproducible.
        slo: the bound D (default: the scenario's).
        max_variables: the LP's size limit.

    ``predict(obs, action_masks=..., deterministic=True)`` still samples where the optimum
    randomises (its argmax could break the SLO); everywhere else it is deterministic.
    """

    name = "slo-optimal"

    def __init__(
        self,
        config: FarmConfig,
        action_mode: str = "server",
        seed: int | None = None,
        *,
        slo: float | None = None,
        max_variables: int = DEFAULT_MAX_LP_VARIABLES,
    ):
        D = slo_of(config, slo)
        solution = _cached(config, D, int(max_variables))
        super().__init__(config, action_mode, seed, solution=solution)
        self.slo = D
        self.mean_response_time = float(solution.info["mean_response_time"])
