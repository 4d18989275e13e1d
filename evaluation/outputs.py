"""The outputs of evaluations: atomic files (JSON, CSV, PNG), the console table, the efficiency plot.

Every file is written atomically: the bytes go to a temporary file in the destination's directory,
which is flushed, fsync'ed and then renamed over the destination with ``os.replace`` (atomic on
POSIX and Windows within one file system). An exception or Ctrl-C at any point leaves either the
previous file or no file, never a truncated one, and no temporary file behind.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import stat
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

__all__ = [
    "atomic_open",
    "atomic_write",
    "check_output_paths",
    "csv_rows",
    "format_sweep_table",
    "format_table",
    "plot_efficiency",
    "plot_sweep",
    "to_json",
    "write_outputs",
    "write_sweep_outputs",
]


# ---------------------------------------------------------------------------------------------
# atomic files
# ---------------------------------------------------------------------------------------------
@contextlib.contextmanager
def atomic_open(
    path: str | Path, mode: str = "w", encoding: str | None = "utf-8"
) -> Iterator[IO[Any]]:
    """Open a temporary file next to ``path``; on a clean exit it replaces ``path`` atomically, on
    any exception (including KeyboardInterrupt) it is deleted and ``path`` is left untouched.

    The result has the permissions a plain ``open(path, "w")`` would leave: those of the file it
    replaces, or for a new file 0666 less the umask (``mkstemp`` alone would make it 0600)."""
    if mode not in ("w", "wb"):
        raise ValueError(f"mode: atomic_open writes whole files, use 'w' or 'wb', got {mode!r}")
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise ValueError(
            f"output path {path}: directory {directory} does not exist; create it first"
        )
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding, newline=None) as fh:
            yield fh
            fh.flush()
            os.chmod(tmp, _mode_for(path))
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _mode_for(path: Path) -> int:
    """Permission bits for a file written to ``path``: the existing file's, else 0666 & ~umask."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        return 0o666 & ~_umask()


def _umask() -> int:
    # the only portable way to read the umask is to set it (and put it back at once); the lock
    # keeps two threads writing reports from reading each other's temporary value
    with _UMASK_LOCK:
        old = os.umask(0o077)
        os.umask(old)
    return old


_UMASK_LOCK = threading.Lock()


def check_output_paths(
    *paths: str | Path | None, figures: Sequence[str | Path | None] = ()
) -> None:
    """Raise ValueError now, before a long run, for any output that could not be written after it:
    a directory that does not exist or cannot be written to, a path that is a directory, the same
    file given twice, or (``figures``) a figure format matplotlib cannot write."""
    seen: dict[Path, str] = {}
    for p in (*paths, *figures):
        if p is None or str(p) == "":
            continue
        path = Path(p)
        d = path.parent if str(path.parent) else Path(".")
        if not d.is_dir():
            why = "is not a directory" if d.exists() else "does not exist; create it first"
            raise ValueError(f"output path {p}: directory {d} {why}")
        if path.is_dir():
            raise ValueError(f"output path {p}: is a directory; give a file name")
        key = path.resolve()
        if key in seen:
            raise ValueError(f"output path {p}: given twice (also as {seen[key]}); give two files")
        seen[key] = str(p)
        try:  # the only reliable test (permissions, read-only mounts, ACLs, root) is to try
            fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=d)
        except OSError as err:
            raise ValueError(
                f"output path {p}: cannot create files in {d} ({err.strerror}); "
                "choose a writable directory"
            ) from None
        os.close(fd)
        os.unlink(probe)
    for p in figures:
        if p is None or str(p) == "":
            continue
        fmt = Path(p).suffix.lstrip(".").lower() or "png"
        supported = _figure_formats()
        if fmt not in supported:
            raise ValueError(
                f"output path {p}: matplotlib cannot write .{fmt} figures; use one of "
                f"{', '.join('.' + f for f in sorted(supported))}"
            )


def _figure_formats() -> set[str]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    return set(FigureCanvasAgg.get_supported_filetypes())


def atomic_write(path: str | Path, data: str | bytes) -> None:
    """Write ``data`` (text or bytes) to ``path`` atomically (see :func:`atomic_open`)."""
    with atomic_open(path, "wb" if isinstance(data, bytes) else "w") as fh:
        fh.write(data)


# ---------------------------------------------------------------------------------------------
# JSON / CSV
# ---------------------------------------------------------------------------------------------
def _jsonable(o: Any) -> Any:
    # NaN/inf are not JSON: undefined quantities are null
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, Mapping):
        return {str(k): _jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_jsonable(v) for v in o]
    if isinstance(o, np.ndarray):
        return _jsonable(o.tolist())
    if isinstance(o, np.bool_):
        return bool(o)
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return _jsonable(float(o))
    if isinstance(o, Path):
        return str(o)
    return o


def to_json(report: Mapping[str, Any]) -> str:
    """The report as strict JSON text (NaN/inf -> null, numpy scalars -> Python)."""
    return json.dumps(_jsonable(report), indent=2, allow_nan=False) + "\n"


def csv_rows(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One flat row per policy (means, half-widths, gaps, per-type blocking)."""
    rows = []
    opt = (report.get("optimum") or {}).get("efficiency")
    bound = (report.get("upper_bound") or {}).get("efficiency")
    for name, e in report["policies"].items():
        row: dict[str, Any] = {"scenario": report["scenario"], "policy": name, "route": e["route"]}
        for m in ("efficiency", "throughput", "power", "blocking", "cost_efficiency"):
            row[f"{m}_mean"] = e[m]["mean"]
            row[f"{m}_ci95"] = e[m]["ci95"]
        # Little's-law response time: exact, or simulated when the simulator reports it
        rt = e.get("mean_response_time") or {}
        row["mean_response_time_mean"] = rt.get("mean")
        row["mean_response_time_ci95"] = rt.get("ci95")
        for jt, s in e["blocking_per_type"].items():
            row[f"blocking_{jt}_mean"] = s["mean"]
            row[f"blocking_{jt}_ci95"] = s["ci95"]
        row["gap_to_pas_pct"] = e["gap_to_pas_pct"]
        row["gap_to_pas_paired_ci95"] = e["gap_to_pas_paired"]["ci95"]
        row["gap_to_optimum_pct"] = e["gap_to_optimum_pct"]
        row["gap_to_bound_pct"] = e["gap_to_bound_pct"]
        row["optimum"] = opt
        row["upper_bound"] = bound
        row["replications"] = e["efficiency"]["n"]
        rows.append(row)
    return rows


def _csv_text(rows: Sequence[Mapping[str, Any]]) -> str:
    buf = io.StringIO()
    fields: list[str] = []
    for r in rows:
        fields.extend(k for k in r if k not in fields)
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if v is None else v) for k, v in _jsonable(dict(r)).items()})
    return buf.getvalue()


# ---------------------------------------------------------------------------------------------
# console
# ---------------------------------------------------------------------------------------------
def _fmt(x: float | None, spec: str = ".4f") -> str:
    return "-" if x is None else format(x, spec)


def _pm(s: Mapping[str, Any], spec: str = ".4f") -> str:
    return _fmt(s["mean"], spec) + ("" if s["ci95"] is None else " ± " + _fmt(s["ci95"], spec))


def _grid(header: list[str], rows: list[list[str]]) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)
    ]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def format_table(report: Mapping[str, Any]) -> str:
    """A plain-text summary: header lines, one row per policy, skipped policies and notes."""
    st = report["settings"]
    opt, bound = report.get("optimum"), report.get("upper_bound")
    head = [
        f"scenario {report['scenario']}: {report['n_servers']} servers, {report['n_groups']} groups, "
        f"{report['n_job_types']} job types, load {report['load']:.3f}",
        "exact stationary values of each policy's per-server CTMC (no sampling error)"
        if st.get("method") == "exact"
        else f"{st['replications']} replications x {st['horizon']} decision epochs after a "
        f"{st['warmup']}-epoch warm-up, seed {st['seed']}; intervals: 95% Student-t",
        "optimum: "
        + (f"{opt['efficiency']:.6f}" if opt else f"n/a ({report.get('optimum_reason')})"),
        "upper bound: "
        + (f"{bound['efficiency']:.6f}" if bound else f"n/a ({report.get('upper_bound_reason')})"),
    ]
    header = ["policy", "efficiency", "throughput", "power", "blocking", "E[T]",
              "vs PAS %", "to opt %", "to bound %", "route"]  # fmt: skip
    rows = []
    for name, e in report["policies"].items():
        rt = e.get("mean_response_time")
        rows.append(
            [
                name,
                _pm(e["efficiency"], ".5f"),
                _pm(e["throughput"], ".3f"),
                _pm(e["power"], ".3f"),
                _pm(e["blocking"], ".4f"),
                "-" if rt is None else _pm(rt, ".4f"),
                _fmt(e["gap_to_pas_pct"], "+.3f"),
                _fmt(e["gap_to_optimum_pct"], ".3f"),
                _fmt(e["gap_to_bound_pct"], ".3f"),
                e["route"],
            ]
        )
    out = "\n".join(head) + "\n\n" + _grid(header, rows)
    for w in report.get("warnings", []):
        out += f"\nwarning: {w}"
    for name, why in report.get("skipped", {}).items():
        out += f"\nskipped {name}: {why}"
    for name, e in report["policies"].items():
        if e.get("check_cpu_s") is not None:
            out += (
                f"\nnote: {name} checked itself on this farm before acting ({e['check_cpu_s']:.1f} "
                "CPU-s per build): not a zero-shot result"
            )
        if e.get("invalid_actions"):
            out += (
                f"\nwarning: {name} chose {e['invalid_actions']} masked actions (executed as PAS)"
            )
    if "wall_time_s" in report:
        out += f"\nwall time {report['wall_time_s']:.1f} s ({report['backend']['kind']})"
    return out


def format_sweep_table(sweep: Mapping[str, Any]) -> str:
    """One line per (scenario, scale, seed, policy)."""
    header = ["scenario", "scale", "servers", "seed", "policy", "efficiency",
              "vs PAS %", "to opt %", "to bound %"]  # fmt: skip
    rows = [
        [
            r["scenario"],
            str(r["scale"]),
            str(r["n_servers"]),
            str(r["seed"]),
            r["policy"],
            _fmt(r["efficiency_mean"], ".5f")
            + ("" if r["efficiency_ci95"] is None else " ± " + _fmt(r["efficiency_ci95"], ".5f")),
            _fmt(r["gap_to_pas_pct"], "+.3f"),
            _fmt(r["gap_to_optimum_pct"], ".3f"),
            _fmt(r["gap_to_bound_pct"], ".3f"),
        ]
        for r in sweep["rows"]
    ]
    return _grid(header, rows) + f"\nwall time {sweep['wall_time_s']:.1f} s"


# ---------------------------------------------------------------------------------------------
# plots (object-oriented matplotlib on the Agg canvas: no pyplot, no global backend switch)
# ---------------------------------------------------------------------------------------------
def save_figure(fig: Any, path: str | Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    fmt = Path(path).suffix.lstrip(".").lower() or "png"
    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, format=fmt, dpi=120, bbox_inches="tight")


def plot_efficiency(report: Mapping[str, Any], path: str | Path) -> None:
    """Efficiency bars with 95% intervals; the optimum (solid) and the relaxation bound (dashed)
    as horizontal lines when known."""
    from matplotlib.figure import Figure

    names = list(report["policies"])
    means = [report["policies"][n]["efficiency"]["mean"] for n in names]
    errs = [report["policies"][n]["efficiency"]["ci95"] or 0.0 for n in names]
    fig = Figure(figsize=(max(4.0, 1.1 * len(names) + 2), 4.0))
    ax = fig.add_subplot()
    ax.bar(
        names, means, yerr=errs, capsize=4, color="#4c72b0", alpha=0.85, label="simulated (95% CI)"
    )
    lo = min(m - e for m, e in zip(means, errs, strict=True))
    hi = max(m + e for m, e in zip(means, errs, strict=True))
    for key, style, color, label in (
        ("optimum", "-", "#c44e52", "exact optimum"),
        ("upper_bound", "--", "#55a868", "relaxation bound"),
    ):
        ref = report.get(key)
        if ref:
            ax.axhline(
                ref["efficiency"],
                linestyle=style,
                color=color,
                label=f"{label} {ref['efficiency']:.4f}",
            )
            lo, hi = min(lo, ref["efficiency"]), max(hi, ref["efficiency"])
    pad = 0.15 * (hi - lo) + 1e-9
    ax.set_ylim(max(0.0, lo - pad), hi + pad)  # zoomed: the differences are a few percent
    ax.set_ylabel("efficiency (work per unit energy)")
    st = report["settings"]
    ax.set_title(f"{report['scenario']}: {st['replications']} reps x {st['horizon']} epochs")
    ax.legend(fontsize=8, loc="best")
    ax.tick_params(axis="x", labelrotation=30)
    save_figure(fig, path)


def plot_sweep(sweep: Mapping[str, Any], path: str | Path) -> None:
    """Efficiency against farm size (servers, log scale), one line per (scenario, policy), seed 0
    of the sweep's seeds; the bound as a dashed line."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.5, 4.2))
    ax = fig.add_subplot()
    first_seed = sweep["settings"]["seeds"][0]
    series: dict[tuple[str, str], list[tuple[int, float, float]]] = {}
    bounds: dict[str, list[tuple[int, float]]] = {}
    for r in sweep["rows"]:
        if r["seed"] != first_seed:
            continue
        series.setdefault((r["base_scenario"], r["policy"]), []).append(
            (r["n_servers"], r["efficiency_mean"], r["efficiency_ci95"] or 0.0)
        )
        if r["upper_bound"] is not None:
            bounds.setdefault(r["base_scenario"], []).append((r["n_servers"], r["upper_bound"]))
    for (sc, pol), pts in series.items():
        pts.sort()
        ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts],
                    marker="o", capsize=3, label=f"{sc} {pol}")  # fmt: skip
    for sc, bpts in bounds.items():
        bpts = sorted(set(bpts))
        ax.plot([p[0] for p in bpts], [p[1] for p in bpts], "k--", lw=1, label=f"{sc} bound")
    ax.set_xscale("log")
    ax.set_xlabel("servers")
    ax.set_ylabel("efficiency (work per unit energy)")
    ax.legend(fontsize=7)
    save_figure(fig, path)


# ---------------------------------------------------------------------------------------------
# all outputs of a run
# ---------------------------------------------------------------------------------------------
def write_outputs(
    report: Mapping[str, Any],
    json_path: str | Path | None = None,
    csv_path: str | Path | None = None,
    plot_path: str | Path | None = None,
) -> None:
    """Write whichever of JSON, CSV and plot were asked for (each atomically)."""
    if json_path:
        atomic_write(json_path, to_json(report))
    if csv_path:
        atomic_write(csv_path, _csv_text(csv_rows(report)))
    if plot_path:
        plot_efficiency(report, plot_path)


def write_sweep_outputs(
    sweep: Mapping[str, Any],
    json_path: str | Path | None = None,
    csv_path: str | Path | None = None,
    plot_path: str | Path | None = None,
) -> None:
    """Sweep counterpart of :func:`write_outputs` (CSV: one row per run x policy)."""
    if json_path:
        atomic_write(json_path, to_json(sweep))
    if csv_path:
        atomic_write(csv_path, _csv_text(sweep["rows"]))
    if plot_path:
        plot_sweep(sweep, plot_path)
