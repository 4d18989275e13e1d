"""Shared plumbing of the experiments (``experiments/paper/``, ``experiments/studies/``): the
command line, output files, a process pool over arbitrary tasks, window lengths in model time,
and ratio statistics.

Every experiment script ``experiments/paper/<name>.py`` (and most of ``experiments/studies/``)
has ``main(argv) -> report`` and the options built by :func:`base_parser` (``--quick``,
``--out DIR``, ``--seed``, ``--workers``, ``--figure-dir``). It writes ``<name>.json`` (the full report), ``<name>.csv`` (one flat row per
measured point) and ``<name>.png`` into ``--out`` (default ``results/<name>/``, git-ignored),
each atomically through :mod:`serverfarm_gym.evaluation.outputs` (a crash or Ctrl-C never leaves a truncated
file). ``--figure-dir docs/figures`` also writes the PNG there (the committed figures of
``docs/results.md`` are produced that way).

Statistics come from :mod:`serverfarm_gym.evaluation.stats` (Student-t intervals over independent
replications); simulations from :mod:`serverfarm_gym.evaluation.policy_report` / :mod:`serverfarm_gym.evaluation.rollout`, so that the
measurement window and the seeds are those of ``evaluate.py``.
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import io
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # runnable as a script from anywhere
    sys.path.insert(0, str(ROOT))

from serverfarm_gym.envs.config import FarmConfig  # noqa: E402
from serverfarm_gym.evaluation.outputs import atomic_open, atomic_write, to_json  # noqa: E402
from serverfarm_gym.evaluation.parallel import parallel_map  # noqa: E402  (re-exported for the experiments)
from serverfarm_gym.evaluation.provenance import versions  # noqa: E402

__all__ = [
    "ROOT",
    "base_parser",
    "durations_to_epochs",
    "metadata",
    "parallel_map",
    "print_progress",
    "resolve_workers",
    "save_figure",
    "write_csv",
    "write_outputs",
]


# ---------------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------------
def base_parser(name: str, description: str) -> argparse.ArgumentParser:
    """The options every experiment shares (the script adds its own); the messages name the
    script by its path, ``experiments/paper/<name>.py`` or ``experiments/studies/<name>.py``."""
    folder = "paper" if (Path(__file__).with_name("paper") / f"{name}.py").is_file() else "studies"
    p = argparse.ArgumentParser(
        prog=f"experiments/{folder}/{name}.py",
        description=description,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--quick", action="store_true", help="CI-sized run (seconds)")
    p.add_argument("--out", default=f"results/{name}", help="output directory (created)")
    p.add_argument("--seed", type=int, default=0, help="base seed of the replications")
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="worker processes (default: 1 with --quick, else min(2, cpu_count))",
    )
    p.add_argument(
        "--figure-dir",
        default=None,
        help="also write the PNG into this directory (e.g. docs/figures)",
    )
    return p


def resolve_workers(workers: int | None, quick: bool) -> int:
    """``--workers`` default: in-process for quick runs (spawning costs seconds), else 2 (the
    project machine has 2 shared cores)."""
    if workers is None:
        return 1 if quick else max(1, min(2, os.cpu_count() or 1))
    if workers < 1:
        raise SystemExit(f"--workers: must be >= 1, got {workers}")
    return int(workers)


# ---------------------------------------------------------------------------------------------
# process pool over arbitrary picklable tasks
# ---------------------------------------------------------------------------------------------
def print_progress(done: int, total: int, msg: str) -> None:
    """One line per finished task on stderr (a log, not a bar: the runs go to files)."""
    print(f"[{done}/{total}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# measurement windows in model time
# ---------------------------------------------------------------------------------------------
def durations_to_epochs(config: FarmConfig, durations: float, minimum: int = 0) -> int:
    """``durations`` mean job durations of the slowest group, in decision epochs (at least
    ``minimum``): a farm scaled by f covers f times less model time per epoch."""
    return max(int(minimum), math.ceil(durations * config.epochs_per_duration))


# ---------------------------------------------------------------------------------------------
# outputs
# ---------------------------------------------------------------------------------------------
def metadata(argv: Sequence[str] | None, settings: Mapping[str, Any], t0: float) -> dict[str, Any]:
    """Provenance of a run: command, settings, versions, git commit, wall time."""
    info = versions()
    commit = info.pop("git_commit")
    return {
        "argv": list(argv) if argv is not None else sys.argv[1:],
        "settings": dict(settings),
        "versions": info,
        "git_commit": commit,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "wall_time_s": time.perf_counter() - t0,
    }


def write_csv(path: str | Path, rows: Iterable[Mapping[str, Any]]) -> None:
    """Rows (dicts; the header is the union of their keys in first-seen order) to CSV, atomically.
    ``None`` is written as an empty cell."""
    rows = list(rows)
    fields: list[str] = []
    for r in rows:
        fields.extend(k for k in r if k not in fields)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: _cell(v) for k, v in r.items()})
    atomic_write(path, buf.getvalue())


def _cell(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, float) and not math.isfinite(v):
        return ""
    if hasattr(v, "item"):  # numpy scalar
        return v.item()
    return v


def save_figure(fig: Any, path: str | Path, dpi: int = 100) -> None:
    """Save a ``matplotlib.figure.Figure`` (Agg canvas, no pyplot) as PNG, atomically."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=dpi, bbox_inches="tight")


def write_outputs(
    out_dir: str | Path,
    name: str,
    report: Mapping[str, Any],
    rows: Sequence[Mapping[str, Any]],
    plot: Callable[[str | Path], None],
    figure_dir: str | Path | None = None,
) -> dict[str, str]:
    """Write ``<name>.json``, ``<name>.csv`` and ``<name>.png`` into ``out_dir`` (created) and,
    with ``figure_dir``, the PNG there too. Returns the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / f"{name}.json", "csv": out / f"{name}.csv", "png": out / f"{name}.png"}
    write_csv(paths["csv"], rows)
    plot(paths["png"])
    if figure_dir is not None:
        fd = Path(figure_dir)
        fd.mkdir(parents=True, exist_ok=True)
        paths["figure"] = fd / f"{name}.png"
        atomic_write(paths["figure"], paths["png"].read_bytes())
    atomic_write(paths["json"], to_json(report))  # last: its presence means the run completed
    return {k: str(v) for k, v in paths.items()}
