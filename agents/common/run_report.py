"""What a training run reports (``train.py``): the summary printed at its end and the learning
curves of its ``evaluations.jsonl``."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from serverfarm_gym.agents.common.checkpoints import read_evaluations
from serverfarm_gym.evaluation.outputs import save_figure
from serverfarm_gym.evaluation.paired import EXACT_RTOL, PairedComparison

__all__ = [
    "MIN_SHARE",
    "check_against_start",
    "check_learning",
    "check_slo",
    "describe_change",
    "describe_learning",
    "describe_slo",
    "format_report",
    "learning_progress",
    "plot_learning_curves",
    "provenance",
    "start_label",
]


#: on a farm with an exact optimum, ``--check`` fails a run whose kept or final model has less
#: than this share of it (a learning test: from a random network the default trainer gets there)
MIN_SHARE = 0.99
#: the shares of the optimum whose first evaluation the report names
THRESHOLDS = (0.99, 0.999)


def learning_progress(s: dict[str, Any], history: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The summary's ``learning`` block where the optimum is known (None otherwise): the share
    of the optimum at the first three evaluations and at the last, of the kept and the final
    model, the first evaluated step at each of ``THRESHOLDS`` (None: not reached) and
    ``min_share`` (``MIN_SHARE``, what ``--check`` asks of the kept and the final model)."""
    opt = s.get("references", {}).get("optimum")
    if opt is None or not history or s.get("slo") is not None:
        return None

    def share(e: float) -> float:
        return float(e) / float(opt)

    points = [(int(h["timesteps"]), share(h["efficiency"])) for h in history]
    return {
        "optimum": float(opt),
        "first": points[:3],
        "last": points[-1],
        "kept_share": share(s["best"]["efficiency"]),
        "final_share": share(s["final"]["efficiency"]),
        "steps_to": {
            f"{t:g}": next((steps for steps, sh in points if sh >= t - 1e-12), None)
            for t in THRESHOLDS
        },
        "evaluated_to": points[-1][0],
        "min_share": MIN_SHARE,
    }


def describe_learning(block: dict[str, Any]) -> list[str]:
    """The report's lines of the ``learning`` block: the shares of the optimum at the first
    evaluations and at the end, and the steps to each threshold."""
    first = ", ".join(f"{100 * sh:.2f}% ({steps:,})" for steps, sh in block["first"])
    steps_to = "; ".join(
        f"to {100 * float(t):g}%: "
        + (f"{v:,} steps" if v is not None else f"not reached in {block['evaluated_to']:,} steps")
        for t, v in block["steps_to"].items()
    )
    return [
        f"  learning: share of the optimum at the first evaluations (steps) {first}; at the "
        f"end {100 * block['last'][1]:.2f}% ({block['last'][0]:,})",
        f"  steps to the optimum's share (first evaluation there) {steps_to}",
        f"  kept model {100 * block['kept_share']:.3f}% of the optimum, final model "
        f"{100 * block['final_share']:.3f}%",
    ]


def check_learning(s: dict[str, Any]) -> list[str]:
    """What is wrong with a run's learning (empty: nothing): on a farm with an exact optimum,
    the kept or the final model below ``min_share`` of it."""
    block = s.get("learning")
    if not block:
        return []
    out = []
    for what in ("kept", "final"):
        sh = float(block[f"{what}_share"])
        if sh < float(block["min_share"]):
            out.append(
                f"the {what} model has {100 * sh:.3f}% of the exact optimum, below "
                f"{100 * float(block['min_share']):g}%"
            )
    return out


def _fmt(est: dict[str, Any]) -> str:
    s = f"{est['efficiency']:.6f}"
    return s + (" (exact)" if est["method"] == "exact" else f" +- {est['ci95']:.6f} (95% CI)")


def start_label(teacher: str | None) -> str:
    """``best-priority clone``, ``random init``, or ``unknown start`` (a summary without it)."""
    if teacher is None:
        return "unknown start"
    return "random init" if teacher == "random" else f"{teacher} clone"


def provenance(s: dict[str, Any]) -> dict[str, Any]:
    """The summary's ``start``, ``kept`` (``"start"`` or ``"ppo"``) and ``ppo_change``; for a
    summary without them (the sb3 trainer: always a random start) they are inferred from the
    kept model's step count."""
    best_steps = int(s["best"].get("timesteps", 0))
    teacher = s.get("started_from", "random" if s.get("trainer") == "sb3" else None)
    kept = s.get("kept", "start" if best_steps == 0 else "ppo")
    start = s.get("start") or {"teacher": teacher, "timesteps": 0}
    if kept == "start" and "efficiency" not in start:
        start = start | {k: s["best"][k] for k in ("efficiency", "ci95", "method")}
    change = s.get("ppo_change", None if kept == "start" else {"method": "not measured"})
    return {"start": start, "kept": kept, "ppo_change": change}


def describe_change(change: dict[str, Any]) -> str:
    """``+0.001593 (+0.487%, exact): better than the start``, or with the paired interval."""
    if change.get("method") not in ("exact", "paired"):
        return "not measured (no start model kept with the run)"
    fields = {f.name for f in dataclasses.fields(PairedComparison)}
    cmp = PairedComparison(**{k: v for k, v in change.items() if k in fields})
    diff = f"{cmp.diff:+.6f}" + ("" if cmp.method == "exact" else f" +- {cmp.ci95:.6f}")
    return f"{diff}, i.e. {cmp.describe('the start')}"


def describe_slo(block: dict[str, Any]) -> list[str]:
    """The report's lines of a run trained to an SLO (the summary's ``slo`` block): the start,
    the kept model (efficiency, E[T], whether it meets the SLO), the exact SLO-constrained
    optimum and the kept model's gap to it, and beta's final value."""

    def one(e: dict[str, Any] | None) -> str:
        if e is None:
            return "not measured"
        ci = f" +- {e['ci95']:.6f}" if e["ci95"] else ""
        tci = f" +- {e['mean_response_time_ci95']:.4f}" if e["mean_response_time_ci95"] else ""
        met = "meets" if e["slo_met"] else "MISSES"
        return (f"efficiency {e['efficiency']:.6f}{ci} at E[T] {e['mean_response_time']:.4f}"
                f"{tci} ({e['method']}; {met} the SLO)")  # fmt: skip

    D = block["mean_response_time_bound"]
    lines = [f"  SLO E[T] <= {D:g}: the sampling policies (the network's, not its argmax)",
             f"    {'start':<28} {one(block['start'])}"]  # fmt: skip
    if block["kept_is_start"]:
        lines.append("    kept: the start; PPO found no improvement that meets the SLO")
    else:
        kept = block["kept"]
        lines.append(f"    {'kept (' + format(kept['timesteps'], ',') + ' steps)':<28} {one(kept)}")
    opt = block.get("optimum")
    if opt is not None:
        lines.append(f"    {'SLO-constrained optimum':<28} efficiency {opt['efficiency']:.6f} at "
                     f"E[T] {opt['mean_response_time']:.4f} (exact)")  # fmt: skip
        gap = block.get("gap_to_optimum_pct")
        gap_s = "n/a (no kept model)" if gap is None else f"{round(gap, 3) + 0.0:.3f}%"
        lines.append(f"    gap of the kept model to the SLO-constrained optimum: {gap_s}")
    else:
        lines.append("    SLO-constrained optimum: not computed (a simulated farm)")
    mult = block.get("multiplier")
    if mult is not None and mult["final"] is not None:
        lines.append(f"    multiplier beta: final {mult['final']:.4g} after "
                     f"{len(mult['rollouts'])} rollouts (dual ascent step {mult['step_size']:.4g})")  # fmt: skip
    return lines


def _gap_line(s: dict[str, Any], who: str, slo: bool) -> str:
    """The gaps of the kept model's deterministic policy to PAS, the optimum and the bound;
    for an SLO run named as what they are against (references that ignore the SLO)."""
    best = s["best"]
    pas, opt = ("PAS (no SLO)", "the optimum without the SLO") if slo else ("PAS", "optimum")
    parts = [f"{who} vs {pas}: {best['gap_to_pas_pct']:+.3f}%"]
    if best["gap_to_optimum_pct"] is not None:
        # a model at the optimum can measure 1e-12 above it: print 0.000, not -0.000
        parts.append(f"gap to {opt}: {round(best['gap_to_optimum_pct'], 3) + 0.0:.3f}%")
    if best["pas_gap_closed"] is not None and not slo:
        parts.append(f"share of PAS's gap closed: {100 * best['pas_gap_closed']:.0f}%")
    if best["gap_to_bound_pct"] is not None:
        parts.append(f"gap to bound: {best['gap_to_bound_pct']:.3f}%")
    return "  " + "   ".join(parts)


def format_report(s: dict[str, Any]) -> str:
    """The human summary printed at the end of a run. The start (the clone of a teacher, or a
    random init) and what PPO's updates changed are separate lines: a kept step-0 model is
    the start, never a PPO result (tests/agents/common/test_run_report.py pins the lines).
    A run trained to an SLO (``summary["slo"]``) leads with its SLO block; the lines after it
    measure the deterministic policies against references that ignore the SLO, and say so."""
    refs, best = s["references"], s["best"]
    prov = provenance(s)
    start, label = prov["start"], start_label(prov["start"]["teacher"])
    ppo_kept = prov["kept"] == "ppo"
    slo = s.get("slo")
    lines = [
        "",
        f"scenario {s['scenario']} ({s['action_mode']} actions"
        + ("" if s.get("objective", "energy") == "energy" else f", objective {s['objective']}")
        + f"), seed {s['seed']}: "
        f"{s['timesteps']:,} timesteps, training {s['learn_wall_s']:.0f} s, "
        f"total {s['total_wall_s']:.0f} s wall ({s['total_cpu_s']:.0f} s CPU)",
    ]
    if slo is not None:
        lines += describe_slo(slo)
        lines.append("  the argmax policies, against references without the SLO:")
    lines.append(
        f"  {'start (' + label + ')':<30} "
        + (f"efficiency {_fmt(start)}" if "efficiency" in start else "not measured")
    )
    if ppo_kept:
        kept_label = f"PPO (best model, {best['timesteps']:,} steps)"
        lines += [
            f"  {kept_label:<30} efficiency {_fmt(best)}",
            f"  PPO's change from the start: {describe_change(prov['ppo_change'])}",
        ]
    else:
        lines.append(f"  kept: the start ({label}); PPO found no improvement")
        conf = s.get("confirmation")
        if conf:  # the model PPO's selection kept, measured against the start on other seeds
            cmp = describe_change(conf["kept_vs_start"])
            lines.append(f"  confirmation: the model of {conf['kept_timesteps']:,} steps: {cmp}")
    opt_label = "optimum" if slo is None else "optimum (no SLO)"
    lines += [
        f"  {'PPO (final model)':<30} efficiency {_fmt(s['final'])}",
        f"  {'PAS':<30} efficiency {_fmt(refs['pas'])}",
    ]
    if refs["optimum"] is not None:
        lines.append(f"  {opt_label:<30} efficiency {refs['optimum']:.6f} (exact)")
    else:
        lines.append(f"  {opt_label:<30} {refs['optimum_note']}")
    if refs["upper_bound"] is not None:
        lines.append(f"  {'upper bound (relaxation)':<30} efficiency {refs['upper_bound']:.6f}")
    lines.append(_gap_line(s, "PPO" if ppo_kept else "start", slo is not None))
    if s.get("learning"):
        lines += describe_learning(s["learning"])
    if s.get("verdict"):  # the PPO trainer's paired comparison (exact, or on fresh seeds)
        kept = "PPO (best model)" if ppo_kept else f"the start ({label})"
        vs = "PAS" if slo is None else "PAS (argmax, no SLO)"
        lines.append(f"  verdict: {kept} vs {vs} {s['verdict']}")
    p = s["paths"]
    lines += [
        f"  model: {best['path']} (final: {s['final']['path']})",
        f"  logs: {p['tensorboard'] or '(TensorBoard off)'}, {p['evaluations']}; "
        f"summary: {Path(p['run_dir']) / 'summary.json'}",
    ]
    return "\n".join(lines)


def check_against_start(s: dict[str, Any], final_too: bool = False) -> list[str]:
    """What is wrong with a run's result against its start (empty: nothing): the kept model
    below the start (exact: by more than the exact comparison's tolerance; simulated: the
    paired 95% interval below 0), and with ``final_too`` the final model below the start.
    A PPO run's summary only (it records its start). A run trained to an SLO is checked on
    its SLO block (:func:`check_slo`): its selection is on the sampling policies, so its
    deterministic policy may legitimately be below the start's."""
    if s.get("slo") is not None:
        return check_slo(s["slo"])
    prov = provenance(s)
    start = prov["start"]
    if "efficiency" not in start:
        return [f"the summary records no measured start (trainer {s.get('trainer')!r})"]
    problems = []
    change = prov["ppo_change"]
    if prov["kept"] == "ppo" and change is not None and change.get("verdict") == "worse":
        problems.append(f"the kept model is below its start: {describe_change(change)}")
    if final_too:
        fin, ref = s["final"], float(start["efficiency"])
        tol = EXACT_RTOL * abs(ref) if fin["method"] == "exact" else float(fin["ci95"])
        if float(fin["efficiency"]) < ref - tol:
            problems.append(
                f"the final model ({fin['efficiency']:.6f}) is below its start ({ref:.6f})"
            )
    return problems


def check_slo(block: dict[str, Any]) -> list[str]:
    """What is wrong with an SLO run's kept model (empty: nothing): it misses the SLO, or its
    sampling policy is less efficient than the start's that meets the SLO (exact: beyond the
    exact comparison's tolerance; simulated: by more than the two 95% half-widths)."""
    kept, start = block.get("kept"), block.get("start")
    if kept is None:
        return ["the SLO run kept no model that meets the SLO"]
    problems = []
    if not kept["slo_met"]:
        problems.append(
            f"the kept model misses the SLO: E[T] {kept['mean_response_time']:.4f} > "
            f"{block['mean_response_time_bound']:g}"
        )
    if start is not None and start["slo_met"]:
        ref = float(start["efficiency"])
        tol = (
            EXACT_RTOL * abs(ref)
            if kept["method"] == "exact"
            else float(kept["ci95"]) + float(start["ci95"])
        )
        if float(kept["efficiency"]) < ref - tol:
            problems.append(
                f"the kept model's sampling policy ({kept['efficiency']:.6f}) is below its "
                f"start's ({ref:.6f}), which meets the SLO"
            )
    return problems


def _ok_line(s: dict[str, Any]) -> str:
    prov = provenance(s)
    what = "PPO's model" if prov["kept"] == "ppo" else "the start"
    label = start_label(prov["start"]["teacher"])
    slo = s.get("slo")
    if slo is None:
        learned = s.get("learning")
        if learned:
            return (
                f"kept {what}; not below the start ({label}); kept and final models at "
                f"{100 * learned['kept_share']:.3f}% and {100 * learned['final_share']:.3f}% of "
                f"the exact optimum (>= {100 * learned['min_share']:g}%)"
            )
        return f"kept {what}; not below the start ({label})"
    k = slo["kept"]
    return (
        f"kept {what}; meets the SLO E[T] <= {slo['mean_response_time_bound']:g} "
        f"(E[T] {k['mean_response_time']:.4f}, {k['method']}) and its sampling policy is not "
        f"below the start's ({label})"
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m serverfarm_gym.agents.common.run_report --check runs/tiny-server-s0/summary.json``: exit 1 (and
    say why) when the run's result is below its start, or (a farm with an exact optimum) its
    kept or final model below ``MIN_SHARE`` of the optimum; 0 otherwise."""
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m serverfarm_gym.agents.common.run_report", description=main.__doc__
    )
    p.add_argument("--check", metavar="SUMMARY", required=True, help="a run's summary.json")
    p.add_argument("--final-too", action="store_true", help="also the final model")
    ns = p.parse_args(argv)
    path = Path(ns.check)
    if not path.is_file():
        p.error(f"--check: no file {path}; give a run's summary.json")
    s = json.loads(path.read_text())
    if ns.final_too and s.get("slo") is not None:
        # the final model's sampling policy is not measured against the SLO
        p.error("--final-too: an SLO run's summary measures only its kept model against the "
                "SLO; drop --final-too")  # fmt: skip
    problems = check_against_start(s, ns.final_too) + check_learning(s)
    for msg in problems:
        print(f"{path}: {msg}", file=sys.stderr)
    if not problems:
        print(f"{path}: {_ok_line(s)}")
    return 1 if problems else 0


def plot_learning_curves(
    run_dirs: list[str | Path],
    path: str | Path,
    title: str = "",
    labels: list[str] | None = None,
) -> None:
    """Efficiency against timesteps of one or more runs of the same scenario (their
    ``evaluations.jsonl``), with PAS and the optimum (or the upper bound) as horizontal lines.

    ``python -c "from serverfarm_gym.agents.common.run_report import plot_learning_curves; plot_learning_curves([...], 'curve.png')"``
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


if __name__ == "__main__":
    raise SystemExit(main())
