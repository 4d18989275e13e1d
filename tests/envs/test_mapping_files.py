"""serverfarm_gym.envs.mapping_files, the one reader of users' YAML/JSON files, and the scenario loaders built on it:
every unreadable file is refused with ``"<file>: line N: what is wrong"``."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from serverfarm_gym.envs.mapping_files import (
    MAX_NESTING,
    FileFormatError,
    load_mapping_file,
    parse_mapping_text,
    read_regular_file,
)
from serverfarm_gym.envs.scenarios import load_geo_scenario, load_scenario
from serverfarm_gym.envs.scenarios.files import ScenarioFileError
from serverfarm_gym.envs.validation import ConfigError

TINY_YAML = """\
name: t
groups:
  - {name: slow, count: 2, service_rate: 1.0, busy_power: 2.0, idle_power: 1.0, buffer: 3}
job_types:
  - {name: web, arrival_rate: 1.5, groups: [slow]}
"""

# (id, file name, content, line the message must name, regex for the rest of the message)
BAD_FILES: list[tuple[str, str, bytes, int, str]] = [
    ("malformed yaml", "bad.yaml", b"name: t\ngroups: [1, 2\njob_types: []\n", 3, r"expected ','"),
    (
        "malformed json",
        "bad.json",
        b'{\n  "name": "t",\n  "groups": [1, 2,]\n}\n',
        3,
        r"Expecting value",
    ),
    ("binary", "farm.yaml", b"name: t\n\x89PNG\r\n\x1a\n\x00\xff\xfe", 2, r"not UTF-8"),
    ("nul byte", "farm.yaml", b"name: t\ngroups: \x00\n", 2, r"binary data"),
    (
        "duplicate yaml key",
        "dup.yaml",
        b"groups:\n  - {name: slow, count: 2, count: 200, buffer: 3}\n",
        2,
        r"duplicate key 'count' \(first given on line 2\)",
    ),
    (
        "duplicate yaml key across lines",
        "dup2.yaml",
        b"name: a\nbuffer: 3\nname: b\n",
        3,
        r"duplicate key 'name' \(first given on line 1\)",
    ),
    (
        "duplicate json key",
        "dup.json",
        b'{\n  "count": 2,\n  "count": 200\n}\n',
        3,
        r"duplicate key 'count'",
    ),
    ("yaml list at top", "list.yaml", b"- 1\n- 2\n", 1, r"top level must be a mapping"),
    ("json scalar at top", "num.json", b"42\n", 1, r"top level must be a mapping"),
]


def _message(path: Path, line: int, rest: str) -> str:
    return rf"^{re.escape(str(path))}: line {line}: .*{rest}"


@pytest.mark.parametrize(
    ("name", "content", "line", "rest"), [c[1:] for c in BAD_FILES], ids=[c[0] for c in BAD_FILES]
)
def test_bad_file_names_the_file_and_the_line(
    tmp_path: Path, name: str, content: bytes, line: int, rest: str
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(FileFormatError, match=_message(path, line, rest)):
        load_mapping_file(path)
    # the scenario loaders give the same message, as a ConfigError that is also a FileFormatError
    for load in (load_scenario, load_geo_scenario):
        with pytest.raises(ScenarioFileError, match=_message(path, line, rest)) as err:
            load(path)
        assert isinstance(err.value, ConfigError) and isinstance(err.value, FileFormatError)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(FileFormatError, match=rf"^{re.escape(str(tmp_path / 'no.yaml'))}: no such"):
        load_mapping_file(tmp_path / "no.yaml")
    with pytest.raises(FileFormatError, match="is a directory"):
        load_mapping_file(tmp_path)
    # a path that does not exist is not a preset either: the loader says both
    with pytest.raises(ConfigError, match="neither a preset"):
        load_scenario(str(tmp_path / "no.yaml"))


def test_duplicate_key_is_refused_not_overwritten() -> None:
    """PyYAML and json keep the last of two equal keys; the reader refuses them."""
    with pytest.raises(FileFormatError, match=r"<s>: line 1: .*duplicate key 'count'"):
        parse_mapping_text("{count: 2, count: 200}", "<s>")
    with pytest.raises(FileFormatError, match=r"<s>: .*duplicate key 'count'"):
        parse_mapping_text('{"count": 2, "count": 200}', "<s>", "json")


def test_valid_files_and_merge_keys(tmp_path: Path) -> None:
    y = tmp_path / "farm.yaml"
    y.write_text(TINY_YAML)
    c = load_scenario(y)
    assert c.n_servers == 2 and c.job_types[0].arrival_rate == (1.5,)
    # YAML anchors and merge keys still work (flatten_mapping runs before the duplicate check)
    text = "base: &b {count: 2, buffer: 3}\ngroup: {<<: *b, buffer: 4}\n"
    assert parse_mapping_text(text, "<s>")["group"] == {"count": 2, "buffer": 4}
    assert parse_mapping_text("", "<s>") == {}


def test_a_scenario_error_in_a_file_names_the_file(tmp_path: Path) -> None:
    p = tmp_path / "farm.yaml"
    p.write_text(TINY_YAML.replace("buffer: 3", "buffer: 0"))
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(p))}: groups\[0\] \(slow\)\.buffer"):
        load_scenario(p)


# ---------------------------------------------------------------------------------------------
# regular files only, size limits, nesting limits (read_regular_file, check_nesting)
# ---------------------------------------------------------------------------------------------
def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    """A named pipe with no writer would block open() or read() forever; it is refused at once
    (for the scenario loaders too)."""
    fifo = tmp_path / "farm.yaml"
    os.mkfifo(fifo)
    with pytest.raises(FileFormatError, match=rf"^{re.escape(str(fifo))}: is a FIFO"):
        load_mapping_file(fifo)
    with pytest.raises(ConfigError, match=re.escape(str(fifo))):
        load_scenario(fifo)
    with pytest.raises(FileFormatError, match="is a character device"):
        read_regular_file("/dev/zero")


def test_a_file_above_the_size_limit_is_refused_before_reading(tmp_path: Path) -> None:
    p = tmp_path / "big.yaml"
    p.write_bytes(b"name: t\n" + b"#" * 200)
    with pytest.raises(FileFormatError, match=r"208 bytes, above the limit of 100"):
        read_regular_file(p, max_bytes=100)
    assert read_regular_file(p, max_bytes=208).startswith(b"name: t")


@pytest.mark.parametrize("fmt", ["json", "yaml"])
@pytest.mark.parametrize("depth", [MAX_NESTING + 1, 100_000])
def test_deep_nesting_is_a_named_error_not_a_recursion_error(
    tmp_path: Path, fmt: str, depth: int
) -> None:
    """Just above the limit (parsed, then refused) and far above it (the parsers' recursion
    gives out first): the same FileFormatError naming the file."""
    p = tmp_path / f"deep.{fmt}"
    p.write_text('{"a": ' + "[" * depth + "]" * depth + "}")
    with pytest.raises(FileFormatError, match=rf"^{re.escape(str(p))}: nested deeper than"):
        load_mapping_file(p)
    ok = '{"a": ' + "[" * (MAX_NESTING - 1) + "]" * (MAX_NESTING - 1) + "}"
    assert parse_mapping_text(ok, "<s>", fmt)["a"] is not None


def test_a_yaml_alias_inside_itself_is_refused_and_shared_aliases_are_cheap() -> None:
    with pytest.raises(FileFormatError, match=r"<s>: an alias refers to .*\(a cycle\)"):
        parse_mapping_text("a: &x [1, *x]\n", "<s>")
    # nine levels of ten aliases each: 10**9 leaves when expanded, a few dozen nodes to check
    lines = ["l0: &l0 [x]"] + [
        f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 10)
    ]
    data = parse_mapping_text("\n".join(lines) + "\n", "<s>")
    assert len(data["l9"]) == 10


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_a_number_too_long_to_convert_names_its_line_and_key(fmt: str) -> None:
    # Python refuses int() of more than 4,300 digits; the parser's own error named neither the
    # line nor the key
    huge = "7" * 5_000
    text = (
        f"name: x\ngroups:\n  - {{name: a, count: {huge}}}\n"
        if fmt == "yaml"
        else f'{{"name": "x",\n "groups": [{{"count": {huge}}}]}}'
    )
    line = 3 if fmt == "yaml" else 2
    with pytest.raises(FileFormatError, match=rf"^f: line {line}: count: a number of 5,000 digits"):
        parse_mapping_text(text, "f", fmt)
    assert parse_mapping_text("a: " + "9" * 400, "s")["a"] == int("9" * 400)  # long is fine
