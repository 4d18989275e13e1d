"""One reader for every YAML / JSON file the project takes from users (scenarios, hyperparameters,
saved run arguments): errors name the file and the line, and a duplicate key is refused.

PyYAML's ``safe_load`` keeps the last of two equal keys in a mapping (``{count: 2, count: 200}`` is
``{"count": 200}``) and ``json.loads`` does the same, which would silently change a farm; both are
refused here. Every problem is a :class:`FileFormatError` (a ``ValueError``) whose message reads
``"<file>: line N: what is wrong"``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

__all__ = ["FileFormatError", "load_mapping_file", "parse_mapping_text"]


class FileFormatError(ValueError):
    """A structured file cannot be read: the message is ``"<file>: line N: what is wrong"``."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping."""


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False):
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


def parse_mapping_text(text: str, source: str, fmt: str = "yaml") -> dict[str, Any]:
    """Parse YAML (``fmt="yaml"``) or JSON text whose top level must be a mapping.

    ``source`` names the text in error messages (a file path, ``"<string>"``).
    """
    if fmt == "json":
        try:
            data = json.loads(text, object_pairs_hook=_unique_json_object)
        except json.JSONDecodeError as e:
            raise FileFormatError(f"{source}: line {e.lineno}: {e.msg} (column {e.colno})") from e
        except ValueError as e:  # the duplicate-key hook; json gives no position for it
            raise FileFormatError(f"{source}: {_json_duplicate_line(text)}{e}") from e
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
    else:
        raise ValueError(f"fmt: expected 'yaml' or 'json', got {fmt!r}")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise FileFormatError(
            f"{source}: line 1: the top level must be a mapping (key: value pairs), "
            f"got {type(data).__name__}"
        )
    return data


def load_mapping_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML or JSON file (by suffix: ``.json`` is JSON, anything else YAML) into a dict.

    Raises :class:`FileFormatError` for a missing, unreadable, undecodable (binary) or malformed
    file, a duplicate key, or a top level that is not a mapping.
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError as e:
        raise FileFormatError(f"{p}: no such file") from e
    except IsADirectoryError as e:
        raise FileFormatError(f"{p}: is a directory, expected a YAML or JSON file") from e
    except OSError as e:
        raise FileFormatError(f"{p}: cannot be read ({e.strerror})") from e
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
