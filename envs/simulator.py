"""Exact continuous-time event simulator of a processor-sharing server farm.

:class:`FarmSimulator` holds the state arrays and exposes two ways to drive it:

* step by step, for the Gymnasium env: :meth:`FarmSimulator.next_epoch` simulates departures and
  blocked arrivals until the next arrival that has a non-full available server (a decision epoch)
  and returns its job type; :meth:`FarmSimulator.assign` puts that job on a server.
* in bulk, for evaluation: :meth:`FarmSimulator.run` dispatches ``n`` epochs with a built-in
  dispatcher (a priority table over (group, level) with ties to the smallest server index, which
  covers PAS, Whittle, JSQ, ... , or uniform random) without returning to Python.

The event loops live in :mod:`serverfarm_gym.envs.kernels` (numba). Exponential sizes use a fast path (departure
of a server at level n at rate mu(n)); other sizes track every job's remaining work exactly. All
randomness comes from one ``numpy.random.Generator``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from serverfarm_gym.envs import kernels as kn
from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.kernels import schema

MODE_ON, MODE_SETUP, MODE_OFF = kn.MODE_ON, kn.MODE_SETUP, kn.MODE_OFF  # right-sizing modes
BUILTIN_POLICIES = {"priority": kn.POLICY_PRIORITY, "random": kn.POLICY_RANDOM}


@dataclass(frozen=True)
class SimStats:
    """Cumulative measurements since the last reset (or between two snapshots, via ``-``).

    ``throughput`` is work served per unit time (= departure rate in the long run, sizes have mean
    1), ``power`` energy per unit time, ``efficiency`` = throughput / power (the objective).
    ``job_time`` is the time integral of the number of jobs in the system, so by Little's law
    ``mean_jobs_in_system`` = job_time / time and ``mean_response_time`` = job_time / accepted
    jobs (a job's time from its acceptance to its departure).
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
    job_time: float = 0.0

    @property
    def mean_jobs_in_system(self) -> float:
        return self.job_time / self.time if self.time > 0 else 0.0

    @property
    def mean_response_time(self) -> float:
        """Mean time from acceptance to departure (Little's law), 0.0 before any acceptance."""
        a = int(self.accepted.sum())
        return self.job_time / a if a > 0 else 0.0

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
            self.job_time - other.job_time,
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
            "mean_response_time": self.mean_response_time,
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

    #: blocked arrivals after which one compiled call returns to Python (~0.1-0.2 s of events;
    #: see :meth:`run`); a setting of responsiveness only, results do not depend on it
    blocked_per_call: int = 1 << 22

    def __init__(
        self,
        config: FarmConfig,
        seed: int | np.random.Generator | None = None,
        force_general: bool = False,
    ):
        self.config = c = config
        if force_general and c.has_sleep:
            raise ValueError(
                "force_general: right-sizing (groups with sleep) runs in its own exponential "
                "event loop only; leave force_general False"
            )
        self.general = force_general or not c.all_exponential
        self._dummy_table = np.zeros((c.n_groups, c.max_buffer + 1))
        self._rng: np.random.Generator | None = None
        self._bind(*_pack(c, self.general))
        self.rng = (
            np.random.default_rng(seed) if not isinstance(seed, np.random.Generator) else seed
        )
        self.reset()

    def _bind(self, ib: np.ndarray, fb: np.ndarray) -> None:
        """Use the packed buffers ``ib``/``fb`` (layout: ``serverfarm_gym.envs.kernels.schema``; a vector env binds
        its simulators to rows of one 2-D buffer). Every array attribute is a view into them."""
        self._ib, self._fb = ib, fb
        self._tag = kn.kind_tag(self.general, self.config.has_sleep)  # selects the event loop
        v = schema.simulator_views(ib, fb)
        self._server_group, self._group_count, self._buffers = v["SG"], v["GC"], v["BUF"]
        self._jg_ptr, self._jg_idx, self._hbase, self._dist = (
            v["JGP"],
            v["JGI"],
            v["HBASE"],
            v["DIST"],
        )
        self.occ = v["OCC"]
        self._hdata, self._hpos = v["HDATA"], v["HPOS"]  # int32: half the cache footprint
        self.level_counts = v["HSIZE"]  # the level sets' sizes m_{k,b}
        self._isc, self._cnt, self._fs, self._rng_ptrs = v["ISC"], v["CNT"], v["FS"], v["RNG"]
        self._mu, self._pw, self._crates, self._prices = v["MU"], v["PW"], v["CR"], v["PR"]
        self._dparams = v["DPAR"]
        self._interval = float(v["IVL"][0])
        if self.general:
            self._vwork, self._tlast, self._jobs = v["VWORK"], v["TLAST"], v["JOBS"]
            self._dheap, self._dpos, self._dkey = v["DHEAP"], v["DPOS"], v["DKEY"]
        self._modes = v["MODE"]  # right-sizing: per-server modes (empty without)
        self._mode_counts = v["MCNT"]
        if self._rng is not None:
            kn.rng_pointers(self._rng, self._rng_ptrs)

    @classmethod
    def from_buffers(
        cls, config: FarmConfig, general: bool, ib: np.ndarray, fb: np.ndarray,
        rng: np.random.Generator,
    ) -> FarmSimulator:  # fmt: skip
        """A simulator of ``config`` on existing packed buffers (no copy, no reset), e.g. a row of
        a vector env's stacked buffers. ``general`` must be the kernel they were packed for (the
        ``general`` attribute of the simulator that built them); ``rng``'s pointers are written
        into ``ib``."""
        sim = cls.__new__(cls)
        sim.__setstate__({"config": config, "general": general, "ib": ib, "fb": fb, "rng": rng})
        return sim

    @property
    def packed(self) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        """The packed buffers ``(ib, fb)`` every array attribute views (``serverfarm_gym.envs.kernels.schema``)."""
        return self._ib, self._fb

    @property
    def kind_tag(self) -> int | float:
        """The ``tag`` argument of the packed kernels for this simulator (its type selects the
        exponential or the general event loop, see ``serverfarm_gym.envs.kernels.kind_tag``)."""
        return self._tag

    @property
    def rng(self) -> np.random.Generator:
        """The single random stream (the compiled kernels read its state through raw pointers)."""
        assert self._rng is not None  # None only inside __init__ and __setstate__
        return self._rng

    @rng.setter
    def rng(self, gen: np.random.Generator) -> None:
        if not isinstance(gen, np.random.Generator):
            raise ValueError(f"rng: expected a numpy.random.Generator, got {type(gen).__name__}")
        self._rng = gen  # holding it keeps the pointers valid
        kn.rng_pointers(gen, self._rng_ptrs)

    def __getstate__(self) -> dict[str, Any]:
        # the array attributes are views of the packed buffers and the kernels read the Generator
        # through raw pointers: pickle the buffers and the Generator, rebuild the rest
        return {"config": self.config, "general": self.general, "ib": self._ib, "fb": self._fb,
                "rng": self._rng}  # fmt: skip

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.config = state["config"]
        self.general = state["general"]
        self._dummy_table = np.zeros((self.config.n_groups, self.config.max_buffer + 1))
        self._rng = None
        self._bind(state["ib"], state["fb"])
        self.rng = state["rng"]

    # ---- state -------------------------------------------------------------------------------
    def reset(self, seed: int | np.random.Generator | None = None) -> None:
        """Empty farm at time 0, counters zeroed; reseeds the random stream if ``seed`` is given."""
        if seed is not None:
            self.rng = (
                seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
            )
        kn.packed_reset(self._ib, self._fb)

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
    def modes(self) -> NDArray[np.int64]:
        """int64[S] (a copy): each server's mode with right-sizing, ``MODE_ON`` (0), ``MODE_SETUP``
        (1) or ``MODE_OFF`` (2); all ON for a farm without ``sleep``."""
        if self._modes.shape[0] == 0:
            return np.zeros(self.config.n_servers, dtype=np.int64)
        modes: NDArray[np.int64] = self._modes.copy()  # a typed name: numpy's .copy() is untyped
        return modes

    @property
    def mode_counts(self) -> NDArray[np.int64]:
        """int64[K, 2]: servers of each group that are off and in setup (zeros without sleep)."""
        out = np.zeros((self.config.n_groups, 2), dtype=np.int64)
        if self._mode_counts.shape[0]:
            out[:, 0] = self._mode_counts[:, 2]
            out[:, 1] = self._mode_counts[:, 0]
        return out

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
            job_time=float(fs[kn.JOBTIME]),
        )

    @property
    def mean_jobs_in_system(self) -> np.float64:
        """Time-average number of jobs in the system since the last reset."""
        t = self._fs[kn.T]
        mean: np.float64 = self._fs[kn.JOBTIME] / t if t > 0 else np.float64(0.0)
        return mean  # a typed name: an element of a float64 array is untyped in numpy's stubs

    @property
    def mean_response_time(self) -> np.float64:
        """Mean response time (acceptance to departure) since the last reset, by Little's law:
        the time integral of the jobs in the system over the jobs accepted (0.0 before any)."""
        a = self._cnt[1].sum()
        mean: np.float64 = self._fs[kn.JOBTIME] / a if a > 0 else np.float64(0.0)
        return mean  # a typed name: an element of a float64 array is untyped in numpy's stubs

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
    def server_mask(self, j: int) -> NDArray[np.bool_]:
        """bool[S]: servers available to type j that are not full."""
        free: NDArray[np.bool_] = self.occ < self._buffers[self._server_group]
        mask: NDArray[np.bool_] = self.config.server_availability[j] & free
        return mask

    def level_mask(self, j: int) -> NDArray[np.bool_]:
        """bool[K, Bmax+1]: (group, level) pairs a type-j job may be sent to (level < B_k)."""
        c = self.config
        levels = np.arange(c.max_buffer + 1)
        ok: NDArray[np.bool_] = (levels[None, :] < self._buffers[:, None]) & (self.level_counts > 0)
        mask: NDArray[np.bool_] = ok & c.availability[j][:, None]
        return mask

    def server_at_level(self, k: int, b: int) -> int:
        """Smallest-index server of group k holding b jobs (-1 if none)."""
        if self.level_counts[k, b] == 0:
            return -1
        return int(kn.packed_level_min(self._ib, k, b))

    # ---- driving -----------------------------------------------------------------------------
    def _run(self, policy: int, table: np.ndarray, n: int) -> None:
        """Dispatch ``n`` epochs (``POLICY_EXTERNAL``: stop at the next one) in compiled calls
        that each return after at most ``blocked_per_call`` blocked arrivals, so a farm that
        blocks almost every arrival still comes back to Python (and Ctrl-C) often. The first call
        re-sums the rates over all servers (removes floating drift); the others continue from
        the incremental rates, so the trajectory is the same as one uninterrupted call's."""
        got = kn.packed_run(self._ib, self._fb, policy, table, n, True, self._tag,
                            self.blocked_per_call)  # fmt: skip
        if policy == kn.POLICY_EXTERNAL:
            while self._isc[kn.PENDING] < 0:
                kn.packed_run(self._ib, self._fb, policy, table, 1, False, self._tag,
                              self.blocked_per_call)  # fmt: skip
            return
        while got < n:
            got += kn.packed_run(self._ib, self._fb, policy, table, n - got, False, self._tag,
                                 self.blocked_per_call)  # fmt: skip

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
        if not kn.can_take(self._ib, s, j):
            raise ValueError(
                f"server {server} cannot take a job of type {j} "
                "(not in its available groups, or full); choose a server where the mask is True"
            )
        kn.packed_assign(self._ib, self._fb, s, self._tag)

    def run(
        self, n_epochs: int, policy: str = "priority", table: np.ndarray | None = None
    ) -> SimStats:
        """Dispatch ``n_epochs`` decision epochs with a built-in dispatcher; returns the stats of
        this run alone (the simulator's cumulative counters keep running). Interruptible: the
        work is done in compiled calls of at most 1,000,000 epochs and ``blocked_per_call``
        blocked arrivals each, and Ctrl-C raises KeyboardInterrupt between them (the state is
        then that of a consistent event: the simulator may be used further).

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
            # chunks of epochs (each re-sums the rates; the env's warm-up uses the same chunks) and,
            # within a chunk, compiled calls bounded in blocked arrivals (see _run): each call is
            # short, so Ctrl-C (KeyboardInterrupt, raised between calls) stays responsive
            chunk = min(remaining, kn.WARMUP_CHUNK)
            self._run(BUILTIN_POLICIES[policy], table, chunk)
            remaining -= chunk
        return self.stats() - before


def _pack(c: FarmConfig, general: bool) -> tuple[np.ndarray, np.ndarray]:
    """Build the packed buffers (header + every field of ``serverfarm_gym.envs.kernels.schema``) of a fresh
    farm; the level sets themselves are filled by ``kernels.packed_reset``."""
    K, J, B1, S = c.n_groups, c.n_job_types, c.max_buffer + 1, c.n_servers
    jg_idx = np.array([k for jt in c.job_types for k in jt.groups], dtype=np.int64)
    jg_ptr = np.concatenate([[0], np.cumsum([len(jt.groups) for jt in c.job_types])])
    # level-set storage: group k reserves R_k slots for each level 0..B_k
    hbase = np.zeros((K, B1), dtype=np.int64)
    off = 0
    for k, g in enumerate(c.groups):
        for b in range(g.buffer + 1):
            hbase[k, b] = off
            off += g.count
    sizes = [c.size_of(j) for j in range(J)]
    counts = np.array([g.count for g in c.groups])
    sets = _level_sets(counts, c.buffers, B1)
    dims = {"S": S, "K": K, "J": J, "B1": B1, "NI": c.n_intervals, "GEN": int(general),
            "NQ": len(jg_idx), "NH": off, "NSET": len(sets), "SLP": int(c.has_sleep)}  # fmt: skip
    extra = {"ZPAR": _sleep_table(c)} if c.has_sleep else {}
    return schema.pack_simulator(dims, {**extra,
        "SG": c.server_group, "GC": counts, "BUF": c.buffers, "JGP": jg_ptr, "JGI": jg_idx,
        "HBASE": hbase, "DIST": np.array([d.code for d in sizes]), "SETS": sets,
        "MU": c.mu_table, "PW": c.power_table, "CR": np.cumsum(c.arrival_rates, axis=1),
        "PR": c.prices, "DPAR": np.array([d.params() for d in sizes], dtype=np.float64),
        "IVL": float(c.interval_length),
    })  # fmt: skip


def _level_sets(counts: np.ndarray, buffers: np.ndarray, B1: int) -> np.ndarray:
    """The ``sets`` field of a fresh farm (layout: ``schema.SETS_FIELDS``; the trees:
    ``serverfarm_gym.envs.kernels.level_sets``): header and tables filled in; the minima and tree words are set
    by ``kernels.packed_reset``."""
    K, C, LM = len(counts), B1 + 1, kn.SET_LMAX
    nlev = np.zeros(K, dtype=np.int64)
    lvoff = np.zeros((K, LM), dtype=np.int64)
    tsize = np.zeros(K, dtype=np.int64)
    for k, r in enumerate(counts):
        if r > 64**LM:
            raise ValueError(
                f"groups[{k}].count: at most {64**LM:,} servers per group, got {int(r):,}; "
                "split the group into several identical groups"
            )
        n, off = -(-int(r) // 64), 0
        while True:  # 64-ary levels up to a single root word
            lvoff[k, nlev[k]] = off
            off += n
            nlev[k] += 1
            if n == 1:
                break
            n = -(-n // 64)
        tsize[k] = off
    layout = schema.sets_layout({"K": K, "C": C, "LM": LM})
    o = layout["WORDS"]
    tbase = np.full((K, C), -1, dtype=np.int64)
    for k in range(K):
        for col in [*range(int(buffers[k]) + 1), C - 1]:  # levels 0..B_k and the non-full set
            tbase[k, col] = o
            o += tsize[k]
    sets = np.zeros(o, dtype=np.int64)
    sets[[kn.S_K, kn.S_C, kn.S_LM, kn.S_WORDS]] = [K, C, LM, layout["WORDS"]]
    tables = {"NFMIN": np.full(K, kn.NO_SERVER), "TBASE": tbase.ravel(), "NLEV": nlev,
              "LVOFF": lvoff.ravel(), "GOFF": np.concatenate([[0], np.cumsum(counts)[:-1]]),
              "BUF": buffers}  # fmt: skip
    for f in schema.SETS_FIELDS:
        sets[schema.SETS["S_" + f.name]] = layout[f.name]
        sets[layout[f.name] : layout[f.name] + len(tables[f.name])] = tables[f.name]
    return sets


def _sleep_table(c: FarmConfig) -> np.ndarray:
    """float64[K, 4] per group: off power, setup rate, setup power, idle-timeout rate (the
    ``ZPAR`` field; a group without ``sleep`` never switches off: rate 0)."""
    out = np.zeros((c.n_groups, 4))
    for k, g in enumerate(c.groups):
        z = g.sleep
        if z is None:
            out[k] = (g.idle_power, 1.0, g.idle_power, 0.0)
        else:
            out[k] = (z.power, z.setup_rate, z.setup_power, z.idle_timeout_rate)
    return out
