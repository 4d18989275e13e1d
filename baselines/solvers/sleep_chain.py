"""Exact chains of a farm with dynamic right-sizing (groups with ``sleep``; docs/latency.md).

A server's state is ``(mode, n)``: ``on(n)`` (n = 0..B), ``off`` and ``setup(n)`` (n = 1..B).
By exchangeability of a group's servers the farm's chain aggregates them by the histogram of
their states (:class:`SleepSpace`), as the base model's exact solvers aggregate by levels. A group
without ``sleep``, or with ``idle_timeout_rate`` 0 (its servers start on and never leave it, as in
the simulator), has the ``on`` states only.

* :func:`evaluate_table`: efficiency, E[N], E[T] of a static priority order over
  (group, mode, level): an arrival goes to a server of the available class of highest priority
  (classes of a group are exchangeable, so any server of the class; ties between classes go to
  the first in :attr:`SleepSpace.classes` order).
* :func:`solve_optimum`: the optimal dispatcher (it may use the whole histogram, e.g. how many
  servers are awake): the occupation-measure LP with the ratio linearised (Charnes-Cooper), HiGHS.
* :func:`evaluate_pas`: PAS with its tie to the smallest server index, which is not a function of
  the histogram, on the per-server (unaggregated) chain; small farms only.

The generator of the uncontrolled moves (departures, setup completions, timeouts) is the
Kronecker sum of the groups' own; each arrival action (group, class) is a Kronecker product.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog
from scipy.sparse.linalg import spsolve

from serverfarm_gym.envs.config import FarmConfig, GroupConfig

__all__ = ["SleepResult", "SleepSpace", "evaluate_pas", "evaluate_table", "solve_optimum"]

ON, SETUP, OFF = 0, 1, 2  # as serverfarm_gym.envs.simulator.MODE_*
MAX_STATES = 200_000


def _sleeps(g: GroupConfig) -> bool:
    return g.sleep is not None and g.sleep.idle_timeout_rate > 0


def server_states(g: GroupConfig) -> list[tuple[int, int]]:
    """The (mode, jobs) states of one server of group g, in class order."""
    on = [(ON, n) for n in range(g.buffer + 1)]
    if not _sleeps(g):
        return on
    return [*on, *((SETUP, n) for n in range(1, g.buffer + 1)), (OFF, 0)]


def _rates(g: GroupConfig, x: tuple[int, int]) -> tuple[float, float, list[tuple[tuple, float]]]:
    """(service rate, power, uncontrolled moves [(next state, rate)]) of one server in x."""
    m, n = x
    z = g.sleep
    if m == OFF:
        return 0.0, z.power, []
    if m == SETUP:
        return 0.0, z.setup_power, [((ON, n), z.setup_rate)]
    if n == 0:
        moves = [((OFF, 0), z.idle_timeout_rate)] if _sleeps(g) else []
        return 0.0, g.idle_power, moves
    mu = g.service_rate[n - 1]
    off = n == 1 and _sleeps(g) and math.isinf(z.idle_timeout_rate)
    return mu, g.busy_power[n - 1], [((OFF, 0) if off else (ON, n - 1), mu)]


def _arrive(x: tuple[int, int]) -> tuple[int, int]:
    m, n = x
    return (SETUP, 1) if m == OFF else (m, n + 1)


class _Group:
    """Histograms of one group's servers over its classes, their values and moves."""

    def __init__(self, g: GroupConfig):
        self.classes = server_states(g)
        # inf timeout: on(0) is left at once, never occupied (kept as a class with no mass)
        self.inf = _sleeps(g) and math.isinf(g.sleep.idle_timeout_rate)
        C = len(self.classes)
        idx = {x: i for i, x in enumerate(self.classes)}
        hists = [h for h in _compositions(g.count, C) if not (self.inf and h[0] > 0)]
        self.hists = np.array(hists, dtype=np.int64)
        rank = {tuple(h): i for i, h in enumerate(hists)}
        n = len(hists)
        vals = [_rates(g, x) for x in self.classes]
        self.work = self.hists @ np.array([v[0] for v in vals])
        self.power = self.hists @ np.array([v[1] for v in vals])
        self.jobs = self.hists @ np.array([x[1] for x in self.classes], dtype=float)
        rows, cols, data = [], [], []
        for i, h in enumerate(hists):
            for c, (_, _, moves) in enumerate(vals):
                for y, r in moves:
                    if h[c] == 0 or (math.isinf(r)):
                        continue
                    t = list(h)
                    t[c] -= 1
                    t[idx[y]] += 1
                    rows.append(i)
                    cols.append(rank[tuple(t)])
                    data.append(h[c] * r)
        u = sp.csr_matrix((data, (rows, cols)), shape=(n, n))
        self.U = (u - sp.diags(np.asarray(u.sum(axis=1)).ravel())).tocsr()
        # arrival at class c: 1 at (h, h with one server moved from c to its successor)
        self.A: dict[int, sp.csr_matrix] = {}
        for c, x in enumerate(self.classes):
            if x[1] >= g.buffer:
                continue
            r_, c_ = [], []
            for i, h in enumerate(hists):
                if h[c] > 0:
                    t = list(h)
                    t[c] -= 1
                    t[idx[_arrive(x)]] += 1
                    r_.append(i)
                    c_.append(rank[tuple(t)])
            self.A[c] = sp.csr_matrix((np.ones(len(r_)), (r_, c_)), shape=(n, n))
        self.start = rank[tuple(_start(g, self.classes))]


def _start(g: GroupConfig, classes: list[tuple[int, int]]) -> list[int]:
    h = [0] * len(classes)
    h[classes.index((OFF, 0) if _sleeps(g) else (ON, 0))] = g.count
    return h


def _compositions(R: int, C: int) -> list[tuple[int, ...]]:
    """All histograms of R servers over C classes."""
    out = []
    for bars in itertools.combinations(range(R + C - 1), C - 1):
        prev, h = -1, []
        for b in bars:
            h.append(b - prev - 1)
            prev = b
        h.append(R + C - 2 - prev)
        out.append(tuple(h))
    return out


def _kron_at(mats: list[sp.spmatrix], k: int, m: sp.spmatrix) -> sp.csr_matrix:
    """I x ... x m (at position k) x ... x I."""
    left = math.prod(a.shape[0] for a in mats[:k])
    right = math.prod(a.shape[0] for a in mats[k + 1 :])
    return sp.kron(sp.kron(sp.identity(left), m), sp.identity(right)).tocsr()


class SleepSpace:
    """The aggregated chain of a farm with right-sizing (state = one histogram per group).

    Attributes: ``classes`` (list of (group, (mode, n)) action classes), ``U`` (generator of the
    uncontrolled moves), ``A[a]`` (arrival at class a), ``avail[a]`` (bool[N]: a server of the
    class exists and is not full), ``W``, ``P``, ``N`` per state, ``start`` (all sleeping
    servers off, the rest on and empty), ``lam`` (arrival rates), ``groups_of`` (K_j)."""

    def __init__(self, config: FarmConfig, max_states: int = MAX_STATES):
        if config.is_time_varying:
            raise ValueError("config: the exact chain needs constant arrival rates")
        self.config = config
        self.g = [_Group(g) for g in config.groups]
        sizes = [len(gg.hists) for gg in self.g]
        self.n_states = math.prod(sizes)
        if self.n_states > max_states:
            raise ValueError(
                f"scenario {config.name!r}: the right-sizing chain has {self.n_states:,} states, "
                f"above max_states={max_states:,}; use a smaller farm"
            )
        eye = [sp.identity(n) for n in sizes]
        self.U = sum(_kron_at(eye, k, gg.U) for k, gg in enumerate(self.g))
        grid = np.indices(sizes).reshape(len(sizes), -1)  # C order: the last group fastest
        self.W = sum(gg.work[grid[k]] for k, gg in enumerate(self.g))
        self.P = sum(gg.power[grid[k]] for k, gg in enumerate(self.g))
        self.N = sum(gg.jobs[grid[k]] for k, gg in enumerate(self.g))
        self.classes, self.A, self.avail = [], [], []
        for k, gg in enumerate(self.g):
            for c, a in gg.A.items():
                self.classes.append((k, gg.classes[c]))
                self.A.append(_kron_at(eye, k, a))
                self.avail.append(np.asarray(a.sum(axis=1)).ravel()[grid[k]] > 0)
        self.lam = np.array([jt.arrival_rate[0] for jt in config.job_types])
        self.groups_of = [set(jt.groups) for jt in config.job_types]
        self.start = int(np.ravel_multi_index([gg.start for gg in self.g], sizes))

    def admissible(self, j: int) -> list[int]:
        return [a for a, (k, _) in enumerate(self.classes) if k in self.groups_of[j]]

    def vacancy(self, j: int) -> np.ndarray:
        out = np.zeros(self.n_states, dtype=bool)
        for a in self.admissible(j):
            out |= self.avail[a]
        return out


@dataclass(frozen=True)
class SleepResult:
    """Long-run measures of a dispatcher: efficiency = throughput / power; E[T] by Little."""

    efficiency: float
    throughput: float
    power: float
    mean_jobs: float
    mean_response_time: float


def _measures(space: SleepSpace, pi: np.ndarray, accepted: float) -> SleepResult:
    w, p, n = float(pi @ space.W), float(pi @ space.P), float(pi @ space.N)
    return SleepResult(w / p, w, p, n, n / accepted)


def _stationary(Q: sp.csr_matrix, start: int) -> np.ndarray:
    """Stationary distribution of the class reachable from ``start`` (zeros elsewhere)."""
    n = Q.shape[0]
    seen = np.zeros(n, dtype=bool)
    seen[start] = True
    frontier = np.array([start])
    Qc = Q.tocsr()
    while frontier.size:
        nxt = np.unique(Qc[frontier].indices)
        nxt = nxt[~seen[nxt]]
        seen[nxt] = True
        frontier = nxt
    idx = np.flatnonzero(seen)
    sub = Qc[idx][:, idx].T.tolil()
    sub[len(idx) - 1, :] = np.ones(len(idx))
    rhs = np.zeros(len(idx))
    rhs[-1] = 1.0
    pi = np.zeros(n)
    pi[idx] = spsolve(sub.tocsc(), rhs)
    return pi


def evaluate_table(space: SleepSpace, priority: np.ndarray) -> SleepResult:
    """A static order: ``priority[a]`` of each class of ``space.classes`` (highest first)."""
    rows = []
    order = np.argsort(-np.asarray(priority, dtype=float), kind="stable")
    accepted = np.zeros(space.n_states)
    Q = space.U.copy()
    for j, lam in enumerate(space.lam):
        free = np.ones(space.n_states, dtype=bool)
        adm = set(space.admissible(j))
        for a in order:
            if a not in adm:
                continue
            take = free & space.avail[a]
            free &= ~take
            rows.append(sp.diags(lam * take.astype(float)) @ space.A[a])
            accepted += lam * take
    Q = Q + sum(rows)
    Q = (Q - sp.diags(np.asarray(Q.sum(axis=1)).ravel())).tocsr()  # arrivals' out-rates
    pi = _stationary(Q, space.start)
    return _measures(space, pi, float(pi @ accepted))


def solve_optimum(space: SleepSpace) -> tuple[float, SleepResult]:
    """The optimal efficiency (LP value, HiGHS) and the measures of the optimal (possibly
    randomised) dispatcher, E[T] included."""
    N = space.n_states
    blocks = []  # (j, a) of each y block
    for j in range(len(space.lam)):
        blocks += [(j, a) for a in space.admissible(j)]
    nv = N * (1 + len(blocks))
    out_rate = np.zeros(N)
    bal = [space.U.T.tocsr()]
    pick = []  # per (m, j) with a vacancy: sum_a y = z
    for j, lam in enumerate(space.lam):
        out_rate += lam * space.vacancy(j)
    bal[0] = bal[0] - sp.diags(out_rate)
    for j, a in blocks:
        bal.append(space.lam[j] * space.A[a].T.tocsr() @ sp.diags(space.avail[a].astype(float)))
    Abal = sp.hstack(bal).tocsr()
    for j in range(len(space.lam)):
        vac = space.vacancy(j)
        rows = np.flatnonzero(vac)
        sel = sp.identity(N, format="csr")[rows]
        parts = [-sel] + [sel if jj == j else sp.csr_matrix(sel.shape) for jj, _ in blocks]
        pick.append(sp.hstack(parts))
    norm = sp.csr_matrix(np.concatenate([space.P, np.zeros(N * len(blocks))])[None, :])
    A_eq = sp.vstack([Abal, *pick, norm]).tocsr()
    b_eq = np.zeros(A_eq.shape[0])
    b_eq[-1] = 1.0
    ub = np.full(nv, np.inf)
    for i, (_, a) in enumerate(blocks):  # y only where the class is available
        ub[N * (i + 1) : N * (i + 2)][~space.avail[a]] = 0.0
    c = -np.concatenate([space.W, np.zeros(N * len(blocks))])
    res = linprog(c, A_eq=A_eq, b_eq=b_eq, bounds=np.column_stack([np.zeros(nv), ub]),
                  method="highs")  # fmt: skip
    if res.status != 0:
        raise RuntimeError(f"right-sizing LP: {res.message}")
    z = res.x[:N]
    pi = z / z.sum()
    accepted = sum(space.lam[j] * float(pi @ space.vacancy(j)) for j in range(len(space.lam)))
    return -res.fun, _measures(space, pi, accepted)


def evaluate_pas(config: FarmConfig, max_states: int = 50_000) -> SleepResult:
    """PAS (most efficient group mu/(eps - eps0) with a non-full server, then the smallest server
    index, whatever its mode) on the per-server chain: the simulator's ``priority`` dispatcher
    with PAS's table."""
    groups = [config.groups[k] for k in config.server_group]
    per = [server_states(g) for g in groups]
    n = math.prod(len(p) for p in per)
    if n > max_states:
        raise ValueError(f"scenario {config.name!r}: {n:,} per-server states > {max_states:,}")
    states = list(itertools.product(*per))
    index = {s: i for i, s in enumerate(states)}
    sg, eff = config.server_group, config.group_efficiency
    rows, cols, data = [], [], []
    W, P, N, acc = (np.zeros(n) for _ in range(4))
    for i, s in enumerate(states):
        for v, (x, g) in enumerate(zip(s, groups, strict=True)):
            w, p, moves = _rates(g, x)
            W[i] += w
            P[i] += p
            N[i] += x[1]
            for y, r in moves:
                if math.isinf(r):
                    continue
                t = list(s)
                t[v] = y
                rows.append(i), cols.append(index[tuple(t)]), data.append(r)
        for jt in config.job_types:
            free = [v for v in range(len(s)) if sg[v] in jt.groups and s[v][1] < groups[v].buffer]
            if free:
                v = min(free, key=lambda v: (-eff[sg[v]], v))
                t = list(s)
                t[v] = _arrive(s[v])
                rows.append(i), cols.append(index[tuple(t)]), data.append(jt.arrival_rate[0])
                acc[i] += jt.arrival_rate[0]
    Q = sp.csr_matrix((data, (rows, cols)), shape=(n, n))
    Q = (Q - sp.diags(np.asarray(Q.sum(axis=1)).ravel())).tocsr()
    start = index[tuple(st[-1] if _sleeps(g) else st[0] for st, g in zip(per, groups, strict=True))]
    pi = _stationary(Q, start)
    w, p, en = float(pi @ W), float(pi @ P), float(pi @ N)
    return SleepResult(w / p, w, p, en, en / float(pi @ acc))
