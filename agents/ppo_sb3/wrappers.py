"""The training view of the env (used by ``train.py``): the reward PPO learns from and the mask."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from serverfarm_gym.envs.server_farm import ServerFarmEnv

__all__ = ["TrainingWrapper"]


class TrainingWrapper(gym.Wrapper):
    """The training view of a :class:`~serverfarm_gym.envs.server_farm.ServerFarmEnv`: the reward PPO sees and
    the action mask.

    ``reward="env"`` keeps the env's reward: the integral of ``W(t) - eta P(t)`` up to the next
    decision epoch (W: total service rate, P: total power or cost rate).

    ``reward="expected"`` replaces it by a reward with the same long-run average and no
    exponential-duration noise. Decision epochs are the arrivals that find a vacancy, so in state
    x they occur at rate ``L(x) = sum of lambda_j over the types with an available non-full
    server``. By the Campbell-Mecke formula (decision epochs have stochastic intensity
    ``L(X(t))``), summing ``g(x_n) = (W(x_n) - eta P(x_n)) / L(x_n)`` over the states x_n found at
    the decision epochs (before the assignment) gives in expectation the time integral of
    ``W - eta P``: every stationary policy has the same long-run average reward under both, hence
    the same ranking. The step's reward is ``g`` of the state at the *next* epoch, which the action
    influences. It is noisier where ``L(x)`` can be small (heavy blocking of the main job type)
    and did not speed up learning, so ``"env"`` is the default.
    ``info["env_reward"]`` keeps the env's own reward.
    """

    REWARDS = ("env", "expected")

    def __init__(self, env: gym.Env, reward: str = "env"):
        super().__init__(env)
        u = env.unwrapped
        if not isinstance(u, ServerFarmEnv):
            raise ValueError("env: TrainingWrapper wraps a ServerFarmEnv")
        if reward not in self.REWARDS:
            raise ValueError(f"reward: choose one of {list(self.REWARDS)}, got {reward!r}")
        self.reward_mode = reward
        self.farm: ServerFarmEnv = u
        c = u.config
        self._sbuf = c.buffers[c.server_group]
        self._mu = c.mu_table[c.server_group]  # [S, Bmax+1]
        self._pw = c.power_table[c.server_group]
        self._avail = c.server_availability  # [J, S]
        self._rates = c.arrival_rates  # [I, J]
        self._prices = c.prices[:, c.server_group]  # [I, S]
        self._S = np.arange(c.n_servers)

    def action_masks(self) -> np.ndarray:
        """The env's action mask (gymnasium wrappers do not forward attributes)."""
        return self.farm.action_masks()

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self.reward_mode == "env":
            return obs, reward, terminated, truncated, info
        u = self.farm
        occ, it = u.sim.occ, u.sim.interval
        work_rate = float(self._mu[self._S, occ].sum())
        power = self._pw[self._S, occ]
        if u.objective == "cost":
            power = power * self._prices[it]
        open_types = (self._avail & (occ < self._sbuf)[None, :]).any(axis=1)
        rate = float(self._rates[it][open_types].sum())
        info["env_reward"] = reward
        g = (work_rate - u.eta * float(power.sum())) / rate if rate > 0 else 0.0
        return obs, g / u.reward_scale, terminated, truncated, info
