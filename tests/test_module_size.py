"""No module of the project is over 700 lines, none in agents/ or train.py over 500 (the style
rule of docs/architecture.md): past that a module holds more than one job and should be split
along its seams."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 700
FOLDERS = ("envs", "baselines", "evaluation", "agents", "serverfarm_gym", "experiments",
           "benchmarks", "examples")  # fmt: skip
MODULES = sorted(
    [p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py")]
    + [ROOT / "train.py", ROOT / "evaluate.py", ROOT / "sweep.py"]
)


def test_the_modules_are_found() -> None:
    assert len(MODULES) > 50
    assert ROOT / "envs" / "server_farm.py" in MODULES


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_over_700_lines(path: Path) -> None:
    n = len(path.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_LINES, f"{path.relative_to(ROOT)}: {n} lines (at most {MAX_LINES}): split it"


#: the agents and the training script are held to a tighter limit: each module one room
AGENT_MAX_LINES = 500
AGENT_MODULES = [p for p in MODULES if p.relative_to(ROOT).parts[0] == "agents"] + [
    ROOT / "train.py"
]


@pytest.mark.parametrize("path", AGENT_MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_agents_module_over_500_lines(path: Path) -> None:
    n = len(path.read_text(encoding="utf-8").splitlines())
    assert n <= AGENT_MAX_LINES, (
        f"{path.relative_to(ROOT)}: {n} lines (agents/ and train.py: at most {AGENT_MAX_LINES})"
    )
