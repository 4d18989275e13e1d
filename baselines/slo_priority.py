"""SLO baselines: the best static priority order that meets a mean-response-time SLO, and the best
per-arrival random mix of two such orders.

A *static order* is a strict ranking of the usable (group, level) pairs, shared by all job types
(a priority table with distinct values, so the compiled simulator's ``"priority"`` dispatcher runs
it and no ties arise: two servers of one group at one level are interchangeable). A *mix* of
orders A and B sends each arrival by A with probability ``p`` and by B otherwise, independently
per arrival: the cheapest randomisation, and the one the constrained optimum
(:mod:`serverfarm_gym.baselines.solvers.slo_optimum`) hints at (that randomises in one state).

Measures, ``(efficiency, E[T])`` of each candidate:

* **exact** on small farms (exponential sizes, constant rates, an aggregated chain of at most
  ``exact_max_states`` states): the aggregated chain of :mod:`serverfarm_gym.baselines.solvers.aggregated`; a strict
  order is a symmetric policy there, a mix is the convex combination of the two action
  distributions;
* **simulated** otherwise: the compiled simulator with common random numbers (the same seed for
  every candidate), a mix by runs of consecutive arrivals with the same order (the run lengths of
  i.i.d. per-arrival choices are geometric, so this *is* the per-arrival mix).

Candidates, exact: every strict order when there are at most ``max_orders`` of them (``U!`` for
``U`` usable pairs), else every group order with each group packed (fullest non-full server
first) or spread (emptiest first), and level-major (all groups' emptiest servers first); mixes: the most efficient orders that break the SLO paired
with the most efficient ones that meet it, the weight found on a grid and refined by bisection at
the SLO (:func:`best_order_mix`); when the orders are too many to enumerate, first-improvement
passes of adjacent swaps from the best candidate add orders (:func:`swap_search`). Simulated
(large farms): every group order with all groups
packed, all spread, or level-major (``3 K!`` simulations), and the tables of ``best-priority``
and PAS (a searched table may meet the SLO as it is), then on farms of at most
``SWAP_MAX_SERVERS`` servers the swap passes from the best order that meets the SLO; the mix of the two orders that bracket the SLO on
the static front, its weight by bisection (:func:`bracket_mix`).
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from serverfarm_gym.baselines.base import Policy
from serverfarm_gym.baselines.best_priority import BestPriorityPolicy
from serverfarm_gym.baselines.pas import pas_table
from serverfarm_gym.baselines.priority import PriorityPolicy
from serverfarm_gym.baselines.solvers.aggregated import (
    AggregatedSpace,
    aggregated_response_time,
    estimate_size,
    evaluate_aggregated,
)
from serverfarm_gym.baselines.solvers.slo_optimum import SLOInfeasibleError, slo_of
from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.simulator import FarmSimulator

__all__ = [
    "OrderMix",
    "OrderPoint",
    "SLOMixPolicy",
    "SLOPriorityPolicy",
    "best_order_mix",
    "best_static_order",
    "bracket_mix",
    "candidate_tables",
    "order_evaluator",
    "order_points",
    "slo_baselines",
    "swap_search",
]

#: exact measure up to this many aggregated states
EXACT_MAX_STATES = 20_000
#: enumerate every strict order up to this many
MAX_ORDERS = 5_040
#: simulated farms up to this many servers also run the swap passes (one simulation a swap;
#: on paper-100 they stop after ~50 swaps, about 1 CPU-s), with at most this many swaps
SWAP_MAX_SERVERS = 1_000
SIMULATED_SWAP_BUDGET = 300


@dataclass(frozen=True)
class OrderPoint:
    """One static order and its measured (efficiency, mean response time)."""

    table: np.ndarray
    efficiency: float
    mean_response_time: float


@dataclass(frozen=True)
class OrderMix:
    """Send an arrival by ``first`` with probability ``p``, else by ``second``."""

    first: np.ndarray
    second: np.ndarray
    p: float
    efficiency: float
    mean_response_time: float


# ---------------------------------------------------------------------------------------------
# candidates
# ---------------------------------------------------------------------------------------------
def _pairs(config: FarmConfig) -> list[tuple[int, int]]:
    return [(k, b) for k, g in enumerate(config.groups) for b in range(g.buffer)]


def _table(config: FarmConfig, ranking: list[tuple[int, int]]) -> np.ndarray:
    """Priority table of a ranking (first = highest); unusable entries 0, usable ones 1..U."""
    t = np.zeros((config.n_groups, config.max_buffer + 1))
    for r, (k, b) in enumerate(ranking):
        t[k, b] = float(len(ranking) - r)
    return t


def candidate_tables(
    config: FarmConfig, max_orders: int = MAX_ORDERS, *, per_group: bool = True
) -> list[np.ndarray]:
    """The static orders searched (module doc): all strict orders when there are at most
    ``max_orders``, else for every group order: group-major orders with each group packed or
    spread (``per_group=False``: all packed or all spread), and the level-major order (every
    group's emptiest servers first, the groups in that order at each level)."""
    pairs = _pairs(config)
    if math.factorial(len(pairs)) <= max_orders:
        return [_table(config, list(r)) for r in itertools.permutations(pairs)]
    out = []
    K = config.n_groups
    for order in itertools.permutations(range(K)):
        modes = (
            itertools.product((True, False), repeat=K) if per_group else ((True,) * K, (False,) * K)
        )
        for packs in modes:
            ranking = []
            for k in order:
                levels = range(config.groups[k].buffer)
                ranking += [(k, b) for b in (reversed(levels) if packs[k] else levels)]
            out.append(_table(config, ranking))
        rank = {k: r for r, k in enumerate(order)}
        out.append(_table(config, sorted(pairs, key=lambda kb: (kb[1], rank[kb[0]]))))
    return out


# ---------------------------------------------------------------------------------------------
# measures
# ---------------------------------------------------------------------------------------------
def _exact_ok(config: FarmConfig, exact_max_states: int) -> bool:
    return (
        config.all_exponential
        and not config.is_time_varying
        and estimate_size(config)[0] <= exact_max_states
    )


class _Exact:
    def __init__(self, config: FarmConfig):
        self.space = AggregatedSpace(config, max_states=EXACT_MAX_STATES)

    def probs(self, table: np.ndarray) -> np.ndarray:
        return self.probs_of(self.space, table)

    @staticmethod
    def probs_of(sp: AggregatedSpace, table: np.ndarray) -> np.ndarray:
        """One-hot float64[N, J, A] of a strict order on the aggregated chain."""
        score = np.where(sp.valid, table[sp.act_k, sp.act_b][None, None, :], -np.inf)
        act = np.argmax(score, axis=2)
        p = np.zeros(sp.valid.shape)
        s, j = np.nonzero(sp.has_vacancy)
        p[s, j, act[s, j]] = 1.0
        return p

    def __call__(self, table: np.ndarray, other: np.ndarray | None = None, p: float = 1.0):
        probs = self.probs(table)
        if other is not None and p < 1.0:
            probs = p * probs + (1.0 - p) * self.probs(other)
        eff, pi = evaluate_aggregated(self.space, probs)
        return float(eff), float(aggregated_response_time(self.space, pi)[2])


class _Simulated:
    def __init__(self, config: FarmConfig, epochs: int, seed: int, durations: float = 200.0):
        self.config, self.seed = config, seed
        slowest = min(max(g.service_rate) for g in config.groups)
        per_duration = config.total_arrival_rate / slowest
        self.horizon = max(int(epochs), math.ceil(durations * per_duration))
        self.warmup = max(self.horizon // 10, math.ceil(50 * per_duration))

    def __call__(self, table: np.ndarray, other: np.ndarray | None = None, p: float = 1.0):
        sim = FarmSimulator(self.config, seed=self.seed)  # common random numbers
        if other is None or p >= 1.0:
            sim.run(self.warmup, "priority", table)
            st = sim.run(self.horizon, "priority", table)
        else:
            rng = np.random.default_rng(self.seed + 1)
            self._mixed(sim, rng, table, other, p, self.warmup)
            before = sim.stats()
            self._mixed(sim, rng, table, other, p, self.horizon)
            st = sim.stats() - before
        return float(st.efficiency), float(st.mean_response_time)

    def mix_seconds(self, a: np.ndarray, b: np.ndarray, p: float, probe: int = 4_000) -> float:
        """Estimated seconds of one mixed measurement: a short probe, scaled to the window."""
        sim = FarmSimulator(self.config, seed=self.seed)
        t0 = time.perf_counter()
        self._mixed(sim, np.random.default_rng(self.seed), a, b, p, probe)
        return (time.perf_counter() - t0) * (self.warmup + self.horizon) / probe

    @staticmethod
    def _mixed(sim, rng, a, b, p, n):
        if p <= 0.0 or p >= 1.0:  # a pure order (the bisection measures its ends too)
            sim.run(n, "priority", a if p >= 1.0 else b)
            return
        done, use_a = 0, rng.random() < p
        while done < n:
            # a run of arrivals sent by the same order: geometric, the choices being i.i.d.
            length = int(rng.geometric(1.0 - p if use_a else p))
            length = min(length, n - done)
            sim.run(length, "priority", a if use_a else b)
            done += length
            use_a = not use_a


def order_evaluator(
    config: FarmConfig,
    *,
    exact_max_states: int = EXACT_MAX_STATES,
    epochs: int = 200_000,
    seed: int = 0,
    durations: float = 200.0,
):
    """(``measure(table, other=None, p=1.0) -> (efficiency, E[T])``, ``"exact"|"simulated"``).

    Simulated windows: at least ``epochs`` decision epochs and ``durations`` mean job durations
    of the slowest group, after a warm-up of a tenth of that (at least 50 durations)."""
    if _exact_ok(config, exact_max_states):
        return _Exact(config), "exact"
    return _Simulated(config, epochs, seed, durations), "simulated"


def order_points(
    config: FarmConfig, measure=None, max_orders: int = MAX_ORDERS, *, per_group: bool = True
):
    """Every candidate order with its (efficiency, E[T]) (exact or simulated)."""
    measure = measure or order_evaluator(config)[0]
    tables = candidate_tables(config, max_orders, per_group=per_group)
    return [OrderPoint(t, *measure(t)) for t in tables]


# ---------------------------------------------------------------------------------------------
# the searches
# ---------------------------------------------------------------------------------------------
def best_static_order(points: list[OrderPoint], D: float) -> OrderPoint:
    """The most efficient order with ``E[T] <= D``.

    Raises:
        SLOInfeasibleError: no order meets D (the message gives the smallest E[T] among them).
    """
    ok = [q for q in points if q.mean_response_time <= D]
    if not ok:
        best = min(q.mean_response_time for q in points)
        raise SLOInfeasibleError(
            f"slo.mean_response_time {D:g}: no static priority order meets it (the fastest has "
            f"E[T] = {best:.6g}); raise the SLO or use slo-optimal",
            best,
        )
    return max(ok, key=lambda q: q.efficiency)


def _boundary(measure, a, b, lo: float, hi: float, D: float, steps: int) -> tuple[float, tuple]:
    """Bisection on the weight of ``a`` between ``lo`` (meets D) and ``hi`` (breaks it)."""
    best = (lo, measure(a, b, lo))
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        val = measure(a, b, mid)
        if val[1] <= D:
            lo, best = mid, (mid, val)
        else:
            hi = mid
    return best


def best_order_mix(
    points: list[OrderPoint],
    D: float,
    measure,
    *,
    n_fast: int = 6,
    n_slow: int = 6,
    grid: int = 8,
    bisection_steps: int = 20,
) -> OrderMix:
    """The most efficient per-arrival mix of two orders with ``E[T] <= D`` (module doc): pairs of
    the ``n_slow`` most efficient orders that break D with the ``n_fast`` most efficient ones
    that meet it; the weight on a grid of ``grid`` steps, refined by bisection at the SLO. The
    best static order (weight 1) is a candidate, so the mix is never worse.
    """
    base = best_static_order(points, D)
    best = OrderMix(base.table, base.table, 1.0, base.efficiency, base.mean_response_time)
    meet = sorted((q for q in points if q.mean_response_time <= D), key=lambda q: -q.efficiency)[
        :n_fast
    ]
    miss = sorted(
        (q for q in points if q.mean_response_time > D and q.efficiency > base.efficiency),
        key=lambda q: -q.efficiency,
    )[:n_slow]
    for a, b in itertools.product(miss, meet):
        prev = 0.0  # weight of a: 0 meets D (it is b)
        for i in range(1, grid + 1):
            p = i / grid
            val = (
                (a.efficiency, a.mean_response_time) if i == grid else measure(a.table, b.table, p)
            )
            if val[1] > D:
                p, val = _boundary(measure, a.table, b.table, prev, p, D, bisection_steps)
                if val[0] > best.efficiency:
                    best = OrderMix(a.table, b.table, p, *val)
                break
            if val[0] > best.efficiency:
                best = OrderMix(a.table, b.table, p, *val)
            prev = p
    return best


def bracket_mix(
    points: list[OrderPoint], D: float, measure, *, steps: int = 8, max_seconds: float = 60.0
) -> OrderMix:
    """The mix of the two orders of the static front that bracket D (the best that meets it and
    the next more efficient one), its weight by bisection at the SLO: the simulated search.

    Raises:
        ValueError: one simulated mix costs more than ``max_seconds`` (switching orders costs a
            pass over the farm's servers; on 10,000 servers a mix is ~100x slower than an order).
    """
    base = best_static_order(points, D)
    better = [q for q in points if q.efficiency > base.efficiency]
    if not better:
        return OrderMix(base.table, base.table, 1.0, base.efficiency, base.mean_response_time)
    a = min(better, key=lambda q: q.mean_response_time)
    estimate = getattr(measure, "mix_seconds", None)
    if estimate is not None:
        cost = estimate(a.table, base.table, 0.5)
    else:
        t0 = time.perf_counter()
        measure(a.table, base.table, 0.5)
        cost = time.perf_counter() - t0
    if cost > max_seconds:
        raise ValueError(
            f"slo-mix: one simulated mix of two orders takes ~{cost:.0f} s on this farm (> "
            f"{max_seconds:g} s); use slo-priority"
        )
    p, val = _boundary(measure, a.table, base.table, 0.0, 1.0, D, steps)
    if val[0] <= base.efficiency:
        return OrderMix(base.table, base.table, 1.0, base.efficiency, base.mean_response_time)
    return OrderMix(a.table, base.table, p, *val)


def swap_search(
    config: FarmConfig, points: list[OrderPoint], D: float, measure, *, budget: int = 2_000
) -> list[OrderPoint]:
    """Orders found by first-improvement passes of adjacent swaps in the ranking, from the best
    order that meets D (from the fastest one if none does, first lowering E[T] below D): every
    order measured on the way (for the mix search too). Used when the orders cannot all be
    enumerated."""
    pairs = _pairs(config)
    feasible = [q for q in points if q.mean_response_time <= D]
    cur = (
        max(feasible, key=lambda q: q.efficiency)
        if feasible
        else min(points, key=lambda q: q.mean_response_time)
    )

    def key(q: OrderPoint) -> tuple[bool, float]:
        meets = q.mean_response_time <= D
        return (meets, q.efficiency if meets else -q.mean_response_time)

    seen, out = {cur.table.tobytes()}, []
    improved = True
    while improved and len(out) < budget:
        improved = False
        ranking = sorted(pairs, key=lambda kb: -cur.table[kb])
        for i in range(len(ranking) - 1):
            cand = [*ranking[:i], ranking[i + 1], ranking[i], *ranking[i + 2 :]]
            t = _table(config, cand)
            if t.tobytes() in seen:
                continue
            seen.add(t.tobytes())
            q = OrderPoint(t, *measure(t))
            out.append(q)
            if key(q) > key(cur):
                cur, improved = q, True
                break
            if len(out) >= budget:
                break
    return out


@lru_cache(maxsize=16)
def _search(config: FarmConfig, D: float, seed: int) -> tuple[OrderPoint, OrderMix | str, str]:
    measure, method = order_evaluator(config, seed=seed)
    if method == "exact":
        points = order_points(config, measure)
        if math.factorial(len(_pairs(config))) > MAX_ORDERS:  # not every order was measured
            points += swap_search(config, points, D, measure)
        return best_static_order(points, D), best_order_mix(points, D, measure), method
    # simulated: every group order, all groups packed, all spread or level-major (3 K! runs),
    # and the tables of best-priority and PAS: a searched table often meets the SLO already, and
    # the best order that meets it can be no worse than the best table known to meet it
    n = 3 * math.factorial(config.n_groups)
    points = order_points(config, measure, n, per_group=False)
    for known in (BestPriorityPolicy(config).priority_table(), pas_table(config)):
        points.append(OrderPoint(known, *measure(known)))
    if config.n_servers <= SWAP_MAX_SERVERS:  # the families jump in E[T]: fill the gaps near D
        points += swap_search(config, points, D, measure, budget=SIMULATED_SWAP_BUDGET)
    static = best_static_order(points, D)
    try:
        mix: OrderMix | str = bracket_mix(points, D, measure)
    except ValueError as err:
        mix = str(err)  # slo-mix refuses this farm; slo-priority still applies
    return static, mix, method


def slo_baselines(
    config: FarmConfig, slo: float | None = None, seed: int = 0
) -> tuple[OrderPoint, OrderMix | str, str]:
    """(best static order, best mix of two orders or why none, ``"exact"|"simulated"``) under
    the SLO (default: the scenario's). Exact: every strict order and the searched mixes
    (:func:`best_order_mix`); simulated: the ``K!`` packed group orders and the bracketing mix
    (:func:`bracket_mix`). Cached per process."""
    return _search(config, slo_of(config, slo), int(seed))


# ---------------------------------------------------------------------------------------------
# the policies
# ---------------------------------------------------------------------------------------------
class SLOPriorityPolicy(PriorityPolicy):
    """``slo-priority``: the most efficient static priority order that meets the SLO (exact on
    small farms, simulated otherwise; see the module doc). Runs on the simulator's built-in
    priority dispatcher. ``slo``: the bound D (default: the scenario's)."""

    name = "slo-priority"

    def __init__(
        self,
        config: FarmConfig,
        action_mode: str = "server",
        seed: int | None = None,
        *,
        slo: float | None = None,
    ):
        point, _, self.method = slo_baselines(config, slo)
        super().__init__(config, action_mode, seed, table=point.table)
        self.efficiency, self.mean_response_time = point.efficiency, point.mean_response_time


class SLOMixPolicy(Policy):
    """``slo-mix``: each arrival is sent by order A with probability ``p``, else by order B (the
    best such mix that meets the SLO). The choice is drawn from the policy's own generator,
    seeded by ``seed``, also when ``deterministic=True`` (the mix is the policy)."""

    name = "slo-mix"
    builtin = None

    def __init__(
        self,
        config: FarmConfig,
        action_mode: str = "server",
        seed: int | None = None,
        *,
        slo: float | None = None,
    ):
        super().__init__(config, action_mode, seed)
        _, mix, self.method = slo_baselines(config, slo)
        if isinstance(mix, str):
            raise ValueError(mix)
        self.mix = mix
        self.p = float(mix.p)
        self.efficiency, self.mean_response_time = mix.efficiency, mix.mean_response_time
        self._first = PriorityPolicy(config, action_mode, table=mix.first)
        self._second = PriorityPolicy(config, action_mode, table=mix.second)

    def aggregated_probs(self, space: AggregatedSpace) -> np.ndarray:
        """float64[N, J, A]: the mix as a randomised symmetric policy of the aggregated chain
        (its exact evaluation: ``serverfarm_gym.evaluation.exact.randomised_exact``)."""
        probs = _Exact.probs_of(space, self.mix.first)
        if self.p < 1.0:
            probs = self.p * probs + (1.0 - self.p) * _Exact.probs_of(space, self.mix.second)
        return probs

    def _act_batch(
        self, obs: np.ndarray, masks: np.ndarray, deterministic: bool = True
    ) -> np.ndarray:
        a = self._first._act_batch(obs, masks)
        if self.p >= 1.0:
            return a
        b = self._second._act_batch(obs, masks)
        return np.where(self.rng.random(obs.shape[0]) < self.p, a, b)
