"""Servers of a group are exchangeable: the group view of a server-mode decision.

A server-mode observation (the occupancy of every server) determines the group-mode one (each
group's occupancy histogram), and a group-mode action, (group k, level b), names a set of
interchangeable servers, of which the env's group mode sends the job to the smallest-index one
(``serverfarm_gym.envs.kernels.env_step``). :class:`GroupView` holds the three maps that let a policy which
scores (group, level) pairs act on servers:

* :meth:`GroupView.observation`: server-mode observations -> the group-mode observations of the
  same states (bit for bit what the group-mode env shows);
* :meth:`GroupView.masks`: server masks -> the (group, level) pairs that have an allowed server;
* :meth:`GroupView.server_actions`: chosen pairs -> the smallest allowed server of each pair;
* :meth:`GroupView.wrap`: a group-mode predictor as a server-mode one (the three together).

With them a server-mode trajectory is the group-mode trajectory step for step, which is why a
network tied over exchangeable servers (``agents``: ``server_network="tied"``) loses nothing:
for exchangeable servers an optimal policy can be taken symmetric (docs/model.md).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike, NDArray

from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.observation import (
    group_features,
    hist_offsets,
    level_offsets,
    n_interval_features,
)

__all__ = ["GroupView"]


class GroupView:
    """The group-mode view of server-mode observations, masks and actions of ``config``
    (batched: every method takes ``[N, ...]`` arrays)."""

    def __init__(self, config: FarmConfig):
        self.config = config
        sg = config.server_group
        self.n_servers = config.n_servers
        self._buffers = config.buffers[sg].astype(np.float64)  # B_k(s): occupancy = obs x B
        self._hist_base = hist_offsets(config)[:-1][sg]  # start of server s's group histogram
        self._act_base = level_offsets(config)[:-1][sg]  # start of server s's group actions
        self.obs_size = int(hist_offsets(config)[-1])
        self.n_actions = int(level_offsets(config)[-1])
        self._tail = n_interval_features(config) + config.n_job_types

    def occupancy(self, obs: ArrayLike) -> NDArray[np.int64]:
        """int64[N, S]: jobs at each server (``obs[s] = n_s / B_k``, exact after rounding)."""
        x = np.asarray(obs, dtype=np.float64)[:, : self.n_servers]
        occ: NDArray[np.int64] = np.rint(x * self._buffers).astype(
            np.int64
        )  # a typed name: numpy leaves this untyped
        return occ

    def observation(self, obs: np.ndarray) -> np.ndarray:
        """float32[N, L + tail]: the group-mode observations of server-mode ``obs`` [N, S + tail]."""
        obs = np.asarray(obs, dtype=np.float32).reshape(len(obs), -1)
        n = len(obs)
        idx = self._hist_base[None, :] + self.occupancy(obs)
        flat = (np.arange(n)[:, None] * self.obs_size + idx).ravel()
        counts = np.bincount(flat, minlength=n * self.obs_size).reshape(n, self.obs_size)
        return np.concatenate([group_features(self.config, counts), obs[:, self.n_servers :]], 1)

    def _pairs(self, obs: ArrayLike) -> NDArray[np.int64]:
        """int64[N, S]: the group-mode action of each server (its group, its level); a full
        server's entry is never used (it is masked)."""
        occ = np.minimum(self.occupancy(obs), self._buffers.astype(np.int64) - 1)
        pairs: NDArray[np.int64] = (
            self._act_base[None, :] + occ
        )  # a typed name: numpy leaves this untyped
        return pairs

    def masks(self, obs: np.ndarray, masks: np.ndarray) -> np.ndarray:
        """bool[N, A]: (group, level) pairs with at least one allowed server."""
        masks = np.asarray(masks, dtype=bool).reshape(len(obs), -1)
        n = len(obs)
        out = np.zeros((n, self.n_actions), dtype=bool)
        rows = np.broadcast_to(np.arange(n)[:, None], masks.shape)
        out[rows[masks], self._pairs(obs)[masks]] = True
        return out

    def server_actions(self, obs: np.ndarray, masks: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """int64[N]: for each chosen pair, its smallest-index allowed server (the group-mode
        env's choice). A row without any allowed server (a blocked job, which the env never
        presents but an exact evaluation may enumerate) gets server 0, as the argmax of an
        all-masked row does. Raises ValueError if a pair has no allowed server (a masked
        action) in a row that has some."""
        masks = np.asarray(masks, dtype=bool).reshape(len(obs), -1)
        actions = np.asarray(actions, dtype=np.int64).reshape(-1)
        hit = masks & (self._pairs(obs) == actions[:, None])
        ok = hit.any(axis=1) | ~masks.any(axis=1)
        if not ok.all():
            bad = int(np.flatnonzero(~ok)[0])
            raise ValueError(
                f"actions: (group, level) action {int(actions[bad])} of row {bad} has no allowed "
                "server; pass actions allowed by GroupView.masks"
            )
        servers: NDArray[np.int64] = hit.argmax(axis=1).astype(
            np.int64
        )  # a typed name: numpy leaves this untyped
        return servers

    def wrap(
        self, predict: Callable[[np.ndarray, np.ndarray], np.ndarray]
    ) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
        """A server-mode predictor ``(obs [N, S + tail], masks [N, S]) -> servers [N]`` of a
        group-mode one (``(group obs, group masks) -> (group, level) actions``)."""

        def server_predict(obs: np.ndarray, masks: np.ndarray) -> np.ndarray:
            obs = np.asarray(obs, dtype=np.float32).reshape(len(masks), -1)
            pairs = predict(self.observation(obs), self.masks(obs, masks))
            return self.server_actions(obs, masks, pairs)

        return server_predict
