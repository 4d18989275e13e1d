"""A farm-agnostic observation: one token per server group, padded to fixed limits.

The ``"server"`` and ``"group"`` encodings (``serverfarm_gym.envs.observation``) are sized by the farm, so a policy
trained on one farm cannot even read another's observations. This encoding describes every farm in
the same fixed-size arrays, so one network (permutation-invariant over the group tokens, e.g.
DeepSets or attention) can act on any farm up to ``max_groups`` groups and ``max_levels`` buffer
places, whatever its number of servers or job types.

Observation (``gymnasium.spaces.Dict``, every entry in ``[0, 1]``, float32):

``"groups"``: ``[max_groups, n_group_features]``, one row (token) per group k, zero rows beyond the
    farm's K groups. Columns (``L = max_levels``; see :data:`GROUP_FEATURES`):

    * ``hist[b]``, b = 0..L: share m_{k,b} / R_k of the group's servers holding b jobs (the state;
      fractions, not counts, so the token does not depend on the farm's size);
    * ``available``: 1 when the arriving job may use group k;
    * ``mu[n]``, ``power[n]``, n = 1..L: service rate mu_k(n) and busy power eps_k(n) of a server
      holding n jobs, relative to the farm's largest service rate / busy power (unit-free: a farm
      with its time or power unit changed reads the same);
    * ``level_open[b]``, b = 0..L-1: 1 when b < B_k (a server at level b can take a job);
    * ``idle_power`` (relative), ``pas_priority`` (mu_k/(eps_k - eps0_k) relative to the farm's
      best group), ``one_server`` (1 / R_k: how coarse the group's fractions are; -> 0 for large
      groups), ``server_share`` (R_k / S), ``buffer`` (B_k / L), ``offered_load`` (x / (1 + x)
      with x the arrival rate of the types that may use k over R_k mu_k(B_k)), ``arrival_share``
      (that rate over the total arrival rate), ``price`` (relative to the farm's highest price;
      1 when the scenario has no prices).

``"group_mask"``: ``[max_groups]``, 1 for the farm's groups, 0 for padding.

``"job"``: ``[n_job_features]``, the arriving job (see :data:`JOB_FEATURES`): its type's share of
    the arrival rate, the share of the groups it may use and of their capacity, the farm's
    normalised load rho / (1 + rho), the farm's size ``log10(S + 1) / 7`` and K / max_groups.

Rates and prices that follow a schedule are those of the current interval.

Actions: ``Discrete(max_groups * max_levels)``; action ``g * max_levels + b`` means "a server of
group g holding b jobs" (the smallest-index one, as the group mode). The action mask is the group
mode's mask scattered into that grid (padding is never valid).

:class:`TokenEncoding` maps the group mode's observations, masks and actions of one farm to this
encoding and back, for one step or a batch (vectorised: a gather and a few copies per batch).
``ServerFarmEnv(..., action_mode="group", obs_mode="tokens", max_groups=, max_levels=)`` (the
Gymnasium id ``ServerFarmTokens-v0``) is the env with this observation and action space.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray

from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.observation import hist_offsets, level_offsets, n_interval_features

__all__ = [
    "DEFAULT_MAX_GROUPS",
    "DEFAULT_MAX_LEVELS",
    "JOB_FEATURES",
    "TokenEncoding",
    "group_feature_names",
]

DEFAULT_MAX_GROUPS = 8
DEFAULT_MAX_LEVELS = 16

#: the scalar columns of a group token, after the per-level blocks (see the module docstring)
GROUP_SCALARS = (
    "available",
    "idle_power",
    "pas_priority",
    "one_server",
    "server_share",
    "buffer",
    "offered_load",
    "arrival_share",
    "price",
)
#: the columns of the job vector
JOB_FEATURES = (
    "arrival_share",
    "groups_share",
    "capacity_share",
    "load",
    "farm_size",
    "n_groups",
)


def group_feature_names(max_levels: int) -> tuple[str, ...]:
    """Names of the columns of a group token for ``max_levels`` (the layout of ``"groups"``)."""
    L = max_levels
    return (
        *(f"hist[{b}]" for b in range(L + 1)),
        *(f"mu[{n}]" for n in range(1, L + 1)),
        *(f"power[{n}]" for n in range(1, L + 1)),
        *(f"level_open[{b}]" for b in range(L)),
        *GROUP_SCALARS,
    )


def _squash(x: np.ndarray) -> np.ndarray:
    """x / (1 + x): a non-negative ratio mapped into [0, 1) (loads may reach 1000)."""
    return x / (1.0 + x)


class TokenEncoding:
    """The token encoding of one farm (see the module docstring).

    Args:
        config: the farm.
        max_groups: padding limit on the number of groups (tokens).
        max_levels: padding limit on the buffers B_k (levels per token).

    Raises:
        ValueError: the farm has more groups than ``max_groups`` or a buffer above ``max_levels``.
    """

    def __init__(
        self,
        config: FarmConfig,
        max_groups: int = DEFAULT_MAX_GROUPS,
        max_levels: int = DEFAULT_MAX_LEVELS,
    ) -> None:
        for name, v in (("max_groups", max_groups), ("max_levels", max_levels)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{name}: must be an integer >= 1, got {v!r}")
        K, G, L = config.n_groups, int(max_groups), int(max_levels)
        if K > G:
            raise ValueError(
                f"max_groups: the farm {config.name!r} has {K} groups, more than max_groups={G}; "
                f"raise max_groups to at least {K}"
            )
        if config.max_buffer > L:
            raise ValueError(
                f"max_levels: the farm {config.name!r} has a buffer of {config.max_buffer}, more "
                f"than max_levels={L}; raise max_levels to at least {config.max_buffer}"
            )
        self.config, self.max_groups, self.max_levels = config, G, L
        self.feature_names = group_feature_names(L)
        col = {n: i for i, n in enumerate(self.feature_names)}
        self._avail_col = col["available"]
        F = len(self.feature_names)

        # the padded per-interval tables: a token of group k is static[interval, k] plus the
        # occupancy histogram, the job vector job[interval, type] (computed once, not per step)
        self._static = _static_tokens(config, G, L, col)
        self._job = _job_vectors(config, G)
        J, avail = config.n_job_types, config.availability
        self._avail = np.zeros((J, G), dtype=np.float32)
        self._avail[:, :K] = avail
        self._group_mask = np.zeros(G, dtype=np.float32)
        self._group_mask[:K] = 1.0

        # -- gathers between the group mode's vectors and the padded grids --------------------
        hoff, loff = hist_offsets(config), level_offsets(config)
        self._hist_src = np.zeros((G, L + 1), dtype=np.int64)  # index into the group obs
        self._hist_valid = np.zeros((G, L + 1), dtype=bool)
        self._to_group = np.full(G * L, -1, dtype=np.int64)  # token action -> group action
        for k, g in enumerate(config.groups):
            self._hist_src[k, : g.buffer + 1] = hoff[k] + np.arange(g.buffer + 1)
            self._hist_valid[k, : g.buffer + 1] = True
            self._to_group[k * L : k * L + g.buffer] = loff[k] + np.arange(g.buffer)
        self._from_group = np.flatnonzero(self._to_group >= 0)  # group action -> token action
        self._n_iv = n_interval_features(config)
        self._n_hist = int(hoff[-1])

        self.observation_space = spaces.Dict(
            {
                "groups": spaces.Box(0.0, 1.0, (G, F), np.float32),
                "group_mask": spaces.Box(0.0, 1.0, (G,), np.float32),
                "job": spaces.Box(0.0, 1.0, (len(JOB_FEATURES),), np.float32),
            }
        )
        self.action_space = spaces.Discrete(G * L)

    # ---- group mode -> tokens ----------------------------------------------------------------
    def encode(self, group_obs: np.ndarray) -> dict[str, np.ndarray]:
        """Tokens of group-mode observations: ``[D]`` -> one observation, ``[N, D]`` -> a batch
        (arrays with a leading N)."""
        obs = np.asarray(group_obs, dtype=np.float32)
        single = obs.ndim == 1
        obs = np.atleast_2d(obs)
        J = self.config.n_job_types
        j = np.argmax(obs[:, obs.shape[1] - J :], axis=1)
        if self._n_iv:
            iv = np.argmax(obs[:, self._n_hist : self._n_hist + self._n_iv], axis=1)
        else:
            iv = np.zeros(len(obs), dtype=np.int64)
        groups = self._static[iv]  # fancy indexing: a copy, [N, G, F]
        groups[:, :, : self.max_levels + 1] = np.where(
            self._hist_valid, obs[:, self._hist_src], 0.0
        )
        groups[:, :, self._avail_col] = self._avail[j]
        out = {
            "groups": groups,
            "group_mask": np.broadcast_to(self._group_mask, (len(obs), self.max_groups)).copy(),
            "job": self._job[iv, j],
        }
        return {k: v[0] for k, v in out.items()} if single else out

    def masks(self, group_masks: np.ndarray) -> np.ndarray:
        """Token-action masks ``bool[..., G * L]`` of group-mode masks ``bool[..., sum B_k]``."""
        m = np.asarray(group_masks, dtype=bool)
        out = np.zeros((*m.shape[:-1], self.max_groups * self.max_levels), dtype=bool)
        out[..., self._from_group] = m
        return out

    # ---- actions --------------------------------------------------------------------------------
    def to_group_actions(self, actions: Any) -> np.ndarray | int:
        """Group-mode action(s) of token action(s); ``ValueError`` for padding or out of range."""
        a = np.asarray(actions)
        if not np.issubdtype(a.dtype, np.integer):
            raise ValueError(f"action: expected integer token actions, got {a.dtype} {actions!r}")
        n = self.max_groups * self.max_levels
        if np.any((a < 0) | (a >= n)):
            raise ValueError(f"action: token actions lie in [0, {n}), got {actions!r}")
        g = self._to_group[a]
        if np.any(g < 0):
            raise ValueError(
                f"action: {actions!r} names a padded (group, level) slot: no such group or level "
                f"in {self.config.name!r} (use the action mask)"
            )
        return int(g) if g.ndim == 0 else g

    def group_action_or_invalid(self, action: int) -> int:
        """The group action of token ``action`` (in range), or -1 for a padded slot (the env's
        compiled step treats -1 as a masked action)."""
        return int(self._to_group[action])

    def from_group_actions(self, group_actions: Any) -> np.ndarray | int:
        """Token action(s) of group-mode action(s)."""
        t = self._from_group[np.asarray(group_actions, dtype=np.int64)]
        return int(t) if t.ndim == 0 else t


def _static_tokens(config: FarmConfig, G: int, L: int, col: dict[str, int]) -> NDArray[np.float32]:
    """float32[NI, G, F]: the farm's part of each group token in each schedule interval
    (service and power per level, shares, loads and prices, scaled into [0, 1])."""
    K, F, NI = config.n_groups, len(group_feature_names(L)), config.n_intervals
    mu, pw = config.mu_table, config.power_table  # [K, Bmax+1]
    mu_ref = float(mu.max())
    p_ref = float(pw[:, 1:].max())
    price_ref = float(config.prices.max())
    caps = np.array([g.count * g.service_rate[-1] for g in config.groups])
    avail = config.availability  # [J, K]
    rates = config.arrival_rates  # [NI, J]
    static = np.zeros((NI, G, F), dtype=np.float64)
    mu_c, pw_c, open_c = col["mu[1]"], col["power[1]"], col["level_open[0]"]
    for k, g in enumerate(config.groups):
        B = g.buffer
        static[:, k, mu_c : mu_c + B] = mu[k, 1 : B + 1] / mu_ref
        static[:, k, pw_c : pw_c + B] = pw[k, 1 : B + 1] / p_ref
        static[:, k, open_c : open_c + B] = 1.0
        static[:, k, col["idle_power"]] = g.idle_power / p_ref
        static[:, k, col["one_server"]] = 1.0 / g.count
        static[:, k, col["server_share"]] = g.count / config.n_servers
        static[:, k, col["buffer"]] = B / L
    static[:, :K, col["pas_priority"]] = config.group_efficiency / config.group_efficiency.max()
    offered = rates @ avail  # [NI, K]: arrival rate of the types that may use k
    total = rates.sum(axis=1, keepdims=True)
    static[:, :K, col["offered_load"]] = _squash(offered / caps[None, :])
    static[:, :K, col["arrival_share"]] = offered / total
    static[:, :K, col["price"]] = config.prices / price_ref
    out: NDArray[np.float32] = static.astype(np.float32)
    return out


def _job_vectors(config: FarmConfig, G: int) -> NDArray[np.float32]:
    """float32[NI, J, len(JOB_FEATURES)]: the job vector of each type in each interval."""
    K, caps = config.n_groups, np.array([g.count * g.service_rate[-1] for g in config.groups])
    avail, rates = config.availability, config.arrival_rates
    total = rates.sum(axis=1, keepdims=True)
    NI, J = config.n_intervals, config.n_job_types
    job = np.zeros((NI, J, len(JOB_FEATURES)), dtype=np.float64)
    job[:, :, 0] = rates / total
    job[:, :, 1] = avail.sum(axis=1)[None, :] / K
    job[:, :, 2] = (avail @ caps)[None, :] / caps.sum()
    job[:, :, 3] = _squash(total / caps.sum())
    job[:, :, 4] = np.log10(config.n_servers + 1) / 7.0
    job[:, :, 5] = K / G
    out: NDArray[np.float32] = job.astype(np.float32)
    return out
