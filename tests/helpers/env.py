"""The env's documented rules, written independently of its implementation: the observations and
masks of a state (:func:`server_obs`, :func:`group_obs`, :func:`valid_server_mask`,
:func:`valid_group_mask`, :func:`expected_obs`, :func:`expected_mask`), the priority dispatcher's
rule (:func:`reference_priority`), building envs by id (:func:`make_env`) and the options the
environment checkers run with."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.observation import (
    counts_from_occupancy,
    hist_offsets,
    level_offsets,
    n_actions,
    n_interval_features,
    obs_size,
)
from serverfarm_gym.envs.server_farm import ServerFarmEnv
from tests.helpers.invariants import expected_server_mask


def masked_choice(rng: np.random.Generator, mask: np.ndarray) -> int:
    """A uniformly random index where ``mask`` is True (the mask must not be empty)."""
    idx = np.flatnonzero(mask)
    assert idx.size > 0, "empty action mask at a decision epoch"
    return int(idx[rng.integers(idx.size)])


def server_obs(config: FarmConfig, occ: np.ndarray, j: int) -> np.ndarray:
    obs = np.zeros(obs_size(config, "server"), dtype=np.float32)
    obs[: config.n_servers] = occ / config.buffers[config.server_group]
    obs[config.n_servers + j] = 1.0
    return obs


def group_obs(config: FarmConfig, occ: np.ndarray, j: int) -> np.ndarray:
    counts = counts_from_occupancy(config, occ)
    off = hist_offsets(config)
    obs = np.zeros(obs_size(config, "group"), dtype=np.float32)
    for k, g in enumerate(config.groups):
        obs[off[k] : off[k + 1]] = counts[k, : g.buffer + 1] / g.count
    obs[-config.n_job_types + j] = 1.0
    return obs


def valid_server_mask(config: FarmConfig, occ: np.ndarray, j: int) -> np.ndarray:
    return config.server_availability[j] & (occ < config.buffers[config.server_group])


def valid_group_mask(config: FarmConfig, occ: np.ndarray, j: int) -> np.ndarray:
    counts = counts_from_occupancy(config, occ)
    m = np.zeros(n_actions(config, "group"), dtype=bool)
    off = level_offsets(config)
    for k, g in enumerate(config.groups):
        if config.availability[j, k]:
            m[off[k] : off[k + 1]] = counts[k, : g.buffer] > 0
    return m


ENV_IDS = {"server": "ServerFarm-v0", "group": "ServerFarmGroup-v0"}


def make_env(scenario: Any, mode: str, **kw: Any) -> gym.Env:
    return gym.make(ENV_IDS[mode], scenario=scenario, **kw)


def expected_obs(env: ServerFarmEnv) -> np.ndarray:
    c, sim, j = env.config, env.sim, env.unwrapped._job
    if env.action_mode == "server":
        state = sim.occ / c.buffers[c.server_group]
    else:
        hoff = hist_offsets(c)
        state = np.zeros(int(hoff[-1]))
        for k, g in enumerate(c.groups):
            occ = sim.occ[c.group_offsets[k] : c.group_offsets[k + 1]]
            state[hoff[k] : hoff[k + 1]] = np.bincount(occ, minlength=g.buffer + 1) / g.count
    iv = np.zeros(n_interval_features(c))
    if iv.size:
        iv[sim.interval] = 1.0
    return np.concatenate([state, iv, np.eye(c.n_job_types)[j]]).astype(np.float32)


def expected_mask(env: ServerFarmEnv) -> np.ndarray:
    c, sim, j = env.config, env.sim, env.unwrapped._job
    if env.action_mode == "server":
        return expected_server_mask(c, sim.occ, j)
    loff = level_offsets(c)
    mask = np.zeros(int(loff[-1]), dtype=bool)
    for k, g in enumerate(c.groups):
        occ = sim.occ[c.group_offsets[k] : c.group_offsets[k + 1]]
        for b in range(g.buffer):
            mask[loff[k] + b] = k in c.job_types[j].groups and bool(np.any(occ == b))
    return mask


def reference_priority(config: FarmConfig, occ: np.ndarray, j: int, table: np.ndarray) -> int:
    """Argmax of table[k(s), n_s] over available non-full servers, ties to the smallest index."""
    sg = config.server_group
    ok = config.server_availability[j] & (occ < config.buffers[sg])
    score = np.where(ok, table[sg, occ], -np.inf)
    return int(np.argmax(score))  # first maximum = smallest index


#: env options both environment checkers (Gymnasium's and SB3's) are run with; not
#: invalid_action="raise": the checkers step with unmasked random actions
CHECKER_OPTIONS = (
    {"objective": "cost"},
    {"warmup_epochs": 200, "warmup_policy": "random"},
    {"reward_eta": 0.3, "reward_scale": 10.0, "eta_tau": 50.0},
)
