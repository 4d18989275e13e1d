"""PAS (Priorities accounting for Available Servers), its price-aware variant, and the paper's
scalable heap dispatcher.

PAS sends an arriving job of type j to the non-full server in its available set with the highest
effective energy efficiency ``mu_k / (eps_k - eps0_k)``; ties go to the smallest server index
(so it packs). For state-dependent groups (per-level mu_k(n), eps_k(n)) the efficiency is taken at
the full-rate level ``B_k`` (``FarmConfig.group_efficiency``), the same at every level, so PAS stays a
level-independent ranking of groups; :mod:`serverfarm_gym.baselines.whittle` is the level-aware generalisation.
"""

from __future__ import annotations

import numpy as np

from serverfarm_gym.baselines.priority import PriorityPolicy, constant_levels
from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.observation import decode_interval

__all__ = [
    "PASHeapDispatcher",
    "PASPolicy",
    "PriceAwarePASPolicy",
    "pas_table",
    "price_aware_table",
]


def pas_table(config: FarmConfig) -> np.ndarray:
    """float64[K, Bmax+1]: ``table[k, b] = mu_k / (eps_k - eps0_k)`` at every level b."""
    return constant_levels(config, config.group_efficiency)


def price_aware_table(config: FarmConfig, interval: int = 0) -> np.ndarray:
    """float64[K, Bmax+1]: ``mu_k / ((eps_k - eps0_k) * price_k)`` with the prices of ``interval``.

    Work per unit of *money* instead of per unit of energy. The table is fixed: the compiled
    simulator's built-in dispatcher uses one table for the whole run, so with time-varying prices
    this is the ranking of one interval (build one policy per interval to switch rankings).
    """
    n = config.n_intervals
    if not (isinstance(interval, (int, np.integer)) and 0 <= interval < n):
        raise ValueError(
            f"interval: must be an integer in 0..{n - 1} (the farm has {n}), got {interval!r}"
        )
    return constant_levels(config, config.group_efficiency / config.prices[int(interval)])


class PASPolicy(PriorityPolicy):
    """PAS: highest ``mu_k/(eps_k - eps0_k)`` first, ties to the smallest server index.

    In ``"server"`` mode the decisions are exactly those of the compiled simulator's built-in
    priority dispatcher run with :func:`pas_table` (``priority_table()``).
    """

    name = "pas"

    def __init__(self, config: FarmConfig, action_mode: str = "server", seed: int | None = None):
        super().__init__(config, action_mode, seed, table=pas_table(config))


class PriceAwarePASPolicy(PriorityPolicy):
    """PAS ranked by ``mu_k / ((eps_k - eps0_k) * price_k)``: work per unit of money.

    ``interval`` selects whose prices rank the groups:

    * an integer: that interval's prices, at every arrival (a fixed table: ``builtin ==
      "priority"``, simulated at compiled speed);
    * ``None`` (default): the *current* interval, read from the observation's interval one-hot
      (:func:`serverfarm_gym.envs.observation.decode_interval`). In a scenario constant in time this is the same
      fixed table as ``interval=0`` (built-in priority policy, as before). In a time-varying
      scenario the ranking changes at every interval boundary, which no single table describes:
      the policy then has ``builtin = None``, so evaluation rolls it out through the env with
      :meth:`predict` (``serverfarm_gym.evaluation.rollout``), and :meth:`priority_table` refuses; the table of
      interval t is ``tables[t]``.
    """

    name = "pas-price"

    def __init__(
        self,
        config: FarmConfig,
        action_mode: str = "server",
        seed: int | None = None,
        interval: int | None = None,
    ):
        self.interval = interval
        self.follows_interval = interval is None and config.is_time_varying
        tables = [price_aware_table(config, t) for t in range(config.n_intervals)]
        first = tables[0] if interval is None else price_aware_table(config, interval)
        super().__init__(config, action_mode, seed, table=first)
        if self.follows_interval:
            self.builtin = None  # instance attribute: the harness reads it per policy
            self.tables = np.stack(tables)
            self.tables.setflags(write=False)
            self._flats = [t.ravel() for t in self.tables]
        else:
            self.tables = self.table[None]

    def priority_table(self) -> np.ndarray:
        if self.follows_interval:
            raise ValueError(
                "priority_table: this price-aware PAS follows the interval of a time-varying "
                "scenario, so no single table describes it; use tables[t] for interval t, or "
                "build it with interval=t for a fixed ranking"
            )
        return self.table

    def _act_batch(
        self, obs: np.ndarray, masks: np.ndarray, deterministic: bool = True
    ) -> np.ndarray:
        if not self.follows_interval:
            return super()._act_batch(obs, masks)
        out = np.empty(obs.shape[0], dtype=np.int64)
        ivs = np.array([decode_interval(self.config, o) for o in obs], dtype=np.int64)
        for t in np.unique(ivs):
            rows = ivs == t
            # swap in interval t's table (both the flat view used in server mode and the 2-D one)
            self.table, self._flat = self.tables[t], self._flats[t]
            out[rows] = super()._act_batch(obs[rows], masks[rows])
        return out


class _IndexedMinHeap:
    """Binary min-heap of distinct integer keys in 0..n-1 with O(log n) insert and delete.

    ``pos[key]`` is the key's slot in ``heap``; this is what makes deletion of an arbitrary key (a
    server that just became full) logarithmic without lazy garbage, in O(len) space.
    """

    __slots__ = ("heap", "pos")

    def __init__(self, keys: list[int]):
        self.heap = sorted(keys)  # a sorted list is a valid heap
        self.pos = {key: i for i, key in enumerate(self.heap)}

    def top(self) -> int:
        return self.heap[0] if self.heap else -1

    def __len__(self) -> int:
        return len(self.heap)

    def __contains__(self, key: int) -> bool:
        return key in self.pos

    def push(self, key: int) -> None:
        self.heap.append(key)
        self._up(len(self.heap) - 1)

    def remove(self, key: int) -> None:
        heap, pos = self.heap, self.pos
        i = pos.pop(key)
        last = heap.pop()
        if i < len(heap):
            heap[i] = last
            pos[last] = i
            self._up(i)
            self._down(pos[last])

    def _up(self, i: int) -> None:
        heap, pos = self.heap, self.pos
        key = heap[i]
        while i > 0:
            p = (i - 1) >> 1
            if heap[p] <= key:
                break
            heap[i] = heap[p]
            pos[heap[i]] = i
            i = p
        heap[i] = key
        pos[key] = i

    def _down(self, i: int) -> None:
        heap, pos = self.heap, self.pos
        n = len(heap)
        key = heap[i]
        while True:
            c = 2 * i + 1
            if c >= n:
                break
            if c + 1 < n and heap[c + 1] < heap[c]:
                c += 1
            if heap[c] >= key:
                break
            heap[i] = heap[c]
            pos[heap[i]] = i
            i = c
        heap[i] = key
        pos[key] = i


class PASHeapDispatcher:
    """The paper's scalable PAS implementation: per-job-type heaps and an indication vector.

    Every job type j keeps a heap of its available non-full servers ordered by
    ``(efficiency, -index)`` (highest efficiency, then smallest index, on top), and
    ``upsilon[j]`` is the heap's top: the server a type-j arrival goes to (-1 when all are full,
    i.e. the arrival is blocked). Servers are ranked once by that key, so the heaps hold integer
    ranks. State changes matter only when a server crosses between ``B_k - 1`` and ``B_k``:
    call :meth:`on_full` / :meth:`on_vacancy` then, each costing O(sum_{j uses s} log |S_j|);
    :meth:`choose` is O(1). Space O(sum_j |S_j|).

    Args:
        config: the farm (all servers start with a vacancy unless ``full`` is given).
        efficiency: float[K] group priorities (default ``config.group_efficiency``, i.e. PAS;
            pass e.g. ``efficiency / prices[i]`` for the price-aware ranking).
        full: optional bool[S] of servers that are full initially.
    """

    def __init__(
        self,
        config: FarmConfig,
        efficiency: np.ndarray | None = None,
        full: np.ndarray | None = None,
    ):
        self.config = config
        S, J = config.n_servers, config.n_job_types
        eff = (
            config.group_efficiency
            if efficiency is None
            else np.asarray(efficiency, dtype=np.float64)
        )
        if eff.shape != (config.n_groups,):
            raise ValueError(f"efficiency: expected shape ({config.n_groups},), got {eff.shape}")
        idx = np.arange(S)
        # rank 0 = highest efficiency, ties by smallest index: exactly PAS's ordering
        self._order = np.lexsort((idx, -eff[config.server_group]))
        rank = np.empty(S, dtype=np.int64)
        rank[self._order] = idx
        self._rank = rank.tolist()
        self._server_of = self._order.tolist()
        # job types that may use each group, then each server
        types_of_group = [
            np.flatnonzero(config.availability[:, k]).tolist() for k in range(config.n_groups)
        ]
        self._types_of = [types_of_group[k] for k in config.server_group.tolist()]
        self._full = [False] * S if full is None else np.asarray(full, dtype=bool).tolist()
        if len(self._full) != S:
            raise ValueError(f"full: expected {S} entries, got {len(self._full)}")
        avail = config.server_availability
        self._heaps = []
        for j in range(J):
            ranks = rank[avail[j] & ~np.asarray(self._full, dtype=bool)].tolist()
            self._heaps.append(_IndexedMinHeap(ranks))
        self.upsilon = [self._top(j) for j in range(J)]

    def _top(self, j: int) -> int:
        r = self._heaps[j].top()
        return self._server_of[r] if r >= 0 else -1

    def choose(self, j: int) -> int:
        """Server a type-j arrival goes to under PAS, or -1 if all its servers are full."""
        return self.upsilon[j]

    def on_full(self, s: int) -> None:
        """Server ``s`` went from ``B_k - 1`` to ``B_k`` jobs."""
        if self._full[s]:
            raise ValueError(
                f"server {s} is already full; call on_full only on the B-1 -> B crossing"
            )
        self._full[s] = True
        r = self._rank[s]
        for j in self._types_of[s]:
            self._heaps[j].remove(r)
            if self.upsilon[j] == s:
                self.upsilon[j] = self._top(j)

    def on_vacancy(self, s: int) -> None:
        """Server ``s`` went from ``B_k`` to ``B_k - 1`` jobs."""
        if not self._full[s]:
            raise ValueError(
                f"server {s} is not full; call on_vacancy only on the B -> B-1 crossing"
            )
        self._full[s] = False
        r = self._rank[s]
        for j in self._types_of[s]:
            h = self._heaps[j]
            h.push(r)
            if h.heap[0] == r:
                self.upsilon[j] = s
