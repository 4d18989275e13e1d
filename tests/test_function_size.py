"""No function of the project is over 80 lines (the project's style rule): a longer function does
several things and reads better as named steps. Length is ``end_lineno - lineno + 1``
of the ``def`` (decorators excluded, docstring and comments included).

Numba kernels are exempt: a function compiled by ``serverfarm_gym.envs.kernels.cache.kernel_njit`` or numba's
``njit`` is an event loop whose steps share registers and locals; splitting it into calls would
cost the inlining it is written for. Functions nested in a kernel are exempt with it.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 80
#: decorators whose functions are numba kernels (matched on the last name: ``numba.njit`` too)
KERNEL_DECORATORS = frozenset({"kernel_njit", "njit"})
#: directories that hold no project source: environments, build and run outputs, caches
SKIP_DIRS = frozenset({
    ".venv", "venv", ".git", "site", "build", "dist", "__pycache__", ".pytest_cache",
    ".ruff_cache", ".hypothesis", "results", "runs", "logs", "checkpoints", "node_modules",
})  # fmt: skip


def _project_files() -> list[Path]:
    out = []
    for p in ROOT.rglob("*.py"):
        parts = p.relative_to(ROOT).parts[:-1]
        if any(d in SKIP_DIRS or d.endswith(".egg-info") for d in parts):
            continue
        out.append(p)
    return sorted(out)


def _decorator_name(node: ast.expr) -> str:
    """``kernel_njit`` for ``@kernel_njit``, ``@kernel_njit(...)`` and ``@numba.njit(...)``."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _is_kernel(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(_decorator_name(d) in KERNEL_DECORATORS for d in fn.decorator_list)


def long_functions(source: str, max_lines: int = MAX_LINES) -> list[tuple[str, int, int]]:
    """(qualified name, first line, length) of every non-kernel function over ``max_lines``."""
    found: list[tuple[str, int, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if _is_kernel(child):
                    continue  # the kernel and anything nested in it
                n = child.end_lineno - child.lineno + 1
                if n > max_lines:
                    found.append((prefix + child.name, child.lineno, n))
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


FILES = _project_files()


def test_the_files_are_found() -> None:
    rel = {p.relative_to(ROOT).as_posix() for p in FILES}
    assert len(FILES) > 100
    assert {"envs/server_farm.py", "train.py", "tests/test_function_size.py"} <= rel
    assert not any(r.startswith((".venv/", "site/", "build/")) for r in rel)


def test_the_rule_is_measured_as_stated() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(80))
    short = f"def f():\n{body}\n"  # 81 lines with its def
    assert long_functions(short) == [("f", 1, 81)]
    assert long_functions(short, max_lines=81) == []
    nested = "class C:\n    def g(self):\n" + textwrap.indent(short, " " * 8)  # h: 81, g: 83
    assert [name for name, _, _ in long_functions(nested)] == ["C.g", "C.g.f"]
    for deco in ("@kernel_njit(inline='always')", "@njit", "@numba.njit(cache=True)"):
        assert long_functions(f"{deco}\n{short}") == []


def test_kernels_are_exempt_not_missed() -> None:
    """The exemption is what keeps the compiled event loops out, not a failure to find them."""
    src = (ROOT / "envs" / "kernels" / "exponential.py").read_text(encoding="utf-8")
    kernels = [
        n
        for n in ast.walk(ast.parse(src))
        if isinstance(n, ast.FunctionDef) and _is_kernel(n) and n.end_lineno - n.lineno >= MAX_LINES
    ]
    assert kernels, "expected at least one long compiled loop in envs/kernels/exponential.py"
    assert long_functions(src) == []


def test_no_function_over_80_lines() -> None:
    offenders = [
        f"{p.relative_to(ROOT).as_posix()}:{line} {name} ({n} lines)"
        for p in FILES
        for name, line, n in long_functions(p.read_text(encoding="utf-8"))
    ]
    print("\n".join(offenders))
    assert not offenders, (
        f"{len(offenders)} function(s) over {MAX_LINES} lines (split into named steps; numba "
        "kernels are exempt):\n" + "\n".join(offenders)
    )
