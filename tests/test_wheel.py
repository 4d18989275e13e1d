"""The built wheel: one import name, and every file the code reads from package data in it.

Builds the wheel from this checkout (no network: ``--no-build-isolation``) and checks it with
``.ci/wheel_contents.py`` (every tracked file of the mapped folders at its mapped place), then
names the files the code itself loads (the shipped models and sidecars, the scenarios and
suites, the hyperparameter file) and finds each in the archive. .ci/installed goes further:
it installs the wheel into fresh virtual environments and uses it.
"""

from __future__ import annotations

import runpy
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from serverfarm_gym.agents.common.run_args import DEFAULT_HYPERPARAMS
from serverfarm_gym.agents.table_generalist.policy import SHIPPED_MODEL
from serverfarm_gym.agents.token_generalist.token_policy import TOKEN_MODEL
from serverfarm_gym.envs.scenarios.files import data_dir

ROOT = Path(__file__).resolve().parent.parent
CONTENTS = runpy.run_path(str(ROOT / ".ci" / "wheel_contents.py"))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(out), str(ROOT)],
        check=True, capture_output=True,
    )  # fmt: skip
    return next(out.glob("serverfarm_gym-*.whl"))


def _in_wheel(path: Path) -> str:
    """The wheel's name of a file of this checkout (pyproject.toml's package-dir)."""
    rel = path.resolve().relative_to(ROOT).as_posix()
    for folder, place in CONTENTS["MAPPED"].items():
        if rel.startswith(folder):
            return place + rel[len(folder) :]
    raise AssertionError(f"{rel}: not in a folder the package maps")


def test_wheel_claims_one_name_and_carries_every_mapped_file(wheel: Path) -> None:
    assert CONTENTS["main"](str(wheel)) == 0


def test_every_file_the_code_loads_is_in_the_wheel(wheel: Path) -> None:
    loaded = [
        SHIPPED_MODEL, SHIPPED_MODEL.with_suffix(".json"), TOKEN_MODEL,
        TOKEN_MODEL.with_suffix(".json"), DEFAULT_HYPERPARAMS, ROOT / "serverfarm_gym" / "py.typed",
        *sorted(data_dir().glob("*.yaml")), *sorted((data_dir() / "suites").glob("*.yaml")),
    ]  # fmt: skip
    assert all(p.is_file() for p in loaded)
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [_in_wheel(p) for p in loaded if _in_wheel(p) not in names]
    assert missing == []
