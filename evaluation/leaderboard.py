"""The leaderboard of a benchmark suite: Markdown table, CSV, PNG plot and JSON, all written
atomically, with every output path checked before the (long) run. See :mod:`evaluation.suite`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evaluation.report import atomic_open, atomic_write, check_output_paths, to_json
from evaluation.suite import run_suite

__all__ = [
    "SCORE_METHOD",
    "format_markdown",
    "leaderboard_csv",
    "leaderboard_paths",
    "plot_leaderboard",
    "run_suite_and_write",
    "suite_cli",
    "write_leaderboard",
]

SCORE_METHOD = (
    "score = 100 (eff - eff_random) / (reference - eff_random); 95% intervals: delta method on "
    "replications paired by seed (common random numbers), Student-t; mean score: unweighted mean "
    "over scenarios, independent per-scenario errors combined in quadrature (normal)"
)


def _pm(s: Mapping[str, Any] | None, spec: str) -> str:
    if s is None or s.get("mean") is None:
        return "n/a"
    half = s.get("ci95")
    return format(s["mean"], spec) + ("" if half is None else " ± " + format(half, spec))


def _policies(board: Mapping[str, Any]) -> list[str]:
    return list(board["mean_score"])


def _response_time_rows(board: Mapping[str, Any], pols: list[str]) -> list[str]:
    """The mean-response-time table (Little's law, simulated; ``*`` = the farm's SLO missed)."""
    rows = ["| scenario | SLO | " + " | ".join(pols) + " |", "|---|---:|" + "---:|" * len(pols)]

    def cell(e: Mapping[str, Any]) -> str:
        rt = e.get("mean_response_time")
        return _pm(rt, ".4f") + (" *" if e.get("slo_met") is False else "")

    for name, sc in board["scenarios"].items():
        slo = sc.get("slo")
        rows.append(
            f"| {name} | {'-' if slo is None else format(slo, '.4g')} | "
            + " | ".join(cell(sc["policies"][p]) for p in pols)
            + " |"
        )
    return rows


def format_markdown(board: Mapping[str, Any], details: Mapping[str, Any] | None = None) -> str:
    """Three Markdown tables (scores, efficiencies, mean response times) and the notes (n/a
    reasons, method)."""
    pols = _policies(board)
    head = f"Suite `{board['suite']}` version {board['suite_version']}"
    score_rows = ["| scenario | servers | reference | " + " | ".join(pols) + " |"]
    score_rows.append("|---|---:|---|" + "---:|" * len(pols))
    eff_rows = ["| scenario | reference | " + " | ".join(pols) + " |"]
    eff_rows.append("|---|---:|" + "---:|" * len(pols))
    for name, sc in board["scenarios"].items():
        ref = sc["reference"]
        score_rows.append(
            f"| {name} | {sc['n_servers']:,} | {ref['kind']} | "
            + " | ".join(_pm(sc["policies"][p]["score"], ".1f") for p in pols)
            + " |"
        )
        eff_rows.append(
            f"| {name} | {ref['efficiency']:.5f} ({ref['kind']}) | "
            + " | ".join(_pm(sc["policies"][p]["efficiency"], ".5f") for p in pols)
            + " |"
        )
    score_rows.append(
        "| **mean score** | | | "
        + " | ".join(f"**{_pm(board['mean_score'][p], '.1f')}**" for p in pols)
        + " |"
    )
    notes = [f"Scores ({SCORE_METHOD}); random = 0, reference = 100."]
    if details:
        for sc_name, na in details.get("not_applicable", {}).items():
            for pol, why in na.items():
                notes.append(f"n/a: {pol} on {sc_name}: {why}")
        partial = [p for p in pols if board["mean_score"][p]["mean"] is None]
        if partial:
            notes.append(
                "mean score n/a for " + ", ".join(partial) + ": not applicable to every scenario"
            )
        notes += [f"warning: {w}" for w in details.get("warnings", [])]
    return "\n".join(
        [
            f"{head}: normalised scores (mean ± 95% half-width)",
            "",
            *score_rows,
            "",
            f"{head}: efficiency (work per unit energy, mean ± 95% half-width)",
            "",
            *eff_rows,
            "",
            f"{head}: mean response time (Little's law, mean ± 95% half-width; * = SLO missed)",
            "",
            *_response_time_rows(board, pols),
            "",
            *(f"- {n}" for n in notes),
            "",
        ]
    )


def leaderboard_csv(board: Mapping[str, Any]) -> str:
    """One row per (scenario, policy), then one ``mean`` row per policy."""
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["suite", "suite_version", "scenario", "n_servers", "reference_kind",
                "reference_efficiency", "policy", "efficiency_mean", "efficiency_ci95",
                "score_mean", "score_ci95", "mean_response_time_mean",
                "mean_response_time_ci95", "slo", "slo_met"])  # fmt: skip

    def cell(v: Any) -> Any:
        return "" if v is None else v

    for name, sc in board["scenarios"].items():
        for pol, e in sc["policies"].items():
            eff, score = e["efficiency"] or {}, e["score"] or {}
            rt = e.get("mean_response_time") or {}
            w.writerow([board["suite"], board["suite_version"], name, sc["n_servers"],
                        sc["reference"]["kind"], sc["reference"]["efficiency"], pol,
                        cell(eff.get("mean")), cell(eff.get("ci95")),
                        cell(score.get("mean")), cell(score.get("ci95")),
                        cell(rt.get("mean")), cell(rt.get("ci95")), cell(sc.get("slo")),
                        cell(e.get("slo_met"))])  # fmt: skip
    for pol, s in board["mean_score"].items():
        w.writerow([board["suite"], board["suite_version"], "mean", "", "", "", pol, "", "",
                    cell(s["mean"]), cell(s["ci95"]), "", "", "", ""])  # fmt: skip
    return buf.getvalue()


def plot_leaderboard(board: Mapping[str, Any], path: str | Path) -> None:
    """Grouped horizontal bars: one group per scenario (and the mean), one bar per policy, the
    score's 95% interval as error bars, 0 (random) and 100 (reference) as vertical lines."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    pols = _policies(board)
    rows = [(n, sc["policies"]) for n, sc in board["scenarios"].items()]
    rows.append(("mean", {p: {"score": board["mean_score"][p]} for p in pols}))
    height = 1.0 / (len(pols) + 1)
    fig = Figure(figsize=(8.0, 0.45 * len(rows) * (len(pols) + 1) * 0.5 + 1.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for j, pol in enumerate(pols):
        ys, xs, errs = [], [], []
        for i, (_, entries) in enumerate(rows):
            s = entries[pol]["score"]
            if s is None or s["mean"] is None:
                continue
            ys.append(i + (j - (len(pols) - 1) / 2) * height)
            xs.append(s["mean"])
            errs.append(s["ci95"] or 0.0)
        ax.barh(ys, xs, height=height, xerr=errs, capsize=2, label=pol)
    ax.axvline(0.0, color="k", lw=0.8)
    ax.axvline(100.0, color="k", lw=0.8, ls="--")
    ax.set_yticks(range(len(rows)), [n for n, _ in rows])
    ax.invert_yaxis()
    ax.set_xlabel("normalised score (random = 0, reference = 100)")
    ax.set_title(f"suite {board['suite']} v{board['suite_version']}")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # clear of the bars
    fmt = Path(path).suffix.lstrip(".").lower() or "png"
    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, format=fmt, dpi=120, bbox_inches="tight")


def leaderboard_paths(
    out_dir: str | Path | None = None,
    json_path: str | Path | None = None,
    csv_path: str | Path | None = None,
    plot_path: str | Path | None = None,
    md_path: str | Path | None = None,
) -> dict[str, Path | None]:
    """Output files: ``out_dir/leaderboard.{json,md,csv,png}`` unless given one by one. The
    directory is created; every path is checked (directory exists and is writable, not itself a
    directory) before anything runs."""
    paths: dict[str, Path | None] = {"json": None, "md": None, "csv": None, "plot": None}
    if out_dir is not None:
        d = Path(out_dir)
        if d.exists() and not d.is_dir():
            raise ValueError(f"--out {d}: exists and is not a directory")
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ValueError(f"--out {d}: cannot create the directory ({err.strerror})") from err
        for key, ext in (("json", "json"), ("md", "md"), ("csv", "csv"), ("plot", "png")):
            paths[key] = d / f"leaderboard.{ext}"
    for key, p in (("json", json_path), ("csv", csv_path), ("plot", plot_path), ("md", md_path)):
        if p is not None:
            paths[key] = Path(p)
    given = [p for p in paths.values() if p is not None]
    check_output_paths(*given)
    for p in given:
        d = p.parent if str(p.parent) else Path(".")
        if not os.access(d, os.W_OK | os.X_OK) or (p.exists() and not os.access(p, os.W_OK)):
            raise ValueError(f"output path {p}: not writable; choose another path")
    return paths


def write_leaderboard(
    board: Mapping[str, Any], details: Mapping[str, Any], paths: Mapping[str, Path | None]
) -> None:
    """Write the requested files, each atomically."""
    json_path, md, csv, plot = (paths.get(k) for k in ("json", "md", "csv", "plot"))
    if json_path:
        atomic_write(json_path, to_json(board))
    if md:
        atomic_write(md, format_markdown(board, details))
    if csv:
        atomic_write(csv, leaderboard_csv(board))
    if plot:
        plot_leaderboard(board, plot)


def run_suite_and_write(
    suite: Any,
    policies: Sequence[str],
    *,
    out_dir: str | Path | None = None,
    json_path: str | Path | None = None,
    csv_path: str | Path | None = None,
    plot_path: str | Path | None = None,
    quiet: bool = False,
    **kwargs: Any,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Check the outputs, :func:`~evaluation.suite.run_suite`, print the Markdown (unless
    ``quiet``) and write the files. This is ``evaluate.py --suite``."""
    paths = leaderboard_paths(out_dir, json_path, csv_path, plot_path)
    board, details = run_suite(suite, policies, **kwargs)
    write_leaderboard(board, details, paths)
    if not quiet:
        print(format_markdown(board, details))
        print(f"wall time {details['wall_time_s']:.1f} s")
    return board, details


#: evaluate.py options that the suite file fixes (dest names)
_FIXED_BY_SUITE = ("replications", "horizon", "warmup", "seed", "scale", "no_builtin",
                   "no_optimum", "optimum_max_variables")  # fmt: skip


def suite_cli(parser: argparse.ArgumentParser, a: argparse.Namespace, policies: list[str]) -> None:
    """``evaluate.py --suite NAME``: refuse the options the suite fixes, then run and write."""
    if getattr(a, "scenario", None):
        raise ValueError(f"--suite {a.suite}: give either a scenario or --suite, not both")
    for dest in _FIXED_BY_SUITE:
        if hasattr(a, dest) and getattr(a, dest) != parser.get_default(dest):
            flag = "--" + dest.replace("_", "-")
            raise ValueError(
                f"{flag}: fixed by the suite file (seeds, windows and references are part of "
                f"suite {a.suite!r}); remove it, or write your own suite file"
            )
    run_suite_and_write(
        a.suite, policies, out_dir=a.out, json_path=a.json_path, csv_path=a.csv_path,
        plot_path=a.plot_path, quiet=a.quiet, action_mode=a.action_mode, workers=a.workers,
        use_ray=a.ray is not None, ray_address=a.ray or None,
        progress=False if a.quiet else None,
    )  # fmt: skip
    if not (a.out or a.json_path or a.csv_path or a.plot_path) and not a.quiet:
        print(
            "(no files written: add --out DIR for leaderboard.{json,md,csv,png})", file=sys.stderr
        )
