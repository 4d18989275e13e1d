"""The aggregated state space of a farm for the exact solvers (``serverfarm_gym.baselines.solvers.efficiency_optimum``).

By exchangeability of a group's servers, a state is one histogram per group (``m_{k,b}``: servers
of group k holding b jobs), so the chain has ``prod_k C(R_k + B_k, B_k)`` states instead of
``prod_k (B_k + 1)^R_k``. :class:`AggregatedSpace` ranks the states, lists the actions
``(k, b)`` and builds the generator of a deterministic policy; :func:`evaluate_aggregated` solves it.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import scipy.sparse as sp

from serverfarm_gym.baselines.solvers.ctmc import GeneratorSolver, check_rates
from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.observation import level_offsets

__all__ = [
    "DEFAULT_MAX_PI_STATES",
    "AggregatedSpace",
    "aggregated_efficiency",
    "aggregated_response_time",
    "estimate_size",
    "evaluate_aggregated",
    "refuse_if_larger",
]

#: refusal limit of the aggregated chain: policy iteration's time and memory (about 0.3 GB per
#: 1e5 states) grow with it
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


def refuse_if_larger(config: FarmConfig, what: str, count: int, limit: int, name: str) -> None:
    if count > limit:
        # a farm of thousands of groups has a count of thousands of digits: show its magnitude
        shown = (
            f"{count:,}"
            if count < 10**15
            else f"about 10^{int(count.bit_length() * math.log10(2))}"
        )
        raise ValueError(
            f"scenario {config.name!r}: the aggregated {what} has {shown} "
            f"{'variables' if 'LP' in what else 'states'}, above the limit {name}={limit}; "
            "use a smaller farm, raise the limit, or use serverfarm_gym.baselines.solvers.bounds.relaxation_bound"
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
        jobs: float64[N] jobs in the farm in each state (``sum_{k,b} b m_{k,b}``).
        admit: float64[N] rate of admitted arrivals in each state (``sum_j lambda_j`` over the
            types with a vacancy: no blocking while one exists).
        next_state: int64[N, A] state after an arrival taking action a (-1: no server there).
        valid: bool[N, J, A] admissible actions (``k in K_j``, ``b < B_k``, ``m_{k,b} > 0``).
        departures: (rows, cols, rates) of the departure transitions, the same for every policy.
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
        refuse_if_larger(config, "chain", n_states, max_states, "max_states")
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
        self.jobs = np.zeros(N)
        for k, gs in enumerate(self.groups):
            B = gs.B
            self.W += (gs.comps @ mu[k, : B + 1])[self.cidx[:, k]]
            self.P += (gs.comps @ eps[k, : B + 1])[self.cidx[:, k]]
            self.jobs += (gs.comps @ np.arange(B + 1.0))[self.cidx[:, k]]
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
        self.departures = (np.concatenate(rows), np.concatenate(cols), np.concatenate(vals))
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
        self.admit = self.has_vacancy @ self.lam

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
        r, c, v = self.departures
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


def aggregated_efficiency(space: AggregatedSpace, pi: np.ndarray) -> float:
    return float(pi @ space.W) / float(pi @ space.P)


def aggregated_response_time(space: AggregatedSpace, pi: np.ndarray) -> tuple[float, float, float]:
    """``(E[N], accepted rate, E[T])`` under the stationary distribution ``pi``: Little's law
    ``E[T] = E[N] / accepted rate`` over admitted jobs (PASTA: a type-j arrival is admitted in the
    states with a vacancy for it)."""
    en, acc = float(pi @ space.jobs), float(pi @ space.admit)
    return en, acc, (en / acc if acc > 0 else math.nan)


def evaluate_aggregated(space: AggregatedSpace, policy: np.ndarray) -> tuple[float, np.ndarray]:
    """(efficiency, stationary distribution) of a symmetric policy on the aggregated chain.

    ``policy`` is ``int[N, J]`` (action per state and type, -1 = block) or ``float[N, J, A]``.
    """
    space.check_policy(policy)
    pi = GeneratorSolver(space.generator(policy)).stationary()
    return aggregated_efficiency(space, pi), pi
