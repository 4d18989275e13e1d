"""Scenario configuration: typed, frozen dataclasses, loaded from YAML/JSON/dict and validated once.

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

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "DISTRIBUTIONS",
    "ConfigError",
    "FarmConfig",
    "GroupConfig",
    "JobSizeConfig",
    "JobTypeConfig",
    "farm_from_dict",
    "load_scenario",
]


class ConfigError(ValueError):
    """A scenario is invalid. The message names the offending field and how to fix it."""


#: job-size distributions (all with mean 1) and the parameters each accepts.
DISTRIBUTIONS: dict[str, tuple[str, ...]] = {
    "exponential": (),
    "deterministic": (),
    "erlang": ("k",),
    "hyperexponential": ("scv",),
    "lognormal": ("scv",),
    "pareto": ("alpha",),
}
# integer codes used by the compiled simulator (order matters; see envs/kernels.py)
DIST_CODES = {name: i for i, name in enumerate(DISTRIBUTIONS)}


@dataclass(frozen=True)
class JobSizeConfig:
    """Job-size distribution with mean 1.

    ``erlang`` takes ``k`` (phases, scv = 1/k), ``hyperexponential`` and ``lognormal`` take ``scv``
    (squared coefficient of variation; hyperexponential needs scv > 1, balanced means), ``pareto``
    takes ``alpha`` > 1 (scv = inf for alpha <= 2).
    """

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
        if d == "erlang":
            return float(self.k), 0.0
        if d == "hyperexponential":
            # balanced-means two-phase hyperexponential with mean 1 and the given scv
            p1 = 0.5 * (1.0 + math.sqrt((self.scv - 1.0) / (self.scv + 1.0)))
            return p1, 0.0
        if d == "lognormal":
            sigma2 = math.log1p(self.scv)
            return -0.5 * sigma2, math.sqrt(sigma2)
        if d == "pareto":
            return self.alpha, (self.alpha - 1.0) / self.alpha  # shape, scale x_m (mean 1)
        return 0.0, 0.0

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"distribution": self.distribution}
        for p in DISTRIBUTIONS[self.distribution]:
            out[p] = getattr(self, p)
        return out


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


@dataclass(frozen=True)
class FarmConfig:
    """A validated server-farm scenario. Build it with :func:`load_scenario` or :func:`farm_from_dict`.

    Servers are numbered group by group in the order of ``groups``: server 0 is the first server of
    the first group, servers ``group_offsets[k] .. group_offsets[k+1]-1`` belong to group k.
    """

    name: str
    groups: tuple[GroupConfig, ...]
    job_types: tuple[JobTypeConfig, ...]
    job_size: JobSizeConfig = field(default_factory=JobSizeConfig)
    interval_length: float = 1.0
    description: str = ""
    #: the ``envs.geo.GeoConfig`` this farm was built from (``GeoConfig.to_farm``), else None;
    #: geo-aware policies (PDR+PAS) read it
    geo: Any = field(default=None, compare=False, repr=False)

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
    def all_exponential(self) -> bool:
        return all(self.size_of(j).is_exponential for j in range(self.n_job_types))

    def size_of(self, j: int) -> JobSizeConfig:
        """Job-size distribution of job type ``j`` (its own, else the scenario default)."""
        return self.job_types[j].job_size or self.job_size

    # ---- derived arrays (computed once; treat as read-only) -----------------------------------
    @cached_property
    def group_offsets(self) -> np.ndarray:
        """int64[K+1]: first server index of each group, then n_servers."""
        return np.concatenate([[0], np.cumsum([g.count for g in self.groups])]).astype(np.int64)

    @cached_property
    def server_group(self) -> np.ndarray:
        """int64[S]: group index of each server."""
        return np.repeat(np.arange(self.n_groups), [g.count for g in self.groups]).astype(np.int64)

    @cached_property
    def buffers(self) -> np.ndarray:
        """int64[K]: B_k."""
        return np.array([g.buffer for g in self.groups], dtype=np.int64)

    @cached_property
    def mu_table(self) -> np.ndarray:
        """float64[K, Bmax+1]: mu_k(n); mu_k(0) = 0, zero beyond B_k."""
        t = np.zeros((self.n_groups, self.max_buffer + 1))
        for k, g in enumerate(self.groups):
            t[k, 1 : g.buffer + 1] = g.service_rate
        return t

    @cached_property
    def power_table(self) -> np.ndarray:
        """float64[K, Bmax+1]: eps_k(n); eps_k(0) = idle power, zero beyond B_k."""
        t = np.zeros((self.n_groups, self.max_buffer + 1))
        for k, g in enumerate(self.groups):
            t[k, 0] = g.idle_power
            t[k, 1 : g.buffer + 1] = g.busy_power
        return t

    @cached_property
    def availability(self) -> np.ndarray:
        """bool[J, K]: availability[j, k] is True when job type j may use group k."""
        a = np.zeros((self.n_job_types, self.n_groups), dtype=bool)
        for j, jt in enumerate(self.job_types):
            a[j, list(jt.groups)] = True
        return a

    @cached_property
    def server_availability(self) -> np.ndarray:
        """bool[J, S]: job type j may use server s."""
        return self.availability[:, self.server_group]

    @cached_property
    def arrival_rates(self) -> np.ndarray:
        """float64[n_intervals, J]: arrival rate of each type in each interval (cyclic schedule)."""
        n = self.n_intervals
        return np.array([_stretch(j.arrival_rate, n) for j in self.job_types]).T.copy()

    @cached_property
    def prices(self) -> np.ndarray:
        """float64[n_intervals, K]: electricity price of each group in each interval."""
        n = self.n_intervals
        return np.array([_stretch(g.price, n) for g in self.groups]).T.copy()

    @cached_property
    def group_efficiency(self) -> np.ndarray:
        """float64[K]: PAS priority mu_k / (eps_k - eps0_k) of each group."""
        return np.array([g.efficiency for g in self.groups])

    @property
    def total_arrival_rate(self) -> float:
        return float(self.arrival_rates.mean(axis=0).sum())

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

    def with_job_size(self, job_size: Mapping[str, Any] | JobSizeConfig) -> FarmConfig:
        """The same farm with every job type using ``job_size``."""
        d = self.to_dict()
        d["job_size"] = (
            job_size.to_dict() if isinstance(job_size, JobSizeConfig) else dict(job_size)
        )
        for j in d["job_types"]:
            j.pop("job_size", None)
        return farm_from_dict(d)


def _stretch(values: tuple[float, ...], n: int) -> list[float]:
    return list(values) * n if len(values) == 1 else list(values)


# ---------------------------------------------------------------------------------------------
# loading and validation
# ---------------------------------------------------------------------------------------------
_TOP_KEYS = {"name", "description", "groups", "job_types", "job_size", "interval_length"}
_GROUP_KEYS = {"name", "count", "service_rate", "busy_power", "idle_power", "buffer", "price"}
_JOB_KEYS = {"name", "arrival_rate", "groups", "job_size"}


def _check_keys(d: Mapping[str, Any], allowed: set[str], where: str) -> None:
    if not isinstance(d, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {type(d).__name__}")
    unknown = sorted(set(d) - allowed)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {unknown}; allowed keys are {sorted(allowed)} "
            "(check the spelling)"
        )


def _require(d: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in d:
        raise ConfigError(f"{where}.{key}: missing (required)")
    return d[key]


def _number(v: Any, where: str, *, positive: bool = False, nonneg: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise ConfigError(f"{where}: expected a number, got {v!r}")
    x = float(v)
    if not math.isfinite(x):
        raise ConfigError(f"{where}: must be finite, got {v!r}")
    if positive and x <= 0:
        raise ConfigError(f"{where}: must be > 0, got {v!r}")
    if nonneg and x < 0:
        raise ConfigError(f"{where}: must be >= 0, got {v!r}")
    return x


def _integer(v: Any, where: str, minimum: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        else:
            raise ConfigError(f"{where}: expected an integer, got {v!r}")
    if v < minimum:
        raise ConfigError(f"{where}: must be >= {minimum}, got {v!r}")
    return int(v)


def _levels(v: Any, n: int, where: str, *, positive: bool) -> tuple[float, ...]:
    """A scalar (same at every level) or a list of exactly ``n`` per-level values."""
    if isinstance(v, (list, tuple)):
        if len(v) != n:
            raise ConfigError(
                f"{where}: a list must have one value per buffer level 1..buffer "
                f"(length {n}), got length {len(v)}"
            )
        return tuple(_number(x, f"{where}[{i}]", positive=positive) for i, x in enumerate(v))
    return (_number(v, where, positive=positive),) * n


def _schedule(v: Any, where: str, *, positive: bool) -> tuple[float, ...]:
    """A scalar or a non-empty list, one value per time interval."""
    if isinstance(v, (list, tuple)):
        if len(v) == 0:
            raise ConfigError(f"{where}: an empty list; give a number or one value per interval")
        vals = tuple(
            _number(x, f"{where}[{i}]", nonneg=True, positive=False) for i, x in enumerate(v)
        )
        if positive and sum(vals) <= 0:
            raise ConfigError(f"{where}: at least one interval must have a positive value")
        return vals
    return (_number(v, where, positive=positive),)


def server_group_fields(
    g: Mapping[str, Any], w: str
) -> tuple[int, tuple[float, ...], tuple[float, ...], float, int]:
    """Validate the server fields shared by farm groups and geo cluster groups.

    Returns ``(count, service_rate, busy_power, idle_power, buffer)``; ``w`` names the group in
    error messages.
    """
    buf = _integer(_require(g, "buffer", w), f"{w}.buffer", 1)
    count = _integer(_require(g, "count", w), f"{w}.count", 1)
    mu = _levels(_require(g, "service_rate", w), buf, f"{w}.service_rate", positive=True)
    eps = _levels(_require(g, "busy_power", w), buf, f"{w}.busy_power", positive=True)
    eps0 = _number(_require(g, "idle_power", w), f"{w}.idle_power", nonneg=True)
    for n, e in enumerate(eps, start=1):
        if e <= eps0:
            raise ConfigError(
                f"{w}.busy_power: must exceed idle_power ({eps0}) at every level, "
                f"got {e} at level {n}"
            )
    return count, mu, eps, eps0, buf


def _job_size(d: Any, where: str) -> JobSizeConfig:
    if isinstance(d, str):
        d = {"distribution": d}
    if not isinstance(d, Mapping):
        raise ConfigError(f"{where}: expected a mapping like {{distribution: exponential}}")
    dist = d.get("distribution", "exponential")
    if dist not in DISTRIBUTIONS:
        raise ConfigError(
            f"{where}.distribution: unknown distribution {dist!r}; choose one of {list(DISTRIBUTIONS)}"
        )
    _check_keys(d, {"distribution", *DISTRIBUTIONS[dist]}, where)
    kw: dict[str, Any] = {}
    if dist == "erlang":
        kw["k"] = _integer(_require(d, "k", where), f"{where}.k", 1)
    elif dist == "hyperexponential":
        scv = _number(_require(d, "scv", where), f"{where}.scv")
        if scv <= 1:
            raise ConfigError(
                f"{where}.scv: hyperexponential needs scv > 1, got {scv} "
                "(use exponential for scv = 1, erlang for scv < 1)"
            )
        kw["scv"] = scv
    elif dist == "lognormal":
        kw["scv"] = _number(_require(d, "scv", where), f"{where}.scv", positive=True)
    elif dist == "pareto":
        alpha = _number(_require(d, "alpha", where), f"{where}.alpha")
        if alpha <= 1:
            raise ConfigError(
                f"{where}.alpha: pareto needs alpha > 1 for a finite mean, got {alpha}"
            )
        kw["alpha"] = alpha
    return JobSizeConfig(distribution=dist, **kw)


def farm_from_dict(d: Mapping[str, Any]) -> FarmConfig:
    """Validate a scenario given as a plain dict and build a :class:`FarmConfig`."""
    _check_keys(d, _TOP_KEYS, "scenario")
    name = str(d.get("name", "unnamed"))
    groups_in = _require(d, "groups", "scenario")
    if not isinstance(groups_in, Sequence) or isinstance(groups_in, str) or len(groups_in) == 0:
        raise ConfigError("scenario.groups: must be a non-empty list of server groups")
    groups: list[GroupConfig] = []
    names: dict[str, int] = {}
    for i, g in enumerate(groups_in):
        w = f"groups[{i}]"
        _check_keys(g, _GROUP_KEYS, w)
        gname = str(g.get("name", f"g{i}"))
        w = f"groups[{i}] ({gname})"
        if gname in names:
            raise ConfigError(f"{w}.name: duplicate group name {gname!r}; names must be unique")
        names[gname] = i
        count, mu, eps, eps0, buf = server_group_fields(g, w)
        price = _schedule(g.get("price", 1.0), f"{w}.price", positive=True)
        groups.append(GroupConfig(gname, count, mu, eps, eps0, buf, price))

    default_size = _job_size(d.get("job_size", {"distribution": "exponential"}), "job_size")
    jobs_in = _require(d, "job_types", "scenario")
    if not isinstance(jobs_in, Sequence) or isinstance(jobs_in, str) or len(jobs_in) == 0:
        raise ConfigError("scenario.job_types: must be a non-empty list of job types")
    jobs: list[JobTypeConfig] = []
    jnames: set[str] = set()
    for i, j in enumerate(jobs_in):
        w = f"job_types[{i}]"
        _check_keys(j, _JOB_KEYS, w)
        jname = str(j.get("name", f"j{i}"))
        w = f"job_types[{i}] ({jname})"
        if jname in jnames:
            raise ConfigError(f"{w}.name: duplicate job type name {jname!r}; names must be unique")
        jnames.add(jname)
        rate = _schedule(_require(j, "arrival_rate", w), f"{w}.arrival_rate", positive=True)
        gl = _require(j, "groups", w)
        if isinstance(gl, str) or not isinstance(gl, Sequence) or len(gl) == 0:
            raise ConfigError(
                f"{w}.groups: must be a non-empty list of group names (the groups this type may use)"
            )
        idx = []
        for gn in gl:
            if gn not in names:
                raise ConfigError(
                    f"{w}.groups: unknown group {gn!r}; known groups are {list(names)}"
                )
            if names[gn] in idx:
                raise ConfigError(f"{w}.groups: group {gn!r} listed twice")
            idx.append(names[gn])
        js = _job_size(j["job_size"], f"{w}.job_size") if "job_size" in j else None
        jobs.append(JobTypeConfig(jname, rate, tuple(sorted(idx)), js))

    lens = {len(j.arrival_rate) for j in jobs} | {len(g.price) for g in groups}
    lens.discard(1)
    if len(lens) > 1:
        raise ConfigError(
            f"arrival_rate/price schedules: all lists must have the same number of intervals, "
            f"got lengths {sorted(lens)}"
        )
    interval = _number(d.get("interval_length", 1.0), "interval_length", positive=True)
    return FarmConfig(
        name=name,
        groups=tuple(groups),
        job_types=tuple(jobs),
        job_size=default_size,
        interval_length=interval,
        description=str(d.get("description", "")),
    )


def load_scenario(spec: str | Path | Mapping[str, Any] | FarmConfig) -> FarmConfig:
    """Load a scenario from a preset name, a YAML/JSON file path, a dict, or a FarmConfig.

    Geo scenarios (``envs.geo``: presets such as ``"geo-us-eu"``, files or dicts with ``clusters``)
    are accepted too and turned into their farm by ``GeoConfig.to_farm()``; the farm's ``geo``
    field keeps the geo config for geo-aware policies.
    """
    if isinstance(spec, FarmConfig):
        return spec
    if isinstance(spec, Mapping):
        return _geo_farm(spec) if "clusters" in spec else farm_from_dict(spec)
    if type(spec).__name__ == "GeoConfig":
        return _geo_farm(spec)
    if not isinstance(spec, (str, Path)):
        raise ConfigError(
            f"scenario: expected a preset name, a file path, a dict or a FarmConfig, got {type(spec).__name__}"
        )
    from envs.geo import geo_presets
    from envs.scenarios import PRESETS, load_preset

    if isinstance(spec, str) and spec in PRESETS:
        return load_preset(spec)
    path = Path(spec)
    if isinstance(spec, str) and not path.is_file() and spec in geo_presets():
        return _geo_farm(spec)
    if not path.is_file():
        raise ConfigError(
            f"scenario: {str(spec)!r} is neither a preset ({sorted(PRESETS)}), a geo preset "
            f"({geo_presets()}) nor an existing file"
        )
    text = path.read_text()
    if path.suffix.lower() == ".json":
        data = json.loads(text)
    else:
        import yaml

        data = yaml.safe_load(text)
    if not isinstance(data, Mapping):
        raise ConfigError(f"scenario file {path}: top level must be a mapping")
    return _geo_farm(data) if "clusters" in data else farm_from_dict(data)


def _geo_farm(spec: Any) -> FarmConfig:
    """The farm of a geo scenario (see ``envs.geo``), remembering the geo config it came from."""
    from dataclasses import replace

    from envs.geo import load_geo_scenario

    geo = load_geo_scenario(spec)
    return replace(geo.to_farm(), geo=geo)
