"""Domain randomisation as one Gymnasium env: a new farm every episode, seen as group tokens.

The token encoding (``serverfarm_gym.envs.tokens``) has the same spaces for every farm within its padding
limits, so an env whose *farm* changes at every reset still has fixed observation and action
spaces. :class:`SampledFarmTokenEnv` draws each episode's farm with ``serverfarm_gym.envs.farm_sampler`` (its own
seed stream, outside the held-out range) and runs it as a ``ServerFarmEnv`` with group actions
and token observations (``obs_mode="tokens"``). Any RL library that trains on one Gymnasium env
trains a farm-agnostic policy on it, e.g. RLlib through ``serverfarm_gym.envs.rllib``'s action-mask observation
(``serverfarm_gym.agents.generalist.rllib_module`` has the permutation-invariant RLModule).
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np

from serverfarm_gym.envs.farm_sampler import HELD_OUT_SEEDS, FarmDistribution, sample_farm
from serverfarm_gym.envs.server_farm import ServerFarmEnv
from serverfarm_gym.envs.tokens import DEFAULT_MAX_GROUPS, DEFAULT_MAX_LEVELS, TokenEncoding

__all__ = ["SampledFarmTokenEnv"]


class SampledFarmTokenEnv(gym.Env):
    """A new farm from ``distribution`` at every reset, with token observations and actions.

    Args:
        distribution: a :class:`~serverfarm_gym.envs.farm_sampler.FarmDistribution` or a mapping of its fields.
        max_groups, max_levels: padding limits of the tokens (must cover the distribution).
        episode_steps: decisions per episode (then truncated; the next reset draws a new farm).
        held_out: draw from the held-out seed range (evaluation) instead of the training one.
        env_kwargs: further ``ServerFarmEnv`` arguments (``warmup_epochs`` defaults to 50 mean
            job durations of each farm's slowest group, at least 1,000).

    ``info["farm"]`` is the name of the episode's farm (``sampled-SEED``), so any farm can be
    rebuilt with ``sample_farm(SEED, distribution)``.
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012

    def __init__(
        self,
        distribution: FarmDistribution | dict[str, Any] | None = None,
        max_groups: int = DEFAULT_MAX_GROUPS,
        max_levels: int = DEFAULT_MAX_LEVELS,
        episode_steps: int = 1_000,
        held_out: bool = False,
        **env_kwargs: Any,
    ) -> None:
        if isinstance(distribution, dict):
            distribution = FarmDistribution.from_dict(distribution)
        self.distribution = distribution or FarmDistribution()
        if self.distribution.n_groups[1] > max_groups or self.distribution.buffer[1] > max_levels:
            raise ValueError(
                f"max_groups, max_levels: the distribution draws up to "
                f"{self.distribution.n_groups[1]} groups and buffers of "
                f"{self.distribution.buffer[1]}; raise the limits to at least those"
            )
        if int(episode_steps) < 1:
            raise ValueError(f"episode_steps: must be >= 1, got {episode_steps}")
        self.max_groups, self.max_levels = int(max_groups), int(max_levels)
        self.episode_steps = int(episode_steps)
        self.held_out = bool(held_out)
        self.env_kwargs = env_kwargs
        probe = TokenEncoding(sample_farm(0, self.distribution), max_groups, max_levels)
        self.observation_space = probe.observation_space
        self.action_space = probe.action_space
        self.env: ServerFarmEnv | None = None
        self._steps = 0

    def _farm_seed(self) -> int:
        lo, hi = (
            (HELD_OUT_SEEDS.start, HELD_OUT_SEEDS.stop)
            if self.held_out
            else (0, HELD_OUT_SEEDS.start)
        )
        return int(self.np_random.integers(lo, hi))

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        farm_seed = self._farm_seed()
        config = sample_farm(farm_seed, self.distribution)
        kw = dict(self.env_kwargs)
        kw.setdefault("warmup_epochs", max(1_000, math.ceil(50 * config.epochs_per_duration)))
        self.env = ServerFarmEnv(
            config, action_mode="group", obs_mode="tokens", max_groups=self.max_groups,
            max_levels=self.max_levels, **kw,
        )  # fmt: skip
        self._steps = 0
        obs, info = self.env.reset(seed=int(self.np_random.integers(2**31)))
        assert isinstance(obs, dict)  # obs_mode="tokens": a dict of token arrays
        return obs, dict(info, farm=config.name)

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        if self.env is None:
            raise RuntimeError("call reset() before step()")
        obs, reward, terminated, _, info = self.env.step(action)
        assert isinstance(obs, dict)  # obs_mode="tokens": a dict of token arrays
        self._steps += 1
        truncated = self._steps >= self.episode_steps
        return (
            obs,
            float(reward),
            terminated,
            truncated,
            dict(info, farm=self.env.config.name),
        )

    def action_masks(self) -> np.ndarray:
        """Valid token actions now (sb3-contrib and ``serverfarm_gym.envs.rllib`` read this)."""
        if self.env is None:
            raise RuntimeError("call reset() before action_masks()")
        return self.env.action_masks()
