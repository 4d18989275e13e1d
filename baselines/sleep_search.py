"""Fair static baselines for farms with right-sizing, evaluated exactly (serverfarm_gym.baselines.solvers.sleep_chain).

A static order ranks the (group, mode, level) classes of :attr:`SleepSpace.classes`; an arrival
goes to a server of the highest-ranked available class. Two literature heuristics as orders:

* ``pack``: PAS's group order (mu/(eps - eps0), highest first); within a group the fullest
  serving server first, then servers in setup (fullest first), an off server last;
* ``join-awake``: "join an awake efficient server, wake one only if none": every group's ON
  classes first (PAS's group order, fullest first), then SETUP classes, then OFF ones.

:func:`best_static_order` searches the orders from those starts by first-improvement local
search (move one class to another position), each candidate evaluated exactly; it returns the
best order found (a local optimum of that neighbourhood, not a certified global one).
PAS itself, with its tie to the smallest server index, is :func:`serverfarm_gym.baselines.solvers.sleep_chain.evaluate_pas`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from serverfarm_gym.baselines.solvers.sleep_chain import (
    OFF,
    ON,
    SETUP,
    SleepResult,
    SleepSpace,
    evaluate_table,
)

__all__ = ["OrderResult", "best_static_order", "heuristic_orders", "priority_of"]

_MODE_RANK = {ON: 0, SETUP: 1, OFF: 2}


def heuristic_orders(space: SleepSpace) -> dict[str, list[int]]:
    """The ``pack`` and ``join-awake`` orders (lists of class indices, first = highest)."""
    eff = space.config.group_efficiency
    cls = space.classes
    pack = sorted(range(len(cls)), key=lambda a: (-eff[cls[a][0]], cls[a][0],
                                                  _MODE_RANK[cls[a][1][0]], -cls[a][1][1]))  # fmt: skip
    awake = sorted(range(len(cls)), key=lambda a: (_MODE_RANK[cls[a][1][0]], -eff[cls[a][0]],
                                                   cls[a][0], -cls[a][1][1]))  # fmt: skip
    return {"pack": pack, "join-awake": awake}


def priority_of(order: list[int]) -> np.ndarray:
    """Priorities (highest first) of an order of class indices."""
    p = np.empty(len(order))
    p[np.asarray(order)] = -np.arange(len(order), dtype=float)
    return p


@dataclass(frozen=True)
class OrderResult:
    order: list[int]
    result: SleepResult
    evaluations: int


def best_static_order(
    space: SleepSpace, starts: dict[str, list[int]] | None = None, max_evaluations: int = 400
) -> OrderResult:
    """Local search over class orders (first improvement, one class moved per step) from each
    start (default :func:`heuristic_orders`; the best first), within ``max_evaluations`` exact
    evaluations besides the starts' own."""
    starts = starts or heuristic_orders(space)
    cache: dict[bytes, SleepResult] = {}

    def value(order: list[int]) -> SleepResult:
        key = np.asarray(order, dtype=np.int16).tobytes()
        if key not in cache:
            cache[key] = evaluate_table(space, priority_of(order))
        return cache[key]

    best_order, best = None, None
    # every start is evaluated (the result is never below one), the best searched first
    ranked = sorted(starts.values(), key=lambda o: -value(o).efficiency)
    for start in ranked:
        order, cur = list(start), value(start)
        improved = True
        while improved and len(cache) < max_evaluations:
            improved = False
            for i in range(len(order)):
                for j in range(len(order)):
                    if i == j or len(cache) >= max_evaluations:
                        continue
                    cand = order[:i] + order[i + 1 :]
                    cand.insert(j, order[i])
                    r = value(cand)
                    if r.efficiency > cur.efficiency * (1 + 1e-12):
                        order, cur, improved = cand, r, True
                        break
                if improved:
                    break
        if best is None or cur.efficiency > best.efficiency:
            best_order, best = order, cur
    return OrderResult(best_order, best, len(cache))
