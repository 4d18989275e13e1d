"""Type and layer checks of the package as it is installed: ``python tools/static_checks.py``.

The repository keeps envs/, baselines/, evaluation/ and agents/ at its top level and maps them
into ``serverfarm_gym`` with setuptools' package-dir (pyproject.toml). mypy and import-linter
find modules by walking folders, not through that mapping, so this script lays the package out
as the wheel does, in ``build/layout/serverfarm_gym`` (symbolic links into the repository, so
every reported line is the repository's), and runs ``mypy`` and ``lint-imports`` there with the
settings of pyproject.toml. Exits non-zero when either check fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYOUT = ROOT / "build" / "layout"
SUBPACKAGES = ("envs", "baselines", "evaluation", "agents")


def lay_out() -> Path:
    """``build/layout/serverfarm_gym``: the package's own files and its subpackages, linked."""
    pkg = LAYOUT / "serverfarm_gym"
    if LAYOUT.exists():
        shutil.rmtree(LAYOUT)
    pkg.mkdir(parents=True)
    for f in (ROOT / "serverfarm_gym").iterdir():
        if f.name != "__pycache__":
            (pkg / f.name).symlink_to(f)
    for name in SUBPACKAGES:
        (pkg / name).symlink_to(ROOT / name, target_is_directory=True)
    return LAYOUT


def main() -> int:
    layout = lay_out()
    config = str(ROOT / "pyproject.toml")
    # the layout first on the path: its serverfarm_gym is the one with every subpackage
    env = {**os.environ, "PYTHONPATH": str(layout), "MYPYPATH": str(layout)}
    checks = (
        [sys.executable, "-m", "mypy", "--config-file", config],
        ["lint-imports", config, "--no-cache"],
    )
    failed = 0
    for cmd in checks:
        print("+", " ".join(cmd[2:] if cmd[0] == sys.executable else cmd), flush=True)
        failed |= subprocess.run(cmd, cwd=layout, env=env).returncode != 0
    return int(failed)


if __name__ == "__main__":
    raise SystemExit(main())
