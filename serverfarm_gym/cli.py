"""Console scripts ``serverfarm-train`` and ``serverfarm-evaluate``: the top-level ``train.py`` and
``evaluate.py`` run as ``__main__`` with the command line they were given.

The scripts are not packages (the project's layers put them on top of every package). In a
source checkout they are found beside this package; an installed wheel carries them, with the
files they read (``hyperparams/``), under ``serverfarm_gym/_scripts/`` (pyproject.toml maps that
package to the repository root), so both layouts run the same files.
"""

from __future__ import annotations

import importlib.util
import runpy
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent


def script_path(name: str) -> Path:
    """The file of the top-level script ``name`` (``"train"`` or ``"evaluate"``)."""
    for candidate in (_HERE / "_scripts" / f"{name}.py", _HERE.parent / f"{name}.py"):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"{name}.py: neither {_HERE / '_scripts'} nor {_HERE.parent} holds it; reinstall "
        "serverfarm-gym (pip install serverfarm-gym) or run from a source checkout"
    )


def _run(name: str) -> None:
    path = script_path(name)
    sys.argv[0] = str(path)
    runpy.run_path(str(path), run_name="__main__")


#: what train.py imports beyond the base install (the ``train`` extra)
TRAIN_MODULES = ("torch", "stable_baselines3", "sb3_contrib")


def train() -> None:
    """``serverfarm-train``: ``python train.py ...``."""
    missing = [m for m in TRAIN_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        raise SystemExit(
            f"serverfarm-train: {', '.join(missing)} not installed; training needs the 'train' "
            "extra: pip install 'serverfarm-gym[train]'"
        )
    _run("train")


def evaluate() -> None:
    """``serverfarm-evaluate``: ``python evaluate.py ...``."""
    _run("evaluate")
