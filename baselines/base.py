"""The one policy interface every dispatcher implements, learned or not.

``predict(obs, state=None, episode_start=None, deterministic=True, action_masks=None)`` has the shape
of SB3's ``BasePolicy.predict``: it accepts one observation or a batch, and returns
``(actions, None)``. So ``evaluation`` runs PAS, heuristics, the exact optimum and PPO alike.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.observation import check_action_mode, n_actions


class Policy:
    """Base class: subclasses implement :meth:`act` for one observation and its action mask.

    Args:
        config: the farm the policy dispatches for.
        action_mode: ``"server"`` or ``"group"`` (see ``serverfarm_gym.envs.observation``).
        seed: seed of the policy's own generator (randomised policies only).
    """

    #: name used by ``baselines.make_policy`` and in evaluation tables
    name: str = "policy"
    #: code of the equivalent built-in dispatcher of the compiled simulator, if any (see
    #: ``serverfarm_gym.envs.simulator.BUILTIN_POLICIES``); such policies are evaluated at full simulator speed.
    builtin: str | None = None

    def __init__(self, config: FarmConfig, action_mode: str = "server", seed: int | None = None):
        self.config = config
        self.action_mode = check_action_mode(action_mode)
        self.n_actions = n_actions(config, action_mode)
        self.rng = np.random.default_rng(seed)

    def act(self, obs: np.ndarray, mask: np.ndarray, deterministic: bool = True) -> int:
        raise NotImplementedError

    def reset(self, seed: int | None = None) -> None:
        if seed is not None:
            self.rng = np.random.default_rng(seed)

    def predict(
        self,
        observation: np.ndarray,
        state: Any = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = True,
        action_masks: np.ndarray | None = None,
    ) -> tuple[np.ndarray, None]:
        """Actions for one observation (returns a 0-d array) or a batch (returns shape ``(n,)``)."""
        obs = np.asarray(observation)
        batched = obs.ndim == 2
        obs2 = obs if batched else obs[None]
        if action_masks is None:
            masks = np.ones((obs2.shape[0], self.n_actions), dtype=bool)
        else:
            masks = np.asarray(action_masks, dtype=bool).reshape(obs2.shape[0], self.n_actions)
        acts = self._act_batch(obs2, masks, deterministic)
        return (acts if batched else acts[0]), None

    def _act_batch(
        self, obs: np.ndarray, masks: np.ndarray, deterministic: bool = True
    ) -> np.ndarray:
        """Actions of a batch ``obs[n, d]`` with ``masks[n, n_actions]``: :meth:`act` row by row
        unless a subclass vectorises it."""
        return np.array(
            [self.act(o, m, deterministic) for o, m in zip(obs, masks, strict=True)],
            dtype=np.int64,
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(config={self.config.name!r}, action_mode={self.action_mode!r})"
        )
