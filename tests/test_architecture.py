"""The layering of docs/architecture.md, beyond what ``lint-imports`` (pyproject.toml) checks:
no import cycle between any two modules of the project (imports inside functions included), no
package importing a script, and the scripts' imports visible at their top."""

from __future__ import annotations

import ast
import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: the subpackages of serverfarm_gym, lowest layer first (the repository's top-level folders)
PACKAGES = ("envs", "baselines", "evaluation", "agents")
LAYER = {name: i for i, name in enumerate(PACKAGES)}
#: serverfarm_gym's own modules (its __init__, the console scripts) sit on top of them
TOP = len(PACKAGES)
SCRIPTS = [
    ROOT / "train.py",
    ROOT / "evaluate.py",
    ROOT / "sweep.py",
    *sorted((ROOT / "experiments").rglob("*.py")),
    *sorted((ROOT / "benchmarks").glob("*.py")),
]
SCRIPT_NAMES = {"train", "evaluate", "sweep", "experiments", "benchmarks"}


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative): the components with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            child = next(it, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        m = stack.pop()
                        on_stack.discard(m)
                        comp.append(m)
                        if m == node:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(graph.get(child, ()))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return out


_GRAPH = """
import grimp, json
g = grimp.build_graph("serverfarm_gym", include_external_packages=False, cache_dir=None)
print(json.dumps({m: sorted(g.find_modules_directly_imported_by(m)) for m in g.modules}))
"""


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    """Module -> modules it imports (a package's ``__init__`` counted as its own module), read
    by grimp from the installed layout of tools/static_checks.py: grimp walks folders and cannot
    follow package-dir, and a fresh process keeps this one's imports apart."""
    layout = runpy.run_path(str(ROOT / "tools" / "static_checks.py"))["lay_out"]()
    env = {**os.environ, "PYTHONPATH": str(layout)}
    out = subprocess.run([sys.executable, "-c", _GRAPH], cwd=layout, env=env,
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    return {m: set(deps) for m, deps in json.loads(out).items()}


def _layer(module: str) -> int:
    parts = module.split(".")
    return LAYER.get(parts[1], TOP) if len(parts) > 1 else TOP


def test_graph_holds_every_subpackage(graph):
    assert {m.split(".")[1] for m in graph if "." in m} >= set(PACKAGES)


def test_no_import_cycle_between_any_two_modules(graph):
    cycles = _strongly_connected(graph)
    # a package's __init__ re-exporting its modules is not a cycle of the code's logic, but it
    # would be one here if a module imported its own package's __init__: keep that out too
    assert cycles == [], f"import cycles: {cycles}"


def test_each_package_imports_only_those_below(graph):
    bad = []
    for m, deps in graph.items():
        bad += [f"{m} -> {dep}" for dep in deps if _layer(dep) > _layer(m)]
    assert bad == []


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(module, at module level) of every import statement in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    top_level = {id(n) for n in tree.body}
    # imports for annotations only (``if TYPE_CHECKING:`` at the top) count as top-level
    for n in tree.body:
        if isinstance(n, ast.If) and ast.unparse(n.test).endswith("TYPE_CHECKING"):
            top_level |= {id(m) for m in n.body}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, id(node) in top_level) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, id(node) in top_level))
    return out


def _is_project(module: str) -> bool:
    return module.split(".")[0] == "serverfarm_gym"


def test_no_package_imports_a_script():
    bad = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            bad += [f"{path.relative_to(ROOT)}: {m}" for m, _ in _imports(path)
                    if m.split(".")[0] in SCRIPT_NAMES]  # fmt: skip
    assert bad == []


@pytest.mark.parametrize("path", [ROOT / "train.py", ROOT / "evaluate.py", ROOT / "sweep.py"],
                         ids=lambda p: p.name)  # fmt: skip
def test_main_scripts_import_the_project_at_the_top(path):
    hidden = [m for m, top in _imports(path) if _is_project(m) and not top]
    assert hidden == [], f"{path.name}: move these imports to the top: {hidden}"


def test_packages_import_the_project_at_the_top():
    hidden = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            hidden += [f"{path.relative_to(ROOT)}: {m}" for m, top in _imports(path)
                       if _is_project(m) and not top]  # fmt: skip
    assert hidden == []


def test_scripts_exist():
    assert all(p.exists() for p in SCRIPTS)
