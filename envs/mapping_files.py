"""One reader for every YAML / JSON file the project takes from users (scenarios, hyperparameters,
saved run arguments): errors name the file and the line, and a duplicate key is refused.

PyYAML's ``safe_load`` keeps the last of two equal keys in a mapping (``{count: 2, count: 200}`` is
``{"count": 200}``) and ``json.loads`` does the same, which would silently change a farm; both are
refused here. Every problem is a :class:`FileFormatError` (a ``ValueError``) whose message reads
``"<file>: line N: what is wrong"``.

Every file read from a path goes through :func:`read_regular_file`, which is also the primitive of
``serverfarm_gym.agents.common.artefacts`` (models, checkpoints, sidecars): only regular files are opened (a FIFO given as
a file would block the reader forever, a device could be endless), opened non-blocking so that the
check itself cannot hang, and refused above a size limit before anything is read. Nesting deeper
than :data:`MAX_NESTING` levels (or an alias that contains itself) is refused after parsing; a
parser that runs out of stack on deeper text gives the same error instead of a ``RecursionError``.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "MAX_FILE_BYTES",
    "MAX_NESTING",
    "FileFormatError",
    "check_nesting",
    "load_mapping_file",
    "parse_mapping_text",
    "read_regular_file",
]

#: the largest YAML/JSON file read (a scenario of 100,000 job types is ~10 MB)
MAX_FILE_BYTES = 64 * 2**20
#: the deepest nesting of mappings and lists accepted (the project's files nest < 10 levels)
MAX_NESTING = 64


class FileFormatError(ValueError):
    """A structured file cannot be read: the message is ``"<file>: line N: what is wrong"``."""


_FILE_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def read_regular_file(
    path: str | Path, max_bytes: int = MAX_FILE_BYTES, expected: str = "a YAML or JSON file"
) -> bytes:
    """The bytes of the regular file ``path``, at most ``max_bytes`` of them.

    Raises :class:`FileFormatError` naming the file for a missing or unreadable path, anything
    but a regular file (directory, FIFO, socket, device: ``expected`` says what was wanted), or
    a file larger than ``max_bytes``. The file is opened with ``O_NONBLOCK`` and checked with
    ``fstat`` on the open descriptor, so neither a FIFO nor a swap of the path after a check
    can make the read block."""
    p = Path(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(p, flags)
    except FileNotFoundError as e:
        raise FileFormatError(f"{p}: no such file") from e
    except IsADirectoryError as e:
        raise FileFormatError(f"{p}: is a directory, expected {expected}") from e
    except OSError as e:
        raise FileFormatError(f"{p}: cannot be read ({e.strerror})") from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = next((k for test, k in _FILE_KINDS if test(st.st_mode)), "not a regular file")
            raise FileFormatError(f"{p}: is {kind}, expected {expected} (a regular file)")
        if st.st_size > max_bytes:
            raise FileFormatError(
                f"{p}: {st.st_size:,} bytes, above the limit of {max_bytes:,} for {expected}"
            )
        chunks, left = [], max_bytes + 1
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as e:
        raise FileFormatError(f"{p}: cannot be read ({e.strerror})") from e
    finally:
        os.close(fd)
    raw = b"".join(chunks)
    if len(raw) > max_bytes:  # it grew while being read
        raise FileFormatError(f"{p}: larger than the limit of {max_bytes:,} bytes for {expected}")
    return raw


def _containers(node: Any) -> list[Any]:
    values = node.values() if isinstance(node, dict) else node
    return [v for v in values if isinstance(v, (dict, list))]


def check_nesting(data: Any, source: str, limit: int = MAX_NESTING) -> None:
    """Refuse ``data`` nested deeper than ``limit`` mappings/lists, or containing itself (a YAML
    alias inside the node it names). Each distinct container is visited once, so shared YAML
    aliases (``&a [*b, *b, ...]``) cost their number of nodes, not their expansion."""
    height: dict[int, int] = {}
    active: set[int] = set()  # the containers on the current path
    stack: list[tuple[Any, bool]] = [(data, False)]
    while stack:
        node, done = stack.pop()
        if not isinstance(node, (dict, list)):
            continue
        key = id(node)
        if done:
            active.discard(key)
            h = 1 + max((height[id(c)] for c in _containers(node)), default=0)
            if h > limit:
                raise FileFormatError(
                    f"{source}: nested deeper than {limit} levels of mappings and lists; "
                    "flatten the file"
                )
            height[key] = h
            continue
        if key in height:
            continue
        if key in active:
            raise FileFormatError(
                f"{source}: an alias refers to a mapping or list that contains it (a cycle); "
                "write the value out"
            )
        active.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _containers(node) if id(c) not in height)


def _too_deep(source: str) -> FileFormatError:
    return FileFormatError(
        f"{source}: nested deeper than the parser can follow (the limit is {MAX_NESTING} levels "
        "of mappings and lists); flatten the file"
    )


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping."""


def _construct_unique_mapping(
    loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False
) -> dict[Any, Any]:
    # only the keys written in this mapping count: keys merged in with ``<<: *anchor`` may be
    # overridden by an explicit key (YAML's merge rule), so the check runs before flattening
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=deep)
        try:
            first = seen.get(key)
        except TypeError:  # an unhashable key; construct_mapping below reports it
            continue
        if first is not None:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"duplicate key {key!r} (first given on line {first}); remove one of them",
                key_node.start_mark,
            )
        seen[key] = key_node.start_mark.line + 1
    loader.flatten_mapping(node)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping
)


def _unique_json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}; remove one of them")
        out[key] = value
    return out


def _json_duplicate_line(text: str) -> str:
    """``"line N: "`` of the first duplicate key in JSON ``text``, found by the YAML reader
    (JSON without tabs is YAML, and its duplicate check knows positions); ``""`` if it cannot."""
    try:
        yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.MarkedYAMLError as e:
        if e.problem_mark is not None and "duplicate key" in str(e.problem):
            return f"line {e.problem_mark.line + 1}: "
    return ""


#: a run of digits longer than Python converts to an int by default (sys.get_int_max_str_digits)
_LONG_NUMBER = re.compile(rf"\d{{{sys.get_int_max_str_digits() or 4300},}}")
_KEY_BEFORE = re.compile(r"""["']?([A-Za-z_][\w-]*)["']?\s*:\s*[-+]?$""")


def _check_long_numbers(text: str, source: str) -> None:
    """Refuse a number too long to convert, naming its line and key: the parser's own error
    (Python's int-to-str limit) names neither, and no field of any file takes such a value."""
    m = _LONG_NUMBER.search(text)
    if m is None:
        return
    line_start = text.rfind("\n", 0, m.start()) + 1
    line = text.count("\n", 0, m.start()) + 1
    key = _KEY_BEFORE.search(text[line_start : m.start()])
    field = f"{key.group(1)}: " if key else ""
    n = len(m.group(0))
    raise FileFormatError(
        f"{source}: line {line}: {field}a number of {n:,} digits; no field takes a value that "
        "large (every rate, power and count has a documented limit: docs/scenarios.md)"
    )


def parse_mapping_text(text: str, source: str, fmt: str = "yaml") -> dict[str, Any]:
    """Parse YAML (``fmt="yaml"``) or JSON text whose top level must be a mapping.

    ``source`` names the text in error messages (a file path, ``"<string>"``).
    """
    _check_long_numbers(text, source)
    if fmt == "json":
        try:
            data = json.loads(text, object_pairs_hook=_unique_json_object)
        except json.JSONDecodeError as e:
            raise FileFormatError(f"{source}: line {e.lineno}: {e.msg} (column {e.colno})") from e
        except ValueError as e:  # the duplicate-key hook; json gives no position for it
            raise FileFormatError(f"{source}: {_json_duplicate_line(text)}{e}") from e
        except RecursionError:
            raise _too_deep(source) from None
    elif fmt == "yaml":
        try:
            data = yaml.load(
                text, Loader=_UniqueKeyLoader
            )  # a SafeLoader subclass: no arbitrary objects
        except yaml.MarkedYAMLError as e:
            mark = e.problem_mark or e.context_mark
            where = f"line {mark.line + 1}: " if mark is not None else ""
            what = " ".join(str(x) for x in (e.context, e.problem) if x)
            raise FileFormatError(f"{source}: {where}{what}") from e
        except yaml.YAMLError as e:
            raise FileFormatError(f"{source}: {e}") from e
        except RecursionError:
            raise _too_deep(source) from None
    else:
        raise ValueError(f"fmt: expected 'yaml' or 'json', got {fmt!r}")
    if data is None:
        data = {}
    check_nesting(data, source)
    if not isinstance(data, dict):
        raise FileFormatError(
            f"{source}: line 1: the top level must be a mapping (key: value pairs), "
            f"got {type(data).__name__}"
        )
    return data


def load_mapping_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML or JSON file (by suffix: ``.json`` is JSON, anything else YAML) into a dict.

    Raises :class:`FileFormatError` for a missing, unreadable, undecodable (binary) or malformed
    file, anything but a regular file (:func:`read_regular_file`), a file above
    :data:`MAX_FILE_BYTES`, nesting deeper than :data:`MAX_NESTING`, a duplicate key, or a top
    level that is not a mapping.
    """
    p = Path(path)
    raw = read_regular_file(p)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise FileFormatError(
            f"{p}: line {line}: not UTF-8 text (byte {e.start}); expected a YAML or JSON file"
        ) from e
    if "\x00" in text:
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise FileFormatError(f"{p}: line {line}: binary data (NUL byte); expected YAML or JSON")
    return parse_mapping_text(text, str(p), "json" if p.suffix.lower() == ".json" else "yaml")
