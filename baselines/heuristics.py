"""Classic dispatching heuristics, the comparison points for PAS, Whittle and learned agents.

All but ``random`` are priority tables (:class:`~serverfarm_gym.baselines.priority.PriorityPolicy`), so the compiled
simulator runs them natively and ties go to the smallest server index (group mode: module
``serverfarm_gym.baselines.priority``). One line each:

* ``random``: uniform over the allowed servers (group mode: a level with probability proportional to
  its number of servers, which is the same law).
* ``jsq``: join the shortest queue, fewest jobs first (``table[k, b] = -b``).
* ``meesf``: most energy-efficient server first by ``mu/eps`` (idle power ignored); for
  state-dependent groups the efficiency ``mu_k(b+1)/eps_k(b+1)`` of the level the job would create.
* ``slowest``: slowest server first (``table[k, b] = -max_n mu_k(n)``, the peak rate).
* ``first-fit``: the smallest-index non-full server (``table = 0``).
"""

from __future__ import annotations

import numpy as np

from serverfarm_gym.baselines.base import Policy
from serverfarm_gym.baselines.priority import PriorityPolicy, constant_levels
from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.observation import decode_group_obs, decode_server_obs

__all__ = [
    "FirstFitPolicy",
    "JSQPolicy",
    "MEESFPolicy",
    "RandomPolicy",
    "SlowestFirstPolicy",
    "first_fit_table",
    "jsq_table",
    "meesf_table",
    "slowest_table",
]


def jsq_table(config: FarmConfig) -> np.ndarray:
    """``table[k, b] = -b``: fewest jobs first."""
    return -np.tile(np.arange(config.max_buffer + 1, dtype=np.float64), (config.n_groups, 1))


def meesf_table(config: FarmConfig) -> np.ndarray:
    """``table[k, b] = mu_k(b+1) / eps_k(b+1)`` (on/off: mu_k/eps_k); unused levels repeat B_k-1."""
    t = np.empty((config.n_groups, config.max_buffer + 1))
    for k, g in enumerate(config.groups):
        eff = np.asarray(g.service_rate) / np.asarray(g.busy_power)  # levels 1..B
        t[k, : g.buffer] = eff
        t[k, g.buffer :] = eff[-1]
    return t


def slowest_table(config: FarmConfig) -> np.ndarray:
    """``table[k, b] = -max_n mu_k(n)``: lowest peak service rate first."""
    return constant_levels(config, -config.mu_table.max(axis=1))


def first_fit_table(config: FarmConfig) -> np.ndarray:
    """All zeros: every tie is broken by the smallest server index."""
    return np.zeros((config.n_groups, config.max_buffer + 1))


class JSQPolicy(PriorityPolicy):
    """Join the shortest queue: the allowed server with the fewest jobs, ties smallest index."""

    name = "jsq"

    def __init__(self, config: FarmConfig, action_mode: str = "server", seed: int | None = None):
        super().__init__(config, action_mode, seed, table=jsq_table(config))


class MEESFPolicy(PriorityPolicy):
    """Most energy-efficient server first by ``mu/eps`` (busy power only, idle power ignored)."""

    name = "meesf"

    def __init__(self, config: FarmConfig, action_mode: str = "server", seed: int | None = None):
        super().__init__(config, action_mode, seed, table=meesf_table(config))


class SlowestFirstPolicy(PriorityPolicy):
    """Slowest server first (lowest peak service rate), ties smallest index."""

    name = "slowest"

    def __init__(self, config: FarmConfig, action_mode: str = "server", seed: int | None = None):
        super().__init__(config, action_mode, seed, table=slowest_table(config))


class FirstFitPolicy(PriorityPolicy):
    """First fit: the smallest-index allowed non-full server."""

    name = "first-fit"

    def __init__(self, config: FarmConfig, action_mode: str = "server", seed: int | None = None):
        super().__init__(config, action_mode, seed, table=first_fit_table(config))


class RandomPolicy(Policy):
    """Uniformly random allowed server (the simulator's built-in ``"random"``).

    Only servers available to the job type and not full are drawn when the mask allows any (as for
    the priority policies); otherwise uniformly over the mask. ``deterministic`` is ignored: the
    policy is random by definition. Group mode draws (k, b) with probability proportional to
    ``m_{k,b}``, so the chosen server is uniform as in server mode.
    """

    name = "random"
    builtin = "random"

    def act(self, obs: np.ndarray, mask: np.ndarray, deterministic: bool = True) -> int:
        c = self.config
        mask = np.asarray(mask, dtype=bool)
        if self.action_mode == "server":
            occ, j = decode_server_obs(c, obs)
            weights = (mask & (occ < c.buffers[c.server_group]) & c.server_availability[j]).astype(
                np.float64
            )
        else:
            counts, j = decode_group_obs(c, obs)
            weights = np.zeros(self.n_actions)
            a = 0
            for k, g in enumerate(c.groups):
                if c.availability[j, k]:
                    weights[a : a + g.buffer] = counts[k, : g.buffer]
                a += g.buffer
            weights *= mask
        if weights.sum() <= 0:
            weights = mask.astype(np.float64)
        total = weights.sum()
        if total <= 0:
            return 0
        return int(self.rng.choice(self.n_actions, p=weights / total))
