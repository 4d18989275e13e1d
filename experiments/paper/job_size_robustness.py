"""Experiment 3: is PAS's efficiency insensitive to the job-size distribution?

    nice python -m experiments.paper.job_size_robustness --figure-dir docs/figures
    python -m experiments.paper.job_size_robustness --quick --out /tmp/e3

The farms of experiment 2 (presets ``tiny``, ``small-1``, ``small-2``, ``small-3``,
``paper-100``) with every job type's size drawn, mean 1, from: exponential (the reference),
deterministic, Erlang (k = 4, scv 0.25), hyperexponential (balanced means, scv 4 and 10),
lognormal (scv 4) and Pareto (alpha 1.5: infinite variance; alpha 2.5: scv 0.8)
(``FarmConfig.with_job_size``; the compiled simulator tracks every job's remaining work exactly
for non-exponential sizes).

PAS is simulated with the evaluation harness (independent replications, 95% Student-t
intervals; window of at least 100 mean job durations after a warm-up of at least 50). The change
relative to the exponential case is ``100 (eff_d - eff_exp) / eff_exp`` with the interval of the
per-replication differences (``serverfarm_gym.evaluation.stats.paired_gap_pct``: replication r of every
distribution uses the same seed; the streams are independent across distributions, so the
pairing is valid but gives little variance reduction). For the small presets the exact
exponential value (per-server CTMC) is recorded as a check of the simulated reference.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # runnable as a script from anywhere
    sys.path.insert(0, str(ROOT))

from experiments.common import (  # noqa: E402
    base_parser,
    durations_to_epochs,
    metadata,
    resolve_workers,
    save_figure,
    write_outputs,
)
from serverfarm_gym.baselines.solvers.ctmc import evaluate_policy, n_full_states  # noqa: E402
from serverfarm_gym.envs.scenarios import load_preset  # noqa: E402
from serverfarm_gym.evaluation import plan_evaluation, run_units, summarize_plan  # noqa: E402
from serverfarm_gym.evaluation.stats import paired_gap_pct  # noqa: E402

NAME = "job_size_robustness"
FARMS = ("tiny", "small-1", "small-2", "small-3", "paper-100")
#: label -> job-size spec (mean 1)
SIZES: dict[str, dict[str, Any]] = {
    "exponential": {"distribution": "exponential"},
    "deterministic": {"distribution": "deterministic"},
    "erlang-4": {"distribution": "erlang", "k": 4},
    "hyperexp-4": {"distribution": "hyperexponential", "scv": 4.0},
    "hyperexp-10": {"distribution": "hyperexponential", "scv": 10.0},
    "lognormal-4": {"distribution": "lognormal", "scv": 4.0},
    "pareto-1.5": {"distribution": "pareto", "alpha": 1.5},
    "pareto-2.5": {"distribution": "pareto", "alpha": 2.5},
}
FULL = {"farms": FARMS, "sizes": tuple(SIZES), "replications": 10, "min_epochs": 500_000}
QUICK = {"farms": ("tiny", "small-3"), "sizes": ("exponential", "deterministic", "pareto-1.5"),
         "replications": 3, "min_epochs": 20_000}  # fmt: skip
CTMC_MAX = 20_000


def parse_settings(argv: Sequence[str] | None) -> tuple[Any, dict[str, Any]]:
    """(parsed arguments, the settings of the run: the preset ``QUICK``/``FULL`` plus overrides)."""
    p = base_parser(NAME, "PAS under non-exponential job sizes (experiment 3)")
    p.add_argument("--farms", default=None, help="comma-separated presets")
    p.add_argument("--sizes", default=None, help=f"comma-separated labels of {list(SIZES)}")
    p.add_argument("--replications", type=int, default=None, help="10 (quick 3)")
    p.add_argument("--min-epochs", type=int, default=None,
                   help="minimum decision epochs per replication (5e5; quick 2e4)")  # fmt: skip
    a = p.parse_args(argv)
    d = QUICK if a.quick else FULL
    st = {
        "farms": [s.strip() for s in a.farms.split(",")] if a.farms else list(d["farms"]),
        "sizes": [s.strip() for s in a.sizes.split(",")] if a.sizes else list(d["sizes"]),
        "replications": a.replications or d["replications"],
        "min_epochs": a.min_epochs or d["min_epochs"],
        "horizon_durations": 100.0,
        "warmup_durations": 50.0,
        "seed": a.seed,
        "quick": bool(a.quick),
        "workers": resolve_workers(a.workers, a.quick),
    }
    unknown = sorted(set(st["sizes"]) - set(SIZES))
    if unknown:
        raise SystemExit(f"--sizes: unknown {unknown}; choose from {list(SIZES)}")
    if "exponential" not in st["sizes"]:
        st["sizes"].insert(0, "exponential")  # the reference
    if st["replications"] < 2:
        raise SystemExit("--replications: need at least 2 for a confidence interval")
    st["size_specs"] = {k: SIZES[k] for k in st["sizes"]}
    return a, st


def plan_points(st: dict[str, Any]) -> list[dict[str, Any]]:
    """One evaluation plan per (farm, job-size distribution): ``{"farm", "size", "plan"}``."""
    points = []
    for farm in st["farms"]:
        base = load_preset(farm)
        # one window per farm (the exponential one), so every distribution covers the same time
        horizon = durations_to_epochs(base, st["horizon_durations"], st["min_epochs"])
        warmup = durations_to_epochs(base, st["warmup_durations"], horizon // 10)
        for label in st["sizes"]:
            c = base.with_job_size(SIZES[label])
            plan = plan_evaluation(c, ["pas"], st["replications"], horizon, warmup, st["seed"])
            points.append({"farm": farm, "size": label, "plan": plan})
    return points


def point_row(pt: dict[str, Any], res: Sequence[Any]) -> tuple[dict[str, Any], list[float]]:
    """(the table row of one point, its per-replication efficiencies for the paired gaps)."""
    plan = pt["plan"]
    refs = {"optimum": None, "upper_bound": None}
    rep = summarize_plan(plan, res, refs)
    e = rep["policies"]["pas"]
    row = {
        "farm": pt["farm"], "size": pt["size"], "n_servers": plan.config.n_servers,
        "load": plan.config.load, "horizon": plan.horizon, "warmup": plan.warmup,
        "replications": plan.replications,
        "pas_efficiency": e["efficiency"]["mean"], "pas_ci95": e["efficiency"]["ci95"],
        "pas_ci95_rel_pct": 100.0 * e["efficiency"]["ci95"] / e["efficiency"]["mean"],
        "pas_blocking": e["blocking"]["mean"],
        "window_warnings": rep["warnings"],
        "cpu_s": sum(r["wall_s"] for r in res),
    }  # fmt: skip
    return row, [r["efficiency"] for r in e["replications"]]


def add_changes(rows: Sequence[dict[str, Any]], reps: dict[tuple[str, str], list[float]]) -> None:
    """Each row's paired change vs the exponential reference of its farm (replications share
    seeds); the exponential rows are also checked against the exact CTMC value when small."""
    for r in rows:
        g = paired_gap_pct(reps[(r["farm"], r["size"])], reps[(r["farm"], "exponential")])
        r["change_vs_exponential_pct"] = g["mean"] if r["size"] != "exponential" else 0.0
        r["change_ci95"] = g["ci95"] if r["size"] != "exponential" else 0.0
        if r["size"] == "exponential":
            c = load_preset(r["farm"])
            if n_full_states(c) <= CTMC_MAX:
                r["exact_exponential"] = evaluate_policy(c, "pas").efficiency
                r["exact_within_ci"] = (
                    abs(r["exact_exponential"] - r["pas_efficiency"]) <= r["pas_ci95"]
                )


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    a, st = parse_settings(argv)
    t0 = time.perf_counter()
    points = plan_points(st)
    units = [u for pt in points for u in pt["plan"].units]
    results = run_units(units, st["workers"], progress=False)

    rows: list[dict[str, Any]] = []
    reps: dict[tuple[str, str], list[float]] = {}
    i = 0
    for pt in points:
        n_units = len(pt["plan"].units)
        row, reps[(pt["farm"], pt["size"])] = point_row(pt, results[i : i + n_units])
        rows.append(row)
        i += n_units
    add_changes(rows, reps)
    summary = summarize(rows, st["sizes"])
    report = {
        "experiment": NAME,
        "question": "How much does PAS's energy efficiency change when job sizes are not "
        "exponential (same mean)?",
        "summary": summary,
        "points": rows,
        **metadata(argv, st, t0),
    }
    write_outputs(a.out, NAME, report, rows, lambda path: plot(rows, st, path), a.figure_dir)
    for r in rows:
        print(f"{r['farm']:10s} {r['size']:14s} PAS {r['pas_efficiency']:.5f} ± "
              f"{r['pas_ci95']:.5f} ({r['pas_ci95_rel_pct']:.2f}%)  change "
              f"{r['change_vs_exponential_pct']:+.3f} ± {r['change_ci95']:.3f}%")  # fmt: skip
    return report


def summarize(rows: Sequence[dict[str, Any]], sizes: Sequence[str]) -> dict[str, Any]:
    """Per distribution: the largest |change| over the farms, and how many changes are
    significant (interval excludes 0); overall the widest relative half-width."""
    out: dict[str, Any] = {"per_size": {}}
    for s in sizes:
        if s == "exponential":
            continue
        pts = [r for r in rows if r["size"] == s]
        worst = max(pts, key=lambda r: abs(r["change_vs_exponential_pct"]))
        out["per_size"][s] = {
            "max_abs_change_pct": abs(worst["change_vs_exponential_pct"]),
            "at_farm": worst["farm"],
            "ci95": worst["change_ci95"],
            "significant": sum(
                1 for r in pts if abs(r["change_vs_exponential_pct"]) > r["change_ci95"]
            ),
            "n_farms": len(pts),
        }
    out["max_ci95_rel_pct"] = max(r["pas_ci95_rel_pct"] for r in rows)
    checks = [r["exact_within_ci"] for r in rows if "exact_within_ci" in r]
    out["exact_exponential_checks"] = {"n": len(checks), "within_ci": int(sum(checks))}
    return out


def plot(rows: Sequence[dict[str, Any]], st: dict[str, Any], path: str | Path) -> None:
    from matplotlib.figure import Figure

    sizes = [s for s in st["sizes"] if s != "exponential"]
    farms = st["farms"]
    fig = Figure(figsize=(10, 3.8))
    ax = fig.add_subplot()
    width = 0.8 / max(len(farms), 1)
    for i, farm in enumerate(farms):
        pts = {r["size"]: r for r in rows if r["farm"] == farm}
        xs = [k + (i - (len(farms) - 1) / 2) * width for k in range(len(sizes))]
        ax.errorbar(xs, [pts[s]["change_vs_exponential_pct"] for s in sizes],
                    yerr=[pts[s]["change_ci95"] for s in sizes], fmt="o", ms=4, capsize=3,
                    label=farm)  # fmt: skip
    ax.axhline(0.0, color="k", lw=0.8)
    ax.set_xticks(range(len(sizes)))
    ax.set_xticklabels(sizes, rotation=20)
    ax.set_ylabel("PAS efficiency change vs exponential (%)")
    ax.set_title("95% intervals of the per-replication differences")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7, ncol=min(len(farms), 5))
    save_figure(fig, path)


if __name__ == "__main__":
    main()
