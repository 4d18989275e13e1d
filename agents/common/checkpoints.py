"""Checkpoints and run files shared by both PPO trainers (``serverfarm_gym.agents.ppo``, ``serverfarm_gym.agents.ppo_sb3``).

* atomic writes: :func:`save_model_atomic` (a model's ``save`` through a temporary file) and
  :func:`atomic_write_json`; a failed write raises :class:`DiskWriteError` naming the file;
* the checkpoints of a run directory (``checkpoints/ckpt_<steps>_steps.zip``):
  :func:`list_checkpoints`, :func:`latest_checkpoint`, :func:`newest_loadable` (the newest one
  that loads, a damaged one skipped);
* :func:`read_evaluations` (``evaluations.jsonl``);
* :class:`TrainingDiverged`, raised by :func:`check_finite_params` / :func:`diverged`.
"""

from __future__ import annotations

import errno
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from serverfarm_gym.envs.mapping_files import read_regular_file
from serverfarm_gym.evaluation.outputs import atomic_write, to_json

__all__ = [
    "CKPT_RE",
    "DiskWriteError",
    "TrainingDiverged",
    "atomic_write_json",
    "check_finite_params",
    "diverged",
    "latest_checkpoint",
    "list_checkpoints",
    "newest_loadable",
    "read_evaluations",
    "save_model_atomic",
    "write_error",
]

T = TypeVar("T")

CKPT_RE = re.compile(r"^ckpt_(\d+)_steps\.zip$")


class DiskWriteError(OSError):
    """A model or statistics file could not be written (disk full, file too large, ...): the
    message names the file; the temporary file is removed and the files saved before stay."""

    def __str__(self) -> str:
        return str(self.strerror)


def write_error(path: Path, err: OSError) -> DiskWriteError:
    why = {errno.ENOSPC: "no space left on the device", errno.EFBIG: "file too large for the "
           "file system", errno.EDQUOT: "disk quota exceeded"}.get(err.errno, err.strerror)  # fmt: skip
    return DiskWriteError(
        err.errno,
        f"cannot write {path}: {why or err}; the files saved before it are kept (free space and "
        "continue with --resume)",
    )


def save_model_atomic(model: Any, path: str | Path) -> Path:
    """``model.save(path)`` through a temporary file and ``os.replace`` (never half-written).
    A failed write (``ENOSPC``, ``EFBIG``, ...) removes the temporary file and raises
    :class:`DiskWriteError` naming ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp.zip")
    try:
        model.save(tmp)
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise write_error(path, err) from err
    return path


def atomic_write_json(path: str | Path, obj: Any) -> None:
    """Write JSON atomically (``serverfarm_gym.evaluation.outputs.atomic_write``: a kill never leaves half a file)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, to_json(obj))


def list_checkpoints(ckpt_dir: str | Path) -> list[tuple[Path, int]]:
    """(path, timesteps) of the complete checkpoints in ``ckpt_dir``, newest first."""
    d = Path(ckpt_dir)
    if not d.is_dir():
        return []
    found = [(int(m.group(1)), d / f.name) for f in d.iterdir() if (m := CKPT_RE.match(f.name))]
    return [(path, steps) for steps, path in sorted(found, reverse=True)]


def latest_checkpoint(ckpt_dir: str | Path) -> tuple[Path, int] | None:
    """(path, timesteps) of the newest complete checkpoint in ``ckpt_dir``, or None."""
    found = list_checkpoints(ckpt_dir)
    return found[0] if found else None


def newest_loadable(
    ckpt_dir: str | Path, load: Callable[[Path, int], T]
) -> tuple[T, Path, int] | None:
    """``(load(path, steps), path, steps)`` for the newest checkpoint of ``ckpt_dir`` that
    ``load`` accepts, or None if there is no checkpoint. ``load`` raises on a damaged file (cut
    short, overwritten, no sidecar, a step count other than its name's); that one is skipped
    with a warning on stderr and the previous one is tried. Why: a run killed while writing
    must still resume from the last complete checkpoint. If none loads, a ValueError lists why.
    """
    errors = []
    for path, steps in list_checkpoints(ckpt_dir):
        try:
            loaded = load(path, steps)
        except Exception as err:  # any failure to load our own file means it is damaged
            why = " ".join(f"{type(err).__name__}: {err}".split())
            errors.append(f"{path.name} ({why})")
            print(
                f"warning: checkpoint {path} cannot be loaded ({why}); trying the previous one",
                file=sys.stderr,
            )
            continue
        return loaded, path, steps
    if errors:
        raise ValueError(
            f"--resume: no checkpoint in {ckpt_dir} can be loaded: {'; '.join(errors)}"
        )
    return None


def read_evaluations(path: str | Path) -> list[dict[str, Any]]:
    """The entries of an ``evaluations.jsonl`` (a line cut short by a kill is skipped)."""
    p = Path(path)
    if not p.exists():
        return []
    raw = read_regular_file(p, 1 << 30, expected="an evaluations log (JSON lines)")
    out = []
    for line in raw.decode("utf-8", errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


class TrainingDiverged(ValueError):
    """The loss or the parameters became non-finite (NaN or inf): training stops at once, and
    the last finite checkpoint is kept; the message names the step and what to change."""


def check_finite_params(params: Any, steps: int, what: str = "parameters") -> None:
    """Raise :class:`TrainingDiverged` if a tensor in ``params`` (an iterable of tensors) holds a
    NaN or an infinity."""
    import torch

    if not all(bool(torch.isfinite(p).all()) for p in params):
        raise diverged(steps, f"the network's {what} became NaN or inf")


def diverged(steps: int, why: str) -> TrainingDiverged:
    return TrainingDiverged(
        f"training diverged at {steps:,} timesteps: {why}; nothing after the last finite "
        "checkpoint is kept. Lower --learning-rate or --max-grad-norm (too large a step), or "
        "check --ent-coef / --vf-coef"
    )
