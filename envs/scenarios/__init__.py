"""Where farms come from, in one place: loading, the shipped files, presets and generators.

* :func:`load_scenario` (:mod:`serverfarm_gym.envs.scenarios.loading`): a preset name, a YAML/JSON file, a dict,
  a geo scenario or a config -> a validated :class:`~serverfarm_gym.envs.config.FarmConfig`;
  :func:`load_geo_scenario` for geo scenarios (:class:`~serverfarm_gym.envs.geo.GeoConfig`).
* :data:`PRESETS`, :func:`load_preset`, :func:`geo_presets` (:mod:`serverfarm_gym.envs.scenarios.presets`): the
  named scenarios shipped as YAML in the repository's ``scenarios/`` folder.
* :mod:`serverfarm_gym.envs.scenarios.files`: reading users' files and the shipped ones (errors name the file and
  the line), and :func:`~serverfarm_gym.envs.scenarios.files.data_dir`, where the shipped files are in a source
  checkout and in an installed wheel.
* :func:`random_farm` (:mod:`serverfarm_gym.envs.scenarios.random_farms`): seeded random farms in the paper's
  style.

The formats themselves (``serverfarm_gym.envs.config``, ``serverfarm_gym.envs.geo``) read no file and know no loader.
"""

from __future__ import annotations

from serverfarm_gym.envs.scenarios.loading import load_geo_scenario, load_scenario
from serverfarm_gym.envs.scenarios.presets import PRESETS, geo_presets, load_preset
from serverfarm_gym.envs.scenarios.random_farms import random_farm

__all__ = [
    "PRESETS",
    "geo_presets",
    "load_geo_scenario",
    "load_preset",
    "load_scenario",
    "random_farm",
]
