"""The envs package's own import graph: no cycle between its modules (imports inside
functions count), no private name imported across modules, and envs/mapping_files.py the only reader of
YAML/JSON. Read from the source with ``ast``, so nothing is imported."""

from __future__ import annotations

import ast
from pathlib import Path

from serverfarm_gym import envs

ROOT = Path(envs.__file__).resolve().parent


def _modules() -> dict[str, ast.Module]:
    """Dotted name -> syntax tree of every module of the package (subpackages included)."""
    out = {}
    for p in sorted(ROOT.rglob("*.py")):
        parts = ["serverfarm_gym", "envs", *p.relative_to(ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = ast.parse(p.read_text(), str(p))
    return out


def _imports(tree: ast.Module, known: dict[str, ast.Module]) -> list[tuple[str, list[str]]]:
    """(module, imported names) for every import statement, at any depth; ``from envs import
    kernels`` counts as an import of the module ``serverfarm_gym.envs.kernels``."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [a.name for a in node.names]
            subs = [f"{node.module}.{n}" for n in names if f"{node.module}.{n}" in known]
            out += [(s, []) for s in subs]
            rest = [n for n in names if f"{node.module}.{n}" not in known]
            if rest or not subs:
                out.append((node.module, rest))
    return out


def envs_graph() -> dict[str, set[str]]:
    mods = _modules()
    return {
        name: {m for m, _ in _imports(tree, mods) if m in mods and m != name}
        for name, tree in mods.items()
    }


def test_no_import_cycle_inside_envs() -> None:
    graph = envs_graph()
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph[m]):
            assert state.get(n) != 1, f"import cycle: {' -> '.join([*path, m, n])}"
            if n not in state:
                visit(n, [*path, m])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])


def test_no_private_name_imported_across_modules() -> None:
    mods = _modules()
    for name, tree in mods.items():
        for module, names in _imports(tree, mods):
            if module.startswith("envs"):
                private = [n for n in names if n.startswith("_")]
                assert not private, f"{name} imports {private} from {module}"


def test_files_is_the_only_yaml_json_reader() -> None:
    mods = _modules()
    for name, tree in mods.items():
        if name == "serverfarm_gym.envs.mapping_files":
            continue
        readers = {m for m, _ in _imports(tree, mods)} & {"yaml", "json"}
        assert not readers, (
            f"{name} imports {readers}: read files with serverfarm_gym.envs.mapping_files"
        )
