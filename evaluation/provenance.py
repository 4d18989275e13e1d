"""Provenance of a result: the versions of Python and of the packages that produced it, and the
git commit of this checkout. The one collector, used by evaluation reports and ``train.py``'s
``summary.json``."""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from pathlib import Path

__all__ = ["PACKAGES", "versions"]

#: distributions whose version is recorded (None when not installed); keys of ``versions()``
PACKAGES: tuple[str, ...] = (
    "serverfarm-gym",
    "numpy",
    "scipy",
    "numba",
    "gymnasium",
    "torch",
    "stable_baselines3",
    "sb3_contrib",
    "ray",
)

_ROOT = Path(__file__).resolve().parent.parent


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=_ROOT, capture_output=True, text=True, timeout=5
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out or None


def versions(packages: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """``{"python": ..., <package>: version or None, ..., "git_commit": sha or None}``.

    Read from the installed distributions' metadata (nothing is imported, so this is cheap and
    never fails a finished run); ``git_commit`` is None outside a git checkout."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    for pkg in packages:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    out["git_commit"] = _git_commit()
    return out
