"""Where farms come from, in one place: loading, the shipped files, presets and generators.

* :func:`load_scenario` (:mod:`envs.scenarios.loading`): a preset name, a YAML/JSON file, a dict,
  a geo scenario or a config -> a validated :class:`~envs.config.FarmConfig`;
  :func:`load_geo_scenario` for geo scenarios (:class:`~envs.geo.GeoConfig`).
* :data:`PRESETS`, :func:`load_preset`, :func:`geo_presets` (:mod:`envs.scenarios.presets`): the
  named scenarios shipped as YAML in the repository's ``scenarios/`` folder.
* :mod:`envs.scenarios.files`: reading users' files and the shipped ones (errors name the file and
  the line), and :func:`~envs.scenarios.files.data_dir`, where the shipped files are in a source
  checkout and in an installed wheel.
* :func:`random_farm` (:mod:`envs.scenarios.random_farms`): seeded random farms in the paper's
  style.

The formats themselves (``envs.config``, ``envs.geo``) read no file and know no loader.
"""

from __future__ import annotations

from envs.scenarios.loading import load_geo_scenario, load_scenario
from envs.scenarios.presets import PRESETS, geo_presets, load_preset
from envs.scenarios.random_farms import random_farm

__all__ = [
    "PRESETS",
    "geo_presets",
    "load_geo_scenario",
    "load_preset",
    "load_scenario",
    "random_farm",
]
