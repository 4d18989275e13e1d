"""Exact optimum under a mean-response-time SLO: maximise efficiency subject to ``E[T] <= D``.

The scenario's ``slo: {mean_response_time: D}`` (``serverfarm_gym.envs.config.SLOConfig``) bounds the long-run
mean response time of admitted jobs. By Little's law ``E[T] = E[N] / E[admitted rate]``, so on the
aggregated chain of :mod:`serverfarm_gym.baselines.solvers.aggregated` (exponential sizes, small farms) the
constraint is ``E[N] <= D E[admitted rate]``, which is *linear* in the stationary distribution and
homogeneous, so it survives the Charnes-Cooper transform of the ratio objective unchanged. The LP is the one of
:func:`serverfarm_gym.baselines.solvers.efficiency_optimum.solve_lp` plus one inequality row::

    max  sum_m W(m) z(m)
    s.t. sum_m P(m) z(m) = 1
         sum_a y(m, j, a) = z(m)                       every (m, j) with a vacancy
         outflow(m) = inflow(m)                        every m
         sum_m z(m) (N(m) - D Lambda(m)) <= 0          the SLO

with ``N(m)`` the jobs in state m and ``Lambda(m) = sum_j lambda_j 1{type j has a vacancy}``.
It is solved by HiGHS (``scipy.optimize.linprog``).

**The optimal policy may randomise.** A constrained MDP with one constraint has an optimal
stationary policy that randomises between two actions in at most one (state, job type) pair
(a basic LP solution has one more basic variable than the unconstrained one). When the SLO binds
the optimum usually *needs* that randomisation: no deterministic policy reaches it.
:class:`serverfarm_gym.baselines.optimal_policy.SLOOptimalPolicy` plays it with its own seeded generator
(``predict``'s default samples; see :class:`serverfarm_gym.baselines.optimal_policy.OptimalPolicy`);
``info["randomised_pairs"]`` counts the pairs.

:func:`min_response_time` gives the smallest ``E[T]`` any admissible policy achieves (the same
polytope, normalised by the admitted rate instead of the power); a ``D`` below it is infeasible
and :func:`solve_slo` refuses it with that number.
"""

from __future__ import annotations

import math
import time

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from serverfarm_gym.baselines.solvers.aggregated import (
    AggregatedSpace,
    aggregated_efficiency,
    aggregated_response_time,
    estimate_size,
    refuse_if_larger,
)
from serverfarm_gym.baselines.solvers.ctmc import GeneratorSolver
from serverfarm_gym.baselines.solvers.efficiency_optimum import (
    DEFAULT_MAX_LP_VARIABLES,
    OptimumSolution,
    lp_solution,
    occupation_measures,
)
from serverfarm_gym.envs.config import FarmConfig

__all__ = [
    "SLOInfeasibleError",
    "min_response_time",
    "slo_of",
    "solve_slo",
]


class SLOInfeasibleError(ValueError):
    """No admissible policy meets the SLO; ``min_response_time`` is the smallest E[T]."""

    def __init__(self, message: str, min_response_time: float):
        super().__init__(message)
        self.min_response_time = min_response_time


def slo_of(config: FarmConfig, slo: float | None = None) -> float:
    """The SLO bound ``D``: ``slo`` if given, else the scenario's ``slo.mean_response_time``."""
    if slo is None:
        if config.slo is None:
            raise ValueError(
                f"scenario {config.name!r}: no SLO; add `slo: {{mean_response_time: D}}` to the "
                "scenario or pass slo=D"
            )
        return float(config.slo.mean_response_time)
    D = float(slo)
    if not (math.isfinite(D) and D > 0):
        raise ValueError(f"slo: the mean-response-time bound must be finite and > 0, got {slo!r}")
    return D


def _space(config: FarmConfig | AggregatedSpace, max_variables: int) -> AggregatedSpace:
    cfg = config.config if isinstance(config, AggregatedSpace) else config
    refuse_if_larger(cfg, "LP", estimate_size(cfg)[1], max_variables, "max_variables")
    if isinstance(config, AggregatedSpace):
        return config
    return AggregatedSpace(config, max_states=max_variables)


def _flow_constraints(space: AggregatedSpace) -> tuple[sp.csr_matrix, tuple[np.ndarray, ...]]:
    """Rows ``[balance (N); coupling (one per (m, j) with a vacancy)]`` over ``[z; y]``, all = 0,
    and the (state, type, action) of each ``y`` column."""
    N = space.n_states
    ys, yj, ya = np.nonzero(space.valid)
    ny = ys.size
    vs, vj = np.nonzero(space.has_vacancy)
    crow = np.full(space.has_vacancy.shape, -1, dtype=np.int64)
    crow[vs, vj] = N + np.arange(vs.size)
    dr, dc, dv = space.departures
    zc = np.arange(N)
    yc = N + np.arange(ny)
    lam = space.lam
    rows = np.concatenate([dc, zc, space.next_state[ys, ya], ys, crow[ys, yj], crow[vs, vj]])
    cols = np.concatenate([dr, zc, yc, yc, yc, vs])
    vals = np.concatenate([
        dv, -np.bincount(dr, weights=dv, minlength=N),
        lam[yj], -lam[yj],
        np.ones(ny), -np.ones(vs.size),
    ])  # fmt: skip
    A = sp.csr_matrix((vals, (rows, cols)), shape=(N + vs.size, N + ny))
    return A, (ys, yj, ya)


def _linprog(c, A_eq, b_eq, A_ub=None, b_ub=None, tol: float = 1e-10):
    return linprog(
        c, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=b_eq, bounds=(0, None), method="highs",
        options={"primal_feasibility_tolerance": tol, "dual_feasibility_tolerance": tol},
    )  # fmt: skip


def min_response_time(
    config: FarmConfig | AggregatedSpace, *, max_variables: int = DEFAULT_MAX_LP_VARIABLES
) -> float:
    """The smallest long-run ``E[T]`` over all admissible policies (exact LP on small farms):
    ``min sum_m N(m) z(m)`` over the occupation polytope normalised by ``sum_m Lambda(m) z(m) = 1``.
    """
    space = _space(config, max_variables)
    A, _ = _flow_constraints(space)
    nv = A.shape[1]
    norm = np.zeros(nv)
    norm[: space.n_states] = space.admit
    A_eq = sp.vstack([A, sp.csr_matrix(norm)]).tocsr()
    b_eq = np.zeros(A_eq.shape[0])
    b_eq[-1] = 1.0
    c = np.zeros(nv)
    c[: space.n_states] = space.jobs
    res = _linprog(c, A_eq, b_eq)
    if res.status != 0:
        raise RuntimeError(f"minimum-response-time LP failed: {res.message}")
    return float(res.fun)


def _policy_from(space: AggregatedSpace, z: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``y / z`` where the state carries mass; elsewhere (never visited from the empty farm) the
    action that keeps the fewest jobs per server, i.e. the least-loaded (k, b) (any choice gives
    the same long-run value)."""
    live = (z > 1e-13 * z.max())[:, None] & space.has_vacancy
    tot = y.sum(axis=2)
    probs = np.zeros_like(y)
    ok = live & (tot > 0)
    probs[ok] = y[ok] / tot[ok][:, None]
    fs, fj = np.nonzero(space.has_vacancy & ~ok)
    lowest = np.argmax(space.valid[fs, fj] * (1.0 / (1.0 + space.act_b))[None, :], axis=1)
    probs[fs, fj, lowest] = 1.0
    return probs


def solve_slo(
    config: FarmConfig | AggregatedSpace,
    slo: float | None = None,
    *,
    max_variables: int = DEFAULT_MAX_LP_VARIABLES,
    tol: float = 1e-10,
) -> OptimumSolution:
    """The exact SLO-constrained optimum (see the module doc) as an :class:`OptimumSolution`
    (``method="slo-lp"``; ``probs`` is the possibly randomised policy).

    ``info``: ``slo`` (D), ``mean_response_time`` (the policy's exact E[T]), ``binding`` (E[T]
    within 1e-6 relative of D), ``randomised_pairs`` (recurrent (state, type) pairs that mix),
    ``dual_price`` (mu >= 0, the SLO row's HiGHS marginal: the optimum's policy maximises
    ``E[(1 + mu D) W - mu N] / E[P]``, the Lagrangian the multiplier of ``serverfarm_gym.envs.slo`` prices).

    Raises:
        SLOInfeasibleError: D is below the smallest achievable mean response time (the message
            gives it); ValueError: no SLO given, or the LP is above ``max_variables``.
    """
    t0 = time.perf_counter()
    space = _space(config, max_variables)
    cfg = space.config
    D = slo_of(cfg, slo)
    N = space.n_states
    A, _ = _flow_constraints(space)
    nv = A.shape[1]
    norm = np.zeros(nv)
    norm[:N] = space.P
    A_eq = sp.vstack([A, sp.csr_matrix(norm)]).tocsr()
    b_eq = np.zeros(A_eq.shape[0])
    b_eq[-1] = 1.0
    row = np.zeros(nv)
    row[:N] = space.jobs - D * space.admit
    c = np.zeros(nv)
    c[:N] = -space.W
    res = _linprog(c, A_eq, b_eq, sp.csr_matrix(row), np.zeros(1), tol)
    if res.status == 2:
        best = min_response_time(space)
        raise SLOInfeasibleError(
            f"scenario {cfg.name!r}: slo.mean_response_time {D:g} cannot be met: the smallest "
            f"achievable mean response time is {best:.6g}; raise the SLO to at least that",
            best,
        )
    if res.status != 0:
        raise RuntimeError(f"SLO LP solve failed: {res.message}")
    z, y = occupation_measures(space, res.x)
    probs = _policy_from(space, z, y)
    pi = GeneratorSolver(space.generator(probs)).stationary()
    et = aggregated_response_time(space, pi)[2]
    mass = space.has_vacancy & (pi > 1e-12)[:, None]
    mixed = int(np.count_nonzero(probs.max(axis=2)[mass] < 1.0 - 1e-7))
    return lp_solution(
        space,
        res,
        "slo-lp",
        probs,
        z,
        y,
        pi,
        t0,
        {
            "slo": D,
            "mean_response_time": et,
            "policy_value": aggregated_efficiency(space, pi),
            "binding": bool(abs(et - D) <= 1e-6 * D),
            "randomised_pairs": mixed,
            "n_variables": nv,
            # the SLO row's dual price: d(optimal efficiency) / d(its right-hand side), in
            # efficiency per unit of (E[N] - D E[admitted rate]) / E[P]; 0 when it is slack
            "dual_price": max(0.0, -float(res.ineqlin.marginals[0])),
        },
    )
