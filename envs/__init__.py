"""serverfarm-gym environments. Importing this package registers the Gymnasium ids:

* ``ServerFarm-v0``: :class:`~serverfarm_gym.envs.server_farm.ServerFarmEnv` with ``action_mode="server"``.
* ``ServerFarmGroup-v0``: the size-independent ``action_mode="group"`` variant.
* ``ServerFarmTokens-v0``: group actions seen through the farm-agnostic token encoding
  (``obs_mode="tokens"``, :mod:`serverfarm_gym.envs.tokens`); no native vector env.

``gymnasium.make("ServerFarm-v0", scenario="tiny", max_episode_steps=500)``;
``gymnasium.make_vec("ServerFarm-v0", num_envs=64, vectorization_mode="vector_entry_point")``
builds the native batched env :class:`~serverfarm_gym.envs.vector.ServerFarmVectorEnv` (also ``make_vec``'s
default mode for these ids; ``"sync"``/``"async"`` give Gymnasium's generic vector envs).

From other projects and in processes that import nothing (RLlib env runners, subprocess vector
envs), ``gymnasium.make("serverfarm_gym:ServerFarm-v0")`` imports the ``serverfarm_gym`` package,
which registers these ids (docs/ecosystem.md).
"""

from __future__ import annotations

import gymnasium as gym

from serverfarm_gym.envs.config import FarmConfig, farm_from_dict
from serverfarm_gym.envs.scenarios import PRESETS, load_preset, load_scenario, random_farm
from serverfarm_gym.envs.server_farm import ServerFarmEnv
from serverfarm_gym.envs.simulator import FarmSimulator, SimStats
from serverfarm_gym.envs.validation import ConfigError

__all__ = [
    "PRESETS",
    "ConfigError",
    "FarmConfig",
    "FarmSimulator",
    "ServerFarmEnv",
    "SimStats",
    "farm_from_dict",
    "load_preset",
    "load_scenario",
    "random_farm",
    "register_envs",
]

DEFAULT_MAX_EPISODE_STEPS = 1000


def register_envs() -> None:
    """Register the env ids; safe to call (and to import this package) more than once."""
    specs = {
        "ServerFarm-v0": {"action_mode": "server"},
        "ServerFarmGroup-v0": {"action_mode": "group"},
    }
    for env_id, kwargs in specs.items():
        if env_id not in gym.registry:
            gym.register(
                id=env_id,
                entry_point="serverfarm_gym.envs.server_farm:ServerFarmEnv",
                vector_entry_point="serverfarm_gym.envs.vector:ServerFarmVectorEnv",
                max_episode_steps=DEFAULT_MAX_EPISODE_STEPS,
                kwargs=kwargs,
            )
    if "ServerFarmTokens-v0" not in gym.registry:  # the vector env has no token observations
        gym.register(
            id="ServerFarmTokens-v0",
            entry_point="serverfarm_gym.envs.server_farm:ServerFarmEnv",
            max_episode_steps=DEFAULT_MAX_EPISODE_STEPS,
            kwargs={"action_mode": "group", "obs_mode": "tokens"},
        )


register_envs()
