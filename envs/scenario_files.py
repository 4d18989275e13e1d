"""Where scenario dicts come from: users' YAML/JSON files and the presets shipped in the
``scenarios`` package. Both are read by :mod:`envs.files` (errors name the file and the line,
duplicate keys are refused); the farm and geo formats (``envs.config``, ``envs.geo``) only see
the resulting dicts."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from envs.files import FileFormatError, load_mapping_file, parse_mapping_text
from envs.validation import ConfigError

__all__ = ["ScenarioFileError", "read_scenario_file", "read_shipped_scenario", "shipped_scenarios"]

#: the package that ships the preset files (``scenarios/<name>.yaml``)
PRESET_PACKAGE = "scenarios"


class ScenarioFileError(ConfigError, FileFormatError):
    """A scenario file cannot be read: ``"<file>: line N: what is wrong"``. Both a
    :class:`~envs.validation.ConfigError` (a bad scenario) and a
    :class:`~envs.files.FileFormatError` (a bad file), so either ``except`` catches it."""


def read_scenario_file(path: str | Path) -> dict[str, Any]:
    """The mapping in a user's YAML or JSON scenario file (``.json`` is JSON, else YAML)."""
    try:
        return load_mapping_file(path)
    except FileFormatError as e:
        raise ScenarioFileError(str(e)) from e
    except ValueError as e:
        # what the parsers raise themselves, e.g. Python's limit on converting a number of more
        # than 4,300 digits (no field takes one); without this the message names no file
        raise ScenarioFileError(f"{path}: {' '.join(str(e).split())}") from e


def shipped_scenarios(prefix: str = "") -> list[str]:
    """Names (file stems) of the shipped preset files whose name starts with ``prefix``."""
    root = resources.files(PRESET_PACKAGE)
    return sorted(
        p.name[: -len(".yaml")]
        for p in root.iterdir()
        if p.name.endswith(".yaml") and p.name.startswith(prefix)
    )


def read_shipped_scenario(name: str) -> dict[str, Any]:
    """The mapping in the shipped preset file ``scenarios/<name>.yaml``."""
    text = resources.files(PRESET_PACKAGE).joinpath(f"{name}.yaml").read_text(encoding="utf-8")
    try:
        return parse_mapping_text(text, f"{PRESET_PACKAGE}/{name}.yaml")
    except FileFormatError as e:
        raise ScenarioFileError(str(e)) from e
