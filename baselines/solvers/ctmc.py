"""Exact evaluation of fixed dispatching policies as continuous-time Markov chains.

The chain is the full per-server one: the state is the occupancy vector ``n = (n_s)``,
``n_s in 0..B_k(s)``, so there are ``prod_k (B_k + 1)^R_k`` states. Valid for **exponential job
sizes only** (the chain is then exactly Markov); other size distributions are refused unless
``check_sizes=False`` is passed, in which case the result is that of the same farm with exponential
sizes. Arrival rates must be constant in time (or be given explicitly with ``arrival_rates``).

Transitions: a job leaves server s at rate ``mu_k(n_s)`` (processor sharing, total rate
``mu_table[k, n_s]``); a type-j job arrives at rate ``lambda_j`` and the policy sends it to a
non-full server of its available groups (or blocks it). Policies:

- a priority table ``float64[K, Bmax+1]`` (also ``"priority"`` with ``table=``): the job goes to the
  available non-full server maximising ``table[k(s), n_s]``, ties to the smallest server index
  (the simulator's built-in ``"priority"`` dispatcher); ``"pas"`` is the table
  ``mu_k / (eps_k - eps0_k)``, constant over levels;
- ``"random"``: uniform over the available non-full servers;
- a function ``rule(occ: int64[S], j: int) -> int``: a per-server deterministic rule returning
  a server index (which must be available to type j and not full), or -1 to block.

Results: stationary distribution, efficiency = throughput / power with
throughput ``E[sum_s mu_k(s)(n_s)]`` and power ``E[sum_s eps_k(s)(n_s)]``, blocking probability per
job type (by PASTA, the stationary probability of the states where the policy blocks that type),
mean occupancy and occupancy distribution per server, and the mean response time of admitted
jobs ``E[T] = E[N] / accepted rate`` (Little's law, ``N`` = jobs in the farm).

The generic solver :class:`GeneratorSolver` (stationary distribution and relative values from one
factorisation) is shared with :mod:`serverfarm_gym.baselines.solvers.efficiency_optimum`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from numba import njit
from scipy.sparse.csgraph import breadth_first_order
from scipy.sparse.linalg import splu

from serverfarm_gym.baselines.pas import pas_table
from serverfarm_gym.envs.config import FarmConfig

__all__ = [
    "DEFAULT_MAX_STATES",
    "DIRECT_MAX_STATES",
    "CTMCResult",
    "GeneratorSolver",
    "check_rates",
    "choose_reference",
    "evaluate_policy",
    "full_states",
    "n_full_states",
    "occupancy_distribution",
    "reachable_from",
    "relative_values",
    "stationary_distribution",
]

#: default refusal limit on the number of per-server states (a solve stays in seconds)
DEFAULT_MAX_STATES = 2_000_000

PolicySpec = str | np.ndarray | Callable[[np.ndarray, int], int]


# ---------------------------------------------------------------------------------------------
# generic CTMC linear algebra
# ---------------------------------------------------------------------------------------------
#: chains up to this many states are solved by a sparse LU; larger ones by ILU(0)-preconditioned
#: GMRES (the LU of a high-dimensional lattice fills in badly: ~26e6 entries for 46e3 states)
DIRECT_MAX_STATES = 3_000
#: SuperLU options of the direct method: a symmetric fill-reducing order with threshold pivoting
#: (a pivot within 10x of its column's largest, as UMFPACK's default). On these lattices it is
#: 3-5x faster than SuperLU's default (COLAMD, strict partial pivoting), whose row exchanges let
#: the dense border fill the factors; the residuals are the same (tests/baselines/solvers/
#: test_ctmc.py; ``python -m benchmarks.bench_exact`` measures both)
DIRECT_LU_OPTIONS: dict[str, object] = {"permc_spec": "MMD_AT_PLUS_A", "diag_pivot_thresh": 0.1}

_JIT = {"cache": True, "nogil": True}


# ---------------------------------------------------------------------------------------------
# compiled sparse kernels: ILU(0) and right-preconditioned GMRES on a CSR matrix. Written out
# (no BLAS) because a multi-threaded BLAS on a busy 2-core machine made numpy/scipy's level-1/2
# calls ~30x slower than these loops; and scipy's ILUT took seconds where ILU(0) takes ms.
# ---------------------------------------------------------------------------------------------
@njit(**_JIT)
def _ilu0(indptr, indices, data):  # pragma: no cover - compiled
    """ILU(0) of a CSR matrix with sorted indices and a non-zero diagonal: (lu values, diag pos)."""
    n = indptr.size - 1
    lu = data.copy()
    diag = np.full(n, -1, dtype=np.int64)
    iw = np.full(n, -1, dtype=np.int64)
    for i in range(n):
        for p in range(indptr[i], indptr[i + 1]):
            iw[indices[p]] = p
            if indices[p] == i:
                diag[i] = p
        if diag[i] < 0:
            return lu, diag  # missing diagonal: caller falls back
        for p in range(indptr[i], indptr[i + 1]):
            k = indices[p]
            if k >= i:
                break
            piv = lu[p] / lu[diag[k]]
            lu[p] = piv
            for q in range(diag[k] + 1, indptr[k + 1]):
                pos = iw[indices[q]]
                if pos != -1:
                    lu[pos] -= piv * lu[q]
        for p in range(indptr[i], indptr[i + 1]):
            iw[indices[p]] = -1
    return lu, diag


@njit(**_JIT)
def _ilu_apply(indptr, indices, lu, diag, v, trans, out):  # pragma: no cover - compiled
    """out = (LU)^-1 v, or (LU)^-T v when ``trans``."""
    n = v.size
    for i in range(n):
        out[i] = v[i]
    if not trans:
        for i in range(n):  # L y = v (unit lower)
            acc = out[i]
            for p in range(indptr[i], diag[i]):
                acc -= lu[p] * out[indices[p]]
            out[i] = acc
        for i in range(n - 1, -1, -1):  # U x = y
            acc = out[i]
            for p in range(diag[i] + 1, indptr[i + 1]):
                acc -= lu[p] * out[indices[p]]
            out[i] = acc / lu[diag[i]]
    else:
        for i in range(n):  # U^T z = v
            out[i] /= lu[diag[i]]
            zi = out[i]
            for p in range(diag[i] + 1, indptr[i + 1]):
                out[indices[p]] -= lu[p] * zi
        for i in range(n - 1, -1, -1):  # L^T x = z
            xi = out[i]
            for p in range(indptr[i], diag[i]):
                out[indices[p]] -= lu[p] * xi


@njit(**_JIT)
def _matvec(indptr, indices, data, x, trans, ref, c, out):  # pragma: no cover - compiled
    """out = (Q + c 1 e_ref^T) x, or (Q^T + c e_ref 1^T) x when ``trans`` (Q in CSR)."""
    n = x.size
    if not trans:
        for i in range(n):
            acc = 0.0
            for p in range(indptr[i], indptr[i + 1]):
                acc += data[p] * x[indices[p]]
            out[i] = acc + c * x[ref]
    else:
        tot = 0.0
        for i in range(n):
            out[i] = 0.0
            tot += x[i]
        for i in range(n):
            xi = x[i]
            for p in range(indptr[i], indptr[i + 1]):
                out[indices[p]] += data[p] * xi
        out[ref] += c * tot


@njit(**_JIT)
def _norm(x):  # pragma: no cover - compiled
    acc = 0.0
    for i in range(x.size):
        acc += x[i] * x[i]
    return math.sqrt(acc)


@njit(**_JIT)
def _gmres(
    indptr, indices, data, ref, c, mptr, midx, lu, diag, b, x, trans, rtol, norm_a, restart, maxiter
):  # pragma: no cover - compiled
    """Right-preconditioned restarted GMRES (modified Gram-Schmidt, Givens rotations).

    Solves ``B x = b`` in place in ``x``, ``B`` the operator of :func:`_matvec`, preconditioned
    by the ILU(0) factors ``(mptr, midx, lu, diag)``, until the residual is at most
    ``rtol (norm_a ||x|| + ||b||)`` (backward error). Returns (iterations, residual).
    """
    n = b.size
    V = np.empty((restart + 1, n))
    Z = np.empty((restart, n))
    H = np.zeros((restart + 1, restart))
    g = np.zeros(restart + 1)
    cs = np.zeros(restart)
    sn = np.zeros(restart)
    r = np.empty(n)
    w = np.empty(n)
    norm_b = _norm(b)
    total = 0
    while True:
        _matvec(indptr, indices, data, x, trans, ref, c, r)
        for i in range(n):
            r[i] = b[i] - r[i]
        beta = _norm(r)
        target = rtol * (norm_a * _norm(x) + norm_b)
        if beta <= target or total >= maxiter:
            return total, beta
        for i in range(n):
            V[0, i] = r[i] / beta
        g[:] = 0.0
        g[0] = beta
        kk = 0
        for k in range(restart):
            _ilu_apply(mptr, midx, lu, diag, V[k], trans, Z[k])
            _matvec(indptr, indices, data, Z[k], trans, ref, c, w)
            for j in range(k + 1):
                h = 0.0
                for i in range(n):
                    h += V[j, i] * w[i]
                H[j, k] = h
                for i in range(n):
                    w[i] -= h * V[j, i]
            hn = _norm(w)
            H[k + 1, k] = hn
            if hn > 0.0:
                for i in range(n):
                    V[k + 1, i] = w[i] / hn
            for j in range(k):
                t = cs[j] * H[j, k] + sn[j] * H[j + 1, k]
                H[j + 1, k] = -sn[j] * H[j, k] + cs[j] * H[j + 1, k]
                H[j, k] = t
            d = math.hypot(H[k, k], H[k + 1, k])
            cs[k] = H[k, k] / d
            sn[k] = H[k + 1, k] / d
            H[k, k] = d
            H[k + 1, k] = 0.0
            g[k + 1] = -sn[k] * g[k]
            g[k] = cs[k] * g[k]
            total += 1
            kk = k + 1
            if abs(g[k + 1]) <= 0.5 * target or hn == 0.0 or total >= maxiter:
                break
        # back substitution and update x += Z^T y
        y = np.zeros(kk)
        for i in range(kk - 1, -1, -1):
            acc = g[i]
            for j in range(i + 1, kk):
                acc -= H[i, j] * y[j]
            y[i] = acc / H[i, i]
        for j in range(kk):
            for i in range(n):
                x[i] += y[j] * Z[j, i]


def reachable_from(Q: sp.spmatrix, start: int = 0) -> np.ndarray:
    """bool[N]: states reachable from ``start`` along positive-rate transitions of ``Q``."""
    order = breadth_first_order(
        sp.csr_matrix(Q), int(start), directed=True, return_predecessors=False
    )
    out = np.zeros(Q.shape[0], dtype=bool)
    out[order] = True
    return out


def choose_reference(Q: sp.spmatrix, start: int = 0, steps: int = 4000) -> int:
    """A recurrent state of fairly high probability (heuristic), for the iterative solver's shift.

    Follows the fastest transition from ``start`` (the empty farm, recurrent under every policy)
    for ``steps`` steps: the walk ends near the bulk of the chain, and every state it visits is
    reachable from ``start``, hence recurrent.
    """
    Q = sp.csr_matrix(Q)
    ip, ix, dv = Q.indptr, Q.indices, Q.data
    s = int(start)
    for _ in range(steps):
        cols, vals = ix[ip[s] : ip[s + 1]], dv[ip[s] : ip[s + 1]]
        vals = np.where(cols == s, -np.inf, vals)
        if vals.size == 0 or not np.isfinite(vals.max()):
            break
        s = int(cols[np.argmax(vals)])
    return s


class GeneratorSolver:
    """Solves ``pi Q = 0`` (stationary distribution) and ``Q h = -r`` (relative values) for a
    generator ``Q`` with one recurrent class (here: the empty farm is reached from every state).

    Small chains (``method="direct"``): one sparse LU of the bordered matrix
    ``K = [[Q, 1], [1^T, 0]]``, non-singular for a unichain Q, serves both systems: ``K^T`` gives
    pi (with ``sum(pi) = 1``), ``K`` gives relative values normalised by ``sum(h) = 0``. Unlike
    the textbook reduction that deletes a reference state, it needs no reference state, whose
    choice matters: deleting a rarely hit one leaves a near-singular system on which even LU
    returns garbage (seen on a 10^4-state chain).

    Large chains (``method="iterative"``): the LU of a high-dimensional lattice fills in badly, so
    compiled ILU(0)-preconditioned GMRES solves the *rank-one shifted* systems
    ``(Q^T + c e_ref 1^T) pi = c e_ref`` and ``(Q + c 1 e_ref^T) h = -r``. By Brauer's theorem
    the shift only moves the zero eigenvalue of Q to ``c``, so both are non-singular and as well
    conditioned as Q itself, whatever ``ref`` is; the killed system instead becomes
    near-singular when ``ref`` is rarely hit (GMRES then returns garbage that passes a residual
    test). The solution of the first is pi (its entries sum to 1); of the second, relative
    values of ``r - (pi.r)`` with ``h[ref] = -(pi.r)/c``. Preconditioner: ILU(0) of
    ``Q + c e_ref e_ref^T`` (and its transpose); the shifted operators differ from it by rank one.

    Args:
        Q: the generator (rows sum to zero).
        ref: reference state of the iterative method's shift (any state works; a probable one
            gives a better preconditioner); default :func:`choose_reference`.
        method: ``"auto"`` (LU up to ``DIRECT_MAX_STATES`` states, else GMRES with a fall-back to
            LU if it stalls), ``"direct"`` or ``"iterative"`` (RuntimeError if GMRES stalls).
        rtol: GMRES stopping rule (backward error) ``||Bx - b|| <= rtol (||B|| ||x|| + ||b||)``.
        max_iterations: GMRES iterations before giving up (RuntimeError).
    """

    def __init__(
        self,
        Q: sp.spmatrix,
        ref: int | None = None,
        *,
        method: str = "auto",
        rtol: float = 1e-13,
        max_iterations: int = 3000,
    ):
        Q = sp.csr_matrix(Q, dtype=np.float64)
        n = Q.shape[0]
        if Q.shape != (n, n):
            raise ValueError(f"Q: expected a square generator, got shape {Q.shape}")
        if method not in ("auto", "direct", "iterative"):
            raise ValueError(f"method: expected 'auto', 'direct' or 'iterative', got {method!r}")
        Q.sort_indices()
        self.Q, self.n = Q, n
        self._auto = method == "auto"
        if method == "auto":
            method = "direct" if n <= DIRECT_MAX_STATES else "iterative"
        self.method = method
        self.rtol, self.max_iterations = rtol, int(max_iterations)
        self.gmres_iterations: list[int] = []
        self._lu = self._ilu = None
        self.ref = 0 if ref is None else int(ref)
        if n == 1:
            return
        if method == "direct":
            one = sp.csr_matrix(np.ones((1, n)))
            K = sp.bmat([[Q, one.T], [one, None]], format="csc")
            self._lu = splu(K, **DIRECT_LU_OPTIONS)
            return
        self.ref = choose_reference(Q) if ref is None else int(ref)
        diag = -Q.diagonal()
        self.c = float(diag.mean()) if diag.mean() > 0 else 1.0
        self._norm_b = 2.0 * float(diag.max()) + self.c  # bound on ||B||_inf of both operators
        M = (Q + sp.csr_matrix(([self.c], ([self.ref], [self.ref])), shape=(n, n))).tocsr()
        M.sort_indices()
        lu, dpos = _ilu0(M.indptr, M.indices, M.data)
        if np.any(dpos < 0) or np.any(lu[dpos] == 0.0):  # no ILU(0) (zero pivot): use LU
            self.__init__(Q, self.ref, method="direct", rtol=rtol, max_iterations=max_iterations)
            return
        self._ilu = (M.indptr, M.indices, lu, dpos)

    def _gmres(self, b: np.ndarray, trans: bool, x0: np.ndarray | None) -> np.ndarray:
        Q = self.Q
        mptr, midx, lu, dpos = self._ilu
        b = np.ascontiguousarray(b, dtype=np.float64)
        x = np.zeros(self.n) if x0 is None else np.array(x0, dtype=np.float64)
        its, res = _gmres(
            Q.indptr, Q.indices, Q.data, self.ref, self.c, mptr, midx, lu, dpos, b, x, trans,
            self.rtol, self._norm_b, 60, self.max_iterations,
        )  # fmt: skip
        self.gmres_iterations.append(int(its))
        if res > self.rtol * (self._norm_b * float(np.linalg.norm(x)) + float(np.linalg.norm(b))):
            raise RuntimeError(
                f"GMRES did not reach backward error {self.rtol} in {its} iterations on a "
                f"{self.n}-state chain (residual {res:.3g}); use a smaller instance or "
                "method='direct'"
            )
        return x

    def stationary(self, x0: np.ndarray | None = None) -> np.ndarray:
        """pi with ``pi Q = 0``, ``sum(pi) = 1`` (zero on transient states, up to rounding).

        ``x0``: an approximate stationary distribution to warm-start the iterative solver.
        """
        if self.n == 1:
            return np.ones(1)
        if self._lu is not None:
            # [[Q^T, 1], [1^T, 0]] [pi; t] = [0; 1]  (t = 0 at the solution)
            rhs = np.zeros(self.n + 1)
            rhs[-1] = 1.0
            pi = self._lu.solve(rhs, trans="T")[: self.n]
        else:
            b = np.zeros(self.n)
            b[self.ref] = self.c
            g = None if x0 is None else np.asarray(x0, dtype=np.float64) / np.sum(x0)
            try:
                pi = self._gmres(b, True, g)
            except RuntimeError:
                if not self._to_direct():
                    raise
                return self.stationary()
        np.maximum(pi, 0.0, out=pi)  # transient states: exact 0, rounding gives +-1e-17
        return pi / pi.sum()

    def relative_values(self, r: np.ndarray, x0: np.ndarray | None = None) -> np.ndarray:
        """Relative values h: ``Q h = -(r - g)``, g the gain ``pi . r`` (0 when r is centred).

        Normalisation: ``sum(h) = 0`` (direct) or ``h[ref] = -g / c`` (iterative); only
        differences of h matter. ``x0``: a warm start (iterative method).
        """
        r = np.asarray(r, dtype=np.float64)
        if self.n == 1:
            return np.zeros(1)
        if self._lu is not None:
            # [[Q, 1], [1^T, 0]] [h; -g] = [-r; 0]: Q h = -(r - g), sum(h) = 0
            return self._lu.solve(np.append(-r, 0.0))[: self.n]
        g = None if x0 is None else np.asarray(x0, dtype=np.float64) - x0[self.ref]
        try:
            return self._gmres(-r, False, g)
        except RuntimeError:
            if not self._to_direct():
                raise
            return self.relative_values(r)

    def _to_direct(self) -> bool:
        """With ``method="auto"``, switch to the LU after GMRES stalled (slowly mixing chains,
        e.g. 2-dimensional lattices with many servers, where LU is cheap anyway)."""
        if not self._auto:
            return False
        its = self.gmres_iterations
        self.__init__(self.Q, self.ref, method="direct", rtol=self.rtol)
        self.gmres_iterations = its
        return True


def stationary_distribution(Q: sp.spmatrix, method: str = "auto") -> np.ndarray:
    """Stationary distribution of a generator ``Q`` with one recurrent class."""
    return GeneratorSolver(Q, method=method).stationary()


def relative_values(Q: sp.spmatrix, r: np.ndarray, method: str = "auto") -> np.ndarray:
    """Relative values h of the reward rate ``r``: ``Q h = -(r - pi.r)`` (up to a constant)."""
    return GeneratorSolver(Q, method=method).relative_values(r)


def check_rates(
    config: FarmConfig, arrival_rates: np.ndarray | None = None, *, check_sizes: bool = True
) -> np.ndarray:
    """float64[J] arrival rates for a stationary exact solver; refuses what it cannot model."""
    if check_sizes and not config.all_exponential:
        raise ValueError(
            f"scenario {config.name!r}: exact CTMC/MDP solvers need exponential job sizes; use "
            "config.with_job_size('exponential') (or pass check_sizes=False to solve the "
            "exponential version of this farm)"
        )
    if arrival_rates is None:
        if config.is_time_varying:
            raise ValueError(
                f"scenario {config.name!r}: arrival rates/prices vary over {config.n_intervals} "
                "intervals; the exact solvers need constant rates: pass arrival_rates= explicitly "
                "(e.g. config.arrival_rates[i] for interval i)"
            )
        lam = config.arrival_rates[0]
    else:
        lam = np.asarray(arrival_rates, dtype=np.float64).ravel()
        if lam.shape != (config.n_job_types,) or np.any(lam < 0) or not np.all(np.isfinite(lam)):
            raise ValueError(
                f"arrival_rates: expected {config.n_job_types} finite non-negative rates, got {lam}"
            )
    return np.array(lam, dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# full per-server chain
# ---------------------------------------------------------------------------------------------
def n_full_states(config: FarmConfig) -> int:
    """Number of per-server states ``prod_k (B_k + 1)^R_k`` (exact Python int)."""
    n = 1
    for g in config.groups:
        n *= (g.buffer + 1) ** g.count
    return n


@dataclass(frozen=True)
class CTMCResult:
    """Exact stationary performance of a fixed policy on the per-server chain.

    Attributes:
        states: int16[N, S] occupancy vector of each state (mixed radix, server 0 slowest).
        pi: float64[N] stationary distribution over ``states``.
        throughput, power, efficiency: ``E[sum mu]``, ``E[sum eps]`` and their ratio.
        blocking: float64[J] probability that a type-j arrival is blocked (PASTA).
        mean_occupancy: float64[S] ``E[n_s]``.
        occupancy_dist: float64[S, Bmax+1] ``P(n_s = b)``.
        accepted_rate: ``sum_j lambda_j (1 - blocking_j)``, the rate of admitted jobs.
    """

    states: np.ndarray
    pi: np.ndarray
    throughput: float
    power: float
    efficiency: float
    blocking: np.ndarray
    mean_occupancy: np.ndarray
    occupancy_dist: np.ndarray
    accepted_rate: float = math.nan

    @property
    def n_states(self) -> int:
        return int(self.pi.shape[0])

    @property
    def mean_jobs(self) -> float:
        """``E[N]``: mean number of jobs in the farm (all servers)."""
        return float(self.mean_occupancy.sum())

    @property
    def mean_response_time(self) -> float:
        """``E[T] = E[N] / accepted rate`` (Little's law over admitted jobs; NaN if none)."""
        return self.mean_jobs / self.accepted_rate if self.accepted_rate > 0 else math.nan


def full_states(config: FarmConfig) -> tuple[np.ndarray, np.ndarray]:
    """(states int16[N, S], strides int64[S]) of the mixed-radix per-server state space."""
    radix = config.buffers[config.server_group] + 1
    S = config.n_servers
    strides = np.ones(S, dtype=np.int64)
    for s in range(S - 2, -1, -1):
        strides[s] = strides[s + 1] * radix[s + 1]
    N = int(strides[0] * radix[0])
    idx = np.arange(N, dtype=np.int64)
    states = np.empty((N, S), dtype=np.int16)
    for s in range(S):
        states[:, s] = (idx // strides[s]) % radix[s]
    return states, strides


def _decisions(
    config: FarmConfig, states: np.ndarray, policy: PolicySpec, table: np.ndarray | None
) -> tuple[str, np.ndarray]:
    """("det", int64[N, J] chosen server or -1) or ("random", bool[N, J, S] candidate sets)."""
    sg = config.server_group
    vacant = states < config.buffers[sg][None, :]  # [N, S]
    cand = vacant[:, None, :] & config.server_availability[None, :, :]  # [N, J, S]
    if isinstance(policy, str) and policy == "random":
        return "random", cand
    if isinstance(policy, str) and policy == "pas":
        policy, table = "priority", pas_table(config)
    if isinstance(policy, np.ndarray):
        policy, table = "priority", policy
    if isinstance(policy, str):
        if policy != "priority":
            raise ValueError(
                f"policy: unknown policy {policy!r}; use 'pas', 'random', 'priority' (with table=), "
                "a float64[K, Bmax+1] table, or a function rule(occ, j) -> server"
            )
        if table is None:
            raise ValueError("table: policy 'priority' needs table=float64[K, Bmax+1]")
        t = np.asarray(table, dtype=np.float64)
        shape = (config.n_groups, config.max_buffer + 1)
        if t.shape != shape:
            raise ValueError(f"table: expected shape {shape}, got {t.shape}")
        score = t[sg[None, :], states.astype(np.int64)]  # [N, S]
        masked = np.where(cand, score[:, None, :], -np.inf)
        choice = np.argmax(masked, axis=2).astype(np.int64)  # first maximum: smallest index
        choice[~cand.any(axis=2)] = -1
        return "det", choice
    if callable(policy):
        N, J = states.shape[0], config.n_job_types
        choice = np.empty((N, J), dtype=np.int64)
        occ = states.astype(np.int64)
        for i in range(N):
            for j in range(J):
                s = int(policy(occ[i].copy(), j))
                if s != -1 and not (0 <= s < config.n_servers and cand[i, j, s]):
                    raise ValueError(
                        f"policy rule returned server {s} for job type {j} in state {occ[i]}: "
                        "it must return an available, non-full server index or -1 (block)"
                    )
                choice[i, j] = s
        return "det", choice
    raise ValueError(f"policy: expected a name, a table or a callable, got {type(policy).__name__}")


def evaluate_policy(
    config: FarmConfig,
    policy: PolicySpec = "pas",
    table: np.ndarray | None = None,
    *,
    max_states: int = DEFAULT_MAX_STATES,
    arrival_rates: np.ndarray | None = None,
    check_sizes: bool = True,
) -> CTMCResult:
    """Exact stationary performance of a per-server dispatching rule (see the module docstring).

    Args:
        config: the farm (exponential sizes, constant rates unless ``arrival_rates`` is given).
        policy: ``"pas"``, ``"random"``, ``"priority"`` (with ``table``), a priority table, or a
            function ``rule(occ, j) -> server or -1``.
        table: the priority table for ``policy="priority"``.
        max_states: refuse (ValueError) when ``prod_k (B_k+1)^R_k`` exceeds this.
        arrival_rates: float64[J] override of the configured (constant) rates.
        check_sizes: refuse non-exponential job sizes (the chain is only exact for exponential).
    """
    lam = check_rates(config, arrival_rates, check_sizes=check_sizes)
    n = n_full_states(config)
    if n > max_states:
        raise ValueError(
            f"scenario {config.name!r}: the per-server chain has {n} states, above the limit "
            f"max_states={max_states}; use a smaller farm, raise max_states, or use the aggregated "
            "solvers in serverfarm_gym.baselines.solvers.efficiency_optimum"
        )
    states, strides = full_states(config)
    N, S = states.shape
    sg = config.server_group
    occ = states.astype(np.int64)
    rows, cols, vals = [], [], []
    idx = np.arange(N, dtype=np.int64)
    for s in range(S):  # departures
        rate = config.mu_table[sg[s], occ[:, s]]
        on = occ[:, s] > 0
        rows.append(idx[on])
        cols.append(idx[on] - strides[s])
        vals.append(rate[on])
    kind, dec = _decisions(config, states, policy, table)
    if kind == "det":
        blocked = dec < 0
        for j in range(config.n_job_types):
            on = ~blocked[:, j]
            rows.append(idx[on])
            cols.append(idx[on] + strides[dec[on, j]])
            vals.append(np.full(int(on.sum()), lam[j]))
    else:
        ncand = dec.sum(axis=2)  # [N, J]
        blocked = ncand == 0
        for j in range(config.n_job_types):
            st, sv = np.nonzero(dec[:, j, :])
            rows.append(st)
            cols.append(st + strides[sv])
            vals.append(lam[j] / ncand[st, j])
    r, c, v = np.concatenate(rows), np.concatenate(cols), np.concatenate(vals)
    Q = sp.csr_matrix((v, (r, c)), shape=(N, N))
    Q = Q - sp.diags(np.asarray(Q.sum(axis=1)).ravel())
    pi = GeneratorSolver(Q).stationary()

    mu_s = config.mu_table[sg[None, :], occ]
    eps_s = config.power_table[sg[None, :], occ]
    thr = float(pi @ mu_s.sum(axis=1))
    pw = float(pi @ eps_s.sum(axis=1))
    dist = np.zeros((S, config.max_buffer + 1))
    for s in range(S):
        dist[s] = np.bincount(occ[:, s], weights=pi, minlength=config.max_buffer + 1)
    blocking = pi @ blocked.astype(np.float64)
    return CTMCResult(
        states=states,
        pi=pi,
        throughput=thr,
        power=pw,
        efficiency=thr / pw,
        blocking=blocking,
        mean_occupancy=dist @ np.arange(config.max_buffer + 1),
        occupancy_dist=dist,
        accepted_rate=float(lam @ (1.0 - blocking)),
    )


def occupancy_distribution(
    config: FarmConfig,
    policy: PolicySpec = "pas",
    table: np.ndarray | None = None,
    **kwargs,
) -> np.ndarray:
    """float64[S, Bmax+1]: stationary ``P(n_s = b)`` per server (e.g. M/M/1/B for one server).

    Keyword arguments are those of :func:`evaluate_policy`.
    """
    return evaluate_policy(config, policy, table, **kwargs).occupancy_dist
