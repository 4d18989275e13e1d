"""Experiment 1: is PAS near-optimal on small random farms?

    nice python experiments/pas_vs_optimum.py --figure-dir docs/figures     # 200 farms
    python experiments/pas_vs_optimum.py --quick --out /tmp/e1              # CI-sized

Farms: ``serverfarm_gym.envs.scenarios.random_farm(seed)`` for seeds ``0..n_farms-1`` with the generator's
defaults (2-4 groups of 1-3 servers, buffers 1-3, 1-3 job types with random available sets,
normalised load rho uniform in [0.3, 1.2], exponential sizes).

Per farm:

* the exact optimum over admissible policies (block only when every available server is full):
  ratio policy iteration on the symmetry-aggregated chain (``serverfarm_gym.baselines.solvers.efficiency_optimum.solve_pi``; it
  agrees with the LP to 1e-7 and is much faster). Farms whose aggregated chain exceeds
  ``--max-opt-states`` are skipped and counted.
* PAS, Whittle, JSQ, random and MEESF (``serverfarm_gym.baselines.registry``), and the diagnostic variant
  ``pas-spread`` (:func:`pas_spread_table`: PAS's group order, but inside a group the server with
  the fewest jobs rather than the smallest index): **exact** stationary efficiency from the
  per-server CTMC (``serverfarm_gym.baselines.solvers.ctmc.evaluate_policy``; PAS's smallest-index tie-breaking is not
  symmetric, so it needs the full chain) when it has at most ``--ctmc-max-states`` states, else
  **simulation** with the evaluation harness (``serverfarm_gym.evaluation.evaluate``: independent replications,
  95% Student-t intervals).
* gap to the optimum ``100 (opt - eff) / opt`` (``serverfarm_gym.evaluation.stats.shortfall_pct``), with the
  half-width ``100 ci / opt`` for simulated farms.

Outputs: per-farm rows (CSV), the gap distribution per policy (mean / median / 90th percentile /
max, share of farms within 1% and 3%), PAS's gap by load band, and a figure (ECDF of the gaps per
policy; PAS's gap against the load).
"""

from __future__ import annotations

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
    print_progress,
    resolve_workers,
    save_figure,
    write_outputs,
)
from serverfarm_gym.baselines.priority import PriorityPolicy  # noqa: E402
from serverfarm_gym.baselines.registry import make_policy  # noqa: E402
from serverfarm_gym.baselines.solvers.ctmc import evaluate_policy, n_full_states  # noqa: E402
from serverfarm_gym.baselines.solvers.efficiency_optimum import estimate_size, solve_pi  # noqa: E402
from serverfarm_gym.envs.scenarios import random_farm  # noqa: E402
from serverfarm_gym.evaluation import evaluate  # noqa: E402
from serverfarm_gym.evaluation.stats import shortfall_pct  # noqa: E402

NAME = "pas_vs_optimum"
POLICIES = ("pas", "whittle", "jsq", "random", "meesf", "pas-spread")
#: diagnostic variants defined here (not in the registry): name -> table builder
VARIANTS = ("pas-spread",)
#: load bands of the PAS breakdown (rho is drawn from [0.3, 1.2])
LOAD_BANDS = ((0.3, 0.6), (0.6, 0.9), (0.9, 1.2))

FULL = {"n_farms": 200, "max_opt_states": 50_000, "ctmc_max_states": 2_000_000,
        "replications": 10, "horizon": 500_000}  # fmt: skip
QUICK = {"n_farms": 6, "max_opt_states": 3_000, "ctmc_max_states": 3_000,
         "replications": 3, "horizon": 20_000}  # fmt: skip


def build_parser():
    p = base_parser(NAME, "PAS vs the exact optimum on small random farms (experiment 1)")
    p.add_argument("--n-farms", type=int, default=None, help="farms (seeds 0..n-1); 200 (quick 6)")
    p.add_argument(
        "--max-opt-states",
        type=int,
        default=None,
        help="skip farms whose aggregated chain is larger (50000; quick 3000)",
    )
    p.add_argument(
        "--ctmc-max-states",
        type=int,
        default=None,
        help="exact CTMC up to this many per-server states, else simulate (2e6)",
    )
    p.add_argument("--replications", type=int, default=None, help="simulated farms: 10 (quick 3)")
    p.add_argument(
        "--horizon",
        type=int,
        default=None,
        help="simulated farms: decision epochs per replication (500000; quick 20000)",
    )
    p.add_argument("--policies", default=",".join(POLICIES), help="comma-separated")
    return p


# ---------------------------------------------------------------------------------------------
# one farm
# ---------------------------------------------------------------------------------------------
def pas_spread_table(config: Any) -> np.ndarray:
    """PAS's group order with the opposite tie-break inside a group: the server with the fewest
    jobs (join the shortest queue among equally efficient servers) instead of the smallest index
    (which packs one server up to its buffer while its identical neighbours idle).

    ``table[k, b] = e_k - b * delta`` with ``delta`` small enough never to reorder two groups of
    different effective efficiency ``e_k = mu_k / (eps_k - eps0_k)``.
    """
    eff = np.asarray(config.group_efficiency, dtype=np.float64)
    gaps = np.diff(np.unique(eff))
    delta = (gaps.min() if gaps.size else 1.0) / (2.0 * (config.max_buffer + 1))
    levels = np.arange(config.max_buffer + 1, dtype=np.float64)
    return eff[:, None] - delta * levels[None, :]


def build_policy(name: str, config: Any) -> Any:
    """A registry policy, or one of the diagnostic :data:`VARIANTS` (a priority-table policy)."""
    if name == "pas-spread":
        pol = PriorityPolicy(config, table=pas_spread_table(config))
        pol.name = name
        return pol
    return make_policy(name, config)


def _exact(config: Any, names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Exact stationary efficiency and blocking of each policy on the per-server chain."""
    out = {}
    lam = config.arrival_rates[0]
    for name in names:
        pol = build_policy(name, config)
        spec = "random" if pol.builtin == "random" else np.asarray(pol.priority_table())
        res = evaluate_policy(config, spec, max_states=10**9)
        out[name] = {
            "efficiency": res.efficiency,
            "ci95": 0.0,
            "blocking": float(res.blocking @ lam / lam.sum()),
        }
    return out


def _simulated(config: Any, names: Sequence[str], st: dict[str, Any]) -> dict[str, Any]:
    """Simulated efficiency (mean, 95% half-width) of each policy with the evaluation harness."""
    # at least 100 / 50 mean durations of the slowest group (the harness's window rule)
    horizon = durations_to_epochs(config, 100, st["horizon"])
    warmup = durations_to_epochs(config, 50, horizon // 10)
    specs = [build_policy(n, config) if n in VARIANTS else n for n in names]
    rep = evaluate(config, specs, replications=st["replications"], horizon=horizon,
                   warmup=warmup, seed=st["seed"], workers=1, compute_optimum=False,
                   progress=False)  # fmt: skip
    out: dict[str, Any] = {}
    for name in names:
        e = rep["policies"][name]
        out[name] = {
            "efficiency": e["efficiency"]["mean"],
            "ci95": e["efficiency"]["ci95"],
            "blocking": e["blocking"]["mean"],
        }
    out["_window"] = {"horizon": horizon, "warmup": warmup, "warnings": rep["warnings"]}
    return out


def farm_task(task: tuple[int, dict[str, Any]]) -> dict[str, Any]:
    """Everything about one random farm (run in a worker process)."""
    seed, st = task
    t0 = time.perf_counter()
    c = random_farm(seed)
    full = n_full_states(c)
    agg, _ = estimate_size(c)
    row: dict[str, Any] = {
        "seed": seed, "n_groups": c.n_groups, "n_job_types": c.n_job_types,
        "n_servers": c.n_servers, "load": c.load, "full_states": full, "agg_states": agg,
    }  # fmt: skip
    if agg > st["max_opt_states"]:
        row.update(skipped=f"aggregated chain has {agg} states > --max-opt-states")
        return row
    t1 = time.perf_counter()
    sol = solve_pi(c, max_states=st["max_opt_states"])
    row.update(optimum=float(sol.value), opt_seconds=time.perf_counter() - t1)
    t1 = time.perf_counter()
    names = st["policies"]
    if full <= st["ctmc_max_states"]:
        row["method"] = "ctmc"
        res = _exact(c, names)
    else:
        row["method"] = "simulation"
        res = _simulated(c, names, st)
        w = res.pop("_window")
        row.update(horizon=w["horizon"], warmup=w["warmup"], window_warnings=len(w["warnings"]))
    row["eval_seconds"] = time.perf_counter() - t1
    opt = row["optimum"]
    for name in names:
        r = res[name]
        row[f"{name}_efficiency"] = r["efficiency"]
        row[f"{name}_ci95"] = r["ci95"]
        row[f"{name}_blocking"] = r["blocking"]
        row[f"{name}_gap_pct"] = shortfall_pct(r["efficiency"], opt)
        row[f"{name}_gap_ci95"] = None if r["ci95"] is None else 100.0 * r["ci95"] / opt
    row["seconds"] = time.perf_counter() - t0
    return row


# ---------------------------------------------------------------------------------------------
# summaries
# ---------------------------------------------------------------------------------------------
def gap_summary(gaps: Sequence[float]) -> dict[str, Any]:
    """Distribution of gaps (percent): n, mean, median, p90, max, share within 1% / 3%."""
    g = np.asarray(gaps, dtype=np.float64)
    if g.size == 0:
        return {"n": 0}
    return {
        "n": int(g.size),
        "mean": float(g.mean()),
        "median": float(np.median(g)),
        "p90": float(np.percentile(g, 90)),
        "max": float(g.max()),
        "min": float(g.min()),
        "share_within_1pct": float(np.mean(g <= 1.0)),
        "share_within_3pct": float(np.mean(g <= 3.0)),
    }


def summarize_rows(rows: Sequence[dict[str, Any]], names: Sequence[str]) -> dict[str, Any]:
    solved = [r for r in rows if "optimum" in r]
    out: dict[str, Any] = {"per_policy": {}, "pas_by_load": {}}
    for name in names:
        s = gap_summary([r[f"{name}_gap_pct"] for r in solved])
        if solved:
            worst = max(solved, key=lambda r: r[f"{name}_gap_pct"])
            s["worst_seed"] = worst["seed"]
            # a simulated gap below 0 is noise around an optimal policy; exact ones must be >= 0
            s["exact_negative"] = sum(
                1 for r in solved if r["method"] == "ctmc" and r[f"{name}_gap_pct"] < -1e-7
            )
        out["per_policy"][name] = s
    if "pas" in names:
        for lo, hi in LOAD_BANDS:
            band = [r["pas_gap_pct"] for r in solved if lo <= r["load"] < hi + 1e-12]
            out["pas_by_load"][f"{lo:.1f}-{hi:.1f}"] = gap_summary(band)
        sim = [r["pas_gap_ci95"] for r in solved if r["method"] == "simulation"]
        out["pas_max_gap_ci95_simulated"] = max(sim) if sim else None
    out["counts"] = {
        "farms": len(rows),
        "solved": len(solved),
        "skipped_optimum": len(rows) - len(solved),
        "exact_ctmc": sum(1 for r in solved if r["method"] == "ctmc"),
        "simulated": sum(1 for r in solved if r["method"] == "simulation"),
    }
    return out


def plot(rows: Sequence[dict[str, Any]], names: Sequence[str], path: str | Path) -> None:
    from matplotlib.figure import Figure

    solved = [r for r in rows if "optimum" in r]
    fig = Figure(figsize=(10, 3.8))
    ax1, ax2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    styles = ["-", "--", "-.", ":", (0, (5, 1))]
    for i, name in enumerate(names):
        # gaps below 0 are simulation noise around 0; PAS and Whittle coincide on on/off farms
        g = np.sort([max(r[f"{name}_gap_pct"], 0.0) for r in solved])
        if g.size:
            x = np.concatenate([[0.0], g])
            y = np.concatenate([[0.0], np.arange(1, g.size + 1) / g.size])
            ax1.step(x, y, where="post", label=name, ls=styles[i % len(styles)], lw=1.5)
    ax1.set_xscale("symlog", linthresh=0.01)
    ax1.set_xlabel("gap to the exact optimum (%)")
    ax1.set_ylabel("fraction of farms")
    ax1.set_title(f"{len(solved)} random farms")
    ax1.legend(fontsize=8)
    ax1.grid(alpha=0.3)
    if "pas" in names and solved:
        for method, marker in (("ctmc", "o"), ("simulation", "s")):
            pts = [r for r in solved if r["method"] == method]
            if not pts:
                continue
            ax2.errorbar(
                [r["load"] for r in pts],
                [r["pas_gap_pct"] for r in pts],
                yerr=[r["pas_gap_ci95"] or 0.0 for r in pts],
                fmt=marker, ms=3, alpha=0.7, capsize=2,
                label="exact CTMC" if method == "ctmc" else "simulated (95% CI)",
            )  # fmt: skip
        if "pas-spread" in names:
            ax2.plot([r["load"] for r in solved], [r["pas-spread_gap_pct"] for r in solved], ".",
                     color="0.55", ms=3, label="pas-spread (diagnostic)")  # fmt: skip
        ax2.set_xlabel("normalised load rho")
        ax2.set_ylabel("PAS gap to the optimum (%)")
        ax2.set_title("PAS")
        ax2.legend(fontsize=8)
        ax2.grid(alpha=0.3)
    save_figure(fig, path)


# ---------------------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    a = build_parser().parse_args(argv)
    t0 = time.perf_counter()
    d = QUICK if a.quick else FULL
    names = [s.strip() for s in a.policies.split(",") if s.strip()]
    st = {
        "n_farms": a.n_farms or d["n_farms"],
        "max_opt_states": a.max_opt_states or d["max_opt_states"],
        "ctmc_max_states": a.ctmc_max_states or d["ctmc_max_states"],
        "replications": a.replications or d["replications"],
        "horizon": a.horizon or d["horizon"],
        "seed": a.seed,
        "policies": names,
        "quick": bool(a.quick),
        "workers": resolve_workers(a.workers, a.quick),
        "optimum_solver": "serverfarm_gym.baselines.solvers.efficiency_optimum.solve_pi (aggregated chain)",
        "farm_generator": "serverfarm_gym.envs.scenarios.random_farm(seed) with its default ranges",
    }
    if st["replications"] < 2:
        raise SystemExit("--replications: need at least 2 for a confidence interval")
    seeds = list(range(st["n_farms"]))
    # biggest first, so that the long solves do not end up alone at the tail of the pool
    order = sorted(seeds, key=lambda s: -estimate_size(random_farm(s))[0])

    def progress(done: int, total: int, row: dict[str, Any]) -> None:
        if not a.quick:
            gap = row.get("pas_gap_pct")
            print_progress(done, total, f"seed {row['seed']}: {row.get('method', 'skipped')} "
                           f"PAS gap {gap if gap is None else round(gap, 4)} "
                           f"({row.get('seconds', 0):.1f} s)")  # fmt: skip

    rows = parallel_map(farm_task, [(s, st) for s in order], st["workers"], progress)
    rows.sort(key=lambda r: r["seed"])
    summary = summarize_rows(rows, names)
    report = {
        "experiment": NAME,
        "question": "How far is PAS (and Whittle, JSQ, random, MEESF) from the exact optimum "
        "on small random farms?",
        "seeds": seeds,
        "summary": summary,
        "farms": rows,
        **metadata(argv, st, t0),
    }
    write_outputs(a.out, NAME, report, rows, lambda p: plot(rows, names, p), a.figure_dir)
    print(format_summary(summary, names))
    return report


def format_summary(summary: dict[str, Any], names: Sequence[str]) -> str:
    lines = [f"counts: {summary['counts']}",
             "policy        n   mean%  median%   p90%    max%  <=1%   <=3%"]  # fmt: skip
    for n in names:
        s = summary["per_policy"][n]
        if s.get("n"):
            lines.append(
                f"{n:11s} {s['n']:4d} {s['mean']:7.3f} {s['median']:7.3f} {s['p90']:7.3f} "
                f"{s['max']:7.3f} {s['share_within_1pct']:5.2f} {s['share_within_3pct']:5.2f}"
            )
    for band, s in summary.get("pas_by_load", {}).items():
        if s.get("n"):
            lines.append(f"PAS load {band}: n={s['n']} mean {s['mean']:.3f}% max {s['max']:.3f}%")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
