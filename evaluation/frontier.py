"""The efficiency / mean-response-time frontier of a farm (``python evaluate.py SCENARIO --frontier``).

Curves (efficiency against the mean response time ``E[T]``, Little's law):

* ``optimum`` (small farms: exponential sizes, constant rates, the LP within its size limit):
  the exact SLO-constrained optimum (:func:`serverfarm_gym.baselines.solvers.slo_optimum.solve_slo`) at ``n_points``
  bounds ``D`` from the smallest achievable E[T] to the E[T] of the unconstrained optimum (beyond
  it the SLO does not bind and the curve is flat);
* ``static``: the Pareto front of the static priority orders (:mod:`serverfarm_gym.baselines.slo_priority`:
  exact on small farms, every strict order; simulated with common random numbers otherwise,
  every group order with all groups packed, all spread or level-major, windows of ``durations`` mean job
  durations of the slowest group), a staircase;
* ``mix``: per-arrival random mixes of two orders. Exact farms: the best mix at each ``D`` of
  the grid (:func:`serverfarm_gym.baselines.slo_priority.best_order_mix`). Simulated farms: mixes of each two
  consecutive orders of the static front at weights 1/4, 1/2, 3/4, when one simulated mix costs
  at most ``max_mix_seconds`` (switching orders costs a pass over the farm's servers: on
  ``large-10k`` a mix is ~100x slower than one order, so it is left out, with the reason).

Points: the given policies (default PAS, Whittle, best-priority; any registry name or
``ppo:PATH``), exact where the per-server chain is solvable (``serverfarm_gym.evaluation.policy_report.evaluate_exact``),
else simulated (``serverfarm_gym.evaluation.policy_report.evaluate``, mean and 95% interval over replications).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from serverfarm_gym.baselines.slo_priority import (
    EXACT_MAX_STATES,
    OrderPoint,
    best_order_mix,
    candidate_tables,
    order_evaluator,
)
from serverfarm_gym.baselines.solvers.efficiency_optimum import solve_lp
from serverfarm_gym.baselines.solvers.slo_optimum import min_response_time, solve_slo
from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.scenarios import load_scenario
from serverfarm_gym.evaluation.exact import exact_solvable
from serverfarm_gym.evaluation.outputs import atomic_write, save_figure, to_json
from serverfarm_gym.evaluation.policy_report import evaluate, evaluate_exact

__all__ = [
    "DEFAULT_FRONTIER_POLICIES",
    "format_frontier",
    "frontier",
    "frontier_and_write",
    "plot_frontier",
]

DEFAULT_FRONTIER_POLICIES = ("pas", "whittle", "best-priority")


def _pareto(points: Sequence[OrderPoint]) -> list[OrderPoint]:
    """Orders not dominated (lower E[T] and higher efficiency), by increasing E[T]."""
    front: list[OrderPoint] = []
    for q in sorted(points, key=lambda q: (q.mean_response_time, -q.efficiency)):
        if not front or q.efficiency > front[-1].efficiency:
            front.append(q)
    return front


def _row(eff: float, et: float, **extra: Any) -> dict[str, Any]:
    return {"efficiency": float(eff), "mean_response_time": float(et), **extra}


def _optimum_curve(config: FarmConfig, n_points: int) -> tuple[list[dict[str, Any]], float, float]:
    lo = min_response_time(config)
    free = solve_lp(config)
    hi = float(free.mean_response_time)
    curve = []
    for D in np.linspace(lo * (1 + 1e-6), hi, n_points):
        sol = solve_slo(config, float(D))
        curve.append(_row(sol.value, sol.info["mean_response_time"], slo=float(D),
                          randomised_pairs=sol.info["randomised_pairs"]))  # fmt: skip
    return curve, lo, hi


def _mix_curve(
    config: FarmConfig,
    front: Sequence[OrderPoint],
    points: Sequence[OrderPoint],
    measure: Any,
    method: str,
    grid_D: np.ndarray,
    max_mix_seconds: float,
) -> tuple[list[dict[str, Any]], str | None]:
    if method == "exact":
        out = []
        for D in grid_D:
            if front[0].mean_response_time > D:
                continue  # no order meets D, so no mix of a meeting order either
            m = best_order_mix(list(points), float(D), measure)
            out.append(_row(m.efficiency, m.mean_response_time, slo=float(D), p=m.p))
        return out, None
    if len(front) < 2:
        return [], "the static front has a single order"
    cost: float = measure.mix_seconds(front[1].table, front[0].table, 0.5)
    if cost > max_mix_seconds:
        return [], (
            f"one simulated mix takes ~{cost:.0f} s (> {max_mix_seconds:g} s): switching orders "
            "costs a pass over the farm's servers"
        )
    out = []
    for i in range(len(front) - 1):
        a, b = front[i + 1], front[i]  # a: more efficient, slower
        for p in (0.25, 0.5, 0.75):
            out.append(_row(*measure(a.table, b.table, p), p=p))
    return sorted(out, key=lambda r: r["mean_response_time"]), None


def _policy_points(
    config: FarmConfig,
    policies: Sequence[str],
    exact: bool,
    replications: int,
    horizon: int,
    seed: int,
    workers: int | None,
) -> tuple[dict[str, Any], dict[str, str]]:
    if exact:
        rep = evaluate_exact(config, list(policies), compute_optimum=False)
    else:
        rep = evaluate(config, list(policies), replications=replications, horizon=horizon,
                       seed=seed, workers=workers, compute_optimum=False, progress=False)  # fmt: skip
    out = {}
    for name, e in rep["policies"].items():
        rt = e.get("mean_response_time") or {}
        out[name] = {
            "efficiency": e["efficiency"]["mean"],
            "efficiency_ci95": e["efficiency"]["ci95"],
            "mean_response_time": rt.get("mean"),
            "mean_response_time_ci95": rt.get("ci95"),
            "route": e["route"],
        }
    return out, dict(rep.get("skipped", {}))


def frontier(
    scenario: FarmConfig | str | Path | Mapping[str, Any],
    policies: Sequence[str] = DEFAULT_FRONTIER_POLICIES,
    *,
    n_points: int = 15,
    replications: int = 5,
    horizon: int = 100_000,
    seed: int = 0,
    workers: int | None = None,
    epochs: int = 100_000,
    durations: float = 50.0,
    max_mix_seconds: float = 30.0,
) -> dict[str, Any]:
    """The frontier report (module doc): ``{"scenario", "method", "slo", "min_response_time",
    "curves": {"optimum", "static", "mix"}, "points", "skipped", "notes"}``."""
    if int(n_points) != n_points or n_points < 2:
        raise ValueError(f"n_points: must be an integer >= 2, got {n_points!r}")
    t0 = time.perf_counter()
    config = load_scenario(scenario)
    measure, method = order_evaluator(config, exact_max_states=EXACT_MAX_STATES, epochs=epochs,
                                      seed=seed, durations=durations)  # fmt: skip
    notes: list[str] = []
    opt_curve: list[dict[str, Any]] = []
    lo: float | None = None
    hi: float | None = None
    if method == "exact":
        try:
            opt_curve, lo, hi = _optimum_curve(config, n_points)
        except (ValueError, MemoryError) as err:
            notes.append(f"no exact optimum curve: {err}")
    # simulated: every group order with all groups packed, all spread or level-major (3 K!)
    exact = method == "exact"
    max_orders = 5_040 if exact else 3 * math.factorial(config.n_groups)
    tables = candidate_tables(config, max_orders=max_orders, per_group=exact)
    points = [OrderPoint(t, *measure(t)) for t in tables]
    front = _pareto(points)
    if lo is None or hi is None:
        lo, hi = front[0].mean_response_time, front[-1].mean_response_time
    grid = np.linspace(lo * (1 + 1e-6), hi, n_points)
    mix, why = _mix_curve(config, front, points, measure, method, grid, max_mix_seconds)
    if why:
        notes.append(f"no mix curve: {why}")
    pts, skipped = _policy_points(
        config, policies, exact_solvable(config), replications, horizon, seed, workers
    )
    return {
        "scenario": config.name,
        "method": method,
        "slo": None if config.slo is None else config.slo.mean_response_time,
        "min_response_time": lo if method == "exact" else None,
        "n_orders": len(points),
        "curves": {
            "optimum": opt_curve,
            "static": [_row(q.efficiency, q.mean_response_time) for q in front],
            "mix": mix,
        },
        "points": pts,
        "skipped": skipped,
        "notes": notes,
        "wall_time_s": time.perf_counter() - t0,
    }


def format_frontier(rep: Mapping[str, Any]) -> str:
    """Plain text: the curves' extent and one line per policy point."""
    lines = [f"frontier of {rep['scenario']} ({rep['method']}; {rep['n_orders']} static orders)"]
    for name, curve in rep["curves"].items():
        if curve:
            a, b = curve[0], curve[-1]
            lines.append(
                f"  {name:8s} {len(curve):3d} points: E[T] {a['mean_response_time']:.4f} -> "
                f"{b['mean_response_time']:.4f}, efficiency {a['efficiency']:.5f} -> "
                f"{b['efficiency']:.5f}"
            )
    for name, p in rep["points"].items():
        ci = p["efficiency_ci95"]
        lines.append(
            f"  point {name}: efficiency {p['efficiency']:.5f}"
            + ("" if not ci else f" ± {ci:.5f}")
            + f", E[T] {p['mean_response_time']:.4f} ({p['route']})"
        )
    lines += [f"  skipped {n}: {w}" for n, w in rep["skipped"].items()]
    lines += [f"  note: {n}" for n in rep["notes"]]
    return "\n".join(lines)


def plot_frontier(rep: Mapping[str, Any], path: str | Path) -> None:
    """Efficiency against E[T]: the exact optimum (line), the static orders' front (staircase),
    the mixes (dashed staircase of the best mix meeting each bound, and the mixes measured), the
    policies as labelled points (with 95% intervals when simulated)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.8, 4.4))
    ax = fig.add_subplot()
    cur = rep["curves"]

    def xy(c: Sequence[Mapping[str, Any]]) -> tuple[list[float], list[float]]:
        return [r["mean_response_time"] for r in c], [r["efficiency"] for r in c]

    if cur["optimum"]:
        ax.plot(*xy(cur["optimum"]), "-", color="#c44e52", lw=2, label="SLO-constrained optimum")
    if cur["static"]:
        ax.step(*xy(cur["static"]), where="post", color="#4c72b0", label="best static order")
    if cur["mix"]:
        # the best mix meeting each bound: a staircase through the running maximum
        x, y = xy(sorted(cur["mix"], key=lambda r: r["mean_response_time"]))
        ax.step(x, np.maximum.accumulate(y), where="post", ls="--", color="#55a868",
                label="mix of two orders")  # fmt: skip
        ax.plot(x, y, ".", color="#55a868", ms=4)
    markers = iter("osD^vP*Xh<>")
    for name, p in rep["points"].items():
        if p["mean_response_time"] is None:
            continue
        ax.errorbar(p["mean_response_time"], p["efficiency"], xerr=p["mean_response_time_ci95"]
                    or None, yerr=p["efficiency_ci95"] or None, fmt=next(markers, "o"),
                    capsize=3, ms=8, mfc="none", mew=1.6, label=name)  # fmt: skip
    if rep.get("slo"):
        ax.axvline(rep["slo"], color="gray", ls=":", label=f"SLO {rep['slo']:g}")
    ax.set_xlabel("mean response time E[T]")
    ax.set_ylabel("efficiency (work per unit energy)")
    ax.set_title(f"{rep['scenario']}: efficiency / response-time frontier ({rep['method']})")
    ax.legend(fontsize=8, loc="lower right")
    save_figure(fig, path)


def frontier_and_write(
    scenario: Any,
    policies: Sequence[str],
    json_path: str | Path | None = None,
    plot_path: str | Path | None = None,
    quiet: bool = False,
    **kwargs: Any,
) -> dict[str, Any]:
    """:func:`frontier`, then print it and write the JSON and the plot (each atomically)."""
    rep = frontier(scenario, policies, **kwargs)
    if not quiet:
        print(format_frontier(rep))
    if json_path:
        atomic_write(json_path, to_json(rep))
    if plot_path:
        plot_frontier(rep, plot_path)
    return rep
