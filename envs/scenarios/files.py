"""Where scenario dicts come from: users' YAML/JSON files and the shipped scenario files (the
repository's ``scenarios/`` folder: presets, geo presets, ``suites/``). Both are read by
:mod:`serverfarm_gym.envs.mapping_files` (errors name the file and the line, duplicate keys are refused); the farm and
geo formats (``serverfarm_gym.envs.config``, ``serverfarm_gym.envs.geo``) only see the resulting dicts.

The shipped files are data, not code: a source checkout reads them from ``scenarios/`` beside the
``envs`` package; an installed wheel carries the same folder as ``envs/scenarios/data/``
(pyproject.toml maps the data-only package ``serverfarm_gym.envs.scenarios.data`` to ``scenarios/``), so both
layouts read the same files through :func:`data_dir`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from serverfarm_gym.envs.mapping_files import FileFormatError, load_mapping_file, parse_mapping_text
from serverfarm_gym.envs.validation import ConfigError

__all__ = [
    "ScenarioFileError",
    "data_dir",
    "read_scenario_file",
    "read_shipped_scenario",
    "shipped_scenarios",
]

_HERE = Path(__file__).resolve().parent
#: where the shipped files are: the wheel's data package first, then the source checkout's folder
_DATA_DIRS = (_HERE / "data", _HERE.parent.parent / "scenarios")


class ScenarioFileError(ConfigError, FileFormatError):
    """A scenario file cannot be read: ``"<file>: line N: what is wrong"``. Both a
    :class:`~serverfarm_gym.envs.validation.ConfigError` (a bad scenario) and a
    :class:`~serverfarm_gym.envs.mapping_files.FileFormatError` (a bad file), so either ``except`` catches it."""


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


def data_dir() -> Path:
    """The folder of the shipped scenario files (``<name>.yaml`` presets, ``suites/``)."""
    for candidate in _DATA_DIRS:
        if (candidate / "tiny.yaml").is_file():
            return candidate
    raise FileNotFoundError(
        f"scenario files: neither {_DATA_DIRS[0]} nor {_DATA_DIRS[1]} holds the shipped "
        "scenarios; reinstall serverfarm-gym (pip install serverfarm-gym) or run from a source "
        "checkout"
    )


def shipped_scenarios(prefix: str = "") -> list[str]:
    """Names (file stems) of the shipped preset files whose name starts with ``prefix``."""
    root = data_dir()
    return sorted(
        p.name[: -len(".yaml")]
        for p in root.iterdir()
        if p.name.endswith(".yaml") and p.name.startswith(prefix)
    )


def read_shipped_scenario(name: str) -> dict[str, Any]:
    """The mapping in the shipped preset file ``scenarios/<name>.yaml``."""
    text = (data_dir() / f"{name}.yaml").read_text(encoding="utf-8")
    try:
        return parse_mapping_text(text, f"scenarios/{name}.yaml")
    except FileFormatError as e:
        raise ScenarioFileError(str(e)) from e
