"""Priority-table dispatchers: the common form of PAS, Whittle and most classic heuristics.

A priority-table policy is given by ``table: float64[K, Bmax+1]``: ``table[k, b]`` is the priority of
sending the arriving job to a server of group k that currently holds b jobs. Entries with
``b >= B_k`` are never used (such a server is full); the tables built in this package fill them with
finite values so that the array can be handed to the compiled simulator as is.

Decision rules
--------------
``"server"`` mode (exactly the compiled simulator's built-in ``"priority"`` dispatcher,
``serverfarm_gym.envs.kernels.dispatch.pick_priority_kb``): among the servers allowed by the action mask, choose the one
maximising ``table[k(s), n_s]``; ties (exact float equality) go to the smallest server index.
Only servers that are available to the arriving type and not full are considered when the mask
allows at least one of them; otherwise (a hand-made mask, e.g. ``action_masks=None`` in a
blocking state) the choice is among the masked servers. An empty mask returns action 0.

``"group"`` mode (a histogram of levels per group; the action is a pair (k, b)): choose the
masked (k, b) with a server present (``m_{k,b} > 0``) that maximises ``table[k, b]``.
Ties: first the *smallest group k* (servers are numbered group by group, so this is the group the
server-mode rule would pick), then the *highest level b* (pack). Which level holds the
smallest-index server of the group is not knowable from a histogram, so within a group the
group-mode rule can differ from the server-mode one whenever several levels tie (e.g. PAS, whose
priorities do not depend on b). The compiled simulator has no group-mode built-in.

Tables must be exactly reproducible floats: ties are exact equality, both here and in the kernel.
"""

from __future__ import annotations

import numpy as np

from serverfarm_gym.baselines.base import Policy
from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.observation import hist_offsets, level_offsets

__all__ = ["PriorityPolicy", "check_table", "constant_levels"]


def check_table(config: FarmConfig, table: np.ndarray) -> np.ndarray:
    """A read-only float64 copy of ``table`` after checking its shape and finiteness."""
    t = np.array(table, dtype=np.float64, copy=True)
    shape = (config.n_groups, config.max_buffer + 1)
    if t.shape != shape:
        raise ValueError(
            f"table: expected shape {shape} (groups, max buffer + 1), got {t.shape}; "
            "build it with e.g. serverfarm_gym.baselines.pas.pas_table(config)"
        )
    if not np.all(np.isfinite(t)):
        raise ValueError(
            "table: every entry must be finite (use a large negative number instead of -inf)"
        )
    t.setflags(write=False)
    return t


def constant_levels(config: FarmConfig, values: np.ndarray) -> np.ndarray:
    """float64[K, Bmax+1] table whose row k is ``values[k]`` at every level."""
    v = np.asarray(values, dtype=np.float64).reshape(config.n_groups, 1)
    return np.repeat(v, config.max_buffer + 1, axis=1)


class PriorityPolicy(Policy):
    """Dispatch by a fixed priority table over (group, level); see the module docstring.

    Args:
        config: the farm.
        action_mode: ``"server"`` or ``"group"``.
        seed: unused (deterministic policy); accepted for a uniform constructor.
        table: float64[K, Bmax+1]. Subclasses build their own and pass it here.
    """

    name = "priority"
    builtin = "priority"

    def __init__(
        self,
        config: FarmConfig,
        action_mode: str = "server",
        seed: int | None = None,
        table: np.ndarray | None = None,
    ):
        super().__init__(config, action_mode, seed)
        if table is None:
            raise ValueError("table: PriorityPolicy needs a float64[K, Bmax+1] priority table")
        self._set_table(table)
        c = config
        S, J = c.n_servers, c.n_job_types
        self._S, self._J = S, J
        self._sg = c.server_group
        self._sbuf = c.buffers[c.server_group]  # B_k(s)
        self._savail = c.server_availability  # bool[J, S]
        # group mode: action a <-> (k, b); histogram column of each action
        off = level_offsets(c)
        self._act_k = np.repeat(np.arange(c.n_groups), c.buffers).astype(np.int64)
        self._act_b = (np.arange(int(off[-1])) - off[self._act_k]).astype(np.int64)
        self._act_col = hist_offsets(c)[self._act_k] + self._act_b
        self._col_count = np.repeat([g.count for g in c.groups], c.buffers + 1).astype(np.float64)
        self._act_avail = c.availability[:, self._act_k]  # bool[J, A]
        # tie key in group mode: smallest k, then highest b
        self._act_tiekey = self._act_k * (c.max_buffer + 1) + (c.max_buffer - self._act_b)
        # server mode, a table constant in the level (PAS, Whittle on on/off farms): a server's
        # score is its group's, and a full server is one whose observation is B/B
        self._full_obs = (self._sbuf - 0.5) / self._sbuf  # obs < this <=> n_s < B_k
        self._score_cache: tuple[np.ndarray, np.ndarray | None] | None = None

    def _set_table(self, table: np.ndarray) -> None:
        self.table = check_table(self.config, table)
        self._flat = self.table.ravel()

    def priority_table(self) -> np.ndarray:
        """The (read-only) float64[K, Bmax+1] priority table."""
        return self.table

    # ---- decisions ---------------------------------------------------------------------------
    def act(self, obs: np.ndarray, mask: np.ndarray, deterministic: bool = True) -> int:
        return int(self._act_batch(np.asarray(obs)[None], np.asarray(mask, dtype=bool)[None])[0])

    def _act_batch(
        self, obs: np.ndarray, masks: np.ndarray, deterministic: bool = True
    ) -> np.ndarray:
        """Vectorised over the batch; the same result as :meth:`act` row by row."""
        jt = np.argmax(obs[:, -self._J :], axis=1)
        if self.action_mode == "server":
            return self._server_batch(obs, jt, masks)
        return self._group_batch(obs, jt, masks)

    def _server_scores(self) -> np.ndarray | None:
        """float64[S]: each server's score when the current table is constant in the level over
        0..B_k (then the occupancy does not matter), else None. Cached per table (subclasses
        swap ``_flat`` per interval or job type)."""
        cache = self._score_cache
        if cache is None or cache[0] is not self._flat:
            t, levelconst = self.table, True
            for k, g in enumerate(self.config.groups):
                levelconst &= bool(np.all(t[k, : g.buffer + 1] == t[k, 0]))
            cache = (self._flat, t[self._sg, 0].astype(np.float64) if levelconst else None)
            self._score_cache = cache
        return cache[1]

    def _server_batch(self, obs: np.ndarray, jt: np.ndarray, masks: np.ndarray) -> np.ndarray:
        scores = self._server_scores()
        if scores is not None:
            # the same decision as below without the per-server occupancies and table reads:
            # O(S) passes that dominate a 10,000-server evaluation (17 -> ~1 ms per step of 16)
            valid = masks & (obs[:, : self._S] < self._full_obs) & self._savail[jt]
            cand = np.where(valid.any(axis=1, keepdims=True), valid, masks)
            return np.argmax(np.where(cand, scores, -np.inf), axis=1).astype(np.int64)
        occ = np.rint(np.asarray(obs[:, : self._S], dtype=np.float64) * self._sbuf).astype(np.int64)
        occ = np.clip(occ, 0, self.config.max_buffer)
        valid = masks & (occ < self._sbuf) & self._savail[jt]
        cand = np.where(valid.any(axis=1, keepdims=True), valid, masks)
        score = self._flat[self._sg * (self.config.max_buffer + 1) + occ]
        # argmax returns the first maximum: ties go to the smallest server index
        return np.argmax(np.where(cand, score, -np.inf), axis=1).astype(np.int64)

    def _group_batch(self, obs: np.ndarray, jt: np.ndarray, masks: np.ndarray) -> np.ndarray:
        counts = np.rint(
            np.asarray(obs[:, self._act_col], dtype=np.float64) * self._col_count[self._act_col]
        )
        valid = masks & (counts > 0) & self._act_avail[jt]
        cand = np.where(valid.any(axis=1, keepdims=True), valid, masks)
        score = np.where(cand, self.table[self._act_k, self._act_b][None, :], -np.inf)
        best = score.max(axis=1, keepdims=True)
        tied = cand & (score == best)
        key = np.where(tied, self._act_tiekey[None, :], np.iinfo(np.int64).max)
        out = np.argmin(key, axis=1).astype(np.int64)
        out[~cand.any(axis=1)] = 0
        return out
