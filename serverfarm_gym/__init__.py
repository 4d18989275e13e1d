"""serverfarm-gym under one importable name, for use from other projects and RL libraries.

Importing this package registers the Gymnasium ids, so any fresh process (an RLlib env runner,
a subprocess vector env, a worker of another library) can build the env from its id alone::

    import gymnasium as gym
    env = gym.make("serverfarm_gym:ServerFarm-v0", scenario="paper-100")  # imports this package

    import serverfarm_gym
    gym.register_envs(serverfarm_gym)  # what linters and readers see as the reason for the import
    venv = gym.make_vec("ServerFarm-v0", num_envs=64)

Ids: ``ServerFarm-v0`` (server actions), ``ServerFarmGroup-v0`` (size-independent group actions),
``ServerFarmTokens-v0`` (group actions, farm-agnostic token observations). The subpackages:
``serverfarm_gym.envs`` (the environments, re-exported here), ``serverfarm_gym.baselines``,
``serverfarm_gym.evaluation`` and ``serverfarm_gym.agents``; docs/ecosystem.md shows each library.
"""

from __future__ import annotations

from importlib import metadata as _metadata

from serverfarm_gym.envs import (
    PRESETS,
    ConfigError,
    FarmConfig,
    ServerFarmEnv,
    load_scenario,
    register_envs,
)
from serverfarm_gym.envs.server_farm import InvalidActionWarning
from serverfarm_gym.envs.vector import ServerFarmVectorEnv, make_vec
from serverfarm_gym.envs.wrappers import MaskInObservation

try:
    __version__ = _metadata.version("serverfarm-gym")
except _metadata.PackageNotFoundError:  # a source tree on sys.path that was never installed
    __version__ = "0+unknown"

#: the Gymnasium ids this package registers
ENV_IDS = ("ServerFarm-v0", "ServerFarmGroup-v0", "ServerFarmTokens-v0")

__all__ = [
    "ENV_IDS",
    "PRESETS",
    "ConfigError",
    "FarmConfig",
    "InvalidActionWarning",
    "MaskInObservation",
    "ServerFarmEnv",
    "ServerFarmVectorEnv",
    "__version__",
    "load_scenario",
    "make_vec",
    "register_envs",
]

register_envs()
