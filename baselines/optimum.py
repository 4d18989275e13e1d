"""Exact optimum of the ratio objective (throughput / power) on the symmetry-aggregated chain.

Servers of one group are exchangeable, so an optimal policy can be taken symmetric and the state
aggregated to histograms ``m_k = (m_{k,0}, ..., m_{k,B_k})`` (servers of group k holding b jobs):
``prod_k C(R_k + B_k, B_k)`` states. A type-j arrival in state m picks an action ``(k, b)`` with
``k in K_j``, ``b < B_k``, ``m_{k,b} > 0`` ("a server of group k holding b jobs"), or is blocked
when there is none (blocking only when every available server is full). **Exponential job sizes
only** (the chain is then a continuous-time MDP); general per-level ``mu_k(n)``, ``eps_k(n)`` from
``config.mu_table`` / ``config.power_table``.

Actions are numbered as the group-mode actions of ``envs.observation``: ``a = level_offsets[k] + b``.

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

:class:`OptimalPolicy` plays the solved policy in the env through the ``Policy`` interface.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from baselines.base import Policy
from baselines.ctmc import DIRECT_MAX_STATES, GeneratorSolver, check_rates
from envs.config import FarmConfig
from envs.observation import (
    counts_from_occupancy,
    decode_group_obs,
    decode_server_obs,
    group_action,
    level_offsets,
)

__all__ = [
    "DEFAULT_MAX_LP_VARIABLES",
    "DEFAULT_MAX_PI_STATES",
    "AggregatedSpace",
    "OptimalPolicy",
    "OptimumSolution",
    "brute_force",
    "estimate_size",
    "evaluate_aggregated",
    "solve",
    "solve_lp",
    "solve_pi",
]

#: refusal limits. Measured on 2 busy cores: the LP (HiGHS) takes ~15 s at 12e3 variables and
#: minutes at 5e4; policy iteration ~6-50 s at 1e5 states (memory ~0.3 GB per 1e5 states).
DEFAULT_MAX_LP_VARIABLES = 20_000
DEFAULT_MAX_PI_STATES = 300_000


# ---------------------------------------------------------------------------------------------
# sizes and state space
# ---------------------------------------------------------------------------------------------
def estimate_size(config: FarmConfig) -> tuple[int, int]:
    """(n_states, n_variables) of the aggregated chain and its LP, without building anything.

    ``n_states = prod_k C(R_k + B_k, B_k)``; ``n_variables = n_states + #y``, where the number of
    ``y(m, j, k, b)`` is ``sum_j sum_{k in K_j} B_k C(R_k - 1 + B_k, B_k) prod_{k' != k} n_k'``
    (the histograms of group k with ``m_{k,b} > 0`` are those of ``R_k - 1`` servers, plus one).
    """
    nk = [math.comb(g.count + g.buffer, g.buffer) for g in config.groups]
    n_states = math.prod(nk)
    n_y = 0
    for jt in config.job_types:
        for k in jt.groups:
            g = config.groups[k]
            n_y += g.buffer * math.comb(g.count - 1 + g.buffer, g.buffer) * (n_states // nk[k])
    return n_states, n_states + n_y


def _refuse(config: FarmConfig, what: str, count: int, limit: int, name: str) -> None:
    if count > limit:
        raise ValueError(
            f"scenario {config.name!r}: the aggregated {what} has {count} "
            f"{'variables' if 'LP' in what else 'states'}, above the limit {name}={limit}; "
            "use a smaller farm, raise the limit, or use baselines.bounds.relaxation_bound"
        )


def _compositions(R: int, B: int) -> np.ndarray:
    """int64[C(R+B, B), B+1]: all histograms of R servers over levels 0..B."""
    n = math.comb(R + B, B)
    out = np.empty((n, B + 1), dtype=np.int64)
    # stars and bars: bar positions c_1 < ... < c_B in 0..R+B-1
    for i, bars in enumerate(itertools.combinations(range(R + B), B)):
        prev = -1
        for b, c in enumerate(bars):
            out[i, b] = c - prev - 1
            prev = c
        out[i, B] = R + B - 1 - prev
    return out


class _GroupSpace:
    """Histograms of one group, ranked by a mixed-radix key over levels 1..B (empty first)."""

    def __init__(self, R: int, B: int):
        self.R, self.B = R, B
        comps = _compositions(R, B)
        self._use_key = (R + 1) ** B < 2**62
        if self._use_key:
            self._radix = (R + 1) ** np.arange(B, dtype=np.int64)
            keys = comps[:, 1:] @ self._radix
            order = np.argsort(keys, kind="stable")
            self.comps, self.keys = comps[order], keys[order]
        else:  # huge B with few servers: rank through a dict (rare)
            self.comps = comps[np.lexsort(comps[:, 1:].T[::-1])]
            self._dict = {tuple(r): i for i, r in enumerate(self.comps[:, 1:].tolist())}
        self.n = self.comps.shape[0]
        # neighbours: departure from level b (b >= 1), arrival at level b (b < B); -1 if m_b == 0
        self.dep_next = np.full((self.n, B + 1), -1, dtype=np.int64)
        self.arr_next = np.full((self.n, B), -1, dtype=np.int64)
        for b in range(B + 1):
            has = self.comps[:, b] > 0
            if b >= 1:
                nb = self.comps[has].copy()
                nb[:, b] -= 1
                nb[:, b - 1] += 1
                self.dep_next[has, b] = self.rank(nb)
            if b < B:
                nb = self.comps[has].copy()
                nb[:, b] -= 1
                nb[:, b + 1] += 1
                self.arr_next[has, b] = self.rank(nb)

    def rank(self, hist: np.ndarray) -> np.ndarray:
        """Indices of histograms ``int[..., B+1]`` (must be valid histograms of R servers)."""
        h = np.asarray(hist, dtype=np.int64)
        if self._use_key:
            return np.searchsorted(self.keys, h[..., 1:] @ self._radix)
        flat = h.reshape(-1, self.B + 1)[:, 1:].tolist()
        return np.array([self._dict[tuple(r)] for r in flat], dtype=np.int64).reshape(h.shape[:-1])


class AggregatedSpace:
    """The aggregated state space, its rates and transitions (state 0 = empty farm).

    Attributes:
        n_states, n_actions: N and ``A = sum_k B_k``.
        lam: float64[J] arrival rates.
        W, P: float64[N] total service rate and power in each state.
        next_state: int64[N, A] state after an arrival taking action a (-1: no server there).
        valid: bool[N, J, A] admissible actions (``k in K_j``, ``b < B_k``, ``m_{k,b} > 0``).
        act_k, act_b: int64[A] group and level of each action.
    """

    def __init__(
        self,
        config: FarmConfig,
        *,
        max_states: int = DEFAULT_MAX_PI_STATES,
        arrival_rates: np.ndarray | None = None,
        check_sizes: bool = True,
    ):
        self.config = config
        self.lam = check_rates(config, arrival_rates, check_sizes=check_sizes)
        n_states, _ = estimate_size(config)
        _refuse(config, "chain", n_states, max_states, "max_states")
        K, _J = config.n_groups, config.n_job_types
        self.groups = [_GroupSpace(g.count, g.buffer) for g in config.groups]
        self.shape = tuple(gs.n for gs in self.groups)
        self.n_states = N = n_states
        self.strides = np.array([math.prod(self.shape[k + 1 :]) for k in range(K)], dtype=np.int64)
        idx = np.arange(N, dtype=np.int64)
        self.cidx = np.stack([(idx // self.strides[k]) % self.shape[k] for k in range(K)], axis=1)
        mu, eps = config.mu_table, config.power_table
        self.W = np.zeros(N)
        self.P = np.zeros(N)
        for k, gs in enumerate(self.groups):
            B = gs.B
            self.W += (gs.comps @ mu[k, : B + 1])[self.cidx[:, k]]
            self.P += (gs.comps @ eps[k, : B + 1])[self.cidx[:, k]]
        # departures (fixed for every policy)
        rows, cols, vals = [], [], []
        for k, gs in enumerate(self.groups):
            ck = self.cidx[:, k]
            for b in range(1, gs.B + 1):
                m = gs.comps[ck, b]
                on = m > 0
                rows.append(idx[on])
                cols.append(idx[on] + (gs.dep_next[ck[on], b] - ck[on]) * self.strides[k])
                vals.append(m[on] * mu[k, b])
        self._dep = (np.concatenate(rows), np.concatenate(cols), np.concatenate(vals))
        # arrivals
        self.n_actions = A = int(config.buffers.sum())
        self.act_k = np.repeat(np.arange(K), config.buffers).astype(np.int64)
        self.act_b = (np.arange(A) - level_offsets(config)[self.act_k]).astype(np.int64)
        self.next_state = np.full((N, A), -1, dtype=np.int64)
        for a in range(A):
            k, b = self.act_k[a], self.act_b[a]
            gs, ck = self.groups[k], self.cidx[:, k]
            nx = gs.arr_next[ck, b]
            on = nx >= 0
            self.next_state[on, a] = idx[on] + (nx[on] - ck[on]) * self.strides[k]
        self.valid = (self.next_state >= 0)[:, None, :] & config.availability[:, self.act_k][None]
        self.has_vacancy = self.valid.any(axis=2)  # [N, J]

    # ---- lookups --------------------------------------------------------------------------
    def index_of(self, counts: np.ndarray) -> int:
        """State index of a histogram ``int[K, Bmax+1]`` (``counts[k, b]`` = servers at level b)."""
        c = np.asarray(counts, dtype=np.int64)
        i = 0
        for k, gs in enumerate(self.groups):
            row = c[k, : gs.B + 1]
            if row.sum() != gs.R or np.any(row < 0) or np.any(c[k, gs.B + 1 :] != 0):
                raise ValueError(
                    f"counts: row {k} {c[k].tolist()} is not a histogram of the {gs.R} servers of "
                    f"group {k} over levels 0..{gs.B}"
                )
            i += int(gs.rank(row)) * int(self.strides[k])
        return i

    def counts_of(self, state: int) -> np.ndarray:
        """Histogram ``int64[K, Bmax+1]`` of a state index."""
        c = np.zeros((self.config.n_groups, self.config.max_buffer + 1), dtype=np.int64)
        for k, gs in enumerate(self.groups):
            c[k, : gs.B + 1] = gs.comps[self.cidx[state, k]]
        return c

    # ---- generators -----------------------------------------------------------------------
    def generator(self, policy: np.ndarray) -> sp.csr_matrix:
        """Generator of a policy: ``int[N, J]`` actions (-1 = block) or ``float[N, J, A]`` probs."""
        r, c, v = self._dep
        rows, cols, vals = [r], [c], [v]
        pol = np.asarray(policy)
        N = self.n_states
        if pol.ndim == 2:
            for j in range(self.config.n_job_types):
                st = np.nonzero(pol[:, j] >= 0)[0]
                rows.append(st)
                cols.append(self.next_state[st, pol[st, j]])
                vals.append(np.full(st.size, self.lam[j]))
        else:
            for j in range(self.config.n_job_types):
                st, a = np.nonzero(pol[:, j, :] > 0)
                rows.append(st)
                cols.append(self.next_state[st, a])
                vals.append(self.lam[j] * pol[st, j, a])
        R, C, V = np.concatenate(rows), np.concatenate(cols), np.concatenate(vals)
        if np.any(C < 0):
            raise ValueError("policy: chooses an action with no server at that level")
        Q = sp.csr_matrix((V, (R, C)), shape=(N, N))
        return (Q - sp.diags(np.asarray(Q.sum(axis=1)).ravel())).tocsr()

    def check_policy(self, policy: np.ndarray) -> None:
        """Raise unless the policy is admissible (acts exactly where a vacancy exists)."""
        pol = np.asarray(policy)
        if pol.ndim == 2:
            acts = pol >= 0
            a = np.where(acts, pol, 0)
            ok = np.take_along_axis(self.valid, a[:, :, None], axis=2)[:, :, 0]
            bad = (acts & ~ok) | (acts != self.has_vacancy)
        else:
            mass = pol.sum(axis=2)
            bad = (np.any((pol > 0) & ~self.valid, axis=2)) | (
                np.abs(mass - self.has_vacancy) > 1e-9
            )
        if np.any(bad):
            s, j = np.argwhere(bad)[0]
            raise ValueError(
                f"policy: not admissible in state {self.counts_of(int(s)).tolist()} for job type "
                f"{int(j)} (must pick an available (k, b) with a server there whenever one exists, "
                "and block otherwise)"
            )


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

    def policy(self) -> np.ndarray:
        """The policy in generator form: ``probs`` if randomised, else ``actions``."""
        return self.probs if self.probs is not None else self.actions


def _efficiency(space: AggregatedSpace, pi: np.ndarray) -> float:
    return float(pi @ space.W) / float(pi @ space.P)


def evaluate_aggregated(space: AggregatedSpace, policy: np.ndarray) -> tuple[float, np.ndarray]:
    """(efficiency, stationary distribution) of a symmetric policy on the aggregated chain.

    ``policy`` is ``int[N, J]`` (action per state and type, -1 = block) or ``float[N, J, A]``.
    """
    space.check_policy(policy)
    pi = GeneratorSolver(space.generator(policy)).stationary()
    return _efficiency(space, pi), pi


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

    Each step evaluates the current policy (:class:`baselines.ctmc.GeneratorSolver`): the
    stationary distribution pi, ``eta = pi.W / pi.P`` and the relative values h of the reward
    rate ``W - eta P``; each (state, type) then switches to ``argmax_a h(next(m, a))`` if that
    beats its current action by more than ``rtol`` times the spread of h (the margin prevents
    cycling on rounding ties). A policy with a positive ``(W - eta P)`` gain has efficiency
    > eta, so eta never decreases (``info["history"]``); the final policy satisfies the
    optimality equations, hence is optimal from every state. The first policy is PAS-like.

    Linear algebra (``linear_solver="auto"``): a sparse LU when the lattice is low-dimensional
    (``sum_k B_k <= 2``) or small, else ILU(0)-preconditioned GMRES warm-started from the previous
    step (falling back to LU if GMRES stalls). Measured (2 busy cores): ~1e5 states in 6-50 s.
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
    J = space.config.n_job_types
    lam_valid = space.valid  # [N, J, A]
    history = []
    pi = h = None
    ref: int | None = None
    gmres_its: list[int] = []
    fallbacks = 0
    method = linear_solver
    if method == "auto":
        # LU fill-in is mild on low-dimensional lattices (sum_k B_k = lattice dimension)
        low_dim = int(space.config.buffers.sum()) <= 2
        method = "direct" if low_dim or space.n_states <= DIRECT_MAX_STATES else "iterative"
    for it in range(1, max_iter + 1):
        # ref (iterative solver only): the previous mode, a good shift/preconditioner state
        Q = space.generator(act)
        try:
            solver = GeneratorSolver(Q, ref, method=method)
            pi_new = solver.stationary(x0=pi)
            eta = _efficiency(space, pi_new)
            h = solver.relative_values(space.W - eta * space.P, x0=h)
        except RuntimeError:  # GMRES stalled (e.g. a slowly mixing chain): LU instead
            if method == "direct":
                raise
            fallbacks += 1
            solver = GeneratorSolver(Q, method="direct")
            pi_new = solver.stationary()
            eta = _efficiency(space, pi_new)
            h = solver.relative_values(space.W - eta * space.P)
        pi = pi_new
        gmres_its += solver.gmres_iterations
        history.append(eta)
        if verbose:
            print(f"PI iteration {it}: eta = {eta:.15g}, ref = {solver.ref}")
        hn = np.where(space.next_state >= 0, h[np.maximum(space.next_state, 0)], -np.inf)
        # margin relative to the spread of h where the chain lives (far, improbable states can
        # have huge |h| that would swamp a margin relative to max|h|)
        bulk = h[pi > 1e-12 * pi.max()]
        tol = rtol * max(float(bulk.max() - bulk.min()), 1e-300)
        changed = 0
        for j in range(J):
            sc = np.where(lam_valid[:, j, :], hn, -np.inf)
            best = np.argmax(sc, axis=1)
            on = np.nonzero(space.has_vacancy[:, j])[0]
            gain = sc[on, best[on]] - sc[on, act[on, j]]
            sw = on[gain > tol]
            act[sw, j] = best[sw]
            changed += int(sw.size)
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
    if isinstance(config, AggregatedSpace):
        space = config
        _refuse(space.config, "LP", estimate_size(space.config)[1], max_variables, "max_variables")
    else:
        _refuse(config, "LP", estimate_size(config)[1], max_variables, "max_variables")
        space = AggregatedSpace(
            config, max_states=max_variables, arrival_rates=arrival_rates, check_sizes=check_sizes
        )
    N, J, A = space.n_states, space.config.n_job_types, space.n_actions
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
    dr, dc, dv = space._dep  # departure from state dr to dc at rate dv
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
    x = np.maximum(res.x, 0.0)
    z = x[:N]
    y = np.zeros((N, J, A))
    y[ys, yj, ya] = x[N:]
    # policy y / z where the state carries mass; elsewhere a placeholder, then one greedy step
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
    eta = _efficiency(space, pi)
    h = lu.relative_values(space.W - eta * space.P)
    hn = np.where(space.valid, h[np.maximum(space.next_state, 0)][:, None, :], -np.inf)
    best = np.argmax(hn, axis=2)
    probs[fs, fj, :] = 0.0
    probs[fs, fj, best[fs, fj]] = 1.0
    actions = np.argmax(probs, axis=2).astype(np.int64)  # ties: smallest (k, b)
    actions[~space.has_vacancy] = -1
    return OptimumSolution(
        value=-float(res.fun),
        method="lp",
        space=space,
        actions=actions,
        probs=probs,
        z=z,
        y=y,
        pi=pi,
        iterations=int(getattr(res, "nit", 0) or 0),
        seconds=time.perf_counter() - t0,
        info={"policy_value": eta, "n_variables": nv, "n_constraints": nrow},
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


# ---------------------------------------------------------------------------------------------
# the policy
# ---------------------------------------------------------------------------------------------
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
