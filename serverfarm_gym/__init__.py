"""serverfarm-gym under one importable name, for use from other projects and RL libraries.

Importing this package registers the Gymnasium ids, so any fresh process (an RLlib env runner,
a subprocess vector env, a worker of another library) can build the env from its id alone::

    import gymnasium as gym
    env = gym.make("serverfarm_gym:ServerFarm-v0", scenario="paper-100")  # imports this package

    import serverfarm_gym
    gym.register_envs(serverfarm_gym)  # what linters and readers see as the reason for the import
    venv = gym.make_vec("ServerFarm-v0", num_envs=64)

Ids: ``ServerFarm-v0`` (server actions), ``ServerFarmGroup-v0`` (size-independent group actions),
``ServerFarmTokens-v0`` (group actions, farm-agnostic token observations). The package is thin:
the environments live in the top-level ``envs`` package it re-exports from (``baselines``,
``evaluation`` and ``agents`` are installed beside it); docs/ecosystem.md shows each library.
"""

from __future__ import annotations

from pathlib import Path

import envs as _envs

# the distribution installs a top-level package named ``envs``; a user project with its own
# ``envs`` earlier on sys.path would shadow it, and the ids would resolve to that project's code
if not hasattr(_envs, "ServerFarmEnv") or not hasattr(_envs, "register_envs"):
    raise ImportError(
        f"serverfarm_gym: the 'envs' package found at {Path(_envs.__file__ or '?').parent} is not "
        "serverfarm-gym's (another project's 'envs' package shadows it on sys.path); rename that "
        "package or put serverfarm-gym's install location first on sys.path"
    )

from envs import (  # after the shadowing check above
    PRESETS,
    ConfigError,
    FarmConfig,
    ServerFarmEnv,
    load_scenario,
    register_envs,
)
from envs.server_farm import InvalidActionWarning
from envs.vector import ServerFarmVectorEnv, make_vec
from envs.wrappers import MaskInObservation

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
    "load_scenario",
    "make_vec",
    "register_envs",
]

register_envs()
