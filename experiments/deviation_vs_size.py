"""Experiment 2: how does PAS's deviation from the relaxation bound shrink with size?

    nice python experiments/deviation_vs_size.py --figure-dir docs/figures
    python experiments/deviation_vs_size.py --quick --out /tmp/e2

Every R_k and lambda_j of a base farm is multiplied by the same integer f
(``FarmConfig.scaled``; the normalised load stays the same) so that the farm has about 10, 30,
100, ..., 10^5 servers (plus the base farm itself). Base farms: the presets ``tiny``, ``small-1``,
``small-2``, ``small-3`` (random farms with exact values known at f = 1) and ``paper-100``
(100 servers, from 100 up).

At each size:

* PAS simulated with the compiled simulator's priority dispatcher through the evaluation harness
  (``plan_evaluation`` + ``run_units``: independent replications, 95% Student-t intervals). The
  window is set in *model time*: a warm-up of at least 50 and a horizon of at least 100 mean job
  durations of the slowest group (``serverfarm_gym.evaluation.policy_report.window_warnings``; a larger farm has
  proportionally more arrivals per unit time), and at least ``--min-epochs`` decision epochs;
* the relaxation upper bound (``serverfarm_gym.baselines.solvers.bounds.relaxation_bound`` via
  ``serverfarm_gym.evaluation.policy_report.reference_values``: the tight bound, with the per-type caps and blocking
  cuts) and, side by side, the loose bound of the first version (``tight=False``,
  ``bound_loose`` / ``deviation_loose_pct``);
* the exact optimum (``serverfarm_gym.baselines.solvers.efficiency_optimum.solve_pi``) while the aggregated chain has at most
  ``--max-opt-states`` states.

``deviation_pct = 100 (bound - PAS) / bound`` with half-width ``100 ci / bound`` (the bound is
exact); likewise against the optimum. The decay is fitted per base farm on the points whose
deviation is significantly positive (interval above 0): ``ln d = a - b N`` (exponential in the
number of servers N, as the paper's deviation bound) against ``ln d = a - c ln N`` (power law);
the JSON reports both fits with their R^2 on ln d (``fit``: from the size with the largest
deviation on, since small farms can first rise; ``fit_all_significant``: every such point).
"""

from __future__ import annotations

import itertools
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
    durations_to_epochs,
    metadata,
    parallel_map,
    resolve_workers,
    save_figure,
    write_outputs,
)
from serverfarm_gym.baselines.solvers.bounds import relaxation_bound  # noqa: E402
from serverfarm_gym.baselines.solvers.efficiency_optimum import estimate_size, solve_pi  # noqa: E402
from serverfarm_gym.envs.config import FarmConfig  # noqa: E402
from serverfarm_gym.envs.scenarios import load_preset  # noqa: E402
from serverfarm_gym.evaluation import plan_evaluation, reference_values, run_units, summarize_plan  # noqa: E402
from serverfarm_gym.evaluation.stats import shortfall_pct  # noqa: E402

NAME = "deviation_vs_size"
BASES = ("tiny", "small-1", "small-2", "small-3", "paper-100")
TARGETS = (10, 30, 100, 300, 1_000, 3_000, 10_000, 30_000, 100_000)
PAPER_THRESHOLD_PCT = 3.0

FULL = {"bases": BASES, "targets": TARGETS, "replications": 5, "min_epochs": 1_000_000,
        "horizon_durations": 100.0, "warmup_durations": 50.0, "max_opt_states": 150_000}  # fmt: skip
QUICK = {"bases": ("tiny", "small-3"), "targets": (10, 100), "replications": 3,
         "min_epochs": 20_000, "horizon_durations": 100.0, "warmup_durations": 50.0,
         "max_opt_states": 3_000}  # fmt: skip


def scale_factors(n_base: int, targets: Sequence[int]) -> list[int]:
    """Integer factors f (1 first) with f * n_base close to each target >= n_base, deduplicated."""
    fs = [1]
    for t in targets:
        if t >= n_base:
            f = max(1, round(t / n_base))
            if f not in fs:
                fs.append(f)
    return fs


def fit_decay(servers: Sequence[float], dev: Sequence[float]) -> dict[str, Any]:
    """Least-squares fits of ``ln d`` against N (exponential) and ln N (power law).

    Returns ``{"n_points", "exponential": {"rate", "prefactor", "r2"}, "power": {"exponent",
    "prefactor", "r2"}, "better"}`` (None entries when fewer than 3 points)."""
    n = np.asarray(servers, dtype=np.float64)
    d = np.asarray(dev, dtype=np.float64)
    out: dict[str, Any] = {"n_points": int(n.size), "exponential": None, "power": None,
                           "better": None}  # fmt: skip
    if n.size < 3:
        return out
    y = np.log(d)

    def lin(x: np.ndarray) -> tuple[float, float, float]:
        slope, icpt = np.polyfit(x, y, 1)
        res = y - (icpt + slope * x)
        ss = float(np.sum((y - y.mean()) ** 2))
        return float(slope), float(icpt), 1.0 - float(np.sum(res**2)) / ss if ss > 0 else 1.0

    s1, i1, r1 = lin(n)
    s2, i2, r2 = lin(np.log(n))
    out["exponential"] = {"rate": -s1, "prefactor_pct": float(np.exp(i1)), "r2": r1,
                          "model": "d = prefactor * exp(-rate * N)"}  # fmt: skip
    out["power"] = {"exponent": -s2, "prefactor_pct": float(np.exp(i2)), "r2": r2,
                    "model": "d = prefactor * N^(-exponent)"}  # fmt: skip
    out["better"] = "exponential" if r1 > r2 else "power"
    return out


def relaxation_details(config: FarmConfig) -> dict[str, Any]:
    """What the relaxed optima do that an admissible policy may not: the share of the offered
    jobs each blocks and the groups it leaves (almost) idle (< 1% of servers busy); ``bound_*``
    for the tight bound, ``bound_loose_*`` for the loose one (also its efficiency)."""
    out: dict[str, Any] = {}
    for tight, prefix in ((True, "bound"), (False, "bound_loose")):
        try:
            r = relaxation_bound(config, tight=tight)
        except (ValueError, RuntimeError):
            continue
        busy = [1.0 - r.occupancy[k, 0] / g.count for k, g in enumerate(config.groups)]
        out[f"{prefix}_blocked_share"] = r.blocked_share
        out[f"{prefix}_idle_groups"] = [
            g.name for g, b in zip(config.groups, busy, strict=True) if b < 0.01
        ]
        out[f"{prefix}_busy_fraction"] = busy
        if not tight:
            out["bound_loose"] = r.efficiency
    return out


def optimum_task(task: tuple[FarmConfig, int]) -> tuple[float | None, str | None]:
    """(exact optimum by policy iteration, None) or (None, why it was not computed)."""
    config, limit = task
    n, _ = estimate_size(config)
    if n > limit:
        return None, f"aggregated chain has {n} states > --max-opt-states={limit}"
    return float(solve_pi(config, max_states=limit).value), None


def parse_settings(argv: Sequence[str] | None) -> tuple[Any, dict[str, Any]]:
    """(parsed arguments, the settings of the run: the preset ``QUICK``/``FULL`` plus overrides)."""
    p = base_parser(NAME, "PAS deviation from the relaxation bound vs farm size (experiment 2)")
    p.add_argument("--bases", default=None, help="comma-separated presets (default: 5 presets)")
    p.add_argument("--max-servers", type=int, default=None, help="largest target size (1e5)")
    p.add_argument("--replications", type=int, default=None, help="5 (quick 3)")
    p.add_argument("--min-epochs", type=int, default=None,
                   help="minimum decision epochs per replication (1e6; quick 2e4)")  # fmt: skip
    p.add_argument("--max-opt-states", type=int, default=None, help="exact optimum limit (150000)")
    a = p.parse_args(argv)
    d = QUICK if a.quick else FULL
    targets = [t for t in d["targets"] if a.max_servers is None or t <= a.max_servers]
    st = {
        "bases": [s.strip() for s in a.bases.split(",")] if a.bases else list(d["bases"]),
        "targets": targets,
        "replications": a.replications or d["replications"],
        "min_epochs": a.min_epochs or d["min_epochs"],
        "horizon_durations": d["horizon_durations"],
        "warmup_durations": d["warmup_durations"],
        "max_opt_states": a.max_opt_states or d["max_opt_states"],
        "seed": a.seed,
        "quick": bool(a.quick),
        "workers": resolve_workers(a.workers, a.quick),
        "policy": "pas (compiled priority dispatcher)",
    }
    if st["replications"] < 2:
        raise SystemExit("--replications: need at least 2 for a confidence interval")
    return a, st


def plan_points(st: dict[str, Any]) -> list[dict[str, Any]]:
    """One evaluation plan per (base farm, scale factor): ``{base, scale, config, plan}``."""
    targets = st["targets"]
    points: list[dict[str, Any]] = []
    for base in st["bases"]:
        b = load_preset(base)
        fs = scale_factors(b.n_servers, targets)
        # extra small sizes where the exact optimum is still computable (PAS vs optimum trend)
        fs += [f for f in range(2, 13) if f not in fs and f * b.n_servers <= max(targets)
               and estimate_size(b.scaled(f))[0] <= st["max_opt_states"]]  # fmt: skip
        for f in sorted(fs):
            c = b if f == 1 else b.scaled(f)
            horizon = durations_to_epochs(c, st["horizon_durations"], st["min_epochs"])
            warmup = durations_to_epochs(c, st["warmup_durations"], horizon // 10)
            plan = plan_evaluation(c, ["pas"], st["replications"], horizon, warmup, st["seed"])
            points.append({"base": base, "scale": f, "config": c, "plan": plan})
    return points


def run_points(
    points: Sequence[dict[str, Any]], st: dict[str, Any]
) -> tuple[list[tuple[float | None, str | None]], list[Any]]:
    """(exact optimum per point, the simulation results of all points' units in plan order).

    The units of all points share one pool, so a small point does not wait for a large one.
    """
    # exact optima first (policy iteration, tens of seconds for the largest chains)
    opts = parallel_map(optimum_task, [(pt["config"], st["max_opt_states"]) for pt in points],
                        st["workers"])  # fmt: skip
    units = [u for pt in points for u in pt["plan"].units]
    # longest units first (they dominate the wall time), results put back in plan order
    order = sorted(range(len(units)), key=lambda i: -(units[i].horizon + units[i].warmup))
    res_sorted = run_units([units[i] for i in order], st["workers"], progress=False)
    results: list[Any] = [None] * len(units)
    for i, r in zip(order, res_sorted, strict=True):
        results[i] = r
    return opts, results


def point_row(
    pt: dict[str, Any], opt: float | None, opt_why: str | None, res: Sequence[Any]
) -> dict[str, Any]:
    """The table row of one point: PAS's efficiency and its deviations from bounds and optimum."""
    c, plan = pt["config"], pt["plan"]
    refs = reference_values(c, compute_optimum=False)
    refs["optimum"] = None if opt is None else {"efficiency": opt, "method": "pi"}
    rep = summarize_plan(plan, res, refs)
    e = rep["policies"]["pas"]
    eff, ci = e["efficiency"]["mean"], e["efficiency"]["ci95"]
    bound = refs["upper_bound"]["efficiency"] if refs["upper_bound"] else None
    details = relaxation_details(c)
    loose = details.get("bound_loose")
    return {
        "base": pt["base"], "scale": pt["scale"], "n_servers": c.n_servers, "load": c.load,
        "horizon": plan.horizon, "warmup": plan.warmup, "replications": plan.replications,
        "pas_efficiency": eff, "pas_ci95": ci,
        "pas_ci95_rel_pct": 100.0 * ci / eff if ci is not None else None,
        "pas_blocking": e["blocking"]["mean"],
        "bound": bound, "bound_reason": refs["upper_bound_reason"],
        "deviation_pct": shortfall_pct(eff, bound),
        "deviation_ci95": None if bound is None or ci is None else 100.0 * ci / bound,
        "optimum": opt, "optimum_reason": opt_why,
        **details,
        "deviation_loose_pct": shortfall_pct(eff, loose),
        "deviation_loose_ci95": None if loose is None or ci is None else 100.0 * ci / loose,
        "gap_to_opt_pct": shortfall_pct(eff, opt),
        "gap_to_opt_ci95": None if opt is None or ci is None else 100.0 * ci / opt,
        "window_warnings": rep["warnings"],
        "cpu_s": sum(r["wall_s"] for r in res),
    }  # fmt: skip


def print_rows(rows: Sequence[dict[str, Any]]) -> None:
    """One console line per point: PAS, its deviation from the bounds and the optimum."""
    for r in rows:
        dev = r["deviation_pct"]
        print(f"{r['base']:10s} N={r['n_servers']:<7d} PAS {r['pas_efficiency']:.5f} "
              f"± {r['pas_ci95']:.5f}  dev "
              + ("n/a" if dev is None else f"{dev:.3f} ± {r['deviation_ci95']:.3f}%")
              + ("" if r["deviation_loose_pct"] is None
                 else f" (loose {r['deviation_loose_pct']:.3f}%)")
              + ("" if r["gap_to_opt_pct"] is None else f"  to opt {r['gap_to_opt_pct']:.3f}%"))  # fmt: skip


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    a, st = parse_settings(argv)
    t0 = time.perf_counter()
    points = plan_points(st)
    opts, results = run_points(points, st)
    t_sim = time.perf_counter() - t0

    rows: list[dict[str, Any]] = []
    i = 0
    for pt, (opt, opt_why) in zip(points, opts, strict=True):
        n_units = len(pt["plan"].units)
        rows.append(point_row(pt, opt, opt_why, results[i : i + n_units]))
        i += n_units
    summary = summarize(rows, st["bases"])
    report = {
        "experiment": NAME,
        "question": "Does PAS's deviation from the relaxation bound decrease with the farm size, "
        "is it below 3% at 100 servers, and how fast does it decay?",
        "summary": summary,
        "points": rows,
        "simulation_wall_s": t_sim,
        **metadata(argv, st, t0),
    }
    write_outputs(a.out, NAME, report, rows, lambda path: plot(rows, st["bases"], path),
                  a.figure_dir)  # fmt: skip
    print_rows(rows)
    return report


def summarize(rows: Sequence[dict[str, Any]], bases: Sequence[str]) -> dict[str, Any]:
    """Per base farm: the decay fits, the deviation near 100 servers, where it is below 3%."""
    out: dict[str, Any] = {}
    for base in bases:
        pts = sorted((r for r in rows if r["base"] == base), key=lambda r: r["n_servers"])
        s: dict[str, Any] = {"sizes": [r["n_servers"] for r in pts]}
        have = [r for r in pts if r["deviation_pct"] is not None]
        if have:
            near100 = min(have, key=lambda r: abs(np.log(r["n_servers"] / 100)))
            s["at_about_100_servers"] = {
                "n_servers": near100["n_servers"],
                "deviation_pct": near100["deviation_pct"],
                "ci95": near100["deviation_ci95"],
                "below_3pct": near100["deviation_pct"] + near100["deviation_ci95"]
                < PAPER_THRESHOLD_PCT,
            }
            s["deviation_pct"] = [r["deviation_pct"] for r in have]
            # no increase beyond the two points' combined half-widths
            s["monotone_decreasing"] = all(
                b["deviation_pct"] <= a["deviation_pct"] + a["deviation_ci95"] + b["deviation_ci95"]
                for a, b in itertools.pairwise(have)
            )
            below = [r["n_servers"] for r in have if r["deviation_pct"] < PAPER_THRESHOLD_PCT]
            s["smallest_size_below_3pct"] = min(below) if below else None
            sig = [r for r in have if r["deviation_pct"] - r["deviation_ci95"] > 0]
            # the decay is fitted from the largest deviation on (small farms can rise first)
            peak = max(have, key=lambda r: r["deviation_pct"])["n_servers"]
            tail = [r for r in sig if r["n_servers"] >= peak]
            s["peak_n_servers"] = peak
            s["fit"] = fit_decay([r["n_servers"] for r in tail], [r["deviation_pct"] for r in tail])
            s["fit_all_significant"] = fit_decay(
                [r["n_servers"] for r in sig], [r["deviation_pct"] for r in sig]
            )
            s["not_significant_sizes"] = [r["n_servers"] for r in have if r not in sig]
        else:
            s["deviation_pct"] = None
            s["reason"] = pts[0]["bound_reason"] if pts else None
        opt = [r for r in pts if r["gap_to_opt_pct"] is not None]
        s["gap_to_opt_pct"] = {r["n_servers"]: r["gap_to_opt_pct"] for r in opt}
        out[base] = s
    return out


def plot(rows: Sequence[dict[str, Any]], bases: Sequence[str], path: str | Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 3.8))
    ax1, ax2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    for i, base in enumerate(bases):
        pts = sorted((r for r in rows if r["base"] == base), key=lambda r: r["n_servers"])
        color = f"C{i}"
        n = [r["n_servers"] for r in pts]
        ax1.errorbar(n, [r["pas_efficiency"] for r in pts], yerr=[r["pas_ci95"] or 0 for r in pts],
                     marker="o", ms=3, capsize=2, color=color, label=f"{base} PAS")  # fmt: skip
        bnd = [(r["n_servers"], r["bound"]) for r in pts if r["bound"] is not None]
        if bnd:
            ax1.plot(*zip(*bnd, strict=True), "--", color=color, lw=1)
        # the loose bound (tight=False) only where it is visibly above the tight one
        lo = [(r["n_servers"], r["bound_loose"]) for r in pts
              if r.get("bound_loose") is not None and r["bound"] is not None
              and r["bound_loose"] > r["bound"] * (1 + 1e-4)]  # fmt: skip
        if lo:
            ax1.plot(*zip(*lo, strict=True), ":", color=color, lw=1)
        opt = [(r["n_servers"], r["optimum"]) for r in pts if r["optimum"] is not None]
        if opt:
            ax1.plot(*zip(*opt, strict=True), "x", color=color, ms=6)
        dev = [r for r in pts if r["deviation_pct"] is not None]
        if dev:
            # points not significantly above 0 are drawn at their upper confidence limit, hollow
            sig = [r for r in dev if r["deviation_pct"] - r["deviation_ci95"] > 0]
            ns = [r for r in dev if r not in sig]
            ax2.errorbar([r["n_servers"] for r in sig], [r["deviation_pct"] for r in sig],
                         yerr=[r["deviation_ci95"] for r in sig], marker="o", ms=3, capsize=2,
                         color=color, label=base)  # fmt: skip
            if ns:
                ax2.plot([r["n_servers"] for r in ns],
                         [r["deviation_pct"] + r["deviation_ci95"] for r in ns], "v",
                         mfc="none", color=color, ms=5)  # fmt: skip
        og = [r for r in pts if r["gap_to_opt_pct"] is not None and r["gap_to_opt_pct"] > 0]
        if og:
            ax2.plot([r["n_servers"] for r in og], [r["gap_to_opt_pct"] for r in og], "x",
                     color=color, ms=6, label="x: vs exact optimum" if i == 0 else None)  # fmt: skip
    ax1.set_xscale("log")
    ax1.set_xlabel("servers")
    ax1.set_ylabel("efficiency")
    ax1.set_title("PAS (dots), bound (dashed; loose: dotted), optimum (x)", fontsize=9)
    ax1.legend(fontsize=7)
    ax1.grid(alpha=0.3)
    ax2.set_xscale("log")
    ax2.set_yscale("log")
    ax2.axhline(PAPER_THRESHOLD_PCT, color="k", lw=0.8, ls=":")
    ax2.set_xlabel("servers")
    ax2.set_ylabel("PAS deviation (%)")
    ax2.set_title("from the bound (o; v: upper 95% limit if n.s.), optimum (x)", fontsize=9)
    ax2.grid(alpha=0.3, which="both")
    if ax2.get_legend_handles_labels()[0]:
        ax2.legend(fontsize=7)
    save_figure(fig, path)


if __name__ == "__main__":
    main()
