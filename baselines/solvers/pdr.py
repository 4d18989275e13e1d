"""Power-demand routing (PDR): the multi-objective network-flow optimiser of ``docs/pdr.md``.

For one interval of a :class:`serverfarm_gym.envs.geo.GeoConfig`, route the ingress demands r_i to clusters:

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
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from serverfarm_gym.baselines.solvers.pdr_model import (
    DEFAULT_PIECES,
    EPS_KEYS,
    OBJECTIVES,
    PDRInfeasibleError,
    PDRSolution,
    delay_lines,
    evaluate_routing,
    linearisation_error_bound,
    mm1_breakpoints,
    objective_costs,
    routing_probabilities,
)
from serverfarm_gym.envs.geo import GeoConfig

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
        e, n, lat, p = objective_costs(geo, self.interval, x, y, None)
        _, _, lat_lp, p_lp = objective_costs(
            geo, self.interval, x, y, delay_lines(geo, self.pieces)
        )
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


def _frontier_point(
    model: _Model,
    w: Sequence[float],
    eps: dict[str, float],
    scale: np.ndarray | None = None,
    tie_break: float = 0.0,
) -> PDRSolution | None:
    """Solve with weights ``w`` on the objectives divided by ``scale`` (plus the tie-break).

    None when the LP is infeasible under ``eps``; an infeasible unconstrained LP raises the
    diagnosis, since then no routing exists at all.
    """
    comps = (model.cE, model.cN, model.cP)
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


def _lexicographic_anchors(model: _Model, tie_break: float) -> tuple[list[PDRSolution], np.ndarray]:
    """(the three lexicographic anchors, the payoff table's spread of each objective).

    The payoff table minimises each objective alone; its spread normalises the objectives. An
    anchor then keeps objective k at its minimum and minimises the other two, so it is Pareto
    optimal, not only weakly.
    """
    anchors = [_frontier_point(model, np.eye(3)[k], {}) for k in range(3)]
    F = np.array([a.objectives_lp for a in anchors if a is not None])
    lo = F.min(axis=0)
    span = np.maximum(F.max(axis=0) - lo, 1e-9 * np.maximum(1.0, np.abs(lo)))
    points: list[PDRSolution] = []
    for k in range(3):
        if anchors[k] is None:
            continue
        v = float(anchors[k].objectives_lp[k])
        eps = {OBJECTIVES[k]: v * (1 + 1e-9) + 1e-9}
        s = _frontier_point(model, 1.0 - np.eye(3)[k], eps, span, tie_break)
        points.append(s if s is not None else anchors[k])
    return points, span


def _epsilon_points(
    model: _Model,
    anchors: list[PDRSolution],
    span: np.ndarray,
    n_points: int,
    mixes: Sequence[float],
    tie_break: float,
) -> list[PDRSolution]:
    """Epsilon-constraint points: L_ave bounds between the anchors, each min. ``a E + (1-a) N``."""
    lat_lo = min(p.latency_lp for p in anchors)
    lat_hi = max(p.latency_lp for p in anchors)
    start = max(lat_lo, min(model.geo.d_min, lat_hi))
    points: list[PDRSolution] = []
    for bound in np.linspace(start, lat_hi, n_points):
        for a in mixes:
            # bound + a hair, so the tie with the anchor that defines lat_lo stays feasible
            eps = {"latency": float(bound) * (1 + 1e-9) + 1e-9}
            s = _frontier_point(model, (a, 1.0 - a, 0.0), eps, span, tie_break)
            if s is not None:
                points.append(s)
    return points


def _weighted_points(
    model: _Model, span: np.ndarray, n_points: int, tie_break: float
) -> list[PDRSolution]:
    """Weighted-sum points over the smallest simplex lattice with at least ``n_points`` vectors."""
    h = 1
    while (h + 1) * (h + 2) // 2 < n_points:
        h += 1
    points: list[PDRSolution] = []
    for a in range(h + 1):
        for b in range(h + 1 - a):
            s = _frontier_point(model, (a / h, b / h, (h - a - b) / h), {}, span, tie_break)
            if s is not None:
                points.append(s)
    return points


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
    points, span = _lexicographic_anchors(model, tie_break)
    if method == "epsilon":
        points += _epsilon_points(model, points, span, n_points, mixes, tie_break)
    else:
        points += _weighted_points(model, span, n_points, tie_break)
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
