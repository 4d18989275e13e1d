"""SLO headroom: how far is the best fair baseline from the exact SLO-constrained optimum?

    nice python experiments/slo_headroom.py --figure-dir docs/figures     # 100 farms
    python experiments/slo_headroom.py --quick --out /tmp/slo              # CI-sized

Farms: ``serverfarm_gym.envs.farm_sampler.sample_farm(seed, DIST)`` for seeds ``seed .. seed+n_farms-1`` with
small ranges (:data:`DIST`: 2-3 groups, 2-5 servers in all, buffers 1-2, 1-3 job types, loads
0.3-1.2, exponential sizes, some speed-scaling groups), so that every strict priority order can be
enumerated and every chain solved exactly.

Per farm, with ``lo`` the smallest achievable E[T] (:func:`serverfarm_gym.baselines.solvers.slo_optimum.min_response_time`)
and ``hi`` the E[T] of the unconstrained optimum, the SLO is ``D = lo + w (hi - lo)`` for each
``w`` of ``--positions`` (the SLO binds when ``hi > lo``; farms with ``hi - lo < 1e-6 lo``, where
no SLO can bind, are counted and left out). Exact values of

* ``optimum``: the SLO-constrained optimum (:func:`serverfarm_gym.baselines.solvers.slo_optimum.solve_slo`);
* ``static``: the best strict priority order that meets D (every order enumerated, or the
  families and swap passes of :mod:`serverfarm_gym.baselines.slo_priority` beyond 5,040 orders), and PAS and
  Whittle (per-server chain) when they meet D;
* ``mix``: the best per-arrival mix of two orders (:func:`serverfarm_gym.baselines.slo_priority.best_order_mix`).

Headroom = ``100 (optimum - best fair baseline) / optimum`` with the best fair baseline the best
of ``static`` (deterministic rules only) or of ``static`` and ``mix``; summary: mean, p90, max.
(Farm, SLO) pairs where no fair baseline meets the SLO (the fastest policies are not static
orders) are counted and left out of the statistics.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # runnable as a script from anywhere
    sys.path.insert(0, str(ROOT))

from experiments.common import (  # noqa: E402
    base_parser,
    metadata,
    parallel_map,
    print_progress,
    resolve_workers,
    write_outputs,
)
from serverfarm_gym.baselines.registry import make_policy  # noqa: E402
from serverfarm_gym.baselines.slo_priority import (  # noqa: E402
    MAX_ORDERS,
    best_order_mix,
    best_static_order,
    order_evaluator,
    order_points,
    swap_search,
)
from serverfarm_gym.baselines.solvers.ctmc import evaluate_policy  # noqa: E402
from serverfarm_gym.baselines.solvers.efficiency_optimum import solve_lp  # noqa: E402
from serverfarm_gym.baselines.solvers.slo_optimum import (  # noqa: E402
    SLOInfeasibleError,
    min_response_time,
    solve_slo,
)
from serverfarm_gym.envs.farm_sampler import FarmDistribution, sample_farm  # noqa: E402

NAME = "slo_headroom"
DIST = FarmDistribution(
    n_groups=(2, 3),
    n_job_types=(1, 3),
    n_servers=(2, 5),
    buffer=(1, 2),
    general_size_share=0.0,
)
FULL = {"n_farms": 100, "positions": (0.25, 0.5, 0.75)}
QUICK = {"n_farms": 3, "positions": (0.5,)}


def _fair_rules(config, D: float) -> float:
    """The best efficiency of PAS and Whittle when they meet D (exact per-server chain)."""
    best = -np.inf
    for name in ("pas", "whittle"):
        table = make_policy(name, config).priority_table()
        r = evaluate_policy(config, "priority", table)
        if r.mean_response_time <= D:
            best = max(best, r.efficiency)
    return best


def farm_task(args: tuple[int, dict[str, Any]]) -> list[dict[str, Any]]:
    seed, st = args
    t0 = time.perf_counter()
    config = sample_farm(seed, DIST, name=f"slo-{seed}")
    lo, free = min_response_time(config), solve_lp(config)
    hi = float(free.mean_response_time)
    base = {"seed": seed, "n_servers": config.n_servers, "n_groups": config.n_groups,
            "n_job_types": config.n_job_types, "load": config.load, "min_response_time": lo,
            "optimum_response_time": hi, "unconstrained_optimum": free.value}  # fmt: skip
    if hi - lo < 1e-6 * lo:
        return [{**base, "binding": False, "seconds": time.perf_counter() - t0}]
    measure, _ = order_evaluator(config)
    points = order_points(config, measure)
    exhaustive = math.factorial(sum(g.buffer for g in config.groups)) <= MAX_ORDERS
    rows = []
    for w in st["positions"]:
        D = lo + w * (hi - lo)
        opt = solve_slo(config, D)
        pts = points if exhaustive else points + swap_search(config, points, D, measure)
        try:
            best_order = best_static_order(pts, D).efficiency
            mix = best_order_mix(pts, D, measure).efficiency
        except SLOInfeasibleError:  # the fastest policies are not static orders
            best_order = mix = -math.inf
        static = max(best_order, _fair_rules(config, D))
        mix = max(static, mix)
        row = {**base, "binding": True, "position": w, "slo": D, "optimum": opt.value,
               "randomised_pairs": opt.info["randomised_pairs"], "n_orders": len(pts),
               "baseline_meets_slo": math.isfinite(static), "seconds": time.perf_counter() - t0}  # fmt: skip
        if math.isfinite(static):
            row.update({"best_static": static, "best_with_mix": mix,
                        "headroom_static_pct": 100 * (opt.value - static) / opt.value,
                        "headroom_mix_pct": 100 * (opt.value - mix) / opt.value})  # fmt: skip
        rows.append(row)
    return rows


def _stats(x: np.ndarray) -> dict[str, float]:
    return {"mean": float(x.mean()), "p90": float(np.percentile(x, 90)), "max": float(x.max()),
            "n": int(x.size)}  # fmt: skip


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    bind = [r for r in rows if r["binding"] and r["baseline_meets_slo"]]
    out: dict[str, Any] = {
        "farms": len({r["seed"] for r in rows}),
        "farms_where_no_slo_binds": len({r["seed"] for r in rows if not r["binding"]}),
        "binding_pairs_no_baseline_meets": sum(
            1 for r in rows if r["binding"] and not r["baseline_meets_slo"]
        ),
    }
    for w in sorted({r["position"] for r in bind}):
        sel = [r for r in bind if r["position"] == w]
        out[f"position_{w:g}"] = {
            key: _stats(np.array([r[f"headroom_{key}_pct"] for r in sel]))
            for key in ("static", "mix")
        }
    if bind:
        out["all"] = {
            key: _stats(np.array([r[f"headroom_{key}_pct"] for r in bind]))
            for key in ("static", "mix")
        }
    return out


def format_summary(summary: dict[str, Any]) -> str:
    lines = [
        f"{summary['farms']} farms ({summary['farms_where_no_slo_binds']} where no SLO binds); "
        f"(farm, SLO) pairs where no fair baseline meets the SLO: "
        f"{summary['binding_pairs_no_baseline_meets']} (left out)",
        "| SLO position | baseline | mean % | p90 % | max % | n |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for key, v in summary.items():
        if not isinstance(v, dict):
            continue
        for kind, label in (("static", "best static rule"), ("mix", "+ mixes of two orders")):
            s = v[kind]
            lines.append(f"| {key.replace('position_', 'w = ')} | {label} | {s['mean']:.3f} | "
                         f"{s['p90']:.3f} | {s['max']:.3f} | {s['n']} |")  # fmt: skip
    return "\n".join(lines)


def plot(rows: Sequence[dict[str, Any]], path: str | Path) -> None:
    from matplotlib.figure import Figure

    bind = [r for r in rows if r["binding"] and r["baseline_meets_slo"]]
    fig = Figure(figsize=(6.0, 3.8))
    ax = fig.add_subplot()
    for key, label in (("static", "best static rule"), ("mix", "+ mixes of two orders")):
        x = np.sort([r[f"headroom_{key}_pct"] for r in bind])
        ax.step(x, np.arange(1, x.size + 1) / max(x.size, 1), where="post", label=label)
    ax.set_xscale("symlog", linthresh=1e-3)
    ax.set_xlabel("headroom: (SLO optimum - best fair baseline) / optimum, %")
    ax.set_ylabel("share of (farm, SLO) pairs")
    ax.legend(fontsize=8)
    from experiments.common import save_figure

    save_figure(fig, path)


def build_parser():
    p = base_parser(NAME, "Headroom of the exact SLO-constrained optimum over fair baselines.")
    p.add_argument("--n-farms", type=int, default=None, help="farms (default 100; quick 3)")
    return p


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    a = build_parser().parse_args(argv)
    t0 = time.perf_counter()
    d = QUICK if a.quick else FULL
    st = {"n_farms": a.n_farms or d["n_farms"], "positions": d["positions"], "seed": a.seed,
          "workers": resolve_workers(a.workers, a.quick), "distribution": DIST.to_dict()}  # fmt: skip
    if st["n_farms"] < 1:
        raise SystemExit("--n-farms: must be >= 1")
    seeds = list(range(a.seed, a.seed + st["n_farms"]))

    def progress(done: int, total: int, rows: list[dict[str, Any]]) -> None:
        if not a.quick:
            r = rows[-1]
            print_progress(done, total, f"seed {r['seed']}: {r.get('headroom_mix_pct', '-')} "
                           f"({r['seconds']:.1f} s)")  # fmt: skip

    rows = [r for rs in parallel_map(farm_task, [(s, st) for s in seeds], st["workers"], progress)
            for r in rs]  # fmt: skip
    summary = summarize(rows)
    report = {"experiment": NAME, "summary": summary, "rows": rows,
              "metadata": metadata(argv, st, t0)}  # fmt: skip
    paths = write_outputs(a.out, NAME, report, rows, lambda p: plot(rows, p), a.figure_dir)
    print(format_summary(summary))
    print(f"wrote {paths['json']}")
    return report


if __name__ == "__main__":
    main()
