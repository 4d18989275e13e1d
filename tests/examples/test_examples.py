"""Each examples/ script runs as its users would run it: a fresh process in a foreign working
directory (nothing of the project imported: the ``serverfarm_gym:`` ids must register
themselves), a few hundred steps, at least one training iteration and 0 invalid actions (each
script asserts that and exits non-zero otherwise). Libraries not installed are skipped (the
``examples`` extra installs them); RLlib's and Tianshou's start-up is slow, so they are ``slow``.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CASES = [
    pytest.param("sb3_maskable_ppo.py", ["--steps", "256"], "sb3_contrib", id="sb3"),
    pytest.param("cleanrl_ppo.py", ["--iterations", "1", "--num-envs", "4"], "torch", id="cleanrl"),
    pytest.param(
        "torchrl_ppo.py", ["--iterations", "1", "--frames", "128"], "torchrl", id="torchrl"
    ),
    pytest.param("skrl_ppo.py", ["--timesteps", "128"], "skrl", id="skrl"),
    pytest.param(
        "tianshou_dqn.py", ["--steps", "128"], "tianshou", id="tianshou", marks=pytest.mark.slow
    ),
    pytest.param(
        "rllib_ppo.py",
        ["--iterations", "1"],
        "ray.rllib",
        id="rllib",
        marks=[pytest.mark.slow, pytest.mark.ray],
    ),
]


@pytest.mark.examples
@pytest.mark.parametrize(("script", "args", "library"), CASES)
def test_example_trains_with_no_invalid_action(
    script: str, args: list[str], library: str, tmp_path: Path
) -> None:
    if importlib.util.find_spec(library.split(".")[0]) is None:
        pytest.skip(f"{library} is not installed (pip install -e '.[examples]')")
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "invalid actions: 0" in proc.stdout, proc.stdout[-3000:]
    assert not any(tmp_path.iterdir()), "the example left files in the working directory"
