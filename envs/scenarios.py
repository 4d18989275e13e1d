"""Where farms come from: :func:`load_scenario` (a preset name, a YAML/JSON file, a dict, a geo
scenario), the named presets shipped as YAML in the ``scenarios`` package, and a seeded
random-farm generator in the style of the paper's numerical section.

This module sits above both formats (``envs.config`` for farms, ``envs.geo`` for geo scenarios,
which builds farms), so neither of them needs to know the other's loader.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from envs.config import FarmConfig, farm_from_dict
from envs.geo import GeoConfig, geo_presets, load_geo_scenario
from envs.scenario_files import read_scenario_file, read_shipped_scenario
from envs.validation import ConfigError

__all__ = ["PRESETS", "load_preset", "load_scenario", "random_farm"]

#: preset name -> one-line description
PRESETS: dict[str, str] = {
    "tiny": "4 servers, 2 groups, 2 job types; exact optimum known",
    "tiny-slo": "tiny under the SLO E[T] <= 0.9; exact SLO-constrained optimum known",
    "small-1": "5 servers, 3 groups, 3 job types (random farm); exact optimum known",
    "small-2": "4 servers, 3 groups, 1 job type (random farm); exact optimum known",
    "small-3": "2 servers, 2 groups, 3 job types (random farm); exact optimum known",
    "speed-scaling": "4 servers, one DVFS group with state-dependent rate/power",
    "pas-gap": "small random farm (seed 3) where PAS is 2.7% below the exact optimum",
    "paper-100": "100 servers, 5 groups, 4 job types, rho ~= 0.6",
    "overlap-100": "100 servers, 2 job types sharing the efficient group; PAS ~15% below "
    "best-priority",
    "large-10k": "paper-100 scaled x100: 10,000 servers",
}


def load_preset(name: str) -> FarmConfig:
    """Load a preset by name (see :data:`PRESETS`)."""
    if name not in PRESETS:
        raise ConfigError(f"scenario: unknown preset {name!r}; presets are {sorted(PRESETS)}")
    return farm_from_dict(read_shipped_scenario(name))


def load_scenario(spec: str | Path | Mapping[str, Any] | FarmConfig | GeoConfig) -> FarmConfig:
    """Load a scenario from a preset name, a YAML/JSON file path, a dict, or a FarmConfig.

    Geo scenarios (``envs.geo``: presets such as ``"geo-us-eu"``, files or dicts with ``clusters``,
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


def random_farm(
    seed: int,
    n_groups: int | tuple[int, int] = (2, 4),
    n_job_types: int | tuple[int, int] = (1, 3),
    servers_per_group: int | tuple[int, int] = (1, 3),
    buffer: int | tuple[int, int] = (1, 3),
    load: float | tuple[float, float] = (0.3, 1.2),
    service_rate: tuple[float, float] = (0.5, 2.5),
    idle_power: tuple[float, float] = (0.1, 1.5),
    extra_power: tuple[float, float] = (0.5, 4.0),
    job_size: dict[str, Any] | None = None,
    name: str | None = None,
) -> FarmConfig:
    """A seeded random heterogeneous farm in the paper's style.

    Integer ranges ``(lo, hi)`` are inclusive and drawn uniformly; float ranges uniformly.
    Group k: ``count`` from ``servers_per_group``, ``buffer``, ``service_rate`` mu_k,
    ``idle_power`` eps0_k and ``busy_power`` = eps0_k + ``extra_power`` draw. Each job type gets a
    random non-empty set of groups (every group is used by at least one type); arrival rates split
    ``load * sum_k R_k mu_k`` with Dirichlet(1) weights, so the normalised offered load rho equals
    the drawn ``load``. Values are rounded to 3-4 significant digits for readable files.
    """
    rng = np.random.default_rng(seed)

    def draw_int(r: int | tuple[int, int]) -> int:
        return int(r) if isinstance(r, int) else int(rng.integers(r[0], r[1] + 1))

    def draw(r: float | tuple[float, float]) -> float:
        return float(r) if isinstance(r, (int, float)) else float(rng.uniform(r[0], r[1]))

    K, J = draw_int(n_groups), draw_int(n_job_types)
    if K < 1 or J < 1:
        raise ConfigError("random_farm: n_groups and n_job_types must be >= 1")
    groups: list[dict[str, Any]] = []
    for k in range(K):
        eps0 = round(draw(idle_power), 3)
        groups.append(
            {
                "name": f"g{k}",
                "count": draw_int(servers_per_group),
                "service_rate": round(draw(service_rate), 3),
                "busy_power": round(eps0 + draw(extra_power), 3),
                "idle_power": eps0,
                "buffer": draw_int(buffer),
            }
        )
    # random available sets covering every group
    sets = [set(np.flatnonzero(rng.random(K) < 0.5).tolist()) for _ in range(J)]
    for k in range(K):
        if not any(k in s for s in sets):
            sets[int(rng.integers(J))].add(k)
    for s in sets:
        if not s:
            s.add(int(rng.integers(K)))
    capacity = sum(g["count"] * g["service_rate"] for g in groups)
    weights = rng.dirichlet(np.ones(J))
    rho = draw(load)
    jobs = [
        {
            "name": f"j{j}",
            "arrival_rate": round(max(float(rho * capacity * weights[j]), 1e-3), 4),
            "groups": [f"g{k}" for k in sorted(sets[j])],
        }
        for j in range(J)
    ]
    d: dict[str, Any] = {"name": name or f"random-{seed}", "groups": groups, "job_types": jobs}
    if job_size is not None:
        d["job_size"] = job_size
    return farm_from_dict(d)
