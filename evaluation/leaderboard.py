"""The leaderboard of a benchmark suite: Markdown table, CSV, PNG plot and JSON, all written
atomically, with every output path checked before the (long) run. See :mod:`serverfarm_gym.evaluation.suite`.

Learned rows (``evaluate.py --suite core --learned PATH[,PATH]``) are results measured elsewhere,
such as ``experiments/from_scratch.py``'s ``leaderboard_rows.json``: per scenario an efficiency
with a 95% interval, under a label that says what produced it. Each label becomes one column,
scored with the suite run's random dispatcher and reference by the same formula as the others
(``n/a`` on the scenarios the file lacks). The file is only read: evaluation never imports the
code that wrote it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from serverfarm_gym.evaluation.cli import name_list
from serverfarm_gym.evaluation.outputs import atomic_open, atomic_write, check_output_paths, to_json
from serverfarm_gym.evaluation.suite import (
    RANDOM_POLICY,
    SuiteDefinition,
    load_suite,
    mean_of_scores,
    run_suite,
)

__all__ = [
    "SCORE_METHOD",
    "format_markdown",
    "leaderboard_csv",
    "leaderboard_paths",
    "load_learned_rows",
    "merge_learned",
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
    if s.get("ci95_low") is not None:  # a learned row: an asymmetric (bootstrap) interval
        lo, hi = format(s["ci95_low"], spec), format(s["ci95_high"], spec)
        return f"{format(s['mean'], spec)} [{lo}, {hi}]"
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


#: the schema tag of a learned-rows file (experiments/from_scratch.py writes it)
LEARNED_SCHEMA = "serverfarm-gym/learned-rows/1"
LEARNED_METHOD = (
    "learned columns: efficiency = the file's statistic (IQM over seeds) [its 95% interval]; "
    "score by the same formula with this run's random mean and reference, the interval's ends "
    "mapped through it (the random run's own noise, small next to the seeds', is not added); "
    "mean score: mean of the per-scenario scores, no interval"
)
_ROW_KEYS = ("label", "scenario", "efficiency", "seeds", "steps")


def _finite(v: Any, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"{where}: expected a finite number, got {v!r}")
    return float(v)


def _interval(v: Any, where: str) -> tuple[float, float, float]:
    """(iqm, ci95_low, ci95_high) of a row's statistic, checked."""
    if not isinstance(v, Mapping) or not {"iqm", "ci95_low", "ci95_high"} <= set(v):
        raise ValueError(f"{where}: needs keys iqm, ci95_low, ci95_high; got {v!r}")
    iqm, lo, hi = (_finite(v[k], f"{where}.{k}") for k in ("iqm", "ci95_low", "ci95_high"))
    if not lo <= iqm <= hi:
        raise ValueError(f"{where}: needs ci95_low <= iqm <= ci95_high, got {v!r}")
    return iqm, lo, hi


def _learned_row(row: Any, where: str, suite: SuiteDefinition) -> dict[str, Any]:
    """One validated row; ``ValueError`` naming the row and the field otherwise."""
    if not isinstance(row, Mapping):
        raise ValueError(f"{where}: expected a mapping, got {type(row).__name__}")
    missing = [k for k in _ROW_KEYS if k not in row]
    if missing:
        raise ValueError(f"{where}: missing keys {missing} (a row needs {list(_ROW_KEYS)})")
    label = row["label"]
    if not isinstance(label, str) or not label.strip():
        raise ValueError(f"{where}.label: a non-empty name, got {label!r}")
    if row["scenario"] not in suite.scenario_names():
        raise ValueError(
            f"{where}.scenario: {row['scenario']!r} is not a scenario of suite {suite.name!r} "
            f"({', '.join(suite.scenario_names())})"
        )
    iqm, lo, hi = _interval(row["efficiency"], f"{where}.efficiency")
    rt = row.get("mean_response_time")  # optional: the rows' E[T] (latency suites)
    rt = None if rt is None else _interval(rt, f"{where}.mean_response_time")
    seeds, steps = row["seeds"], row["steps"]
    if not isinstance(seeds, list) or not seeds or not all(type(x) is int for x in seeds):
        raise ValueError(f"{where}.seeds: a non-empty list of integers, got {seeds!r}")
    if type(steps) is not int or steps < 1:
        raise ValueError(f"{where}.steps: a positive integer, got {steps!r}")
    ref = row.get("reference")
    ref_eff = None if not isinstance(ref, Mapping) else ref.get("efficiency")
    return {"label": label.strip(), "scenario": row["scenario"], "efficiency": (iqm, lo, hi),
            "mean_response_time": rt, "seeds": seeds, "steps": steps,
            "reference": None if ref_eff is None else _finite(ref_eff, f"{where}.reference")}  # fmt: skip


def load_learned_rows(paths: Sequence[str | Path], suite: SuiteDefinition) -> list[dict[str, Any]]:
    """The rows of the learned-rows files ``paths`` for ``suite``, validated before anything runs:
    the schema tag, the suite's name and version, every row's keys and numbers (``ValueError``
    naming ``--learned PATH`` and the field otherwise), and one row per (label, scenario)."""
    out: list[dict[str, Any]] = []
    for path in paths:
        where = f"--learned {path}"
        try:
            data = json.loads(Path(path).read_text())
        except OSError as err:
            raise ValueError(f"{where}: cannot read the file ({err.strerror})") from err
        except json.JSONDecodeError as err:
            raise ValueError(f"{where}: not JSON ({err.msg}, line {err.lineno})") from err
        if not isinstance(data, Mapping) or data.get("schema") != LEARNED_SCHEMA:
            got = data.get("schema") if isinstance(data, Mapping) else type(data).__name__
            raise ValueError(f"{where}: schema must be {LEARNED_SCHEMA!r}, got {got!r}")
        for key, want in (("suite", suite.name), ("suite_version", suite.version)):
            if data.get(key) != want:
                raise ValueError(
                    f"{where}: rows for {key} {data.get(key)!r}, this run is {want!r} (scores are "
                    "comparable only within one suite version); rerun what produced the file"
                )
        rows = data.get("rows")
        if not isinstance(rows, list) or not rows:
            raise ValueError(f"{where}: 'rows' must be a non-empty list")
        for i, row in enumerate(rows):
            r = _learned_row(row, f"{where}: rows[{i}]", suite)
            if any((o["label"], o["scenario"]) == (r["label"], r["scenario"]) for o in out):
                raise ValueError(
                    f"{where}: rows[{i}]: a second row for {r['label']!r} on {r['scenario']}"
                )
            out.append({**r, "source": str(path)})
    return out


def _learned_entry(row: Mapping[str, Any], sc: Mapping[str, Any]) -> dict[str, Any]:
    """A learned row's leaderboard entry on scenario ``sc``, scored like the other columns."""
    rand = float(sc["policies"][RANDOM_POLICY]["efficiency"]["mean"])
    span = float(sc["reference"]["efficiency"]) - rand

    def score(x: float) -> float:
        return 100.0 * (x - rand) / span

    iqm, lo, hi = row["efficiency"]
    entry = {
        "efficiency": {"mean": iqm, "ci95": None, "ci95_low": lo, "ci95_high": hi},
        "score": {"mean": score(iqm), "ci95": None, "ci95_low": score(lo), "ci95_high": score(hi)},
        "mean_response_time": None,
        "source": row["source"], "seeds": row["seeds"], "steps": row["steps"],
    }  # fmt: skip
    rt = row.get("mean_response_time")
    if rt is not None:
        entry["mean_response_time"] = {"mean": rt[0], "ci95": None, "ci95_low": rt[1],
                                       "ci95_high": rt[2]}  # fmt: skip
    if sc.get("slo") is not None:  # the suite's rule: E[T] not significantly above D
        entry["slo_met"] = None if rt is None else bool(rt[1] <= sc["slo"])
    return entry


def merge_learned(
    board: dict[str, Any], details: dict[str, Any], rows: Sequence[Mapping[str, Any]]
) -> None:
    """Add one column per learned label to ``board`` (filled where its file has the scenario,
    ``n/a`` with the reason in ``details`` elsewhere) and their provenance as ``board["learned"]``.
    A label may not reuse a policy's name."""
    labels = list(dict.fromkeys(r["label"] for r in rows))
    clash = [lb for lb in labels if lb in board["mean_score"]]
    if clash:
        raise ValueError(f"--learned: label(s) {clash} already name a policy of this run")
    board["learned"] = {}
    for label in labels:
        mine = {r["scenario"]: r for r in rows if r["label"] == label}
        sources = sorted({r["source"] for r in mine.values()})
        per: list[Mapping[str, float | None]] = []
        for name, sc in board["scenarios"].items():
            row = mine.get(name)
            if row is None:
                sc["policies"][label] = {
                    "efficiency": None,
                    "score": None,
                    "mean_response_time": None,
                }
                details.setdefault("not_applicable", {}).setdefault(name, {})[label] = (
                    f"no row for this scenario in {', '.join(sources)}"
                )
                per.append({"mean": None, "ci95": None})
                continue
            sc["policies"][label] = entry = _learned_entry(row, sc)
            per.append(entry["score"])
            ref = row["reference"]
            if ref is not None and abs(ref - sc["reference"]["efficiency"]) > 1e-6 * abs(ref):
                details.setdefault("warnings", []).append(
                    f"{name}: {label}: the file's reference {ref:.8g} differs from this run's "
                    f"{sc['reference']['efficiency']:.8g}"
                )
        scores = [{"mean": s["mean"], "ci95": None} for s in per]
        board["mean_score"][label] = mean_of_scores(scores, [1] * len(scores))
        board["learned"][label] = {"sources": sources, "scenarios": sorted(mine)}


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
    if board.get("learned"):
        notes.append(LEARNED_METHOD + "; from " + ", ".join(
            sorted({src for v in board["learned"].values() for src in v["sources"]})))  # fmt: skip
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
                "mean_response_time_ci95", "slo", "slo_met", "efficiency_ci95_low",
                "efficiency_ci95_high", "score_ci95_low", "score_ci95_high", "source"])  # fmt: skip

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
                        cell(e.get("slo_met")), cell(eff.get("ci95_low")),
                        cell(eff.get("ci95_high")), cell(score.get("ci95_low")),
                        cell(score.get("ci95_high")), cell(e.get("source"))])  # fmt: skip
    for pol, s in board["mean_score"].items():
        w.writerow([board["suite"], board["suite_version"], "mean", "", "", "", pol, "", "",
                    cell(s["mean"]), cell(s["ci95"]), "", "", "", "", "", "", "", "", ""])  # fmt: skip
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
        ys, xs, lows, highs = [], [], [], []
        for i, (_, entries) in enumerate(rows):
            s = entries[pol]["score"]
            if s is None or s["mean"] is None:
                continue
            ys.append(i + (j - (len(pols) - 1) / 2) * height)
            xs.append(s["mean"])
            if s.get("ci95_low") is not None:  # a learned row's asymmetric interval
                lows.append(s["mean"] - s["ci95_low"])
                highs.append(s["ci95_high"] - s["mean"])
            else:
                lows.append(s["ci95"] or 0.0)
                highs.append(s["ci95"] or 0.0)
        ax.barh(ys, xs, height=height, xerr=[lows, highs], capsize=2, label=pol)
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
    learned: Sequence[str | Path] = (),
    **kwargs: Any,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Check the outputs and the ``learned`` rows files, :func:`~serverfarm_gym.evaluation.suite.run_suite`, add
    the learned columns (:func:`merge_learned`), print the Markdown (unless ``quiet``) and write
    the files. This is ``evaluate.py --suite``."""
    paths = leaderboard_paths(out_dir, json_path, csv_path, plot_path)
    if learned:
        suite = suite if isinstance(suite, SuiteDefinition) else load_suite(suite)
        rows = load_learned_rows(learned, suite)
        clash = sorted({r["label"] for r in rows} & {*policies, "pas", RANDOM_POLICY})
        if clash:
            raise ValueError(f"--learned: label(s) {clash} already name a policy of this run")
    board, details = run_suite(suite, policies, **kwargs)
    if learned:
        merge_learned(board, details, rows)
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
        learned=name_list("--learned", a.learned) if a.learned is not None else (),
        use_ray=a.ray is not None, ray_address=a.ray or None,
        progress=False if a.quiet else None,
    )  # fmt: skip
    if not (a.out or a.json_path or a.csv_path or a.plot_path) and not a.quiet:
        print(
            "(no files written: add --out DIR for leaderboard.{json,md,csv,png})", file=sys.stderr
        )
