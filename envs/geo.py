"""Geo-distributed scenarios for power-demand routing (PDR): clusters, ingress points, latencies.

A geo scenario (see ``docs/pdr.md``) describes ``n`` server clusters in different locations, each
made of farm-style server groups, and ``m`` ingress points whose requests must be routed to the
clusters in every time interval::

    name: tiny-geo
    interval_length: 60          # farm time units per interval
    n_intervals: 2
    d_min_ms: 40                 # performance cost is max(0, L_ave - d_min_ms)
    d_max_ms: 120                # constraint L_ave <= d_max_ms (omit for none)
    clusters:
      - name: east
        pue: 1.2
        price: [0.05, 0.08]      # per unit energy, per interval (scalar, list or diurnal profile)
        processing_delay: {model: mm1, base_ms: 20}
        groups:
          - {name: new, count: 10, service_rate: 2.0, busy_power: 0.3, idle_power: 0.1, buffer: 3}
    ingress:
      - name: na
        rate: [8.0, 12.0]        # requests per farm time unit, one value per interval
        latency_ms: {east: 10}   # round-trip delta_ij to every cluster (mapping or list)
        network_cost: {east: 0.001}   # money per request on each link (default 0)

Units and modelling choices (all documented in ``docs/pdr.md``):

- Rates (ingress ``rate``, cluster capacity, service rates) are per farm time unit; an interval
  lasts ``interval_length`` time units, so ingress i sends ``rate * interval_length`` requests in it.
- Capacity ``u_j`` (requests per time unit) = ``utilisation_cap`` x sum over groups of
  count x peak service rate, unless the cluster gives ``capacity`` (which must stay below that raw
  rate, otherwise the M/M/1 delay is infinite inside the feasible region).
- Processing delay ``pi_j(x)`` (ms): ``mm1``: ``base_ms / (1 - x / c_j)`` with ``c_j`` the raw
  service rate of the cluster (convex, increasing, finite on ``[0, u_j]``); ``constant``: ``base_ms``.
- Energy: Qureshi's linear model per group, utilisation = load / (count x peak rate); the cost of
  one unit of IT energy in cluster j is ``price_j x PUE_j``.
- Links: ingress i may use cluster j iff its unloaded latency ``delta_ij + pi_j(0)`` is within
  ``latency_budget_ms`` (default ``d_max_ms``; ``full`` or no ``d_max_ms`` = fully connected).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from serverfarm_gym.envs.config import FarmConfig, JobSizeConfig, farm_from_dict, job_size_from_spec
from serverfarm_gym.envs.validation import (
    MAX_DESCRIPTION_LENGTH,
    ConfigError,
    check_keys,
    integer,
    number,
    require,
    server_group_fields,
    shown,
    text,
)

__all__ = [
    "DELAY_MODELS",
    "ClusterConfig",
    "ClusterGroupConfig",
    "DelayModel",
    "GeoConfig",
    "IngressConfig",
    "diurnal_profile",
    "geo_from_dict",
]

#: most intervals in a geo day (a one-hot entry of the observation and a PDR LP each)
MAX_INTERVALS = 100_000

#: processing-delay models a cluster may use (see :class:`DelayModel`).
DELAY_MODELS = ("mm1", "constant")

#: default utilisation cap: capacity u_j = cap x raw service rate. 0.9 keeps the M/M/1 delay at
#: most 10x its zero-load value, and leaves headroom for the stochastic farm below the cap.
DEFAULT_UTILISATION_CAP = 0.9


# ---------------------------------------------------------------------------------------------
# dataclasses
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ClusterGroupConfig:
    """A group of identical servers inside a cluster (the farm's group fields, without a price).

    ``service_rate`` / ``busy_power`` hold one value per buffer level 1..buffer as in the farm
    format. The flow model uses the full-buffer level (``peak_rate``, ``peak_power``), the same
    convention as :attr:`serverfarm_gym.envs.config.GroupConfig.efficiency`.
    """

    name: str
    count: int
    service_rate: tuple[float, ...]
    busy_power: tuple[float, ...]
    idle_power: float
    buffer: int

    @property
    def peak_rate(self) -> float:
        """Service rate of one server at full buffer (requests per time unit)."""
        return self.service_rate[-1]

    @property
    def peak_power(self) -> float:
        return self.busy_power[-1]

    @property
    def raw_capacity(self) -> float:
        """count x peak rate: requests per time unit the whole group serves when fully busy."""
        return self.count * self.peak_rate

    @property
    def energy_per_request(self) -> float:
        """Dynamic IT energy per request, (eps - eps0) / mu (power units x time units)."""
        return (self.peak_power - self.idle_power) / self.peak_rate

    @property
    def idle_total(self) -> float:
        """Idle power of all servers of the group."""
        return self.count * self.idle_power

    def to_dict(self) -> dict[str, Any]:
        def scal(v: tuple[float, ...]) -> float | list[float]:
            return v[0] if len(set(v)) == 1 else list(v)

        return {
            "name": self.name,
            "count": self.count,
            "service_rate": scal(self.service_rate),
            "busy_power": scal(self.busy_power),
            "idle_power": self.idle_power,
            "buffer": self.buffer,
        }


@dataclass(frozen=True)
class DelayModel:
    """Mean processing delay of a cluster in ms as a function of its load x (requests/time unit).

    ``mm1``: ``base_ms / (1 - x / c)`` with ``c`` the cluster's raw service rate; ``constant``:
    ``base_ms`` at every load. Both are convex and non-decreasing, so x * pi(x) is convex too.
    """

    model: str = "mm1"
    base_ms: float = 20.0

    def delay(self, x: ArrayLike, raw_capacity: float) -> NDArray[np.float64]:
        """pi(x) in ms (vectorised)."""
        x = np.asarray(x, dtype=float)
        if self.model == "constant":
            return np.full_like(x, self.base_ms)
        return self.base_ms / (1.0 - x / raw_capacity)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "base_ms": self.base_ms}


@dataclass(frozen=True)
class ClusterConfig:
    """A server cluster t_j: server groups, PUE, electricity price per interval, delay model."""

    name: str
    groups: tuple[ClusterGroupConfig, ...]
    pue: float
    price: tuple[float, ...]
    processing_delay: DelayModel
    capacity_given: float | None = None

    @property
    def raw_capacity(self) -> float:
        """c_j = sum of count x peak rate over the groups (requests per time unit)."""
        return float(sum(g.raw_capacity for g in self.groups))

    @property
    def idle_power(self) -> float:
        return float(sum(g.idle_total for g in self.groups))

    def capacity(self, utilisation_cap: float) -> float:
        """u_j: the given capacity, else ``utilisation_cap`` x raw capacity."""
        if self.capacity_given is not None:
            return self.capacity_given
        return utilisation_cap * self.raw_capacity

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "pue": self.pue,
            "price": list(self.price),
            "processing_delay": self.processing_delay.to_dict(),
            "groups": [g.to_dict() for g in self.groups],
        }
        if self.capacity_given is not None:
            out["capacity"] = self.capacity_given
        return out


@dataclass(frozen=True)
class IngressConfig:
    """An ingress point s_i: request rate per interval, latency and network cost to each cluster."""

    name: str
    rate: tuple[float, ...]
    latency_ms: tuple[float, ...]
    network_cost: tuple[float, ...]

    def to_dict(self, cluster_names: Sequence[str]) -> dict[str, Any]:
        return {
            "name": self.name,
            "rate": list(self.rate),
            "latency_ms": dict(zip(cluster_names, self.latency_ms, strict=True)),
            "network_cost": dict(zip(cluster_names, self.network_cost, strict=True)),
        }


@dataclass(frozen=True)
class GeoConfig:
    """A validated geo scenario. Build it with :func:`serverfarm_gym.envs.scenarios.load_geo_scenario` or
    :func:`geo_from_dict`.

    Array properties are indexed [interval, ingress] / [interval, cluster] / [ingress, cluster].
    """

    name: str
    clusters: tuple[ClusterConfig, ...]
    ingress: tuple[IngressConfig, ...]
    interval_length: float
    n_intervals: int
    d_min: float = 0.0
    d_max: float | None = None
    latency_budget: float | None = None
    utilisation_cap: float = DEFAULT_UTILISATION_CAP
    job_size: JobSizeConfig = field(default_factory=JobSizeConfig)
    description: str = ""

    # ---- sizes -------------------------------------------------------------------------------
    @property
    def n_clusters(self) -> int:
        return len(self.clusters)

    @property
    def n_ingress(self) -> int:
        return len(self.ingress)

    @property
    def cluster_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.clusters)

    @property
    def ingress_names(self) -> tuple[str, ...]:
        return tuple(i.name for i in self.ingress)

    # ---- derived arrays (computed once; treat as read-only) -----------------------------------
    @cached_property
    def rates(self) -> NDArray[np.float64]:
        """float64[T, m]: r_i per interval (requests per time unit)."""
        rates: NDArray[np.float64] = np.array([i.rate for i in self.ingress], dtype=float).T.copy()
        return rates  # a typed name: numpy's stubs leave ``.T`` untyped

    @cached_property
    def prices(self) -> NDArray[np.float64]:
        """float64[T, n]: electricity price per unit energy of each cluster per interval."""
        prices: NDArray[np.float64] = np.array(
            [c.price for c in self.clusters], dtype=float
        ).T.copy()
        return prices  # a typed name: numpy's stubs leave ``.T`` untyped

    @cached_property
    def pue(self) -> NDArray[np.float64]:
        """float64[n]: power usage effectiveness of each cluster."""
        return np.array([c.pue for c in self.clusters], dtype=float)

    @cached_property
    def latency(self) -> NDArray[np.float64]:
        """float64[m, n]: network round-trip delta_ij in ms."""
        return np.array([i.latency_ms for i in self.ingress], dtype=float)

    @cached_property
    def network_cost(self) -> NDArray[np.float64]:
        """float64[m, n]: network cost per request on link (i, j)."""
        return np.array([i.network_cost for i in self.ingress], dtype=float)

    @cached_property
    def raw_capacities(self) -> NDArray[np.float64]:
        """float64[n]: c_j, total peak service rate of each cluster."""
        return np.array([c.raw_capacity for c in self.clusters])

    @cached_property
    def capacities(self) -> NDArray[np.float64]:
        """float64[n]: u_j, requests per time unit a cluster may receive (constraint C3)."""
        return np.array([c.capacity(self.utilisation_cap) for c in self.clusters])

    @cached_property
    def base_delays(self) -> NDArray[np.float64]:
        """float64[n]: zero-load processing delay pi_j(0) in ms."""
        return np.array([c.processing_delay.base_ms for c in self.clusters])

    @cached_property
    def unloaded_latency(self) -> NDArray[np.float64]:
        """float64[m, n]: delta_ij + pi_j(0), the latency of link (i, j) at zero cluster load."""
        return self.latency + self.base_delays[None, :]

    @cached_property
    def available(self) -> NDArray[np.bool_]:
        """bool[m, n]: links within the latency budget (all True when fully connected)."""
        if self.latency_budget is None:
            return np.ones((self.n_ingress, self.n_clusters), dtype=bool)
        return self.unloaded_latency <= self.latency_budget

    def processing_delay(self, loads: ArrayLike) -> NDArray[np.float64]:
        """float64[n]: exact pi_j(x_j) in ms for cluster loads ``loads``."""
        loads = np.asarray(loads, dtype=float)
        return np.array(
            [
                float(c.processing_delay.delay(loads[j], c.raw_capacity))
                for j, c in enumerate(self.clusters)
            ]
        )

    def check_interval(self, interval: int) -> int:
        """Validate an interval index and return it as an int."""
        if isinstance(interval, bool) or not isinstance(interval, (int, np.integer)):
            raise ValueError(f"interval: expected an integer index, got {interval!r}")
        if not 0 <= interval < self.n_intervals:
            raise ValueError(
                f"interval: {interval} out of range; this scenario has n_intervals = "
                f"{self.n_intervals} (valid 0..{self.n_intervals - 1})"
            )
        return int(interval)

    # ---- transformations ---------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The scenario in the file format with explicit lists (round-trips via geo_from_dict)."""
        names = self.cluster_names
        out: dict[str, Any] = {"name": self.name}
        if self.description:
            out["description"] = self.description
        out.update(
            {
                "interval_length": self.interval_length,
                "n_intervals": self.n_intervals,
                "d_min_ms": self.d_min,
                "utilisation_cap": self.utilisation_cap,
                "latency_budget_ms": "full" if self.latency_budget is None else self.latency_budget,
                "job_size": self.job_size.to_dict(),
                "clusters": [c.to_dict() for c in self.clusters],
                "ingress": [i.to_dict(names) for i in self.ingress],
            }
        )
        if self.d_max is not None:
            out["d_max_ms"] = self.d_max
        return out

    def farm_group_names(self) -> list[str]:
        """Names of the farm groups built by :meth:`to_farm`, in farm order ("<cluster>/<group>")."""
        return [f"{c.name}/{g.name}" for c in self.clusters for g in c.groups]

    def cluster_of_farm_group(self) -> NDArray[np.int64]:
        """int64[K]: cluster index of each farm group built by :meth:`to_farm`."""
        return np.repeat(np.arange(self.n_clusters), [len(c.groups) for c in self.clusters])

    def to_farm(self, interval: int | None = None) -> FarmConfig:
        """The server-farm scenario of this geo system.

        Each cluster group becomes a farm group named ``"<cluster>/<group>"`` (clusters in order,
        groups in order inside a cluster) whose ``price`` is ``price_j x PUE_j`` per interval, so the
        farm's cost of IT energy equals the PDR energy cost (facility energy x price). Each ingress
        point becomes a job type with ``arrival_rate`` = its rate per interval (requests per farm
        time unit) that may use the groups of the clusters within the latency budget
        (:attr:`available`). ``interval=None`` keeps the whole schedule (``interval_length`` set);
        an index gives the constant-rate farm of that interval.
        """
        if interval is not None:
            interval = self.check_interval(interval)
        names = self.farm_group_names()
        groups: list[dict[str, Any]] = []
        k = 0
        for j, c in enumerate(self.clusters):
            eff_price = self.prices[:, j] * c.pue
            for g in c.groups:
                d = g.to_dict()
                d["name"] = names[k]
                d["price"] = (
                    float(eff_price[interval]) if interval is not None else eff_price.tolist()
                )
                groups.append(d)
                k += 1
        job_types: list[dict[str, Any]] = []
        for i, ing in enumerate(self.ingress):
            allowed = [
                f"{c.name}/{g.name}"
                for j, c in enumerate(self.clusters)
                if self.available[i, j]
                for g in c.groups
            ]
            if interval is not None:
                if ing.rate[interval] <= 0:
                    raise ConfigError(
                        f"ingress[{i}] ({ing.name}).rate: zero in interval {interval}; a "
                        "single-interval farm needs a positive rate for every job type "
                        "(use to_farm() for the whole schedule)"
                    )
                rate: float | list[float] = float(ing.rate[interval])
            else:
                rate = list(ing.rate)
            job_types.append({"name": ing.name, "arrival_rate": rate, "groups": allowed})
        d_farm: dict[str, Any] = {
            "name": self.name if interval is None else f"{self.name}@{interval}",
            "description": self.description,
            "groups": groups,
            "job_types": job_types,
            "job_size": self.job_size.to_dict(),
            "interval_length": self.interval_length,
        }
        return farm_from_dict(d_farm)


# ---------------------------------------------------------------------------------------------
# loading and validation
# ---------------------------------------------------------------------------------------------
_TOP_KEYS = {"name", "description", "interval_length", "n_intervals", "d_min_ms", "d_max_ms",
             "latency_budget_ms", "utilisation_cap", "job_size", "clusters", "ingress"}  # fmt: skip
_CLUSTER_KEYS = {"name", "groups", "pue", "price", "processing_delay", "capacity"}
_GROUP_KEYS = {"name", "count", "service_rate", "busy_power", "idle_power", "buffer"}
_INGRESS_KEYS = {"name", "rate", "latency_ms", "network_cost"}
_PROFILE_KEYS = {"profile", "mean", "amplitude", "peak"}
_DELAY_KEYS = {"model", "base_ms"}


def diurnal_profile(
    mean: float, amplitude: float, peak: float, n_intervals: int
) -> NDArray[np.float64]:
    """``mean * (1 + amplitude * cos(2 pi (t - peak) / n_intervals))`` for t = 0..n_intervals-1.

    A one-harmonic day: maximum ``mean (1 + amplitude)`` at interval ``peak`` (may be fractional),
    minimum half a period later; the average over the intervals is exactly ``mean``.
    """
    t = np.arange(n_intervals, dtype=float)
    return mean * (1.0 + amplitude * np.cos(2.0 * np.pi * (t - peak) / n_intervals))


def _series(v: Any, n: int, where: str, *, positive: bool) -> tuple[float, ...]:
    """A scalar, a list of exactly ``n`` values, or a diurnal profile mapping, expanded to n values."""
    if isinstance(v, Mapping):
        check_keys(v, _PROFILE_KEYS, where)
        prof = require(v, "profile", where)
        if prof != "diurnal":
            raise ConfigError(
                f"{where}.profile: unknown profile {shown(prof)}; the only one is 'diurnal'"
            )
        mean = number(require(v, "mean", where), f"{where}.mean", positive=True, bounded=True)
        amp = number(v.get("amplitude", 0.0), f"{where}.amplitude", nonneg=True)
        if amp > 1 or (positive and amp >= 1):
            raise ConfigError(
                f"{where}.amplitude: must be in [0, 1{')' if positive else ']'} so every value "
                f"stays {'positive' if positive else 'non-negative'}, got {amp}"
            )
        peak = number(v.get("peak", 0.0), f"{where}.peak")
        # amplitude 1 reaches 0 at the trough up to rounding (+-1e-16 x mean): that is a zero
        return tuple(
            float(x) if x > 1e-12 * mean else 0.0 for x in diurnal_profile(mean, amp, peak, n)
        )
    if isinstance(v, (list, tuple)):
        if len(v) != n:
            raise ConfigError(
                f"{where}: a list must have one value per interval (n_intervals = {n}), "
                f"got length {len(v)}"
            )
        return tuple(
            number(x, f"{where}[{t}]", positive=positive, nonneg=True, bounded=True)
            for t, x in enumerate(v)
        )
    return (number(v, where, positive=positive, nonneg=True, bounded=True),) * n


def _per_cluster(
    v: Any, names: Sequence[str], where: str, *, default: float | None
) -> tuple[float, ...]:
    """One non-negative value per cluster: a mapping by cluster name, a list, or a scalar."""
    if v is None:
        if default is None:
            raise ConfigError(f"{where}: missing (required: one value per cluster)")
        return (default,) * len(names)
    if isinstance(v, Mapping):
        unknown = sorted(set(v) - set(names))
        if unknown:
            raise ConfigError(
                f"{where}: unknown cluster(s) {unknown}; known clusters are {list(names)}"
            )
        missing = [c for c in names if c not in v]
        if missing:
            raise ConfigError(f"{where}: missing value(s) for cluster(s) {missing}")
        return tuple(number(v[c], f"{where}[{c}]", nonneg=True) for c in names)
    if isinstance(v, (list, tuple)):
        if len(v) != len(names):
            raise ConfigError(
                f"{where}: a list needs one value per cluster in order {list(names)} "
                f"(length {len(names)}), got length {len(v)}"
            )
        return tuple(number(x, f"{where}[{names[k]}]", nonneg=True) for k, x in enumerate(v))
    if default is None:
        raise ConfigError(
            f"{where}: expected a mapping {{cluster: value}} or a list with one value per cluster"
        )
    return (number(v, where, nonneg=True),) * len(names)


def _delay(v: Any, where: str) -> DelayModel:
    if v is None:
        raise ConfigError(f"{where}: missing (required), e.g. {{model: mm1, base_ms: 20}}")
    if not isinstance(v, Mapping):
        return DelayModel("mm1", number(v, where, positive=True))
    check_keys(v, _DELAY_KEYS, where)
    model = v.get("model", "mm1")
    if model not in DELAY_MODELS:
        raise ConfigError(
            f"{where}.model: unknown model {shown(model)}; choose one of {list(DELAY_MODELS)}"
        )
    base = number(require(v, "base_ms", where), f"{where}.base_ms", positive=True)
    return DelayModel(model, base)


def _group(g: Any, i: int, where: str) -> ClusterGroupConfig:
    w = f"{where}.groups[{i}]"
    check_keys(g, _GROUP_KEYS, w)
    name = text(g.get("name", f"g{i}"), f"{w}.name")
    w = f"{where}.groups[{i}] ({name})"
    if "/" in name:
        raise ConfigError(f"{w}.name: must not contain '/' (farm groups are named cluster/group)")
    count, mu, eps, eps0, buf = server_group_fields(g, w)
    return ClusterGroupConfig(name, count, mu, eps, eps0, buf)


def geo_from_dict(d: Mapping[str, Any]) -> GeoConfig:
    """Validate a geo scenario given as a plain dict and build a :class:`GeoConfig`."""
    check_keys(d, _TOP_KEYS, "geo")
    # the text fields first: nothing below may print a value that is not a bounded string
    name = text(d.get("name", "unnamed-geo"), "geo.name")
    description = text(
        d.get("description", ""), "geo.description", max_length=MAX_DESCRIPTION_LENGTH
    )
    interval_length = number(
        require(d, "interval_length", "geo"), "geo.interval_length", positive=True, bounded=True
    )
    # every interval becomes an entry of the farm's schedules and of the observation's one-hot
    n_int = integer(require(d, "n_intervals", "geo"), "geo.n_intervals", 1, MAX_INTERVALS)
    d_min = number(d.get("d_min_ms", 0.0), "geo.d_min_ms", nonneg=True)
    d_max_raw = d.get("d_max_ms")
    d_max = None if d_max_raw is None else number(d_max_raw, "geo.d_max_ms", positive=True)
    if d_max is not None and d_max < d_min:
        raise ConfigError(f"geo.d_max_ms: must be >= d_min_ms ({d_min}), got {d_max}")
    budget_raw = d.get("latency_budget_ms", d_max)
    if budget_raw is None or budget_raw == "full":
        budget = None
    else:
        budget = number(budget_raw, "geo.latency_budget_ms", positive=True)
    cap = number(
        d.get("utilisation_cap", DEFAULT_UTILISATION_CAP), "geo.utilisation_cap", positive=True
    )
    if cap >= 1:
        raise ConfigError(
            f"geo.utilisation_cap: must be in (0, 1) (the M/M/1 delay is infinite at 1), got {cap}"
        )
    job_size = job_size_from_spec(
        d.get("job_size", {"distribution": "exponential"}), "geo.job_size"
    )
    # the clusters first: every ingress gives one latency per cluster, by cluster name
    clusters = _clusters_from_spec(d, n_int)
    cnames = [c.name for c in clusters]
    ingress = _ingress_from_spec(d, n_int, cnames)
    geo = GeoConfig(
        name=name,
        clusters=tuple(clusters),
        ingress=tuple(ingress),
        interval_length=interval_length,
        n_intervals=n_int,
        d_min=d_min,
        d_max=d_max,
        latency_budget=budget,
        utilisation_cap=cap,
        job_size=job_size,
        description=description,
    )
    for i, ing in enumerate(geo.ingress):
        if not geo.available[i].any():
            j = int(np.argmin(geo.unloaded_latency[i]))
            raise ConfigError(
                f"ingress[{i}] ({ing.name}).latency_ms: no cluster within latency_budget_ms "
                f"({budget}); the nearest is {cnames[j]} at {geo.unloaded_latency[i, j]:g} ms "
                "(network delta + zero-load processing delay). Raise latency_budget_ms (or "
                "d_max_ms) or set latency_budget_ms: full"
            )
    return geo


def _clusters_from_spec(d: Mapping[str, Any], n_int: int) -> list[ClusterConfig]:
    """The validated ``clusters`` of a geo scenario (prices expanded to ``n_int`` intervals)."""
    cl_in = require(d, "clusters", "geo")
    if not isinstance(cl_in, Sequence) or isinstance(cl_in, str) or len(cl_in) == 0:
        raise ConfigError("geo.clusters: must be a non-empty list of clusters")
    clusters: list[ClusterConfig] = []
    for j, c in enumerate(cl_in):
        w = f"clusters[{j}]"
        check_keys(c, _CLUSTER_KEYS, w)
        cname = text(c.get("name", f"c{j}"), f"{w}.name")
        w = f"clusters[{j}] ({cname})"
        if cname in {x.name for x in clusters}:
            raise ConfigError(f"{w}.name: duplicate cluster name {cname!r}; names must be unique")
        if "/" in cname:
            raise ConfigError(
                f"{w}.name: must not contain '/' (farm groups are named cluster/group)"
            )
        gl = c.get("groups")
        if not isinstance(gl, Sequence) or isinstance(gl, str) or len(gl) == 0:
            raise ConfigError(
                f"{w}.groups: an empty cluster; give a non-empty list of server groups "
                "(count, service_rate, busy_power, idle_power, buffer)"
            )
        groups = tuple(_group(g, i, w) for i, g in enumerate(gl))
        gnames = [g.name for g in groups]
        if len(set(gnames)) != len(gnames):
            raise ConfigError(f"{w}.groups: duplicate group names {gnames}; names must be unique")
        pue = number(c.get("pue", 1.0), f"{w}.pue", positive=True)
        if pue < 1:
            raise ConfigError(f"{w}.pue: power usage effectiveness must be >= 1, got {pue}")
        price = _series(require(c, "price", w), n_int, f"{w}.price", positive=True)
        delay = _delay(c.get("processing_delay"), f"{w}.processing_delay")
        cluster = ClusterConfig(cname, groups, pue, price, delay)
        if "capacity" in c:
            u = number(c["capacity"], f"{w}.capacity", positive=True)
            raw = cluster.raw_capacity
            if u > raw or (delay.model == "mm1" and u >= raw):
                raise ConfigError(
                    f"{w}.capacity: {u} must be below the raw service rate {raw:g} of the groups "
                    "(sum of count x peak service_rate), where the M/M/1 delay is infinite"
                )
            cluster = ClusterConfig(cname, groups, pue, price, delay, u)
        clusters.append(cluster)
    return clusters


def _ingress_from_spec(d: Mapping[str, Any], n_int: int, cnames: list[str]) -> list[IngressConfig]:
    """The validated ``ingress`` points of a geo scenario; ``cnames`` are the cluster names."""
    in_in = require(d, "ingress", "geo")
    if not isinstance(in_in, Sequence) or isinstance(in_in, str) or len(in_in) == 0:
        raise ConfigError("geo.ingress: must be a non-empty list of ingress points")
    ingress: list[IngressConfig] = []
    for i, s in enumerate(in_in):
        w = f"ingress[{i}]"
        check_keys(s, _INGRESS_KEYS, w)
        iname = text(s.get("name", f"s{i}"), f"{w}.name")
        w = f"ingress[{i}] ({iname})"
        if iname in {x.name for x in ingress}:
            raise ConfigError(f"{w}.name: duplicate ingress name {iname!r}; names must be unique")
        rate = _series(require(s, "rate", w), n_int, f"{w}.rate", positive=False)
        if sum(rate) <= 0:
            raise ConfigError(f"{w}.rate: at least one interval must have a positive rate")
        lat = _per_cluster(require(s, "latency_ms", w), cnames, f"{w}.latency_ms", default=None)
        net = _per_cluster(s.get("network_cost"), cnames, f"{w}.network_cost", default=0.0)
        ingress.append(IngressConfig(iname, rate, lat, net))
    return ingress
