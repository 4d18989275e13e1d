"""Power-demand routing (PDR): the multi-objective network-flow optimiser of ``docs/pdr.md``.

For one interval of a :class:`envs.geo.GeoConfig`, route the ingress demands r_i to clusters:

    x_ij >= 0 on available links (C6),  sum_j x_ij = r_i (C1),  x_j = sum_i x_ij (C2),  x_j <= u_j (C3)
    L_ave = (1/R) sum_ij x_ij (delta_ij + pi_j(x_j))  (C4),  L_ave <= D_max  (C5)

minimising the vector (energy cost, network cost, max(0, L_ave - D_min)). Every scalarised problem
is a linear program solved with HiGHS (``scipy.optimize.linprog(method="highs")``):

- Energy: one flow variable y_k per server group (0 <= y_k <= count_k mu_k, sum_{k in j} y_k = x_j);
  cost per interval ``T price_j PUE_j (idle_j + sum_k (eps_k - eps0_k) / mu_k y_k)`` is linear in y,
  so this part is exact (an optimal LP fills a cluster's groups in order of efficiency).
- Latency: sum_ij x_ij pi_j(x_j) is not linear, but g_j(x) = x pi_j(x) is convex (pi convex,
  increasing), so the epigraph variable t_j >= every secant line of g_j gives
  ``R L_ave = sum_ij delta_ij x_ij + sum_j t_j``. Secants (chords between breakpoints) make the
  model an *upper bound*: a solution meeting D_max in the LP meets it for the exact delay too. The
  breakpoints equalise the per-request delay error; with N pieces the overestimate of pi_j is at
  most ``base_ms x mm1_breakpoints(cap_j, N)[1]`` (cap/((1-cap) N^2) x base_ms: 0.88 % of base_ms for N = 32, cap 0.9).
- Performance: p >= 0, p >= L_ave - D_min.

Rates are per farm time unit (``x_ij`` like ``r_i``); costs are per interval (``interval_length``
time units). See ``docs/pdr.md`` for the formulation, the numbers and the mapping to the farm.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from envs.geo import GeoConfig

__all__ = [
    "DEFAULT_PIECES",
    "OBJECTIVES",
    "PDRInfeasibleError",
    "PDRSolution",
    "delay_lines",
    "evaluate_routing",
    "linearisation_error_bound",
    "mm1_breakpoints",
    "non_dominated",
    "pareto_frontier",
    "plot_frontier",
    "routing_probabilities",
    "solve_interval",
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


def _costs(
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
    e, n, _, p = _costs(geo, interval, x, y, lines)
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
        e, n, lat, p = _costs(geo, t, x, y, None)
        _, _, lat_lp, p_lp = _costs(geo, t, x, y, delay_lines(geo, self.pieces))
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


# ---------------------------------------------------------------------------------------------
# the LP
# ---------------------------------------------------------------------------------------------
class _Model:
    """Variables z = [x over available links | y per group | t per cluster | p] of one interval."""

    def __init__(self, geo: GeoConfig, interval: int, pieces: int) -> None:
        self.geo, self.interval, self.pieces = geo, interval, pieces
        m, n = geo.n_ingress, geo.n_clusters
        T = geo.interval_length
        self.links = np.argwhere(geo.available)  # (L, 2) rows (i, j)
        L = len(self.links)
        cl = geo.cluster_of_farm_group()
        K = len(cl)
        self.ix, self.iy, self.it, self.ip = 0, L, L + K, L + K + n
        nv = self.nv = L + K + n + 1
        r = geo.rates[interval]
        self.R = float(r.sum())
        li, lj = self.links[:, 0], self.links[:, 1]

        # equalities: C1 (m rows), C2 as sum_i x_ij - sum_{k in j} y_k = 0 (n rows)
        rows = [li, m + lj, m + cl]
        cols = [np.arange(L), np.arange(L), self.iy + np.arange(K)]
        vals = [np.ones(L), np.ones(L), -np.ones(K)]
        self.A_eq = sp.csr_array(
            (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(m + n, nv)
        )
        self.b_eq = np.concatenate([r, np.zeros(n)])

        # inequalities: C3 (n rows) and the epigraph rows t_j >= a + b x_j
        ub_r, ub_c, ub_v, ub_b = [], [], [], []
        row = 0
        for j in range(n):
            ks = np.flatnonzero(cl == j)
            ub_r += [row] * len(ks)
            ub_c += list(self.iy + ks)
            ub_v += [1.0] * len(ks)
            ub_b.append(geo.capacities[j])
            row += 1
        for j, (a, b) in enumerate(delay_lines(geo, pieces)):
            ks = np.flatnonzero(cl == j)
            for al, bl in zip(a, b, strict=True):
                ub_r += [row] * (len(ks) + 1)
                ub_c += [*list(self.iy + ks), self.it + j]
                ub_v += [bl] * len(ks) + [-1.0]
                ub_b.append(-al)
                row += 1
        self.A_base = sp.csr_array((ub_v, (ub_r, ub_c)), shape=(row, nv))
        self.b_base = np.array(ub_b, dtype=float)

        # objective / constraint vectors over z
        unit = geo.prices[interval] * geo.pue * T
        dyn = np.array([g.energy_per_request for c in geo.clusters for g in c.groups])
        self.cE = np.zeros(nv)
        self.cE[self.iy : self.iy + K] = unit[cl] * dyn
        self.E0 = float(np.dot(unit, [c.idle_power for c in geo.clusters]))
        self.cN = np.zeros(nv)
        self.cN[:L] = T * geo.network_cost[li, lj]
        self.cP = np.zeros(nv)
        self.cP[self.ip] = 1.0
        self.cS = np.zeros(nv)  # R * L_ave (linearised)
        self.cS[:L] = geo.latency[li, lj]
        self.cS[self.it : self.it + n] = 1.0
        self.bounds = np.zeros((nv, 2))
        self.bounds[:, 1] = np.inf
        self.bounds[self.iy : self.iy + K, 1] = [
            g.raw_capacity for c in geo.clusters for g in c.groups
        ]

    def rows(self, eps: Mapping[str, float], d_max: bool) -> tuple[sp.csr_array, np.ndarray]:
        """A_ub, b_ub: the base rows plus the performance row, C5 and epsilon constraints."""
        extra, rhs = [], []
        geo, R = self.geo, self.R
        if R > 0:
            # p >= L_ave - D_min  <=>  cS z / R - p <= D_min
            extra.append(self.cS / R - self.cP)
            rhs.append(geo.d_min)
            if d_max and geo.d_max is not None:
                extra.append(self.cS / R)
                rhs.append(geo.d_max)
        for key, bound in eps.items():
            if key == "energy":
                extra.append(self.cE)
                rhs.append(bound - self.E0)
            elif key == "network":
                extra.append(self.cN)
                rhs.append(bound)
            elif key == "performance":
                extra.append(self.cP)
                rhs.append(bound)
            elif R > 0:  # latency
                extra.append(self.cS / R)
                rhs.append(bound)
        if not extra:
            return self.A_base, self.b_base
        A = sp.vstack([self.A_base, sp.csr_array(np.array(extra))], format="csr")
        return A, np.concatenate([self.b_base, rhs])

    def solve(
        self, c: np.ndarray, eps: Mapping[str, float], d_max: bool = True
    ) -> tuple[object, float, int]:
        A_ub, b_ub = self.rows(eps, d_max)
        t0 = time.perf_counter()
        res = linprog(
            c,
            A_ub=A_ub,
            b_ub=b_ub,
            A_eq=self.A_eq,
            b_eq=self.b_eq,
            bounds=self.bounds,
            method="highs",
        )
        return res, time.perf_counter() - t0, A_ub.shape[0] + self.A_eq.shape[0]

    def solution(
        self,
        z: np.ndarray,
        weights: tuple[float, float, float],
        eps: dict[str, float],
        solve_time: float,
        n_cons: int,
    ) -> PDRSolution:
        geo = self.geo
        x = np.zeros((geo.n_ingress, geo.n_clusters))
        # clip solver noise (~1e-9) so flows are exactly non-negative
        x[self.links[:, 0], self.links[:, 1]] = np.clip(z[: len(self.links)], 0.0, None)
        y = np.clip(z[self.iy : self.it], 0.0, None)
        e, n, lat, p = _costs(geo, self.interval, x, y, None)
        _, _, lat_lp, p_lp = _costs(geo, self.interval, x, y, delay_lines(geo, self.pieces))
        used = x.sum(axis=0) > 0
        err = linearisation_error_bound(geo, self.pieces)
        return PDRSolution(
            geo=geo,
            interval=self.interval,
            x=x,
            group_loads=y,
            energy_cost=e,
            network_cost=n,
            performance_cost=p,
            latency=lat,
            latency_lp=lat_lp,
            performance_cost_lp=p_lp,
            weights=weights,
            eps_constraints=eps,
            pieces=self.pieces,
            latency_error_bound=float(err[used].max()) if used.any() else 0.0,
            solve_time=solve_time,
            n_vars=self.nv,
            n_constraints=n_cons,
        )

    # ---- diagnosis of infeasibility ---------------------------------------------------------
    def diagnose(self, eps: Mapping[str, float]) -> PDRInfeasibleError:
        geo, t = self.geo, self.interval
        zero = np.zeros(self.nv)
        res, _, _ = self.solve(zero, {}, d_max=False)
        if res.status == 2:
            return _links_error(geo, t)
        if geo.d_max is not None and self.R > 0:
            res, _, _ = self.solve(self.cS / self.R, {}, d_max=False)
            lmin = float(res.fun)
            if lmin > geo.d_max:
                err = float(linearisation_error_bound(geo, self.pieces).max())
                return PDRInfeasibleError(
                    f"interval {t}: D_max = {geo.d_max:g} ms is infeasible; the minimum achievable "
                    f"average latency is {lmin:.4g} ms (chord model, which overestimates the "
                    f"processing delay by <= {err:.3g} ms). Raise d_max_ms to at least that, or "
                    "add capacity near the ingress points",
                    "d_max",
                    min_latency=lmin,
                )
        minima: dict[str, float] = {}
        for key in eps:
            c, off = {
                "energy": (self.cE, self.E0),
                "network": (self.cN, 0.0),
                "performance": (self.cP, 0.0),
                "latency": (self.cS / max(self.R, 1e-300), 0.0),
            }[key]
            res, _, _ = self.solve(c, {})
            minima[key] = float(res.fun) + off
        parts = [f"{k} <= {eps[k]:.6g} but its minimum is {v:.6g}" for k, v in minima.items()]
        return PDRInfeasibleError(
            f"interval {t}: the epsilon constraints cannot all hold: "
            + "; ".join(parts)
            + " (each minimum is taken alone, so bounds above them may still conflict jointly)",
            "eps",
            minima=minima,
        )


def _links_error(geo: GeoConfig, t: int) -> PDRInfeasibleError:
    """Name a set of ingress points whose demand exceeds the capacity they can reach (Hall)."""
    r, u, av = geo.rates[t], geo.capacities, geo.available
    m = geo.n_ingress
    worst: tuple[float, tuple[int, ...]] | None = None
    if m <= 16:  # 65k subsets at most; larger systems get the generic message
        for size in range(1, m + 1):
            for S in itertools.combinations(range(m), size):
                idx = list(S)
                gap = float(r[idx].sum() - u[av[idx].any(axis=0)].sum())
                if gap > 1e-9 and (worst is None or gap > worst[0]):
                    worst = (gap, S)
    msg = f"interval {t}: demand cannot be routed within the latency budget"
    if worst is not None:
        names = [geo.ingress_names[i] for i in worst[1]]
        reach = [geo.cluster_names[j] for j in np.flatnonzero(av[list(worst[1])].any(axis=0))]
        msg += (
            f": ingress {names} need {r[list(worst[1])].sum():.6g} requests per time unit but "
            f"their reachable clusters {reach} offer only "
            f"{u[av[list(worst[1])].any(axis=0)].sum():.6g} (short by {worst[0]:.6g})"
        )
    msg += ". Raise latency_budget_ms or the capacity of nearby clusters"
    return PDRInfeasibleError(msg, "links", excess=worst[0] if worst else float("nan"))


def _weights(weights: Mapping[str, float] | Sequence[float] | None) -> tuple[float, float, float]:
    if weights is None:
        return (1.0, 1.0, 1.0)
    if isinstance(weights, Mapping):
        unknown = sorted(set(weights) - set(OBJECTIVES))
        if unknown:
            raise ValueError(f"weights: unknown key(s) {unknown}; use {list(OBJECTIVES)}")
        w = tuple(float(weights.get(k, 0.0)) for k in OBJECTIVES)
    else:
        w = tuple(float(v) for v in weights)
        if len(w) != 3:
            raise ValueError(f"weights: need 3 values {list(OBJECTIVES)}, got {len(w)}")
    if any(not math.isfinite(v) or v < 0 for v in w) or sum(w) <= 0:
        raise ValueError(f"weights: must be finite, >= 0 and not all zero, got {w}")
    return w  # type: ignore[return-value]


def _eps(eps: Mapping[str, float] | None) -> dict[str, float]:
    if not eps:
        return {}
    unknown = sorted(set(eps) - set(EPS_KEYS))
    if unknown:
        raise ValueError(f"eps_constraints: unknown key(s) {unknown}; use {list(EPS_KEYS)}")
    out = {}
    for k, v in eps.items():
        if not math.isfinite(float(v)):
            raise ValueError(f"eps_constraints[{k}]: must be finite, got {v!r}")
        out[k] = float(v)
    return out


def _check_capacity(geo: GeoConfig, t: int) -> None:
    R, U = float(geo.rates[t].sum()), float(geo.capacities.sum())
    if R > U * (1 + 1e-12):
        raise PDRInfeasibleError(
            f"interval {t}: total demand {R:.6g} requests per time unit exceeds the total capacity "
            f"{U:.6g} by {R - U:.6g} ({100 * (R - U) / U:.3g} %). Add servers, raise "
            "utilisation_cap, or lower the ingress rates",
            "capacity",
            excess=R - U,
        )


def solve_interval(
    geo: GeoConfig,
    interval: int,
    weights: Mapping[str, float] | Sequence[float] | None = None,
    eps_constraints: Mapping[str, float] | None = None,
    *,
    pieces: int = DEFAULT_PIECES,
) -> PDRSolution:
    """Solve the routing LP of one interval.

    Minimises ``w_E energy + w_N network + w_P max(0, L_ave - D_min)`` (weighted sum; weights as a
    mapping by objective name or a 3-sequence; default all 1, so w_P converts ms into money) subject
    to C1-C6, D_max, and ``eps_constraints`` (``{"energy": .., "network": .., "performance": ..,
    "latency": ..}`` upper bounds: the epsilon-constraint method; latency/performance bounds apply
    to the chord model, hence hold for the exact delay too). Raises :class:`PDRInfeasibleError`.
    """
    interval = geo.check_interval(interval)
    w = _weights(weights)
    eps = _eps(eps_constraints)
    if pieces < 1:
        raise ValueError(f"pieces: need at least 1 piece, got {pieces}")
    _check_capacity(geo, interval)
    model = _Model(geo, interval, pieces)
    c = w[0] * model.cE + w[1] * model.cN + w[2] * model.cP
    res, dt, ncons = model.solve(c, eps)
    if res.status == 2:
        raise model.diagnose(eps)
    if res.status != 0:
        raise RuntimeError(f"interval {interval}: HiGHS failed ({res.status}): {res.message}")
    return model.solution(res.x, w, eps, dt, ncons)


# ---------------------------------------------------------------------------------------------
# Pareto frontier
# ---------------------------------------------------------------------------------------------
def _dominates(a: np.ndarray, b: np.ndarray, tol: np.ndarray) -> bool:
    return bool(np.all(a <= b + tol) and np.any(a < b - tol))


def non_dominated(points: Sequence[PDRSolution], rtol: float = 1e-7) -> list[PDRSolution]:
    """The points no other point dominates (exact objectives), duplicates removed."""
    if not points:
        return []
    F = np.array([p.objectives for p in points])
    tol = rtol * np.maximum(1.0, np.abs(F).max(axis=0))
    keep: list[int] = []
    for a in range(len(points)):
        if any(_dominates(F[b], F[a], tol) for b in range(len(points)) if b != a):
            continue
        if any(np.all(np.abs(F[a] - F[b]) <= tol) for b in keep):
            continue
        keep.append(a)
    return [points[a] for a in keep]


def pareto_frontier(
    geo: GeoConfig,
    interval: int,
    n_points: int = 15,
    *,
    method: str = "epsilon",
    mixes: Sequence[float] = (0.2, 0.5, 0.8),
    pieces: int = DEFAULT_PIECES,
    tie_break: float = 1e-4,
) -> list[PDRSolution]:
    """Non-dominated routings of one interval, sorted by L_ave.

    Objectives are first normalised by the payoff table (each one minimised alone); the three
    lexicographic anchors (one objective at its minimum, then the other two) are always included.
    ``"epsilon"``:
    ``n_points`` bounds on L_ave evenly spaced from max(min L_ave, D_min) to the largest L_ave of
    the payoff table, each minimising ``a E + (1-a) N`` for each ``a`` in ``mixes``. ``"weighted"``:
    weighted sums over a simplex lattice of about ``n_points`` weight vectors. Every LP carries a
    ``tie_break`` weight on each normalised objective so its optimum is Pareto optimal, not only
    weakly. The result is filtered by :func:`non_dominated` on the exact objectives.
    """
    interval = geo.check_interval(interval)
    if method not in ("epsilon", "weighted"):
        raise ValueError(f"method: choose 'epsilon' or 'weighted', got {method!r}")
    if n_points < 1:
        raise ValueError(f"n_points: need at least 1, got {n_points}")
    for a in mixes:
        if not 0 <= a <= 1:
            raise ValueError(f"mixes: each mix must be in [0, 1], got {a}")
    _check_capacity(geo, interval)
    model = _Model(geo, interval, pieces)
    comps = (model.cE, model.cN, model.cP)

    def run(
        w: Sequence[float], eps: dict[str, float], scale: np.ndarray | None = None
    ) -> PDRSolution | None:
        """Solve with weights ``w`` on the objectives divided by ``scale`` (plus the tie-break)."""
        if scale is None:
            c = sum(wk * ck for wk, ck in zip(w, comps, strict=True))
            wt = tuple(float(v) for v in w)
        else:
            wt = tuple(float((wk + tie_break) / sk) for wk, sk in zip(w, scale, strict=True))
            c = sum(wk * ck for wk, ck in zip(wt, comps, strict=True))
        res, dt, nc = model.solve(c, eps)
        if res.status == 2 and not eps:
            raise model.diagnose(eps)
        if res.status != 0:
            return None
        return model.solution(res.x, wt, eps, dt, nc)  # type: ignore[arg-type]

    # payoff table: minimise each objective alone; its spread normalises the objectives
    anchors = [run(np.eye(3)[k], {}) for k in range(3)]
    F = np.array([a.objectives_lp for a in anchors if a is not None])
    lo = F.min(axis=0)
    span = np.maximum(F.max(axis=0) - lo, 1e-9 * np.maximum(1.0, np.abs(lo)))

    # lexicographic anchors (Pareto optimal, not only weakly): keep objective k at its minimum,
    # minimise the other two
    points: list[PDRSolution] = []
    for k in range(3):
        if anchors[k] is None:
            continue
        v = float(anchors[k].objectives_lp[k])
        s = run(1.0 - np.eye(3)[k], {OBJECTIVES[k]: v * (1 + 1e-9) + 1e-9}, span)
        points.append(s if s is not None else anchors[k])
    if method == "epsilon":
        lat_lo = min(p.latency_lp for p in points)
        lat_hi = max(p.latency_lp for p in points)
        start = max(lat_lo, min(geo.d_min, lat_hi))
        for bound in np.linspace(start, lat_hi, n_points):
            for a in mixes:
                # bound + a hair, so the tie with the anchor that defines lat_lo stays feasible
                s = run((a, 1.0 - a, 0.0), {"latency": float(bound) * (1 + 1e-9) + 1e-9}, span)
                if s is not None:
                    points.append(s)
    else:
        h = 1
        while (h + 1) * (h + 2) // 2 < n_points:
            h += 1
        for a in range(h + 1):
            for b in range(h + 1 - a):
                s = run((a / h, b / h, (h - a - b) / h), {}, span)
                if s is not None:
                    points.append(s)
    front = non_dominated(points)
    return sorted(front, key=lambda p: (p.latency, p.energy_cost))


def plot_frontier(
    points: Sequence[PDRSolution], path: str | Path, *, title: str | None = None
) -> Path:
    """Scatter energy cost vs L_ave, coloured by network cost; D_min/D_max as dashed lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not points:
        raise ValueError("points: nothing to plot (empty frontier)")
    geo = points[0].geo
    lat = np.array([p.latency for p in points])
    en = np.array([p.energy_cost for p in points])
    net = np.array([p.network_cost for p in points])
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    sc = ax.scatter(lat, en, c=net, cmap="viridis", zorder=2, edgecolors="k", linewidths=0.4)
    fig.colorbar(sc, ax=ax, label="network cost per interval")
    ax.axvline(geo.d_min, ls="--", color="tab:green", lw=1, label=f"D_min = {geo.d_min:g} ms")
    if geo.d_max is not None:
        ax.axvline(geo.d_max, ls="--", color="tab:red", lw=1, label=f"D_max = {geo.d_max:g} ms")
    ax.set_xlabel("average latency L_ave (ms)")
    ax.set_ylabel("energy cost per interval")
    ax.set_title(title or f"PDR Pareto frontier: {geo.name}, interval {points[0].interval}")
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
