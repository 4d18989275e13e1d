"""Exact optimum of the ratio objective (throughput / power) on the symmetry-aggregated chain.

Servers of one group are exchangeable, so an optimal policy can be taken symmetric and the state
aggregated to histograms ``m_k = (m_{k,0}, ..., m_{k,B_k})`` (servers of group k holding b jobs):
``prod_k C(R_k + B_k, B_k)`` states. A type-j arrival in state m picks an action ``(k, b)`` with
``k in K_j``, ``b < B_k``, ``m_{k,b} > 0`` ("a server of group k holding b jobs"), or is blocked
when there is none (blocking only when every available server is full). **Exponential job sizes
only** (the chain is then a continuous-time MDP); general per-level ``mu_k(n)``, ``eps_k(n)`` from
``config.mu_table`` / ``config.power_table``.

Actions are numbered as the group-mode actions of ``serverfarm_gym.envs.observation``: ``a = level_offsets[k] + b``.

Solvers (independent; tests check they agree to 1e-7 relative):

- :func:`solve_lp`: occupation-measure LP with the Charnes-Cooper transform (``docs/model.md``),
  variables ``z(m) >= 0`` (stationary probability / power) and ``y(m, j, a) >= 0``::

      max  sum_m W(m) z(m)
      s.t. sum_m P(m) z(m) = 1
           sum_a y(m, j, a) = z(m)                 for every (m, j) with a vacancy
           outflow(m) = inflow(m)                  global balance, every m

  solved by HiGHS through ``scipy.optimize.linprog`` with sparse matrices. The policy is
  ``y / z`` (possibly randomised).
- :func:`solve_pi`: ratio policy iteration: evaluate the stationary distribution (sparse LU),
  ``eta`` = its efficiency, relative values of the reward rate ``W - eta P``, greedy improvement
  (keep the current action unless another is better by a relative margin); stops when no action
  changes. Deterministic policy; scales further than the LP.
- :func:`brute_force`: every deterministic stationary policy evaluated exactly (tiny farms; test).

:class:`serverfarm_gym.baselines.optimal_policy.OptimalPolicy` plays a solution in the env through the ``Policy``
interface.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from serverfarm_gym.baselines.solvers.aggregated import (
    DEFAULT_MAX_PI_STATES,
    AggregatedSpace,
    aggregated_efficiency,
    aggregated_response_time,
    estimate_size,
    evaluate_aggregated,
    refuse_if_larger,
)
from serverfarm_gym.baselines.solvers.ctmc import DIRECT_MAX_STATES, GeneratorSolver
from serverfarm_gym.envs.config import FarmConfig

__all__ = [
    "DEFAULT_MAX_LP_VARIABLES",
    "DEFAULT_MAX_PI_STATES",
    "AggregatedSpace",
    "OptimumSolution",
    "brute_force",
    "estimate_size",
    "evaluate_aggregated",
    "solve",
    "solve_lp",
    "solve_pi",
]

#: refusal limits: the LP's time (HiGHS) grows fast with its variables, from seconds at 1e4 to
#: minutes at 5e4; policy iteration needs about 0.3 GB per 1e5 states.
DEFAULT_MAX_LP_VARIABLES = 20_000


# ---------------------------------------------------------------------------------------------
# solutions
# ---------------------------------------------------------------------------------------------
@dataclass
class OptimumSolution:
    """Result of an exact solver.

    Attributes:
        value: optimal efficiency (LP objective, or the final policy's exact efficiency for PI).
        method: ``"lp"``, ``"pi"`` or ``"brute_force"``.
        space: the aggregated state space (gives state indices, histograms, transitions).
        actions: int64[N, J] most probable action per (state, job type), -1 where blocked.
        probs: float64[N, J, A] action probabilities ``y / z`` (LP only; None for deterministic).
        z, y: LP variables (``y`` is float64[N, J, A], zero off the admissible actions); None
            for PI.
        pi: float64[N] stationary distribution of the returned policy.
        iterations: policy-iteration steps (PI) or simplex/IPM iterations (LP).
        seconds: wall time of the solve (excluding building the space).
    """

    value: float
    method: str
    space: AggregatedSpace
    actions: np.ndarray
    probs: np.ndarray | None = None
    z: np.ndarray | None = None
    y: np.ndarray | None = None
    pi: np.ndarray | None = None
    iterations: int = 0
    seconds: float = 0.0
    info: dict = field(default_factory=dict)

    @property
    def is_randomized(self) -> bool:
        """True when some recurrent (state, type) splits its probability over several actions."""
        if self.probs is None:
            return False
        return bool(np.any(self.probs.max(axis=2)[self.has_mass] < 1.0 - 1e-9))

    @property
    def has_mass(self) -> np.ndarray:
        """bool[N, J]: (state, type) pairs with a vacancy where the policy is defined by y / z."""
        m = self.space.has_vacancy.copy()
        if self.z is not None:
            m &= (self.z > 0)[:, None]
        return m

    @property
    def mean_response_time(self) -> float:
        """Exact ``E[T]`` (Little's law over admitted jobs) of the returned policy."""
        if self.pi is None:
            return math.nan
        return aggregated_response_time(self.space, self.pi)[2]

    def policy(self) -> np.ndarray:
        """The policy in generator form: ``probs`` if randomised, else ``actions``."""
        return self.probs if self.probs is not None else self.actions


def _initial_policy(space: AggregatedSpace) -> np.ndarray:
    """A PAS-like start for PI: most efficient group, then the fullest non-full level (packing)."""
    c = space.config
    # marginal efficiency of adding a job at level b of group k
    dmu = c.mu_table[space.act_k, space.act_b + 1] - c.mu_table[space.act_k, space.act_b]
    deps = c.power_table[space.act_k, space.act_b + 1] - c.power_table[space.act_k, space.act_b]
    score = (
        c.group_efficiency[space.act_k] * 1e6 + space.act_b + 1e-3 * dmu / np.maximum(deps, 1e-300)
    )
    s = np.where(space.valid, score[None, None, :], -np.inf)
    act = np.argmax(s, axis=2).astype(np.int64)
    act[~space.has_vacancy] = -1
    return act


def _pi_linear_solver(space: AggregatedSpace, linear_solver: str) -> str:
    """The linear solver PI uses: ``linear_solver`` itself unless it is ``"auto"``."""
    if linear_solver != "auto":
        return linear_solver
    # LU fill-in is mild on low-dimensional lattices (sum_k B_k = lattice dimension)
    low_dim = int(space.config.buffers.sum()) <= 2
    return "direct" if low_dim or space.n_states <= DIRECT_MAX_STATES else "iterative"


def _pi_evaluate(
    space: AggregatedSpace,
    act: np.ndarray,
    ref: int | None,
    method: str,
    pi: np.ndarray | None,
    h: np.ndarray | None,
) -> tuple[GeneratorSolver, np.ndarray, float, np.ndarray, bool]:
    """Policy evaluation: (solver, pi, eta, relative values h, whether it fell back to LU).

    ``ref`` (iterative solver only) is the previous mode, a good shift/preconditioner state;
    ``pi`` and ``h`` of the previous step warm-start GMRES.
    """
    Q = space.generator(act)
    try:
        solver = GeneratorSolver(Q, ref, method=method)
        pi_new = solver.stationary(x0=pi)
        eta = aggregated_efficiency(space, pi_new)
        h = solver.relative_values(space.W - eta * space.P, x0=h)
        return solver, pi_new, eta, h, False
    except RuntimeError:  # GMRES stalled (e.g. a slowly mixing chain): LU instead
        if method == "direct":
            raise
    solver = GeneratorSolver(Q, method="direct")
    pi_new = solver.stationary()
    eta = aggregated_efficiency(space, pi_new)
    h = solver.relative_values(space.W - eta * space.P)
    return solver, pi_new, eta, h, True


def _pi_improve(
    space: AggregatedSpace, act: np.ndarray, h: np.ndarray, pi: np.ndarray, rtol: float
) -> int:
    """Greedy improvement of ``act`` in place w.r.t. h; returns how many decisions changed."""
    hn = np.where(space.next_state >= 0, h[np.maximum(space.next_state, 0)], -np.inf)
    # margin relative to the spread of h where the chain lives (far, improbable states can
    # have huge |h| that would swamp a margin relative to max|h|)
    bulk = h[pi > 1e-12 * pi.max()]
    tol = rtol * max(float(bulk.max() - bulk.min()), 1e-300)
    changed = 0
    for j in range(space.config.n_job_types):
        sc = np.where(space.valid[:, j, :], hn, -np.inf)
        best = np.argmax(sc, axis=1)
        on = np.nonzero(space.has_vacancy[:, j])[0]
        gain = sc[on, best[on]] - sc[on, act[on, j]]
        sw = on[gain > tol]
        act[sw, j] = best[sw]
        changed += int(sw.size)
    return changed


def solve_pi(
    config: FarmConfig | AggregatedSpace,
    *,
    max_states: int = DEFAULT_MAX_PI_STATES,
    max_iter: int = 200,
    initial: np.ndarray | None = None,
    rtol: float = 1e-10,
    linear_solver: str = "auto",
    arrival_rates: np.ndarray | None = None,
    check_sizes: bool = True,
    verbose: bool = False,
) -> OptimumSolution:
    """Ratio policy iteration on the aggregated chain (deterministic optimal policy).

    Each step evaluates the current policy (:class:`serverfarm_gym.baselines.solvers.ctmc.GeneratorSolver`): the
    stationary distribution pi, ``eta = pi.W / pi.P`` and the relative values h of the reward
    rate ``W - eta P``; each (state, type) then switches to ``argmax_a h(next(m, a))`` if that
    beats its current action by more than ``rtol`` times the spread of h (the margin prevents
    cycling on rounding ties). A policy with a positive ``(W - eta P)`` gain has efficiency
    > eta, so eta never decreases (``info["history"]``); the final policy satisfies the
    optimality equations, hence is optimal from every state. The first policy is PAS-like.

    Linear algebra (``linear_solver="auto"``): a sparse LU when the lattice is low-dimensional
    (``sum_k B_k <= 2``) or small, else ILU(0)-preconditioned GMRES warm-started from the previous
    step (falling back to LU if GMRES stalls); 1e5 states take seconds to a minute.
    """
    t0 = time.perf_counter()
    space = (
        config
        if isinstance(config, AggregatedSpace)
        else AggregatedSpace(
            config, max_states=max_states, arrival_rates=arrival_rates, check_sizes=check_sizes
        )
    )
    t_build = time.perf_counter() - t0
    act = _initial_policy(space) if initial is None else np.array(initial, dtype=np.int64)
    space.check_policy(act)
    history = []
    pi = h = None
    ref: int | None = None
    gmres_its: list[int] = []
    fallbacks = 0
    method = _pi_linear_solver(space, linear_solver)
    for it in range(1, max_iter + 1):
        solver, pi, eta, h, fell_back = _pi_evaluate(space, act, ref, method, pi, h)
        fallbacks += int(fell_back)
        gmres_its += solver.gmres_iterations
        history.append(eta)
        if verbose:
            print(f"PI iteration {it}: eta = {eta:.15g}, ref = {solver.ref}")
        changed = _pi_improve(space, act, h, pi, rtol)
        ref = int(np.argmax(pi))
        if changed == 0:
            return OptimumSolution(
                value=eta,
                method="pi",
                space=space,
                actions=act,
                pi=pi,
                iterations=it,
                seconds=time.perf_counter() - t0,
                info={
                    "history": history,
                    "build_seconds": t_build,
                    "relative_values": h,
                    "gmres_iterations": gmres_its,
                    "linear_solver": method,
                    "lu_fallbacks": fallbacks,
                },
            )
    raise RuntimeError(
        f"policy iteration did not converge in {max_iter} iterations: {history[-5:]}"
    )


def _lp_space(
    config: FarmConfig | AggregatedSpace,
    max_variables: int,
    arrival_rates: np.ndarray | None,
    check_sizes: bool,
) -> AggregatedSpace:
    """The aggregated space of the LP, refused up front when the LP would be too large."""
    if isinstance(config, AggregatedSpace):
        refuse_if_larger(
            config.config, "LP", estimate_size(config.config)[1], max_variables, "max_variables"
        )
        return config
    refuse_if_larger(config, "LP", estimate_size(config)[1], max_variables, "max_variables")
    return AggregatedSpace(
        config, max_states=max_variables, arrival_rates=arrival_rates, check_sizes=check_sizes
    )


def _lp_constraints(space: AggregatedSpace) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray]:
    """(A_eq, b_eq, c) of the Charnes-Cooper LP over ``x = (z, y[valid])``."""
    N, J = space.n_states, space.config.n_job_types
    ys, yj, ya = np.nonzero(space.valid)
    ny = ys.size
    nv = N + ny
    lam = space.lam
    # rows: 0..N-1 balance (inflow - outflow = 0), then coupling per (m, j) with a vacancy,
    # then the Charnes-Cooper normalisation
    vs, vj = np.nonzero(space.has_vacancy)
    crow = np.full((N, J), -1, dtype=np.int64)
    crow[vs, vj] = N + np.arange(vs.size)
    nrow = N + vs.size + 1
    dr, dc, dv = space.departures  # departure from state dr to dc at rate dv
    zc = np.arange(N)
    outrate = np.bincount(dr, weights=dv, minlength=N)
    yc = N + np.arange(ny)
    rows = np.concatenate([
        dc, zc,                              # z: inflow at destination, outflow at source
        space.next_state[ys, ya], ys,        # y: inflow / outflow of arrivals
        crow[ys, yj], crow[vs, vj],          # coupling: y - z = 0
        np.full(N, nrow - 1),                # normalisation P z = 1
    ])  # fmt: skip
    cols = np.concatenate([dr, zc, yc, yc, yc, vs, zc])
    vals = np.concatenate([
        dv, -outrate,
        lam[yj], -lam[yj],
        np.ones(ny), -np.ones(vs.size),
        space.P,
    ])  # fmt: skip
    A_eq = sp.csr_matrix((vals, (rows, cols)), shape=(nrow, nv))
    b_eq = np.zeros(nrow)
    b_eq[-1] = 1.0
    c = np.zeros(nv)
    c[:N] = -space.W
    return A_eq, b_eq, c


def _lp_policy(
    space: AggregatedSpace, z: np.ndarray, y: np.ndarray
) -> tuple[np.ndarray, np.ndarray, float]:
    """(probs, pi, eta) of the LP solution: ``y / z`` where the state carries mass.

    Elsewhere (transient states, never visited) a placeholder action first, then one greedy
    step w.r.t. the relative values of the LP policy, so the policy is sensible from any start.
    """
    N, J, A = space.n_states, space.config.n_job_types, space.n_actions
    zmin = 1e-13 * z.max()
    live = (z > zmin)[:, None] & space.has_vacancy
    tot = y.sum(axis=2)
    probs = np.zeros((N, J, A))
    ok = live & (tot > 0)
    probs[ok] = y[ok] / tot[ok][:, None]
    fill = space.has_vacancy & ~ok
    first = np.argmax(space.valid, axis=2)
    fs, fj = np.nonzero(fill)
    probs[fs, fj, first[fs, fj]] = 1.0
    lu = GeneratorSolver(space.generator(probs))
    pi = lu.stationary()
    eta = aggregated_efficiency(space, pi)
    h = lu.relative_values(space.W - eta * space.P)
    hn = np.where(space.valid, h[np.maximum(space.next_state, 0)][:, None, :], -np.inf)
    best = np.argmax(hn, axis=2)
    probs[fs, fj, :] = 0.0
    probs[fs, fj, best[fs, fj]] = 1.0
    return probs, pi, eta


def solve_lp(
    config: FarmConfig | AggregatedSpace,
    *,
    max_variables: int = DEFAULT_MAX_LP_VARIABLES,
    arrival_rates: np.ndarray | None = None,
    check_sizes: bool = True,
    tol: float = 1e-10,
) -> OptimumSolution:
    """Occupation-measure LP (Charnes-Cooper) solved by HiGHS; see the module docstring.

    The policy ``probs = y / z`` is defined where ``z(m) > 0``. States with ``z = 0`` are never
    visited under that policy (transient); there the returned policy takes the greedy action
    w.r.t. the relative values of the LP policy (one improvement step), so it is also sensible
    if the env is started elsewhere; this does not change the long-run value.
    """
    t0 = time.perf_counter()
    space = _lp_space(config, max_variables, arrival_rates, check_sizes)
    A_eq, b_eq, c = _lp_constraints(space)
    res = linprog(
        c,
        A_eq=A_eq,
        b_eq=b_eq,
        bounds=(0, None),
        method="highs",
        options={"primal_feasibility_tolerance": tol, "dual_feasibility_tolerance": tol},
    )
    if res.status != 0:
        raise RuntimeError(f"LP solve failed: {res.message}")
    z, y = occupation_measures(space, res.x)
    probs, pi, eta = _lp_policy(space, z, y)
    info = {"policy_value": eta, "n_variables": A_eq.shape[1], "n_constraints": A_eq.shape[0]}
    return lp_solution(space, res, "lp", probs, z, y, pi, t0, info)


def occupation_measures(space: AggregatedSpace, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(z[N], y[N, J, A]) of an occupation-measure LP's solution ``x``: the state measures
    first, then one per valid (state, type, action) in ``np.nonzero(space.valid)`` order (the
    column order of both LPs), clipped at 0 (HiGHS may return -1e-17)."""
    N = space.n_states
    x = np.maximum(x, 0.0)
    y = np.zeros((N, space.config.n_job_types, space.n_actions))
    y[np.nonzero(space.valid)] = x[N:]
    return x[:N], y


def lp_solution(
    space: AggregatedSpace,
    res: Any,
    method: str,
    probs: np.ndarray,
    z: np.ndarray,
    y: np.ndarray,
    pi: np.ndarray,
    t0: float,
    info: dict[str, Any],
) -> OptimumSolution:
    """The :class:`OptimumSolution` of an LP result ``res`` (scipy's ``OptimizeResult``) and its
    policy ``probs``: deterministic ``actions`` by argmax (ties: the smallest (k, b); -1 where
    no server has room), the time since ``t0``."""
    actions = np.argmax(probs, axis=2).astype(np.int64)
    actions[~space.has_vacancy] = -1
    return OptimumSolution(
        value=-float(res.fun),
        method=method,
        space=space,
        actions=actions,
        probs=probs,
        z=z,
        y=y,
        pi=pi,
        iterations=int(getattr(res, "nit", 0) or 0),
        seconds=time.perf_counter() - t0,
        info=info,
    )


def solve(config: FarmConfig, method: str = "lp", **kwargs) -> OptimumSolution:
    """Solve with ``method="lp"`` (:func:`solve_lp`) or ``"pi"`` (:func:`solve_pi`)."""
    if method == "lp":
        return solve_lp(config, **kwargs)
    if method == "pi":
        return solve_pi(config, **kwargs)
    raise ValueError(f"method: unknown solver {method!r}; choose 'lp' or 'pi'")


def brute_force(
    config: FarmConfig, *, max_policies: int = 20_000, **kwargs
) -> tuple[float, np.ndarray]:
    """(best efficiency, its int64[N, J] actions) over all deterministic stationary policies.

    Each policy is evaluated exactly on the aggregated chain. Only for tiny farms: refuses when
    the number of policies ``prod_{(m, j)} |A(m, j)|`` exceeds ``max_policies``.
    """
    space = AggregatedSpace(config, **kwargs)
    ss, jj = np.nonzero(space.has_vacancy)
    choices = [np.nonzero(space.valid[s, j])[0] for s, j in zip(ss, jj, strict=True)]
    count = math.prod(len(c) for c in choices)
    if count > max_policies:
        raise ValueError(
            f"scenario {config.name!r}: {count} deterministic policies, above the limit "
            f"max_policies={max_policies}"
        )
    best, best_act = -np.inf, None
    act = np.full((space.n_states, config.n_job_types), -1, dtype=np.int64)
    for combo in itertools.product(*choices):
        act[ss, jj] = combo
        val, _ = evaluate_aggregated(space, act)
        if val > best:
            best, best_act = val, act.copy()
    return float(best), best_act
