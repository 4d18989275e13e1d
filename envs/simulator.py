"""Exact continuous-time event simulator of a processor-sharing server farm.

:class:`FarmSimulator` holds the state arrays and exposes two ways to drive it:

* step by step, for the Gymnasium env: :meth:`FarmSimulator.next_epoch` simulates departures and
  blocked arrivals until the next arrival that has a non-full available server (a decision epoch)
  and returns its job type; :meth:`FarmSimulator.assign` puts that job on a server.
* in bulk, for evaluation: :meth:`FarmSimulator.run` dispatches ``n`` epochs with a built-in
  dispatcher (a priority table over (group, level) with ties to the smallest server index, which
  covers PAS, Whittle, JSQ, ... , or uniform random) without returning to Python.

The event loops live in :mod:`envs.kernels` (numba). Exponential sizes use a fast path (departure
of a server at level n at rate mu(n)); other sizes track every job's remaining work exactly. All
randomness comes from one ``numpy.random.Generator``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from envs import kernels as kn
from envs.config import FarmConfig

BUILTIN_POLICIES = {"priority": kn.POLICY_PRIORITY, "random": kn.POLICY_RANDOM}


@dataclass(frozen=True)
class SimStats:
    """Cumulative measurements since the last reset (or between two snapshots, via ``-``).

    ``throughput`` is work served per unit time (= departure rate in the long run, sizes have mean
    1), ``power`` energy per unit time, ``efficiency`` = throughput / power (the objective).
    """

    time: float
    work: float
    energy: float
    cost: float
    arrivals: np.ndarray  # int64[J]
    accepted: np.ndarray  # int64[J]
    blocked: np.ndarray  # int64[J]
    departures: int
    epochs: int

    @property
    def throughput(self) -> float:
        return self.work / self.time if self.time > 0 else 0.0

    @property
    def power(self) -> float:
        return self.energy / self.time if self.time > 0 else 0.0

    @property
    def efficiency(self) -> float:
        return self.work / self.energy if self.energy > 0 else 0.0

    @property
    def cost_efficiency(self) -> float:
        """Jobs (work) per unit of money (time-varying prices)."""
        return self.work / self.cost if self.cost > 0 else 0.0

    @property
    def blocking(self) -> float:
        a = int(self.arrivals.sum())
        return float(self.blocked.sum()) / a if a > 0 else 0.0

    @property
    def blocking_per_type(self) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.arrivals > 0, self.blocked / np.maximum(self.arrivals, 1), 0.0)

    def __sub__(self, other: SimStats) -> SimStats:
        return SimStats(
            self.time - other.time,
            self.work - other.work,
            self.energy - other.energy,
            self.cost - other.cost,
            self.arrivals - other.arrivals,
            self.accepted - other.accepted,
            self.blocked - other.blocked,
            self.departures - other.departures,
            self.epochs - other.epochs,
        )

    def as_dict(self) -> dict[str, float | list[float]]:
        return {
            "time": self.time,
            "throughput": self.throughput,
            "power": self.power,
            "efficiency": self.efficiency,
            "cost_efficiency": self.cost_efficiency,
            "blocking": self.blocking,
            "blocking_per_type": self.blocking_per_type.tolist(),
            "epochs": self.epochs,
        }


class FarmSimulator:
    """Event-driven simulator of one farm.

    Args:
        config: the validated farm.
        seed: seed (or Generator) for the single random stream; ``reset`` may replace it.
        force_general: use the exact per-job kernel even for exponential sizes (for testing the
            two kernels against each other).
    """

    def __init__(
        self,
        config: FarmConfig,
        seed: int | np.random.Generator | None = None,
        force_general: bool = False,
    ):
        self.config = c = config
        self.general = force_general or not c.all_exponential
        K, B = c.n_groups, c.max_buffer
        self._server_group = c.server_group
        self._group_count = np.array([g.count for g in c.groups], dtype=np.int64)
        self._buffers = c.buffers
        ptr = np.zeros(c.n_job_types + 1, dtype=np.int64)
        idx: list[int] = []
        for j, jt in enumerate(c.job_types):
            idx.extend(jt.groups)
            ptr[j + 1] = len(idx)
        self._jg_ptr, self._jg_idx = ptr, np.array(idx, dtype=np.int64)
        self._mu, self._pw = c.mu_table, c.power_table
        self._crates = np.cumsum(c.arrival_rates, axis=1)
        self._prices = c.prices
        self._interval = float(c.interval_length)
        sizes = [c.size_of(j) for j in range(c.n_job_types)]
        self._dist = np.array([d.code for d in sizes], dtype=np.int64)
        self._dparams = np.array([d.params() for d in sizes], dtype=np.float64).reshape(-1, 2)
        # heap storage: group k reserves R_k slots for each level 0..B_k
        hbase = np.zeros((K, B + 1), dtype=np.int64)
        off = 0
        for k, g in enumerate(c.groups):
            for b in range(g.buffer + 1):
                hbase[k, b] = off
                off += g.count
        self._hbase = hbase
        S = c.n_servers
        self.occ = np.zeros(S, dtype=np.int64)
        self._hdata = np.zeros(off, dtype=np.int64)
        self._hpos = np.zeros(S, dtype=np.int64)
        self.level_counts = np.zeros((K, B + 1), dtype=np.int64)  # the heaps' sizes = m_{k,b}
        self._fs = np.zeros(8)
        self._isc = np.zeros(6, dtype=np.int64)
        self._cnt = np.zeros((3, c.n_job_types), dtype=np.int64)
        if self.general:
            self._vwork = np.zeros(S)
            self._tlast = np.zeros(S)
            self._jobs = np.zeros((S, B))
            self._dheap = np.zeros(S, dtype=np.int64)
            self._dpos = np.full(S, -1, dtype=np.int64)
            self._dkey = np.full(S, np.inf)
        self._dummy_table = np.zeros((K, B + 1))
        self.rng = (
            np.random.default_rng(seed) if not isinstance(seed, np.random.Generator) else seed
        )
        self.reset()

    # ---- state -------------------------------------------------------------------------------
    def reset(self, seed: int | np.random.Generator | None = None) -> None:
        """Empty farm at time 0, counters zeroed; reseeds the random stream if ``seed`` is given."""
        if seed is not None:
            self.rng = (
                seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
            )
        c = self.config
        self.occ[:] = 0
        self.level_counts[:] = 0
        for k, g in enumerate(c.groups):
            lo = int(c.group_offsets[k])
            base = self._hbase[k, 0]
            # servers in increasing index order form a valid min-heap
            self._hdata[base : base + g.count] = np.arange(lo, lo + g.count)
            self._hpos[lo : lo + g.count] = np.arange(g.count)
            self.level_counts[k, 0] = g.count
        self._fs[:] = 0.0
        self._fs[kn.NEXT_ARR] = -1.0
        self._isc[:] = 0
        self._isc[kn.PENDING] = -1
        self._cnt[:] = 0
        if self.general:
            self._vwork[:] = 0.0
            self._tlast[:] = 0.0
            self._dpos[:] = -1
            self._dkey[:] = np.inf

    @property
    def time(self) -> float:
        return float(self._fs[kn.T])

    @property
    def interval(self) -> int:
        """Index of the current interval of the arrival-rate / price schedule."""
        return int(self._isc[kn.INTERVAL])

    @property
    def pending_job_type(self) -> int:
        """Job type of the arrival waiting for a decision, or -1."""
        return int(self._isc[kn.PENDING])

    @property
    def jobs_in_system(self) -> int:
        return int(self.occ.sum())

    def stats(self) -> SimStats:
        fs, isc, cnt = self._fs, self._isc, self._cnt
        return SimStats(
            time=float(fs[kn.T]),
            work=float(fs[kn.WORK]),
            energy=float(fs[kn.ENERGY]),
            cost=float(fs[kn.COST]),
            arrivals=cnt[0].copy(),
            accepted=cnt[1].copy(),
            blocked=cnt[2].copy(),
            departures=int(isc[kn.DEPARTURES]),
            epochs=int(isc[kn.EPOCHS]),
        )

    @property
    def work(self) -> float:
        return float(self._fs[kn.WORK])

    @property
    def energy(self) -> float:
        return float(self._fs[kn.ENERGY])

    @property
    def cost(self) -> float:
        return float(self._fs[kn.COST])

    # ---- masks -------------------------------------------------------------------------------
    def server_mask(self, j: int) -> np.ndarray:
        """bool[S]: servers available to type j that are not full."""
        c = self.config
        return c.server_availability[j] & (self.occ < self._buffers[self._server_group])

    def level_mask(self, j: int) -> np.ndarray:
        """bool[K, Bmax+1]: (group, level) pairs a type-j job may be sent to (level < B_k)."""
        c = self.config
        levels = np.arange(c.max_buffer + 1)
        ok = (levels[None, :] < self._buffers[:, None]) & (self.level_counts > 0)
        return ok & c.availability[j][:, None]

    def server_at_level(self, k: int, b: int) -> int:
        """Smallest-index server of group k holding b jobs (-1 if none)."""
        if self.level_counts[k, b] == 0:
            return -1
        return int(self._hdata[self._hbase[k, b]])

    # ---- driving -----------------------------------------------------------------------------
    def _run(self, policy: int, table: np.ndarray, n: int) -> int:
        if self.general:
            return kn.run_general(
                self._server_group, self._group_count, self._buffers, self._jg_ptr, self._jg_idx,
                self._mu, self._pw, self._crates, self._prices, self._interval,
                self._dist, self._dparams,
                self.occ, self._hdata, self._hpos, self._hbase, self.level_counts,
                self._fs, self._isc, self._cnt,
                self._vwork, self._tlast, self._jobs, self._dheap, self._dpos, self._dkey,
                self.rng, policy, table, n,
            )  # fmt: skip
        return kn.run_exponential(
            self._server_group, self._group_count, self._buffers, self._jg_ptr, self._jg_idx,
            self._mu, self._pw, self._crates, self._prices, self._interval,
            self.occ, self._hdata, self._hpos, self._hbase, self.level_counts,
            self._fs, self._isc, self._cnt,
            self.rng, policy, table, n,
        )  # fmt: skip

    def next_epoch(self) -> int:
        """Advance to the next decision epoch and return the arriving job's type."""
        if self._isc[kn.PENDING] >= 0:
            raise RuntimeError("a decision is pending: call assign() before next_epoch()")
        self._run(kn.POLICY_EXTERNAL, self._dummy_table, 1)
        return int(self._isc[kn.PENDING])

    def assign(self, server: int) -> None:
        """Put the pending job on ``server`` (must be available to its type and not full)."""
        j = int(self._isc[kn.PENDING])
        if j < 0:
            raise RuntimeError("no pending decision: call next_epoch() first")
        s = int(server)
        if not (0 <= s < self.config.n_servers) or not self.server_mask(j)[s]:
            raise ValueError(
                f"server {server} cannot take a job of type {j} "
                "(not in its available groups, or full); choose a server where the mask is True"
            )
        if self.general:
            kn.assign_general(
                s, j, self._server_group, self._mu, self._pw, self._prices, self._dist,
                self._dparams, self.occ, self._hdata, self._hpos, self._hbase, self.level_counts,
                self._fs, self._isc, self._cnt, self._vwork, self._tlast, self._jobs,
                self._dheap, self._dpos, self._dkey, self.rng,
            )  # fmt: skip
        else:
            kn.assign_exponential(
                s, j, self._server_group, self._mu, self._pw, self._prices, self.occ,
                self._hdata, self._hpos, self._hbase, self.level_counts, self._fs, self._isc,
                self._cnt,
            )  # fmt: skip

    def run(
        self, n_epochs: int, policy: str = "priority", table: np.ndarray | None = None
    ) -> SimStats:
        """Dispatch ``n_epochs`` decision epochs with a built-in dispatcher; returns the stats of
        this run alone (the simulator's cumulative counters keep running).

        Args:
            n_epochs: decision epochs to simulate (blocked arrivals are not epochs).
            policy: ``"priority"`` (needs ``table``) or ``"random"``.
            table: float64[K, Bmax+1], priority of sending a job to a server of group k at level b.
        """
        if policy not in BUILTIN_POLICIES:
            raise ValueError(
                f"policy: unknown built-in dispatcher {policy!r}; choose one of {list(BUILTIN_POLICIES)}"
            )
        if self._isc[kn.PENDING] >= 0:
            raise RuntimeError("a decision is pending: call assign() before run()")
        if policy == "priority":
            if table is None:
                raise ValueError("table: the priority dispatcher needs a float64[K, Bmax+1] table")
            table = np.ascontiguousarray(table, dtype=np.float64)
            if table.shape != self._dummy_table.shape:
                raise ValueError(
                    f"table: expected shape {self._dummy_table.shape} (groups, max buffer + 1), got {table.shape}"
                )
        else:
            table = self._dummy_table
        before = self.stats()
        remaining = int(n_epochs)
        while remaining > 0:
            # chunks keep each compiled call short so Ctrl-C stays responsive
            chunk = min(remaining, 1_000_000)
            self._run(BUILTIN_POLICIES[policy], table, chunk)
            remaining -= chunk
        return self.stats() - before
