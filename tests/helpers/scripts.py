"""Running the scripts (train.py, evaluate.py, ...) in tests: exit codes and run directories."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def exit_code(call: Callable[[], Any]) -> int:
    """The exit status of a script's main: its return value, or the SystemExit it raises."""
    try:
        rc = call()
    except SystemExit as e:
        return int(e.code)
    return rc if isinstance(rc, int) else 0


def resume_run(main: Callable[[list[str]], Any], out: Path, total: int) -> Any:
    """``train.py --resume`` of the run in ``out`` up to ``total`` steps (``main`` is train.main,
    passed in so that this module imports without the train extra)."""
    return main(
        ["--output-dir", str(out), "--resume", "--total-timesteps", str(total), "--no-progress-bar"]
    )


def best_sidecar(out: Path) -> dict:
    """The JSON sidecar of a run's best model."""
    return json.loads((out / "best_model.json").read_text())
