"""The layering of docs/architecture.md, beyond what ``lint-imports`` (pyproject.toml) checks:
no import cycle between any two modules of the project (imports inside functions included), no
package importing a script, and the scripts' imports visible at their top."""

from __future__ import annotations

import ast
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("envs", "baselines", "evaluation", "agents")
LAYER = {name: i for i, name in enumerate(PACKAGES)}
SCRIPTS = [
    ROOT / "train.py",
    ROOT / "evaluate.py",
    ROOT / "sweep.py",
    *sorted((ROOT / "experiments").glob("*.py")),
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


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(*PACKAGES, include_external_packages=False, cache_dir=None)


def _module_graph(g: grimp.ImportGraph) -> dict[str, set[str]]:
    """Module -> modules it imports, a package's ``__init__`` counted as its own module."""
    return {m: set(g.find_modules_directly_imported_by(m)) for m in g.modules}


def test_no_import_cycle_between_any_two_modules(graph):
    cycles = _strongly_connected(_module_graph(graph))
    # a package's __init__ re-exporting its modules is not a cycle of the code's logic, but it
    # would be one here if a module imported its own package's __init__: keep that out too
    assert cycles == [], f"import cycles: {cycles}"


def test_each_package_imports_only_those_below(graph):
    bad = []
    for m in graph.modules:
        top = m.split(".")[0]
        for dep in graph.find_modules_directly_imported_by(m):
            if LAYER[dep.split(".")[0]] > LAYER[top]:
                bad.append(f"{m} -> {dep}")
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
    hidden = [m for m, top in _imports(path) if m.split(".")[0] in PACKAGES and not top]
    assert hidden == [], f"{path.name}: move these imports to the top: {hidden}"


def test_packages_import_the_project_at_the_top():
    hidden = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            hidden += [f"{path.relative_to(ROOT)}: {m}" for m, top in _imports(path)
                       if m.split(".")[0] in PACKAGES and not top]  # fmt: skip
    assert hidden == []


def test_scripts_exist():
    assert all(p.exists() for p in SCRIPTS)
