"""The named scenarios shipped with the project: the farm presets (:data:`PRESETS`) and the geo
presets (``geo-*.yaml``), files of the ``scenarios/`` folder read by :mod:`serverfarm_gym.envs.scenarios.files`."""

from __future__ import annotations

from serverfarm_gym.envs.config import FarmConfig, farm_from_dict
from serverfarm_gym.envs.scenarios.files import read_shipped_scenario, shipped_scenarios
from serverfarm_gym.envs.validation import ConfigError

__all__ = ["PRESETS", "geo_presets", "load_preset"]

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


def geo_presets() -> list[str]:
    """Names of the geo presets shipped in ``scenarios/`` (files ``geo-*.yaml``)."""
    return shipped_scenarios("geo-")
