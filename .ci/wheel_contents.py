"""The wheel claims one import name and carries every file of the package's folders.

``python .ci/wheel_contents.py DIST.whl``: its top-level names (``top_level.txt`` and the
archive's folders) are ``serverfarm_gym`` alone, and every file git tracks under the folders the
package maps (envs/, baselines/, evaluation/, agents/, scenarios/, hyperparams/, serverfarm_gym/,
the root scripts) is in it at its mapped place: code, models, scenarios, suites, hyperparameters.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# repository folder -> its place in the wheel (pyproject.toml's package-dir)
MAPPED = {
    "envs/": "serverfarm_gym/envs/",
    "baselines/": "serverfarm_gym/baselines/",
    "evaluation/": "serverfarm_gym/evaluation/",
    "agents/": "serverfarm_gym/agents/",
    "scenarios/": "serverfarm_gym/envs/scenarios/data/",
    "hyperparams/": "serverfarm_gym/_scripts/hyperparams/",
    "serverfarm_gym/": "serverfarm_gym/",
}
ROOT_SCRIPTS = ("train.py", "evaluate.py", "sweep.py")


def expected() -> set[str]:
    tracked = subprocess.run(["git", "-C", str(REPO), "ls-files"], capture_output=True,
                             text=True, check=True).stdout.split()  # fmt: skip
    out = {f"serverfarm_gym/_scripts/{s}" for s in ROOT_SCRIPTS}
    for path in tracked:
        for folder, place in MAPPED.items():
            if path.startswith(folder):
                out.add(place + path[len(folder) :])
    return out


def main(wheel: str) -> int:
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        top_level = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
        declared = z.read(top_level).decode().split()
    folders = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    problems = []
    if declared != ["serverfarm_gym"] or folders != {"serverfarm_gym"}:
        problems.append(f"top-level names: top_level.txt {declared}, folders {sorted(folders)}")
    missing = sorted(expected() - names)
    if missing:
        problems.append(f"{len(missing)} files missing from the wheel: {missing[:20]}")
    for p in problems:
        print(f"wheel {Path(wheel).name}: {p}", file=sys.stderr)
    if not problems:
        print(f"wheel {Path(wheel).name}: top level serverfarm_gym only, {len(names)} files, "
              f"every mapped file present")  # fmt: skip
    return int(bool(problems))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
