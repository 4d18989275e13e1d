"""Every ```python block of README.md and docs/**/*.md runs as a test.

The blocks are collected from the Markdown when the tests are collected, so a changed doc is a
changed test. Convention: each block is self-contained and runs on its own, in a fresh namespace
(``__name__ == "__main__"``, as a script), in an empty temporary working directory with the
repository root on ``sys.path``, like ``python block.py`` run from anywhere. A block must not need
files it does not create (a trained model, say): show such code as ```bash or ```text. Keep blocks
to a few seconds.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# an opening fence ```python (nothing else on the line), the body, the closing fence
BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """(line of the opening fence, code) of each ```python block of a Markdown file."""
    text = path.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in BLOCK.finditer(text)]


CASES = [
    pytest.param(path, line, code, id=f"{path.relative_to(ROOT)}:{i}:line{line}")
    for path in DOCS
    for i, (line, code) in enumerate(python_blocks(path))
]


def test_blocks_are_found():
    # guards the collection itself: the README's quick start is a python block
    assert any(path.name == "README.md" for path, *_ in (c.values for c in CASES))


@pytest.mark.parametrize(("path", "line", "code"), CASES)
def test_python_block_runs(path: Path, line: int, code: str, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(ROOT))
    # compiled with the Markdown's name and line numbers, so a failure points into the doc
    compiled = compile("\n" * line + code, str(path), "exec")
    exec(compiled, {"__name__": "__main__"})
