"""Loading a scenario from whatever names it: :func:`load_scenario` (a preset name, a YAML/JSON
file, a dict, a geo scenario, a config) and :func:`load_geo_scenario` (geo scenarios only).

This module sits above both formats (``serverfarm_gym.envs.config`` for farms, ``serverfarm_gym.envs.geo`` for geo scenarios,
which builds farms), so neither of them needs to know the other's loader or reads a file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from serverfarm_gym.envs.config import FarmConfig, farm_from_dict
from serverfarm_gym.envs.geo import GeoConfig, geo_from_dict
from serverfarm_gym.envs.scenarios.files import read_scenario_file, read_shipped_scenario
from serverfarm_gym.envs.scenarios.presets import PRESETS, geo_presets, load_preset
from serverfarm_gym.envs.validation import ConfigError

__all__ = ["load_geo_scenario", "load_scenario"]


def load_scenario(spec: str | Path | Mapping[str, Any] | FarmConfig | GeoConfig) -> FarmConfig:
    """Load a scenario from a preset name, a YAML/JSON file path, a dict, or a FarmConfig.

    Geo scenarios (``serverfarm_gym.envs.geo``: presets such as ``"geo-us-eu"``, files or dicts with ``clusters``,
    a ``GeoConfig``) are accepted too and turned into their farm by ``GeoConfig.to_farm()``; the
    farm's ``geo`` field keeps the geo config for geo-aware policies. A file's errors start with
    its path (``ConfigError``; unreadable or malformed files also name the line).
    """
    if isinstance(spec, FarmConfig):
        return spec
    if isinstance(spec, (Mapping, GeoConfig)):
        return _from_dict(spec)
    if not isinstance(spec, (str, Path)):
        raise ConfigError(
            "scenario: expected a preset name, a file path, a dict or a FarmConfig, "
            f"got {type(spec).__name__}"
        )
    if isinstance(spec, str) and spec in PRESETS:
        return load_preset(spec)
    path = Path(spec)
    if isinstance(spec, str) and not path.is_file() and spec in geo_presets():
        return _geo_farm(spec)
    if not path.is_file():
        raise ConfigError(
            f"scenario: {str(spec)!r} is neither a preset ({sorted(PRESETS)}), a geo preset "
            f"({geo_presets()}) nor an existing file"
        )
    data = read_scenario_file(path)
    try:
        return _from_dict(data)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from e


def _from_dict(spec: Mapping[str, Any] | GeoConfig) -> FarmConfig:
    if isinstance(spec, GeoConfig) or "clusters" in spec:
        return _geo_farm(spec)
    return farm_from_dict(spec)


def _geo_farm(spec: str | Mapping[str, Any] | GeoConfig) -> FarmConfig:
    """The farm of a geo scenario, remembering the geo config it came from."""
    geo = load_geo_scenario(spec)
    return replace(geo.to_farm(), geo=geo)


def load_geo_scenario(spec: str | Path | Mapping[str, Any] | GeoConfig) -> GeoConfig:
    """Load a geo scenario from a preset name (e.g. ``"geo-us-eu"``), a YAML/JSON path or a dict."""
    if isinstance(spec, GeoConfig):
        return spec
    if isinstance(spec, Mapping):
        return geo_from_dict(spec)
    if not isinstance(spec, (str, Path)):
        raise ConfigError(
            "geo scenario: expected a preset name, a file path, a dict or a GeoConfig, "
            f"got {type(spec).__name__}"
        )
    path = Path(spec)
    if isinstance(spec, str) and not path.is_file() and spec in geo_presets():
        return geo_from_dict(read_shipped_scenario(spec))
    if not path.is_file():
        raise ConfigError(
            f"geo scenario: {str(spec)!r} is neither a geo preset ({geo_presets()}) "
            "nor an existing file"
        )
    data = read_scenario_file(path)
    try:
        return geo_from_dict(data)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from e
