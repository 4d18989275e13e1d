"""Reporting for ``experiments/studies/geo_day.py``: summary statistics over replications, the PDR plans'
own LP numbers, the Markdown table and the figures (the day's series and one interval's Pareto
frontier). Definitions of the metrics are in ``experiments/studies/geo_day.py``'s module doc.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from serverfarm_gym.envs.geo import GeoConfig
from serverfarm_gym.envs.scenarios import load_geo_scenario
from serverfarm_gym.evaluation.stats import summarize

#: scalar metrics per replication, in the JSON's order
METRICS = (
    "energy_cost", "energy", "network_cost", "total_cost", "throughput", "blocking",
    "network_latency", "latency", "over_dmax", "latency_model", "over_dmax_model", "saturated",
    "sojourn", "jobs_per_money", "jobs_per_energy_money",
)  # fmt: skip
#: per-interval series (means over replications in the JSON, plotted)
PER_INTERVAL = (
    "energy_cost", "network_cost", "throughput", "blocking", "network_latency", "latency",
    "latency_model",
)  # fmt: skip


def _finite_or_none(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _json_num(v: Any) -> Any:
    if isinstance(v, float):
        return _finite_or_none(v)
    return v


def summarise(results: Sequence[dict[str, Any]], policies: Sequence[str]) -> dict[str, Any]:
    """Per policy: mean / 95 % half-width of every metric, per-interval means, cluster shares."""
    out: dict[str, Any] = {}
    for name in policies:
        runs = sorted((r for r in results if r["policy"] == name), key=lambda r: r["replication"])
        entry: dict[str, Any] = {"mode": runs[0]["mode"]}
        for key in METRICS:
            vals = np.array([r["metrics"][key] for r in runs], dtype=float)
            if np.all(np.isfinite(vals)):
                entry[key] = summarize(vals)
            else:  # an infinite model latency in some replication: no interval to report
                entry[key] = {"mean": None, "ci95": None, "std": None, "n": len(vals)}
        entry["invalid_actions"] = int(sum(r["metrics"]["invalid_actions"] for r in runs))
        entry["per_interval"] = {
            k: [
                _finite_or_none(float(np.mean([r["series"][k][t] for r in runs])))
                for t in range(len(runs[0]["series"][k]))
            ]
            for k in PER_INTERVAL
        }
        entry["cluster_share"] = np.mean([r["cluster_share"] for r in runs], axis=0).tolist()
        entry["replications"] = [
            {**{k: _json_num(v) for k, v in r["metrics"].items()}, "wall_s": r["wall_s"]}
            for r in runs
        ]
        out[name] = entry
    return out


def pdr_plan(geo: GeoConfig, solutions: Sequence[Any]) -> dict[str, Any]:
    """The optimiser's own numbers for each interval (LP model: planned, not simulated)."""
    demand = [float(geo.rates[s.interval].sum()) for s in solutions]
    return {
        "weights": list(solutions[0].weights),
        "eps_constraints": dict(solutions[0].eps_constraints),
        "latency": [s.latency for s in solutions],
        "energy_cost": [s.energy_cost for s in solutions],
        "network_cost": [s.network_cost for s in solutions],
        "energy_cost_day": float(sum(s.energy_cost for s in solutions)),
        "network_cost_day": float(sum(s.network_cost for s in solutions)),
        "latency_day": float(
            sum(s.latency * d for s, d in zip(solutions, demand, strict=True)) / sum(demand)
        ),
    }


def _fmt(e: Mapping[str, Any], digits: int = 4, scale: float = 1.0) -> str:
    if e["mean"] is None:
        return "inf"
    mean = e["mean"] * scale
    ci = e["ci95"]
    if ci is None or ci == 0:
        return f"{mean:.{digits}g}"
    return f"{mean:.{digits}g} ± {ci * scale:.2g}"


#: (header, metric, significant digits, scale) of the Markdown table
TABLE_COLUMNS = (
    ("energy cost", "energy_cost", 5, 1.0),
    ("network cost", "network_cost", 4, 1.0),
    ("jobs / total money", "jobs_per_money", 4, 1.0),
    ("throughput", "throughput", 5, 1.0),
    ("blocking %", "blocking", 3, 100.0),
    ("network lat. ms", "network_latency", 4, 1.0),
    ("latency ms (sim.)", "latency", 4, 1.0),
    ("h > D_max (sim.)", "over_dmax", 3, 1.0),
    ("latency ms (model)", "latency_model", 4, 1.0),
    ("h > D_max (model)", "over_dmax_model", 3, 1.0),
    ("sojourn", "sojourn", 4, 1.0),
)


def markdown_table(report: Mapping[str, Any]) -> str:
    head = "| policy | " + " | ".join(c[0] for c in TABLE_COLUMNS) + " |"
    lines = [head, "|---|" + "---:|" * len(TABLE_COLUMNS)]
    for name, e in report["policies"].items():
        cells = [_fmt(e[key], d, s) for _, key, d, s in TABLE_COLUMNS]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    s = report["settings"]
    lines.append("")
    lines.append(
        f"{s['scenario']}, one day = {s['n_intervals']} intervals x {s['interval_length']:g} "
        f"time units, {s['replications']} replications (mean ± 95 % CI half-width), "
        f"seed {s['seed']}. Costs per day; jobs / total money = work / (energy cost + network "
        "cost); throughput in jobs per time unit; latency (sim.) = network delta_ij + simulated "
        "sojourn (Little's law per cluster and interval) converted to ms with the scenario's "
        "base_ms per fastest-server service time; latency (model) = network + the planning "
        "model's delay at the realised cluster loads (inf when a realised load reached the raw "
        "service rate); h > D_max = intervals whose mean latency exceeds D_max; sojourn = "
        "simulated mean time in the farm (time units)."
    )
    for name, plan in report.get("pdr_plans", {}).items():
        lines.append(
            f"{name} plan (LP model, not simulated): energy cost {plan['energy_cost_day']:.5g}, "
            f"network cost {plan['network_cost_day']:.4g}, demand-weighted L_ave "
            f"{plan['latency_day']:.4g} ms."
        )
    return "\n".join(lines) + "\n"


def plot_day(report: Mapping[str, Any], path: Path) -> None:
    """Energy cost and simulated mean latency per interval, one line per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for name, e in report["policies"].items():
        pi = e["per_interval"]
        hours = np.arange(len(pi["energy_cost"]))
        axes[0].plot(hours, pi["energy_cost"], marker=".", label=name)
        lat = np.array([np.nan if v is None else v for v in pi["latency"]], dtype=float)
        axes[1].plot(hours, lat, marker=".", label=name)
    d_max = report["settings"].get("d_max_ms")
    if d_max is not None:
        axes[1].axhline(d_max, ls="--", color="tab:red", lw=1, label=f"D_max = {d_max:g} ms")
    axes[0].set_xlabel("interval (UTC hour)")
    axes[0].set_ylabel("energy cost per interval")
    axes[1].set_xlabel("interval (UTC hour)")
    axes[1].set_ylabel("mean latency (ms, simulated)")
    axes[0].legend(fontsize=8)
    axes[1].legend(fontsize=8)
    fig.suptitle(f"{report['settings']['scenario']}: one day, mean of replications", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_frontier_figure(
    path: Path, interval: int, scenario: str, marks: Sequence[tuple[str, Any]] = ()
) -> Path:
    """Pareto frontier of one interval; ``marks`` = (label, PDRSolution) pairs to highlight (the
    routings the PDR+PAS policies use)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from serverfarm_gym.baselines.solvers.pdr import pareto_frontier

    geo = load_geo_scenario(scenario)
    pts = pareto_frontier(geo, interval, n_points=15)
    lat = np.array([p.latency for p in pts])
    en = np.array([p.energy_cost for p in pts])
    net = np.array([p.network_cost for p in pts])
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    sc = ax.scatter(lat, en, c=net, cmap="viridis", s=22, edgecolors="k", linewidths=0.3, zorder=2)
    fig.colorbar(sc, ax=ax, label="network cost per interval")
    for (label, sol), marker, colour in zip(
        marks, "*P^", ("tab:orange", "tab:red", "w"), strict=False
    ):
        ax.scatter(
            [sol.latency], [sol.energy_cost], marker=marker, s=160 if marker == "*" else 90,
            color=colour, edgecolors="k", zorder=3, label=label,
        )  # fmt: skip
    ax.axvline(geo.d_min, ls="--", color="tab:green", lw=1, label=f"D_min = {geo.d_min:g} ms")
    if geo.d_max is not None:
        ax.axvline(geo.d_max, ls="--", color="tab:red", lw=1, label=f"D_max = {geo.d_max:g} ms")
    ax.set_xlabel("average latency L_ave (ms, exact delay curve)")
    ax.set_ylabel("energy cost per interval")
    ax.set_title(f"PDR Pareto frontier, {geo.name}, interval {interval} (UTC hour)", fontsize=10)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
