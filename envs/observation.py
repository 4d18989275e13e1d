"""Observation and action encodings shared by the env and by every policy.

Two action modes (see ``ServerFarmEnv``):

``"server"`` (default)
    observation ``float32[S + J]``: ``obs[s] = n_s / B_k(s)`` (occupancy of server s, normalised by its
    buffer), then a one-hot of the arriving job type. Action ``Discrete(S)``: the server index.

``"group"`` (size-independent)
    observation ``float32[L + J]`` with ``L = sum_k (B_k + 1)``: for each group k a block of
    ``B_k + 1`` fractions ``m_{k,b} / R_k`` (share of group-k servers holding b jobs, b = 0..B_k),
    then the one-hot job type. Action ``Discrete(sum_k B_k)``: index ``level_offsets[k] + b`` means
    "a server of group k currently holding b < B_k jobs". By exchangeability of a group's servers
    this loses no optimality, and neither space grows with the number of servers.

Right-sizing (a group with ``sleep``, ``config.has_sleep``) appends the servers' modes after the
occupancy block: in server mode one entry per server (0 on, 0.5 in setup, 1 off), in group mode
two per group (the shares of its servers that are off and in setup); masks are unchanged (an
off server counts as holding 0 jobs).

Time-varying scenarios (``config.is_time_varying``) insert a one-hot of the current interval of the
arrival-rate / price schedule (``n_intervals`` entries) just before the job-type one-hot, so the
job type is always the last J entries.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from serverfarm_gym.envs.config import FarmConfig

ACTION_MODES = ("server", "group")


def check_action_mode(mode: str) -> str:
    if mode not in ACTION_MODES:
        raise ValueError(f"action_mode: unknown mode {mode!r}; choose one of {list(ACTION_MODES)}")
    return mode


def hist_offsets(config: FarmConfig) -> NDArray[np.int64]:
    """int64[K+1]: start of group k's block of B_k+1 fractions in a group-mode observation."""
    return np.concatenate([[0], np.cumsum(config.buffers + 1)]).astype(np.int64)


def level_offsets(config: FarmConfig) -> NDArray[np.int64]:
    """int64[K+1]: start of group k's B_k actions in a group-mode action index."""
    return np.concatenate([[0], np.cumsum(config.buffers)]).astype(np.int64)


def n_interval_features(config: FarmConfig) -> int:
    """Length of the interval one-hot (0 for scenarios constant in time)."""
    return config.n_intervals if config.is_time_varying else 0


def n_sleep_features(config: FarmConfig, mode: str) -> int:
    """Length of the mode block (0 without right-sizing): S in server mode, 2K in group mode."""
    if not config.has_sleep:
        return 0
    return config.n_servers if mode == "server" else 2 * config.n_groups


def obs_size(config: FarmConfig, mode: str) -> int:
    state = config.n_servers if mode == "server" else int(hist_offsets(config)[-1])
    return state + n_sleep_features(config, mode) + n_interval_features(config) + config.n_job_types


def n_actions(config: FarmConfig, mode: str) -> int:
    return config.n_servers if mode == "server" else int(level_offsets(config)[-1])


def group_action(config: FarmConfig, k: int, b: int) -> int:
    """Group-mode action index for (group k, level b)."""
    return int(level_offsets(config)[k] + b)


def decode_group_action(config: FarmConfig, action: int) -> tuple[int, int]:
    """(group, level) of a group-mode action index."""
    off = level_offsets(config)
    k = int(np.searchsorted(off, action, side="right") - 1)
    return k, int(action - off[k])


def decode_job_type(config: FarmConfig, obs: np.ndarray) -> int:
    return int(np.argmax(obs[-config.n_job_types :]))


def decode_interval(config: FarmConfig, obs: np.ndarray) -> int:
    """Current schedule interval from an observation (0 for scenarios constant in time)."""
    n = n_interval_features(config)
    if n == 0:
        return 0
    J = config.n_job_types
    return int(np.argmax(obs[len(obs) - J - n : len(obs) - J]))


def decode_server_obs(config: FarmConfig, obs: np.ndarray) -> tuple[np.ndarray, int]:
    """(occupancy int64[S], job type) from a server-mode observation."""
    S = config.n_servers
    occ = np.rint(np.asarray(obs[:S], dtype=np.float64) * config.buffers[config.server_group])
    return occ.astype(np.int64), decode_job_type(config, obs)


def decode_group_obs(config: FarmConfig, obs: np.ndarray) -> tuple[np.ndarray, int]:
    """(counts int64[K, Bmax+1] with counts[k, b] = servers of group k holding b jobs, job type)."""
    off = hist_offsets(config)
    counts = np.zeros((config.n_groups, config.max_buffer + 1), dtype=np.int64)
    for k, g in enumerate(config.groups):
        counts[k, : g.buffer + 1] = np.rint(np.asarray(obs[off[k] : off[k + 1]]) * g.count)
    return counts, decode_job_type(config, obs)


def counts_from_occupancy(config: FarmConfig, occ: np.ndarray) -> NDArray[np.int64]:
    """Histogram counts int64[K, Bmax+1] of a per-server occupancy vector."""
    counts = np.zeros((config.n_groups, config.max_buffer + 1), dtype=np.int64)
    np.add.at(counts, (config.server_group, occ), 1)
    return counts


def group_features(config: FarmConfig, counts: np.ndarray) -> np.ndarray:
    """float32[N, L] histogram fractions of ``counts`` int[N, L] (servers per (group, level)
    in the group-mode observation's order): ``m_{k,b} / R_k`` with the env's float32 reciprocal
    (what the compiled step computes)."""
    rows = np.concatenate([np.full(g.buffer + 1, k) for k, g in enumerate(config.groups)])
    inv = np.array([1.0 / config.groups[k].count for k in rows], np.float32)
    return (np.asarray(counts, dtype=np.int64) * inv).astype(np.float32)


def encode_occupancy(
    config: FarmConfig, mode: str, occ: np.ndarray, job_type: int, interval: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """``(obs float32[N, d], masks bool[N, A])`` of occupancy vectors ``occ`` int[N, S] for an
    arriving type-``job_type`` job in schedule ``interval``: exactly the observation and action
    mask ``ServerFarmEnv`` (its compiled step, ``serverfarm_gym.envs.server_farm.pack_env``'s tables) produces
    in those states, same float32 reciprocals included. Used to evaluate a policy state by state
    (``serverfarm_gym.evaluation.exact``)."""
    check_action_mode(mode)
    if config.has_sleep:
        raise ValueError(
            "config: a farm with right-sizing (sleep) has per-server modes in its state; "
            "occupancies alone do not encode it"
        )
    occ = np.asarray(occ, dtype=np.int64)
    if occ.ndim != 2 or occ.shape[1] != config.n_servers:
        raise ValueError(f"occ: expected shape (N, {config.n_servers}), got {occ.shape}")
    N, J = occ.shape[0], config.n_job_types
    sg, bufs = config.server_group, config.buffers
    if mode == "server":
        # float32 reciprocals promoted to float64, then rounded to float32 (as the kernel does)
        inv = (1.0 / bufs[sg]).astype(np.float32)
        feats = (occ * inv).astype(np.float32)
        masks = (occ < bufs[sg][None, :]) & config.server_availability[job_type][None, :]
    else:
        counts = np.zeros((N, config.n_groups, config.max_buffer + 1), dtype=np.int64)
        for s in range(config.n_servers):
            np.add.at(counts, (np.arange(N), sg[s], occ[:, s]), 1)
        rows = np.concatenate([np.full(g.buffer + 1, k) for k, g in enumerate(config.groups)])
        cols = np.concatenate([np.arange(g.buffer + 1) for g in config.groups])
        feats = group_features(config, counts[:, rows, cols])
        arows = np.concatenate([np.full(g.buffer, k) for k, g in enumerate(config.groups)])
        acols = np.concatenate([np.arange(g.buffer) for g in config.groups])
        masks = (counts[:, arows, acols] > 0) & config.availability[job_type, arows][None, :]
    n_iv = n_interval_features(config)
    tail = np.zeros((N, n_iv + J), np.float32)
    if n_iv:
        tail[:, interval] = 1.0
    tail[:, n_iv + job_type] = 1.0
    return np.concatenate([feats, tail], axis=1), masks
