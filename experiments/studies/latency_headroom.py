"""Headroom of dynamic right-sizing: (optimum - best fair baseline) / optimum on sampled small
farms, all exact (serverfarm_gym.baselines.solvers.sleep_chain, serverfarm_gym.baselines.sleep_search).

Farms come from ``serverfarm_gym.envs.farm_sampler.sample_farm`` with right-sizing (each group sleeps with
probability ``--sleep-share``), 2-3 groups of 1-4 servers in all, buffers 1-2, 1-3 job types,
exponential sizes, on/off servers; a farm without a sleeping group, or whose aggregated chain has
more than ``--max-states`` states, is skipped (counted) and the next seed drawn. Per farm:

* the optimum (LP over the aggregated chain; it may use the whole histogram);
* the fair baselines: PAS with its index ties (per-server chain), the ``pack`` and
  ``join-awake`` orders and the best static (group, mode, level) order found by local search;
* the same farm without ``sleep`` (the base model): its optimum and best static order, for the
  base model's headroom next to it.

``python -m experiments.studies.latency_headroom --farms 100`` (``--quick``: 4 farms). Writes
``latency_headroom.json`` / ``.csv`` / ``.png`` into ``--out`` and prints the table of
docs/latency.md.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # runnable as a script from anywhere
    sys.path.insert(0, str(ROOT))

from experiments.common import (  # noqa: E402
    base_parser,
    metadata,
    parallel_map,
    print_progress,
    resolve_workers,
    save_figure,
    write_outputs,
)
from serverfarm_gym.baselines.sleep_search import best_static_order, heuristic_orders, priority_of  # noqa: E402
from serverfarm_gym.baselines.solvers.sleep_chain import (  # noqa: E402
    SleepSpace,
    evaluate_pas,
    evaluate_table,
    solve_optimum,
)
from serverfarm_gym.envs.config import FarmConfig, farm_from_dict  # noqa: E402
from serverfarm_gym.envs.farm_sampler import FarmDistribution, sample_farm  # noqa: E402

NAME = "latency_headroom"


def distribution(sleep_share: float) -> FarmDistribution:
    return FarmDistribution(n_groups=(2, 3), n_job_types=(1, 3), n_servers=(2, 4), buffer=(1, 2),
                            state_dependent_share=0.0, general_size_share=0.0,
                            sleep_share=sleep_share)  # fmt: skip


def draw_farms(n: int, seed: int, sleep_share: float, max_states: int) -> tuple[list, int]:
    """``n`` sampled farms with a sleeping group and a chain within ``max_states``; the number
    of seeds skipped."""
    d = distribution(sleep_share)
    farms, skipped, s = [], 0, seed
    while len(farms) < n:
        c = sample_farm(s, d)
        s += 1
        if not c.has_sleep:
            skipped += 1
            continue
        try:
            SleepSpace(c, max_states=max_states)
        except ValueError:
            skipped += 1
            continue
        farms.append((s - 1, c))
    return farms, skipped


def _gap(opt: float, best: float) -> float:
    return 100.0 * (opt - best) / opt


def without_sleep(c: FarmConfig) -> FarmConfig:
    d = c.to_dict()
    for g in d["groups"]:
        g.pop("sleep", None)
    return farm_from_dict(d)


def measure(item: tuple[int, FarmConfig, int]) -> dict[str, Any]:
    """Every number of one farm (module-level: runs in worker processes)."""
    seed, c, max_evals = item
    space = SleepSpace(c)
    opt, opt_res = solve_optimum(space)
    baselines = {"pas": evaluate_pas(c).efficiency}
    for name, order in heuristic_orders(space).items():
        baselines[name] = evaluate_table(space, priority_of(order)).efficiency
    search = best_static_order(space, max_evaluations=max_evals)
    baselines["best-order"] = search.result.efficiency
    best_name = max(baselines, key=baselines.get)
    base_space = SleepSpace(without_sleep(c))
    base_opt, _ = solve_optimum(base_space)
    base_best = best_static_order(base_space, max_evaluations=max_evals).result.efficiency
    return {
        "seed": seed, "servers": c.n_servers, "groups": c.n_groups, "states": space.n_states,
        "optimum": opt, "optimum_response_time": opt_res.mean_response_time,
        **{f"eff_{k}": v for k, v in baselines.items()},
        "best_baseline": best_name, "gap_pct": _gap(opt, baselines[best_name]),
        "gap_pas_pct": _gap(opt, baselines["pas"]),
        "search_evaluations": search.evaluations,
        "base_optimum": base_opt, "base_gap_pct": _gap(base_opt, base_best),
        "sleep_gain_pct": 100.0 * (opt - base_opt) / base_opt,
    }  # fmt: skip


def summary(rows: list[dict[str, Any]], key: str) -> dict[str, float]:
    x = np.array([r[key] for r in rows])
    return {"mean": float(x.mean()), "p90": float(np.percentile(x, 90)), "max": float(x.max())}


def table(rows: list[dict[str, Any]], skipped: int) -> str:
    lines = ["| gap (% of the optimum) | mean | p90 | max |", "|---|---|---|---|"]
    for label, key in (("right-sizing: best fair baseline", "gap_pct"),
                       ("right-sizing: PAS with the timeout", "gap_pas_pct"),
                       ("base model (same farms, no sleep): best static order", "base_gap_pct"),
                       ("optimum with sleep over optimum without (gain)", "sleep_gain_pct")):  # fmt: skip
        s = summary(rows, key)
        lines.append(f"| {label} | {s['mean']:.4f} | {s['p90']:.4f} | {s['max']:.4f} |")
    wins: dict[str, int] = {}
    for r in rows:
        wins[r["best_baseline"]] = wins.get(r["best_baseline"], 0) + 1
    lines.append(f"\n{len(rows)} farms ({skipped} seeds skipped: no sleeping group or chain too "
                 f"large); best fair baseline per farm: {wins}")  # fmt: skip
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = base_parser(NAME, __doc__.split("\n\n")[0])
    p.add_argument("--farms", type=int, default=100)
    p.add_argument("--sleep-share", type=float, default=0.75)
    p.add_argument("--max-states", type=int, default=3_000)
    p.add_argument("--max-evaluations", type=int, default=300, help="per local search")
    a = p.parse_args(argv)
    if a.quick:
        a.farms, a.max_states, a.max_evaluations = 4, 600, 60
    if a.farms < 1:
        p.error("--farms: must be >= 1")
    t0 = time.perf_counter()
    farms, skipped = draw_farms(a.farms, a.seed, a.sleep_share, a.max_states)
    items = [(s, c, a.max_evaluations) for s, c in farms]
    rows = parallel_map(measure, items, resolve_workers(a.workers, a.quick),
                        lambda d, n, r: print_progress(d, n, f"seed {r['seed']}: "
                                                       f"gap {r['gap_pct']:.4f}%"))  # fmt: skip
    text = table(rows, skipped)
    print(text)
    report = {"meta": metadata(argv, vars(a), t0), "skipped": skipped,
              "summary": {k: summary(rows, k) for k in ("gap_pct", "gap_pas_pct", "base_gap_pct",
                                                         "sleep_gain_pct")},
              "table": text, "farms": rows}  # fmt: skip

    def plot(path: str | Path) -> None:
        from matplotlib.figure import Figure

        fig = Figure(figsize=(5, 3))
        ax = fig.add_subplot()
        ax.hist([r["gap_pct"] for r in rows], bins=20, label="right-sizing")
        ax.hist([r["base_gap_pct"] for r in rows], bins=20, alpha=0.6, label="base model")
        ax.set_xlabel("(optimum - best fair baseline) / optimum, %")
        ax.set_ylabel("farms")
        ax.legend()
        save_figure(fig, path)

    write_outputs(a.out, NAME, report, rows, plot, a.figure_dir)
    return report


if __name__ == "__main__":
    main()
