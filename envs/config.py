"""Scenario configuration: typed, frozen dataclasses, built from a dict and validated once.

Files, presets and geo scenarios are turned into farms by :func:`serverfarm_gym.envs.scenarios.load_scenario`;
the checks shared with the geo format and the limits are in :mod:`serverfarm_gym.envs.validation`.

A scenario describes one server farm (see ``docs/model.md``)::

    name: tiny
    groups:
      - {name: slow, count: 2, service_rate: 1.0, busy_power: 2.0, idle_power: 1.0, buffer: 3}
      - {name: fast, count: 2, service_rate: 2.0, busy_power: 5.0, idle_power: 1.0, buffer: 3}
    job_types:
      - {name: web, arrival_rate: 1.5, groups: [slow, fast]}
      - {name: gpu, arrival_rate: 1.0, groups: [fast]}
    job_size: {distribution: exponential}

Everything downstream (simulator, env, policies, solvers) reads a :class:`FarmConfig`; nothing
re-validates. Per-level tables ``mu_table`` / ``power_table`` are the single source of the model's
rate and power functions mu_k(n), eps_k(n), n = 0..B_k.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from serverfarm_gym.envs.validation import (
    MAX_DESCRIPTION_LENGTH,
    MAX_EPOCHS_PER_DURATION,
    MAX_JOB_SLOTS,
    MAX_LEVELS,
    MAX_OVERLOAD,
    MAX_SCHEDULE_ENTRIES,
    MAX_SERVERS,
    MIN_ARRIVALS_PER_INTERVAL,
    ConfigError,
    check_keys,
    integer,
    name_list,
    number,
    require,
    schedule,
    server_group_fields,
    shown,
    shown_items,
    sleep_fields,
    text,
)

__all__ = [
    "DISTRIBUTIONS",
    "ConfigError",
    "FarmConfig",
    "GeoOrigin",
    "GroupConfig",
    "JobSizeConfig",
    "JobTypeConfig",
    "SLOConfig",
    "SleepConfig",
    "farm_from_dict",
    "job_size_from_spec",
]

#: job-size distributions (all with mean 1) and the parameters each accepts.
DISTRIBUTIONS: dict[str, tuple[str, ...]] = {
    "exponential": (),
    "deterministic": (),
    "erlang": ("k",),
    "hyperexponential": ("scv",),
    "lognormal": ("scv",),
    "pareto": ("alpha",),
}
# integer codes used by the compiled simulator (order matters; see envs/kernels/dispatch.py, sample_size)
DIST_CODES = {name: i for i, name in enumerate(DISTRIBUTIONS)}


@dataclass(frozen=True)
class JobSizeConfig:
    """Job-size distribution with mean 1.

    ``erlang`` takes ``k`` (phases, scv = 1/k), ``hyperexponential`` and ``lognormal`` take ``scv``
    (squared coefficient of variation; hyperexponential needs scv > 1, balanced means), ``pareto``
    takes ``alpha`` > 1 (scv = inf for alpha <= 2)."""

    distribution: str = "exponential"
    k: int | None = None
    scv: float | None = None
    alpha: float | None = None

    @property
    def code(self) -> int:
        return DIST_CODES[self.distribution]

    @property
    def is_exponential(self) -> bool:
        return self.distribution == "exponential"

    def params(self) -> tuple[float, float]:
        """Two float parameters for the compiled sampler (meaning depends on the distribution)."""
        d = self.distribution
        # job_size_from_spec sets the parameter each distribution needs (asserts narrow the type)
        if d == "erlang":
            assert self.k is not None
            return float(self.k), 0.0
        if d == "hyperexponential":
            assert self.scv is not None
            # balanced-means two-phase hyperexponential with mean 1 and the given scv
            p1 = 0.5 * (1.0 + math.sqrt((self.scv - 1.0) / (self.scv + 1.0)))
            return p1, 0.0
        if d == "lognormal":
            assert self.scv is not None
            sigma2 = math.log1p(self.scv)
            return -0.5 * sigma2, math.sqrt(sigma2)
        if d == "pareto":
            assert self.alpha is not None
            return self.alpha, (self.alpha - 1.0) / self.alpha  # shape, scale x_m (mean 1)
        return 0.0, 0.0

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"distribution": self.distribution}
        for p in DISTRIBUTIONS[self.distribution]:
            out[p] = getattr(self, p)
        return out


@dataclass(frozen=True)
class SleepConfig:
    """Dynamic right-sizing of a group (its ``sleep`` mapping): an idle server switches off at
    rate ``idle_timeout_rate`` (inf: at once; 0: never) and then draws ``power``; a job sent to
    an off server wakes it: exponential setup at rate ``setup_rate`` drawing ``setup_power``,
    during which arriving jobs wait (none is served). Semantics: ``docs/latency.md``."""

    power: float
    setup_rate: float
    setup_power: float
    idle_timeout_rate: float

    def to_dict(self) -> dict[str, Any]:
        a = self.idle_timeout_rate
        return {"power": self.power, "setup_rate": self.setup_rate,
                "setup_power": self.setup_power, "idle_timeout_rate": "inf" if math.isinf(a) else a}  # fmt: skip


@dataclass(frozen=True)
class GroupConfig:
    """A group of ``count`` identical processor-sharing servers.

    ``service_rate[n-1]`` and ``busy_power[n-1]`` are the total service rate mu_k(n) and the power
    eps_k(n) with n = 1..buffer jobs; scalars in the file mean the on/off model (same for every n).
    ``price`` is the electricity price per unit energy, per interval (length 1 if constant).
    """

    name: str
    count: int
    service_rate: tuple[float, ...]
    busy_power: tuple[float, ...]
    idle_power: float
    buffer: int
    price: tuple[float, ...] = (1.0,)
    sleep: SleepConfig | None = None  # dynamic right-sizing (None: always on)

    @property
    def is_on_off(self) -> bool:
        return len(set(self.service_rate)) == 1 and len(set(self.busy_power)) == 1

    @property
    def efficiency(self) -> float:
        """PAS priority mu/(eps - eps0), using the full-rate level for state-dependent groups."""
        return self.service_rate[-1] / (self.busy_power[-1] - self.idle_power)

    def to_dict(self) -> dict[str, Any]:
        def scal(v: tuple[float, ...]) -> float | list[float]:
            return v[0] if len(set(v)) == 1 else list(v)

        out = {
            "name": self.name,
            "count": self.count,
            "service_rate": scal(self.service_rate),
            "busy_power": scal(self.busy_power),
            "idle_power": self.idle_power,
            "buffer": self.buffer,
        }
        if self.price != (1.0,):
            # a schedule stays a list even when constant: its length is the number of intervals
            out["price"] = list(self.price) if len(self.price) > 1 else self.price[0]
        if self.sleep is not None:
            out["sleep"] = self.sleep.to_dict()
        return out


@dataclass(frozen=True)
class JobTypeConfig:
    """A Poisson job stream. ``groups`` are indices into ``FarmConfig.groups`` (the set K_j).

    ``arrival_rate`` has one value per interval (length 1 when constant in time).
    """

    name: str
    arrival_rate: tuple[float, ...]
    groups: tuple[int, ...]
    job_size: JobSizeConfig | None = None

    @property
    def mean_rate(self) -> float:
        return float(np.mean(self.arrival_rate))


class GeoOrigin(Protocol):
    """What a farm built from a geo scenario remembers of it (``FarmConfig.geo``).

    :class:`serverfarm_gym.envs.geo.GeoConfig` is the implementation; it sits above this module (it builds
    farms with :func:`farm_from_dict`), so the farm names the interface instead of the class.
    Geo-aware policies (``serverfarm_gym.baselines.pdr_pas``) read these members and pass the object on to the
    PDR solver, which takes the full ``GeoConfig``.
    """

    @property
    def name(self) -> str: ...

    @property
    def n_clusters(self) -> int: ...

    @property
    def n_ingress(self) -> int: ...

    @property
    def n_intervals(self) -> int: ...

    def cluster_of_farm_group(self) -> NDArray[np.int64]: ...

    def farm_group_names(self) -> list[str]: ...

    def check_interval(self, interval: int) -> int: ...


@dataclass(frozen=True)
class SLOConfig:
    """A service-level objective (optional ``slo:`` block): the long-run mean response time of
    admitted jobs must not exceed ``mean_response_time`` (``serverfarm_gym.baselines.solvers.slo_optimum``)."""

    mean_response_time: float

    def to_dict(self) -> dict[str, Any]:
        return {"mean_response_time": self.mean_response_time}


@dataclass(frozen=True)
class FarmConfig:
    """A validated server-farm scenario. Build it with :func:`serverfarm_gym.envs.scenarios.load_scenario` or
    :func:`farm_from_dict`.

    Servers are numbered group by group in the order of ``groups``: server 0 is the first server of
    the first group, servers ``group_offsets[k] .. group_offsets[k+1]-1`` belong to group k.
    """

    name: str
    groups: tuple[GroupConfig, ...]
    job_types: tuple[JobTypeConfig, ...]
    job_size: JobSizeConfig = field(default_factory=JobSizeConfig)
    interval_length: float = 1.0
    description: str = ""
    #: the optional service-level objective (None: none)
    slo: SLOConfig | None = None
    #: the ``serverfarm_gym.envs.geo.GeoConfig`` this farm was built from (``serverfarm_gym.envs.scenarios.load_scenario`` of a
    #: geo scenario sets it), else None; geo-aware policies (PDR+PAS) read it
    geo: GeoOrigin | None = field(default=None, compare=False, repr=False)

    # ---- sizes -------------------------------------------------------------------------------
    @property
    def n_groups(self) -> int:
        return len(self.groups)

    @property
    def n_job_types(self) -> int:
        return len(self.job_types)

    @property
    def n_servers(self) -> int:
        return int(sum(g.count for g in self.groups))

    @property
    def max_buffer(self) -> int:
        return max(g.buffer for g in self.groups)

    @property
    def n_intervals(self) -> int:
        """Number of piecewise-constant intervals in the (cyclic) arrival-rate/price schedule."""
        lens = [len(j.arrival_rate) for j in self.job_types] + [len(g.price) for g in self.groups]
        return max(lens)

    @property
    def is_time_varying(self) -> bool:
        return self.n_intervals > 1

    @property
    def is_on_off(self) -> bool:
        return all(g.is_on_off for g in self.groups)

    @property
    def has_sleep(self) -> bool:
        """Some group has dynamic right-sizing (a ``sleep`` mapping)."""
        return any(g.sleep is not None for g in self.groups)

    @property
    def all_exponential(self) -> bool:
        return all(self.size_of(j).is_exponential for j in range(self.n_job_types))

    def size_of(self, j: int) -> JobSizeConfig:
        """Job-size distribution of job type ``j`` (its own, else the scenario default)."""
        return self.job_types[j].job_size or self.job_size

    # ---- derived arrays (computed once; treat as read-only) -----------------------------------
    @cached_property
    def group_offsets(self) -> NDArray[np.int64]:
        """int64[K+1]: first server index of each group, then n_servers."""
        return np.concatenate([[0], np.cumsum([g.count for g in self.groups])]).astype(np.int64)

    @cached_property
    def server_group(self) -> NDArray[np.int64]:
        """int64[S]: group index of each server."""
        return np.repeat(np.arange(self.n_groups), [g.count for g in self.groups]).astype(np.int64)

    @cached_property
    def buffers(self) -> NDArray[np.int64]:
        """int64[K]: B_k."""
        return np.array([g.buffer for g in self.groups], dtype=np.int64)

    @cached_property
    def mu_table(self) -> NDArray[np.float64]:
        """float64[K, Bmax+1]: mu_k(n); mu_k(0) = 0, zero beyond B_k."""
        t = np.zeros((self.n_groups, self.max_buffer + 1))
        for k, g in enumerate(self.groups):
            t[k, 1 : g.buffer + 1] = g.service_rate
        return t

    @cached_property
    def power_table(self) -> NDArray[np.float64]:
        """float64[K, Bmax+1]: eps_k(n); eps_k(0) = idle power, zero beyond B_k."""
        t = np.zeros((self.n_groups, self.max_buffer + 1))
        for k, g in enumerate(self.groups):
            t[k, 0] = g.idle_power
            t[k, 1 : g.buffer + 1] = g.busy_power
        return t

    @cached_property
    def availability(self) -> NDArray[np.bool_]:
        """bool[J, K]: availability[j, k] is True when job type j may use group k."""
        a = np.zeros((self.n_job_types, self.n_groups), dtype=bool)
        for j, jt in enumerate(self.job_types):
            a[j, list(jt.groups)] = True
        return a

    @cached_property
    def server_availability(self) -> NDArray[np.bool_]:
        """bool[J, S]: job type j may use server s."""
        return self.availability[:, self.server_group]

    @cached_property
    def arrival_rates(self) -> NDArray[np.float64]:
        """float64[n_intervals, J]: arrival rate of each type in each interval (cyclic schedule)."""
        return _interval_table((j.arrival_rate for j in self.job_types), self.n_intervals)

    @cached_property
    def prices(self) -> NDArray[np.float64]:
        """float64[n_intervals, K]: electricity price of each group in each interval."""
        return _interval_table((g.price for g in self.groups), self.n_intervals)

    @cached_property
    def group_efficiency(self) -> NDArray[np.float64]:
        """float64[K]: PAS priority mu_k / (eps_k - eps0_k) of each group."""
        return np.array([g.efficiency for g in self.groups])

    @property
    def total_arrival_rate(self) -> float:
        return float(self.arrival_rates.mean(axis=0).sum())

    @property
    def cycle_arrivals(self) -> float:
        """Expected arrivals in one cycle of the (cyclic) rate schedule: the decision epochs a
        window must hold to see every interval once (one interval's worth when constant)."""
        return float(self.arrival_rates.sum()) * self.interval_length

    @property
    def epochs_per_duration(self) -> float:
        """Decision epochs per mean job duration at the slowest group: total arrival rate / the
        smallest of the groups' peak service rates. Epochs are arrivals, so a large farm covers
        little model time per epoch; warm-ups and windows are sized in these units."""
        slowest = float(min(max(g.service_rate) for g in self.groups))
        return self.total_arrival_rate / slowest if slowest > 0 else 1.0

    @property
    def load(self) -> float:
        """Normalised offered load rho = sum_j lambda_j / sum_k R_k mu_k (peak rates)."""
        cap = sum(g.count * max(g.service_rate) for g in self.groups)
        return self.total_arrival_rate / cap

    # ---- transformations ---------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The scenario as a plain dict in the file format (round-trips through farm_from_dict)."""
        out: dict[str, Any] = {"name": self.name}
        if self.description:
            out["description"] = self.description
        out["groups"] = [g.to_dict() for g in self.groups]
        jts = []
        for jt in self.job_types:
            d: dict[str, Any] = {
                "name": jt.name,
                "arrival_rate": jt.arrival_rate[0]
                if len(jt.arrival_rate) == 1
                else list(jt.arrival_rate),
                "groups": [self.groups[k].name for k in jt.groups],
            }
            if jt.job_size is not None:
                d["job_size"] = jt.job_size.to_dict()
            jts.append(d)
        out["job_types"] = jts
        out["job_size"] = self.job_size.to_dict()
        if self.is_time_varying or self.interval_length != 1.0:
            out["interval_length"] = self.interval_length
        if self.slo is not None:
            out["slo"] = self.slo.to_dict()
        return out

    def scaled(self, factor: int, name: str | None = None) -> FarmConfig:
        """The same farm with every R_k and lambda_j multiplied by ``factor`` (paper's scaling)."""
        if int(factor) != factor or factor < 1:
            raise ConfigError(f"scale factor must be a positive integer, got {factor!r}")
        d = self.to_dict()
        d["name"] = name or f"{self.name}-x{int(factor)}"
        for g in d["groups"]:
            g["count"] = int(g["count"] * factor)
        for j in d["job_types"]:
            r = j["arrival_rate"]
            j["arrival_rate"] = [x * factor for x in r] if isinstance(r, list) else r * factor
        return farm_from_dict(d)

    def scaled_down(self, factor: int, name: str | None = None) -> FarmConfig:
        """The farm with every R_k and lambda_j divided by ``factor`` (the inverse of
        :meth:`scaled`): the same groups, buffers, rates, powers, job types and schedule, so the
        same group-mode observation and action spaces, at 1/``factor`` of the size. A count that
        ``factor`` does not divide is rounded (at least 1 server): the twin is then close to,
        not exactly, the scaled farm."""
        if int(factor) != factor or factor < 1:
            raise ConfigError(f"scale factor must be a positive integer, got {factor!r}")
        d = self.to_dict()
        d["name"] = name or f"{self.name}-div{int(factor)}"
        for g in d["groups"]:
            g["count"] = max(1, round(g["count"] / factor))
        for j in d["job_types"]:
            r = j["arrival_rate"]
            j["arrival_rate"] = [x / factor for x in r] if isinstance(r, list) else r / factor
        return farm_from_dict(d)

    def with_job_size(self, job_size: Mapping[str, Any] | JobSizeConfig) -> FarmConfig:
        """The same farm with every job type using ``job_size``."""
        d = self.to_dict()
        d["job_size"] = (
            job_size.to_dict() if isinstance(job_size, JobSizeConfig) else dict(job_size)
        )
        for j in d["job_types"]:
            j.pop("job_size", None)
        return farm_from_dict(d)


def _interval_table(schedules: Iterable[tuple[float, ...]], n: int) -> NDArray[np.float64]:
    """float64[n, len(schedules)]: one schedule per column, a single value repeated n times
    (the name is typed: numpy's stubs leave ``.T`` untyped)."""
    table: NDArray[np.float64] = np.array(
        [list(v) * n if len(v) == 1 else list(v) for v in schedules]
    ).T.copy()
    return table


# ---------------------------------------------------------------------------------------------
# validation (the shared primitives and limits are in serverfarm_gym.envs.validation)
# ---------------------------------------------------------------------------------------------
_TOP_KEYS = {"name", "description", "groups", "job_types", "job_size", "interval_length", "slo"}
_GROUP_KEYS = {"name", "count", "service_rate", "busy_power", "idle_power", "buffer", "price",
               "sleep"}  # fmt: skip
_JOB_KEYS = {"name", "arrival_rate", "groups", "job_size"}
_SLO_KEYS = {"mean_response_time"}


def slo_from_spec(d: Any) -> SLOConfig:
    """Validate an ``slo:`` block (``{mean_response_time: D}``, D > 0 in time units)."""
    if not isinstance(d, Mapping):
        raise ConfigError(f"slo: expected a mapping like {{mean_response_time: 2.0}}, got {d!r}")
    check_keys(d, _SLO_KEYS, "slo")
    D = number(
        require(d, "mean_response_time", "slo"),
        "slo.mean_response_time",
        positive=True,
        bounded=True,
    )
    return SLOConfig(mean_response_time=D)


def job_size_from_spec(d: Any, where: str) -> JobSizeConfig:
    """Validate a job-size spec (a mapping like ``{distribution: erlang, k: 2}`` or a bare
    distribution name); ``where`` names the field in error messages."""
    if isinstance(d, str):
        d = {"distribution": d}
    if not isinstance(d, Mapping):
        raise ConfigError(f"{where}: expected a mapping like {{distribution: exponential}}")
    dist = d.get("distribution", "exponential")
    if not isinstance(dist, str) or dist not in DISTRIBUTIONS:
        raise ConfigError(
            f"{where}.distribution: unknown distribution {shown(dist)}; choose one of "
            f"{list(DISTRIBUTIONS)}"
        )
    check_keys(d, {"distribution", *DISTRIBUTIONS[dist]}, where)
    kw: dict[str, Any] = {}
    if dist == "erlang":
        kw["k"] = integer(require(d, "k", where), f"{where}.k", 1, 1_000_000)
    elif dist == "hyperexponential":
        scv = number(require(d, "scv", where), f"{where}.scv", bounded=True)
        if scv <= 1:
            raise ConfigError(
                f"{where}.scv: hyperexponential needs scv > 1, got {scv} "
                "(use exponential for scv = 1, erlang for scv < 1)"
            )
        kw["scv"] = scv
    elif dist == "lognormal":
        kw["scv"] = number(require(d, "scv", where), f"{where}.scv", positive=True, bounded=True)
    elif dist == "pareto":
        alpha = number(require(d, "alpha", where), f"{where}.alpha", bounded=True)
        if alpha <= 1:
            raise ConfigError(
                f"{where}.alpha: pareto needs alpha > 1 for a finite mean, got {alpha}"
            )
        kw["alpha"] = alpha
    return JobSizeConfig(distribution=dist, **kw)


def farm_from_dict(d: Mapping[str, Any]) -> FarmConfig:
    """Validate a scenario given as a plain dict and build a :class:`FarmConfig`."""
    check_keys(d, _TOP_KEYS, "scenario")
    # the text fields first: nothing below may print a value that is not a bounded string
    name = text(d.get("name", "unnamed"), "scenario.name")
    description = text(
        d.get("description", ""), "scenario.description", max_length=MAX_DESCRIPTION_LENGTH
    )
    groups, names = _groups_from_spec(d)
    default_size = job_size_from_spec(
        d.get("job_size", {"distribution": "exponential"}), "job_size"
    )
    jobs = _job_types_from_spec(d, names)
    lens = {len(j.arrival_rate) for j in jobs} | {len(g.price) for g in groups}
    lens.discard(1)
    if len(lens) > 1:
        raise ConfigError(
            f"arrival_rate/price schedules: all lists must have the same number of intervals, "
            f"got lengths {shown_items(sorted(lens))}"
        )
    n_int = max(lens, default=1)
    if n_int * (len(jobs) + len(groups)) > MAX_SCHEDULE_ENTRIES:
        raise ConfigError(
            f"arrival_rate/price schedules: {n_int:,} intervals x {len(jobs):,} job types and "
            f"{len(groups):,} groups = {n_int * (len(jobs) + len(groups)):,} values; at most "
            f"{MAX_SCHEDULE_ENTRIES:,} fit the per-interval tables (fewer intervals or types)"
        )
    interval = number(d.get("interval_length", 1.0), "interval_length", positive=True, bounded=True)
    config = FarmConfig(
        name=name,
        groups=tuple(groups),
        job_types=tuple(jobs),
        job_size=default_size,
        interval_length=interval,
        description=description,
        slo=slo_from_spec(d["slo"]) if "slo" in d else None,
    )
    _check_simulable(config)
    _check_sleep(config)
    return config


def _groups_from_spec(d: Mapping[str, Any]) -> tuple[list[GroupConfig], dict[str, int]]:
    """The validated ``groups`` and each group's index by name (job types name their groups)."""
    groups_in = require(d, "groups", "scenario")
    if not isinstance(groups_in, Sequence) or isinstance(groups_in, str) or len(groups_in) == 0:
        raise ConfigError("scenario.groups: must be a non-empty list of server groups")
    groups: list[GroupConfig] = []
    names: dict[str, int] = {}
    for i, g in enumerate(groups_in):
        w = f"groups[{i}]"
        check_keys(g, _GROUP_KEYS, w)
        gname = text(g.get("name", f"g{i}"), f"{w}.name")
        w = f"groups[{i}] ({gname})"
        if gname in names:
            raise ConfigError(f"{w}.name: duplicate group name {gname!r}; names must be unique")
        names[gname] = i
        count, mu, eps, eps0, buf = server_group_fields(g, w)
        price = schedule(g.get("price", 1.0), f"{w}.price", positive=True)
        sleep = SleepConfig(*sleep_fields(g["sleep"], f"{w}.sleep")) if "sleep" in g else None
        groups.append(GroupConfig(gname, count, mu, eps, eps0, buf, price, sleep))
    return groups, names


def _job_types_from_spec(d: Mapping[str, Any], names: dict[str, int]) -> list[JobTypeConfig]:
    """The validated ``job_types`` of a scenario; ``names`` maps group names to indices."""
    jobs_in = require(d, "job_types", "scenario")
    if not isinstance(jobs_in, Sequence) or isinstance(jobs_in, str) or len(jobs_in) == 0:
        raise ConfigError("scenario.job_types: must be a non-empty list of job types")
    jobs: list[JobTypeConfig] = []
    jnames: set[str] = set()
    for i, j in enumerate(jobs_in):
        w = f"job_types[{i}]"
        check_keys(j, _JOB_KEYS, w)
        jname = text(j.get("name", f"j{i}"), f"{w}.name")
        w = f"job_types[{i}] ({jname})"
        if jname in jnames:
            raise ConfigError(f"{w}.name: duplicate job type name {jname!r}; names must be unique")
        jnames.add(jname)
        rate = schedule(require(j, "arrival_rate", w), f"{w}.arrival_rate", positive=True)
        gl = name_list(
            require(j, "groups", w), f"{w}.groups", "group names (the groups this type may use)"
        )
        idx = []
        for gn in gl:
            if gn not in names:
                raise ConfigError(
                    f"{w}.groups: unknown group {shown(gn)}; known groups are {shown_items(list(names))}"
                )
            if names[gn] in idx:
                raise ConfigError(f"{w}.groups: group {shown(gn)} listed twice")
            idx.append(names[gn])
        js = job_size_from_spec(j["job_size"], f"{w}.job_size") if "job_size" in j else None
        jobs.append(JobTypeConfig(jname, rate, tuple(sorted(idx)), js))
    return jobs


def _check_sleep(config: FarmConfig) -> None:
    """Right-sizing runs in the exponential event loop only (a setup is a memoryless phase)."""
    if config.has_sleep and not config.all_exponential:
        k = next(i for i, g in enumerate(config.groups) if g.sleep is not None)
        raise ConfigError(
            f"groups[{k}] ({config.groups[k].name}).sleep: right-sizing needs exponential job "
            "sizes; remove the non-exponential job_size or the sleep mappings"
        )


def _check_simulable(config: FarmConfig) -> None:
    """Farm-wide limits that keep the event loop finite, the arrays in memory and the steady
    state within reach (the reasons are in the ``serverfarm_gym.envs.validation`` docstring)."""
    groups, jobs, interval_length = config.groups, config.job_types, config.interval_length
    n_servers = sum(g.count for g in groups)
    if n_servers > MAX_SERVERS:
        raise ConfigError(
            f"groups: {n_servers:,} servers in all; at most {MAX_SERVERS:,} fit the simulator's "
            "per-server arrays (lower the counts)"
        )
    n_levels = sum(g.buffer for g in groups)
    if n_levels > MAX_LEVELS:
        raise ConfigError(
            f"groups: the buffers add up to {n_levels:,} levels; at most {MAX_LEVELS:,} keep the "
            "relaxation-bound LP and the group-mode spaces tractable (lower the buffers)"
        )
    slots = n_servers * max(g.buffer for g in groups)
    if slots > MAX_JOB_SLOTS:
        raise ConfigError(
            f"groups: {n_servers:,} servers x largest buffer {max(g.buffer for g in groups):,} = "
            f"{slots:,} job slots; at most {MAX_JOB_SLOTS:,} fit in memory (lower the counts or "
            "the buffers)"
        )
    for i, jt in enumerate(jobs):
        capacity = sum(groups[k].count * max(groups[k].service_rate) for k in jt.groups)
        peak = max(jt.arrival_rate)
        if peak > MAX_OVERLOAD * capacity:
            raise ConfigError(
                f"job_types[{i}] ({jt.name}).arrival_rate: {peak:g} is more than "
                f"{MAX_OVERLOAD:g}x the total service rate {capacity:g} of its groups; every "
                "decision would cost that many blocked arrivals (blocking above 99.9%). Lower "
                "the rate or give the type more servers"
            )
    per_duration = config.epochs_per_duration
    if per_duration > MAX_EPOCHS_PER_DURATION:
        slow = min(range(len(groups)), key=lambda k: max(groups[k].service_rate))
        g = groups[slow]
        raise ConfigError(
            f"groups[{slow}] ({g.name}).service_rate: {max(g.service_rate):g} against a total "
            f"arrival rate of {config.total_arrival_rate:g}: one mean job there spans "
            f"{per_duration:.3g} decision epochs; at most {MAX_EPOCHS_PER_DURATION:.0e} let a simulation reach steady "
            "state (runs and windows are sized in mean job durations of the slowest group). "
            "Make that group faster, or leave it out"
        )
    n_int = max([len(j.arrival_rate) for j in jobs] + [len(g.price) for g in groups])
    if n_int > 1:
        mean_total = sum(float(np.mean(j.arrival_rate)) for j in jobs)
        if interval_length * mean_total < MIN_ARRIVALS_PER_INTERVAL:
            raise ConfigError(
                f"interval_length: {interval_length:g} time units hold {interval_length * mean_total:g}"
                f" arrivals on average; at least {MIN_ARRIVALS_PER_INTERVAL:g} are needed (the "
                "simulator stops at every interval boundary). Lengthen the intervals"
            )
