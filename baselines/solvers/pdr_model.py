"""The PDR model pieces (``docs/pdr.md``): the objectives, the M/M/1 delay and its secant
linearisation, the solution record and what it implies (costs, routing probabilities).
``serverfarm_gym.baselines.solvers.pdr`` builds and solves the LPs from these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from serverfarm_gym.envs.geo import GeoConfig

__all__ = [
    "DEFAULT_PIECES",
    "EPS_KEYS",
    "OBJECTIVES",
    "PDRInfeasibleError",
    "PDRSolution",
    "delay_lines",
    "evaluate_routing",
    "linearisation_error_bound",
    "mm1_breakpoints",
    "objective_costs",
    "routing_probabilities",
]


#: the objective vector, in this order everywhere (weights, eps keys, ``objectives`` arrays).
OBJECTIVES = ("energy", "network", "performance")
#: keys accepted by ``eps_constraints``: the objectives plus the average latency L_ave itself (ms).
EPS_KEYS = (*OBJECTIVES, "latency")
#: default number of chord pieces per M/M/1 cluster (delay error 9/32^2 = 0.88 % of base_ms at cap 0.9).
DEFAULT_PIECES = 32


class PDRInfeasibleError(ValueError):
    """The routing problem of an interval has no solution. ``kind`` says why:

    ``"capacity"`` (total demand above total capacity; ``excess`` = by how much),
    ``"links"`` (enough capacity overall, but some ingress points reach too little of it),
    ``"d_max"`` (``min_latency`` = the smallest achievable L_ave, above D_max),
    ``"eps"`` (an epsilon constraint below the objective's minimum; ``minima`` per key).
    """

    def __init__(self, message: str, kind: str, **details: float | dict[str, float]) -> None:
        super().__init__(message)
        self.kind = kind
        self.details = details
        for k, v in details.items():
            setattr(self, k, v)


# ---------------------------------------------------------------------------------------------
# linearisation of g(x) = x pi(x)
# ---------------------------------------------------------------------------------------------
@lru_cache(maxsize=64)
def mm1_breakpoints(cap: float, pieces: int) -> tuple[np.ndarray, float]:
    """Equal-error breakpoints of the chord linearisation of g(rho) = rho/(1-rho) on [0, cap].

    Returns ``(rho, err)``: ``pieces + 1`` utilisations from 0 to ``cap`` and the maximum
    overestimate of the per-request M/M/1 delay, in units of base_ms (a cluster's delay error is at
    most ``err x base_ms`` ms, and so is the error of L_ave).

    *Derived* (checked numerically in tests): on a chord [a, b] the overestimate
    chord(rho)/rho - 1/(1-rho) peaks at (sqrt g(b) - sqrt g(a))^2. So breakpoints equally spaced in
    sqrt g, g(rho_k) = g(cap) (k/N)^2, give the same error on every piece, and it is the least
    possible max error for N chords: ``err = g(cap) / N^2 = cap / ((1 - cap) N^2)``
    (9/N^2 at cap 0.9: 0.88 % of base_ms with 32 pieces).
    """
    if not 0 < cap < 1:
        raise ValueError(f"cap: utilisation cap must be in (0, 1), got {cap}")
    if pieces < 1:
        raise ValueError(f"pieces: need at least 1 piece, got {pieces}")
    gcap = cap / (1.0 - cap)
    G = gcap * (np.arange(pieces + 1) / pieces) ** 2
    rho = G / (1.0 + G)
    rho[-1] = cap  # exact end point despite rounding
    rho.flags.writeable = False  # cached: shared between callers
    return rho, gcap / pieces**2


def delay_lines(
    geo: GeoConfig, pieces: int = DEFAULT_PIECES
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per cluster, ``(intercepts, slopes)`` of lines whose max is the chord interpolant of
    g_j(x) = x pi_j(x) on [0, u_j] (ms x requests per time unit). A constant delay is one exact line.
    """
    out = []
    for j, c in enumerate(geo.clusters):
        d0 = c.processing_delay.base_ms
        if c.processing_delay.model == "constant":
            out.append((np.zeros(1), np.array([d0])))
            continue
        raw = geo.raw_capacities[j]
        rho, _ = mm1_breakpoints(float(geo.capacities[j] / raw), pieces)
        g = rho / (1.0 - rho)
        slope_rho = np.diff(g) / np.diff(rho)
        icpt_rho = g[:-1] - slope_rho * rho[:-1]
        # g_actual(x) = d0 * raw * g(x / raw): slope d0 * slope_rho, intercept d0 * raw * icpt_rho
        out.append((d0 * raw * icpt_rho, d0 * slope_rho))
    return out


def linearisation_error_bound(geo: GeoConfig, pieces: int = DEFAULT_PIECES) -> np.ndarray:
    """float64[n]: max overestimate (ms) of each cluster's per-request processing delay in the LP.

    L_ave in the LP exceeds the exact L_ave by at most the max of these over the used clusters.
    """
    out = np.zeros(geo.n_clusters)
    for j, c in enumerate(geo.clusters):
        if c.processing_delay.model == "mm1":
            _, err = mm1_breakpoints(float(geo.capacities[j] / geo.raw_capacities[j]), pieces)
            out[j] = err * c.processing_delay.base_ms
    return out


def _g_lin(lines: list[tuple[np.ndarray, np.ndarray]], loads: np.ndarray) -> np.ndarray:
    return np.array([float(np.max(a + b * loads[j])) for j, (a, b) in enumerate(lines)])


# ---------------------------------------------------------------------------------------------
# evaluation of a routing
# ---------------------------------------------------------------------------------------------
def _fill_by_efficiency(geo: GeoConfig, loads: np.ndarray) -> np.ndarray:
    """float64[K]: group loads filling each cluster's groups in order of efficiency mu/(eps-eps0)."""
    y = []
    for j, c in enumerate(geo.clusters):
        order = sorted(range(len(c.groups)), key=lambda k: c.groups[k].energy_per_request)
        left = float(loads[j])
        yj = np.zeros(len(c.groups))
        for k in order:
            yj[k] = min(left, c.groups[k].raw_capacity)
            left -= yj[k]
        y.extend(yj)
    return np.array(y)


def objective_costs(
    geo: GeoConfig,
    interval: int,
    x: np.ndarray,
    y: np.ndarray,
    lines: list[tuple[np.ndarray, np.ndarray]] | None,
) -> tuple[float, float, float, float]:
    """(energy cost, network cost, L_ave, performance cost); exact delay if ``lines`` is None."""
    T = geo.interval_length
    loads = x.sum(axis=0)
    cl = geo.cluster_of_farm_group()
    dyn = np.array([g.energy_per_request for c in geo.clusters for g in c.groups])
    unit = geo.prices[interval] * geo.pue  # cost per unit IT energy
    power = np.array([c.idle_power for c in geo.clusters]) + np.bincount(
        cl, weights=dyn * y, minlength=geo.n_clusters
    )
    energy = float(T * np.dot(unit, power))
    network = float(T * np.sum(geo.network_cost * x))
    R = float(geo.rates[interval].sum())
    if R <= 0:
        return energy, network, 0.0, 0.0
    g = loads * geo.processing_delay(loads) if lines is None else _g_lin(lines, loads)
    lat = float((np.sum(geo.latency * x) + g.sum()) / R)
    return energy, network, lat, max(0.0, lat - geo.d_min)


def evaluate_routing(
    geo: GeoConfig, interval: int, x: np.ndarray, *, pieces: int | None = None
) -> np.ndarray:
    """float64[3]: (energy, network, performance) cost of routing ``x`` (float64[m, n], rates).

    Groups inside a cluster are filled in order of efficiency (the energy-optimal split).
    ``pieces=None`` uses the exact delay curve; an int uses the LP's chord linearisation.
    """
    interval = geo.check_interval(interval)
    x = np.asarray(x, dtype=float)
    y = _fill_by_efficiency(geo, x.sum(axis=0))
    lines = None if pieces is None else delay_lines(geo, pieces)
    e, n, _, p = objective_costs(geo, interval, x, y, lines)
    return np.array([e, n, p])


# ---------------------------------------------------------------------------------------------
# the solution
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)  # arrays inside: compare objectives, not instances
class PDRSolution:
    """An optimal routing of one interval.

    ``x[i, j]`` requests per time unit from ingress i to cluster j (``x * interval_length`` requests
    in the interval), ``loads[j]`` = x_j, ``group_loads[k]`` per farm group (order of
    ``geo.farm_group_names()``). Costs are per interval. ``latency``/``performance_cost`` use the
    exact delay curve, the ``*_lp`` fields the LP's chord model (never smaller, by at most
    ``latency_error_bound`` ms).
    """

    geo: GeoConfig = field(repr=False)
    interval: int
    x: np.ndarray
    group_loads: np.ndarray
    energy_cost: float
    network_cost: float
    performance_cost: float
    latency: float
    latency_lp: float
    performance_cost_lp: float
    weights: tuple[float, float, float]
    eps_constraints: dict[str, float]
    pieces: int
    latency_error_bound: float
    solve_time: float
    n_vars: int
    n_constraints: int

    @property
    def loads(self) -> np.ndarray:
        """float64[n]: x_j, requests per time unit sent to each cluster."""
        return self.x.sum(axis=0)

    @property
    def objectives(self) -> np.ndarray:
        """float64[3]: (energy cost, network cost, max(0, L_ave - D_min)) with the exact delay."""
        return np.array([self.energy_cost, self.network_cost, self.performance_cost])

    @property
    def objectives_lp(self) -> np.ndarray:
        """float64[3]: the same with the LP's (upper-bound) delay model."""
        return np.array([self.energy_cost, self.network_cost, self.performance_cost_lp])

    @property
    def utilisation(self) -> np.ndarray:
        """float64[n]: x_j / raw service rate of each cluster."""
        return self.loads / self.geo.raw_capacities

    def constraint_violations(self, tol: float = 1e-6) -> list[str]:
        """Every violated constraint as a readable line (empty when feasible).

        ``tol`` is relative to the size of each constraint's terms (HiGHS works to ~1e-7).
        """
        geo, t = self.geo, self.interval
        r, x, y = geo.rates[t], self.x, self.group_loads
        scale = max(1.0, float(r.sum()))
        out: list[str] = []
        if x.shape != (geo.n_ingress, geo.n_clusters):
            return [f"x: shape {x.shape}, expected {(geo.n_ingress, geo.n_clusters)}"]
        if (x < -tol * scale).any():
            out.append(f"C6: negative flow min {x.min():.3g}")
        if (np.abs(x[~geo.available]) > tol * scale).any():
            out.append("links: flow on a link outside the latency budget")
        for i in range(geo.n_ingress):
            if abs(x[i].sum() - r[i]) > tol * scale:
                out.append(
                    f"C1: ingress {geo.ingress_names[i]} routes {x[i].sum():.6g} != {r[i]:.6g}"
                )
        cl = geo.cluster_of_farm_group()
        ysum = np.bincount(cl, weights=y, minlength=geo.n_clusters)
        for j, name in enumerate(geo.cluster_names):
            if abs(ysum[j] - self.loads[j]) > tol * scale:
                out.append(
                    f"C2: cluster {name} groups carry {ysum[j]:.6g} != x_j {self.loads[j]:.6g}"
                )
            if self.loads[j] > geo.capacities[j] + tol * scale:
                out.append(
                    f"C3: cluster {name} load {self.loads[j]:.6g} > u_j {geo.capacities[j]:.6g}"
                )
        raw = np.array([g.raw_capacity for c in geo.clusters for g in c.groups])
        if (y < -tol * scale).any() or (y > raw + tol * scale).any():
            out.append("groups: a group load outside [0, count x service_rate]")
        e, n, lat, p = objective_costs(geo, t, x, y, None)
        _, _, lat_lp, p_lp = objective_costs(geo, t, x, y, delay_lines(geo, self.pieces))
        for label, mine, true in (
            ("energy_cost", self.energy_cost, e),
            ("network_cost", self.network_cost, n),
            ("latency", self.latency, lat),
            ("performance_cost", self.performance_cost, p),
            ("latency_lp", self.latency_lp, lat_lp),
        ):
            if abs(mine - true) > tol * max(1.0, abs(true)):
                out.append(f"C4/objective: stored {label} {mine:.9g} != recomputed {true:.9g}")
        if lat > lat_lp + tol * max(1.0, lat_lp):
            out.append(f"linearisation: exact L_ave {lat:.6g} above the LP bound {lat_lp:.6g}")
        if geo.d_max is not None and lat_lp > geo.d_max + tol * max(1.0, geo.d_max):
            out.append(f"C5: L_ave {lat_lp:.6g} ms > D_max {geo.d_max:g} ms")
        vals = {"energy": e, "network": n, "performance": p_lp, "latency": lat_lp}
        for key, bound in self.eps_constraints.items():
            if vals[key] > bound + tol * max(1.0, abs(bound)):
                out.append(f"eps: {key} {vals[key]:.6g} > bound {bound:.6g}")
        return out

    def check_constraints(self, tol: float = 1e-6) -> None:
        """Raise ``ValueError`` listing every violated constraint (see constraint_violations)."""
        bad = self.constraint_violations(tol)
        if bad:
            raise ValueError(
                f"PDR solution of interval {self.interval} infeasible: " + "; ".join(bad)
            )


def routing_probabilities(solution: PDRSolution) -> np.ndarray:
    """float64[m, n]: x_ij / r_i, the share of ingress i's requests sent to cluster j.

    Rows sum to 1; an ingress with zero demand in the interval gets a uniform row over its
    available clusters (any split is optimal for it).
    """
    geo = solution.geo
    r = geo.rates[solution.interval]
    out = np.zeros_like(solution.x)
    for i in range(geo.n_ingress):
        if r[i] > 0:
            row = np.clip(solution.x[i], 0.0, None)
            out[i] = row / row.sum()
        else:
            out[i] = geo.available[i] / geo.available[i].sum()
    return out
