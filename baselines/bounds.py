"""Upper bound on the efficiency of any admissible policy: the optimum of the relaxed problem.

Why it is a bound. Under any stationary policy with exponential job sizes, let ``x[k, n]`` be the
long-run mean number of group-k servers holding n jobs and ``a[k, n]`` the long-run rate of jobs
accepted by group-k servers at level n, ``f[j, k]`` the rate of type-j jobs accepted by group k.
Then, exactly:

* ``sum_n x[k, n] = R_k`` (every server is somewhere);
* ``a[k, n] = mu_k(n+1) x[k, n+1]`` (level-crossing balance of the birth-death servers: in the long
  run every up-crossing n -> n+1 is matched by a down-crossing);
* ``a[k, n] <= Lambda_k x[k, n]`` with ``Lambda_k`` the total rate of the types that may use group k
  (PASTA: a server at level n can only receive arrivals that could use it);
* ``sum_n a[k, n] = sum_j f[j, k]`` and ``sum_{k in K_j} f[j, k] <= lambda_j`` (flow of accepted jobs);
* throughput ``L = sum mu_k(n) x[k, n]``, power ``E = sum eps_k(n) x[k, n]``.

Maximising L/E over this polytope (linear-fractional; Charnes-Cooper turns it into one LP solved by
HiGHS) relaxes the farm in two ways: the per-server and per-arrival coupling is kept only on
average (the Whittle relaxation), and the admissibility rule "no blocking while a vacancy exists" is
dropped. Its value is therefore >= the exact optimum, and the LP has
``sum_k (2 B_k + 1) + J K + 1`` variables whatever the number of servers. It is the reference the
paper's "deviation" is measured against for large farms.

Limits: exponential sizes (for other sizes the balance equations still hold for insensitive
single-server quantities but the bound is not proven here); time-varying scenarios use the mean
arrival rates (a bound on the stationary problem with averaged rates, not on the schedule).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import sparse
from scipy.optimize import linprog

from envs.config import FarmConfig
from envs.scenarios import load_scenario


@dataclass(frozen=True)
class BoundResult:
    """Optimum of the relaxed problem.

    Attributes:
        efficiency: the upper bound on throughput / power.
        throughput, power: L and E of the relaxed optimum.
        occupancy: float64[K, Bmax+1], x[k, n] (mean number of group-k servers at level n).
        group_flows: float64[J, K], accepted flow of type j into group k.
        n_variables, n_constraints: LP size.
    """

    efficiency: float
    throughput: float
    power: float
    occupancy: np.ndarray
    group_flows: np.ndarray
    n_variables: int
    n_constraints: int
    meta: dict = field(default_factory=dict)


def relaxation_bound(config: FarmConfig | str) -> BoundResult:
    """Solve the relaxed problem (module docstring) and return its optimum as a :class:`BoundResult`."""
    c = load_scenario(config)
    K, J = c.n_groups, c.n_job_types
    lam = c.arrival_rates.mean(axis=0)  # [J]
    avail = c.availability  # [J, K]
    Lam_k = (lam[:, None] * avail).sum(axis=0)  # [K]
    mu, pw = c.mu_table, c.power_table

    # variable layout (Charnes-Cooper scaled): y[k, n] (n = 0..B_k), b[k, n] (n = 0..B_k-1),
    # g[j, k] for k in K_j, and t
    y_idx, b_idx = {}, {}
    nv = 0
    for k, grp in enumerate(c.groups):
        for n in range(grp.buffer + 1):
            y_idx[k, n] = nv
            nv += 1
        for n in range(grp.buffer):
            b_idx[k, n] = nv
            nv += 1
    g_idx = {}
    for j in range(J):
        for k in np.flatnonzero(avail[j]):
            g_idx[j, int(k)] = nv
            nv += 1
    t_idx = nv
    nv += 1

    obj = np.zeros(nv)
    for (k, n), i in y_idx.items():
        obj[i] = -mu[k, n]  # linprog minimises

    eq_rows, eq_cols, eq_vals, eq_rhs = [], [], [], []
    ub_rows, ub_cols, ub_vals = [], [], []
    n_eq = n_ub = 0

    def eq(entries: list[tuple[int, float]], rhs: float = 0.0) -> None:
        nonlocal n_eq
        for col, v in entries:
            eq_rows.append(n_eq)
            eq_cols.append(col)
            eq_vals.append(v)
        eq_rhs.append(rhs)
        n_eq += 1

    def ub(entries: list[tuple[int, float]]) -> None:
        nonlocal n_ub
        for col, v in entries:
            ub_rows.append(n_ub)
            ub_cols.append(col)
            ub_vals.append(v)
        n_ub += 1

    # normalisation: scaled power = 1
    eq([(i, pw[k, n]) for (k, n), i in y_idx.items()], 1.0)
    for k, grp in enumerate(c.groups):
        # servers conserved: sum_n y = R_k t
        eq([(y_idx[k, n], 1.0) for n in range(grp.buffer + 1)] + [(t_idx, -float(grp.count))])
        for n in range(grp.buffer):
            # level-crossing balance and the arrival-rate cap
            eq([(b_idx[k, n], 1.0), (y_idx[k, n + 1], -mu[k, n + 1])])
            ub([(b_idx[k, n], 1.0), (y_idx[k, n], -Lam_k[k])])
        # accepted flow into group k = sum of the types' flows
        eq(
            [(b_idx[k, n], 1.0) for n in range(grp.buffer)]
            + [(g_idx[j, k], -1.0) for j in range(J) if avail[j, k]]
        )
    for j in range(J):
        ub([(g_idx[j, int(k)], 1.0) for k in np.flatnonzero(avail[j])] + [(t_idx, -lam[j])])

    A_eq = sparse.csr_matrix((eq_vals, (eq_rows, eq_cols)), shape=(n_eq, nv))
    A_ub = sparse.csr_matrix((ub_vals, (ub_rows, ub_cols)), shape=(n_ub, nv))
    res = linprog(
        obj,
        A_ub=A_ub,
        b_ub=np.zeros(n_ub),
        A_eq=A_eq,
        b_eq=np.array(eq_rhs),
        bounds=(0, None),
        method="highs",
    )
    if res.status != 0:
        raise RuntimeError(f"relaxation LP failed for {c.name!r}: {res.message}")
    z = res.x
    t = z[t_idx]
    occ = np.zeros((K, c.max_buffer + 1))
    for (k, n), i in y_idx.items():
        occ[k, n] = z[i] / t
    flows = np.zeros((J, K))
    for (j, k), i in g_idx.items():
        flows[j, k] = z[i] / t
    throughput = float((mu * occ).sum())
    power = float((pw * occ).sum())
    return BoundResult(
        efficiency=float(-res.fun),
        throughput=throughput,
        power=power,
        occupancy=occ,
        group_flows=flows,
        n_variables=nv,
        n_constraints=n_eq + n_ub,
        meta={"scenario": c.name, "time_varying_rates_averaged": c.is_time_varying},
    )
