"""RLlib support: the env with the Dict observation RLlib's action-masking RLModule expects.

RLlib's action-masking example (``ray.rllib.examples.rl_modules.classes.action_masking_rlm``,
``ActionMaskingTorchRLModule``, PPO) reads observations of the form
``{"action_mask": Box(0, 1, (n_actions,), float32), "observations": <the env's observation>}``
and sets the logits of masked actions to a very large negative number.
:class:`ActionMaskObservation` wraps a :class:`~serverfarm_gym.envs.server_farm.ServerFarmEnv` that way, and
:class:`RLlibServerFarmEnv` is that env as a class RLlib can build from an ``env_config``::

    from ray.rllib.algorithms.ppo import PPOConfig
    from serverfarm_gym.envs.rllib import RLlibServerFarmEnv, action_masking_module_spec

    config = (
        PPOConfig()
        .environment(env=RLlibServerFarmEnv, env_config={"scenario": "paper-100"})
        .rl_module(rl_module_spec=action_masking_module_spec())
    )
    algo = config.build_algo()
    algo.train()

This module imports nothing from Ray until :func:`action_masking_module_spec` is called, so the
wrapper works (and is tested) without Ray installed. ``pip install -e ".[rllib]"`` installs
RLlib's dependencies without its ``gymnasium==1.2.2`` pin (see ``pyproject.toml``).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from serverfarm_gym import envs  # noqa: F401  (registers the env ids)
from serverfarm_gym.envs.sampled_farm_env import SampledFarmTokenEnv
from serverfarm_gym.envs.wrappers import PRESETS, MaskInObservation


class ActionMaskObservation(MaskInObservation):
    """``{"action_mask": float32[n_actions] (1 = valid), "observations": obs}`` observations:
    :class:`~serverfarm_gym.envs.wrappers.MaskInObservation` with its ``"rllib"`` preset.

    The mask is the one of the decision the observation belongs to (``action_masks()`` after
    ``reset``/``step``), as 0/1 floats in a ``Box(0, 1)``, the space RLlib's example uses.
    """

    def __init__(self, env: gym.Env):
        super().__init__(env, **PRESETS["rllib"])


class RLlibServerFarmEnv(ActionMaskObservation):
    """The env as RLlib builds it: ``PPOConfig().environment(env=RLlibServerFarmEnv,
    env_config={...})``. ``env_config`` holds ``gymnasium.make`` arguments: ``env_id`` (default
    ``"ServerFarm-v0"``; ``"ServerFarmGroup-v0"`` for the size-independent mode),
    ``max_episode_steps`` and any :class:`~serverfarm_gym.envs.server_farm.ServerFarmEnv` argument. RLlib passes
    an ``EnvContext`` (a dict); its worker/vector indices are not used. ``gymnasium.make``'s own
    wrappers (time limit, order enforcing, checker) stay in place."""

    def __init__(self, env_config: dict[str, Any] | None = None):
        cfg = dict(env_config or {})
        env_id = cfg.pop("env_id", "ServerFarm-v0")
        super().__init__(gym.make(env_id, **cfg))


def make_rllib_env(env_config: dict[str, Any] | None = None) -> gym.Env:
    """Env creator (for ``ray.tune.registry.register_env``): ``RLlibServerFarmEnv(env_config)``."""
    return RLlibServerFarmEnv(env_config)


def action_masking_module_spec(hiddens: tuple[int, ...] = (64, 64)) -> Any:
    """``RLModuleSpec`` of RLlib's example ``ActionMaskingTorchRLModule`` (PPO, torch)."""
    # imported here on purpose: Ray is an optional dependency (the ``rllib`` extra), and the
    # wrappers above must import and work without it
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec
    from ray.rllib.examples.rl_modules.classes.action_masking_rlm import (
        ActionMaskingTorchRLModule,
    )

    return RLModuleSpec(
        module_class=ActionMaskingTorchRLModule,
        model_config={"head_fcnet_hiddens": list(hiddens), "head_fcnet_activation": "relu"},
    )


class RLlibSampledFarmEnv(ActionMaskObservation):
    """Domain randomisation for RLlib: :class:`~serverfarm_gym.envs.sampled_farm_env.SampledFarmTokenEnv` (a new
    farm every episode, token observations) with the action-mask observation;
    ``env_config`` holds its arguments (``distribution``, ``max_groups``, ``max_levels``,
    ``episode_steps``, ``held_out`` and ``ServerFarmEnv`` arguments). Its ``"observations"`` entry
    is the token dict: use ``serverfarm_gym.agents.generalist.rllib_module.token_module_spec()`` (RLlib's default encoders
    need flat boxes)."""

    def __init__(self, env_config: dict[str, Any] | None = None):
        super().__init__(SampledFarmTokenEnv(**dict(env_config or {})))
