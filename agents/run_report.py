"""What a training run reports (``train.py``): the summary printed at its end and the learning
curves of its ``evaluations.jsonl``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from agents.callbacks import read_evaluations
from evaluation.report import save_figure

__all__ = ["format_report", "plot_learning_curves"]


def _fmt(est: dict[str, Any]) -> str:
    s = f"{est['efficiency']:.6f}"
    return s + (" (exact)" if est["method"] == "exact" else f" +- {est['ci95']:.6f} (95% CI)")


def format_report(s: dict[str, Any]) -> str:
    """The human summary printed at the end of a run."""
    refs, best = s["references"], s["best"]
    lines = [
        "",
        f"scenario {s['scenario']} ({s['action_mode']} actions"
        + ("" if s.get("objective", "energy") == "energy" else f", objective {s['objective']}")
        + f"), seed {s['seed']}: "
        f"{s['timesteps']:,} timesteps, training {s['learn_wall_s']:.0f} s, "
        f"total {s['total_wall_s']:.0f} s wall ({s['total_cpu_s']:.0f} s CPU)",
        f"  PPO (best model, {best['timesteps']:,} steps)  efficiency {_fmt(best)}",
        f"  PPO (final model)              efficiency {_fmt(s['final'])}",
        f"  PAS                            efficiency {_fmt(refs['pas'])}",
    ]
    if refs["optimum"] is not None:
        lines.append(f"  optimum                        efficiency {refs['optimum']:.6f} (exact)")
    else:
        lines.append(f"  optimum                        {refs['optimum_note']}")
    if refs["upper_bound"] is not None:
        lines.append(f"  upper bound (relaxation)       efficiency {refs['upper_bound']:.6f}")
    parts = [f"PPO vs PAS: {best['gap_to_pas_pct']:+.3f}%"]
    if best["gap_to_optimum_pct"] is not None:
        # a model at the optimum can measure 1e-12 above it: print 0.000, not -0.000
        parts.append(f"gap to optimum: {round(best['gap_to_optimum_pct'], 3) + 0.0:.3f}%")
    if best["pas_gap_closed"] is not None:
        parts.append(f"share of PAS's gap closed: {100 * best['pas_gap_closed']:.0f}%")
    if best["gap_to_bound_pct"] is not None:
        parts.append(f"gap to bound: {best['gap_to_bound_pct']:.3f}%")
    lines.append("  " + "   ".join(parts))
    if s.get("verdict"):  # the lean trainer's paired comparison (exact, or on fresh seeds)
        lines.append(f"  verdict: PPO (best model) vs PAS {s['verdict']}")
    p = s["paths"]
    lines += [
        f"  model: {best['path']} (final: {s['final']['path']})",
        f"  logs: {p['tensorboard'] or '(TensorBoard off)'}, {p['evaluations']}; "
        f"summary: {Path(p['run_dir']) / 'summary.json'}",
    ]
    return "\n".join(lines)


def plot_learning_curves(
    run_dirs: list[str | Path],
    path: str | Path,
    title: str = "",
    labels: list[str] | None = None,
) -> None:
    """Efficiency against timesteps of one or more runs of the same scenario (their
    ``evaluations.jsonl``), with PAS and the optimum (or the upper bound) as horizontal lines.

    ``python -c "from agents.run_report import plot_learning_curves; plot_learning_curves([...], 'curve.png')"``
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.0, 3.8))
    ax = fig.add_subplot()
    refs: dict[str, Any] = {}
    ys: list[float] = []
    for i, run_dir in enumerate(run_dirs):
        d = Path(run_dir)
        hist = read_evaluations(d / "evaluations.jsonl")
        refs = json.loads((d / "references.json").read_text())
        args = json.loads((d / "args.json").read_text())
        t = np.array([h["timesteps"] for h in hist])
        e = np.array([h["efficiency"] for h in hist])
        ci = np.array([h["ci95"] if math.isfinite(h["ci95"]) else 0.0 for h in hist])
        label = labels[i] if labels else f"PPO seed {args['seed']}"
        line = ax.plot(t, e, marker=".", lw=1.2, label=label)[0]
        if ci.any():
            ax.fill_between(t, e - ci, e + ci, color=line.get_color(), alpha=0.2, lw=0)
        ys.extend(e[len(e) // 3 :])  # zoom on the learnt part, not the random start
        title = title or f"{args['scenario']} ({args['action_mode']} actions)"
    pas = refs["pas"]["efficiency"]
    ax.axhline(pas, color="k", ls="--", lw=1, label=f"PAS {pas:.4f}")
    ys.append(pas)
    for key, style, color, label in (
        ("optimum", "-", "#c44e52", "optimum"),
        ("upper_bound", ":", "#55a868", "upper bound"),
    ):
        if refs.get(key) is not None:
            ax.axhline(refs[key], color=color, ls=style, lw=1, label=f"{label} {refs[key]:.4f}")
            ys.append(refs[key])
    lo, hi = min(ys), max(ys)
    pad = 0.25 * (hi - lo) + 1e-4 * hi
    ax.set_ylim(lo - pad, hi + pad)
    from matplotlib.ticker import FuncFormatter

    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x / 1000:g}k"))
    ax.set_xlabel("timesteps (decisions)")
    ax.set_ylabel("efficiency (deterministic policy)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, path)
