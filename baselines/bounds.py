"""Upper bound on the efficiency of any admissible policy: the optimum of a relaxed problem.

Why it is a bound. Under any stationary policy with exponential job sizes, let ``x[k, n]`` be the
long-run mean number of group-k servers holding n jobs, ``a[k, n]`` the long-run rate of jobs
accepted by group-k servers at level n, ``g[j, k, n]`` the part of it that is of type j, and
``f[j, k] = sum_n g[j, k, n]`` the rate of type-j jobs accepted by group k. Then, exactly:

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
dropped. Its value is therefore >= the exact optimum. This is the *loose* bound
(``relaxation_bound(config, tight=False)``), kept for comparison.

The tight bound (the default, ``tight=True``) adds two families of constraints, each valid for
every admissible stationary policy (so the optimum stays feasible and the value stays a bound):

1. **Per-type caps** ``g[j, k, n] <= lambda_j x[k, n]`` for every type j, group k in K_j and level
   n < B_k, with ``a[k, n] = sum_j g[j, k, n]``. Proof: a type-j arrival is put on at most one
   server, so the rate of type-j jobs put on group-k servers at level n is ``lambda_j`` times the
   probability that the arrival sees at least one group-k server at level n. Arrivals are Poisson,
   so by PASTA that is the time-stationary probability of the event, which is at most the expected
   number ``x[k, n]`` of such servers (``P(N >= 1) <= E[N]`` for a count N). Summed over j this
   is the old cap ``a[k, n] <= Lambda_k x[k, n]``, which it therefore implies; it is stronger when
   the types that may use a group have different alternatives (the loose LP may route all of a
   group's level-n arrivals from the type with the largest rate, beyond what that type can offer).
2. **Blocking cuts** ``lambda_j - sum_{k in K_j} f[j, k] <= lambda_j x[k, B_k] / R_k`` for every
   type j and every k in K_j. Proof: the left side is the rate of blocked type-j arrivals. An
   admissible policy blocks a type-j job only when every server of every group in K_j is full
   (that is the admissibility rule), in particular only when a given group-k server s is full. By
   PASTA the blocking probability of type j is therefore at most ``P(n_s = B_k)`` for every
   server s of group k, hence at most their average ``(1/R_k) sum_s P(n_s = B_k) = x[k, B_k]/R_k``.
   This is where admissibility enters: a relaxed solution that blocks a type while its groups'
   servers are seldom full is cut off (the loose bound's optimum on ``small-1`` blocks 57% of the
   offered jobs with the efficient groups nearly idle).

Both are linear in (x, g, f), scale with the Charnes-Cooper variable like the others, and add
``J sum_k B_k`` variables (the per-type, per-level flows) and ``J sum_k B_k + sum_j |K_j|`` rows:
the LP size is still independent of the number of servers. The tight LP has
``sum_k (2 B_k + 1) + J sum_k B_k + 1`` variables at most (only the pairs (j, k) with k in K_j),
the loose one ``sum_k (2 B_k + 1) + J K + 1``. It is the reference the "deviation" is measured
against for large farms (``evaluation.references`` uses the default, tight).

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

__all__ = ["BoundResult", "relaxation_bound"]


@dataclass(frozen=True)
class BoundResult:
    """Optimum of the relaxed problem.

    Attributes:
        efficiency: the upper bound on throughput / power.
        throughput, power: L and E of the relaxed optimum.
        occupancy: float64[K, Bmax+1], x[k, n] (mean number of group-k servers at level n).
        group_flows: float64[J, K], accepted flow of type j into group k.
        n_variables, n_constraints: LP size.
        meta: ``scenario``, ``tight`` (which relaxation), ``time_varying_rates_averaged``.
    """

    efficiency: float
    throughput: float
    power: float
    occupancy: np.ndarray
    group_flows: np.ndarray
    n_variables: int
    n_constraints: int
    meta: dict = field(default_factory=dict)

    @property
    def blocked_share(self) -> float:
        """Share of the offered jobs the relaxed optimum does not accept."""
        lam = float(self.meta.get("offered_rate", 0.0))
        return 1.0 - float(self.group_flows.sum()) / lam if lam > 0 else 0.0


class _Rows:
    """Sparse constraint rows ``A z (= or <=) rhs`` collected one at a time."""

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.rhs: list[float] = []

    def add(self, entries: list[tuple[int, float]], rhs: float = 0.0) -> None:
        r = len(self.rhs)
        for col, v in entries:
            self.rows.append(r)
            self.cols.append(col)
            self.vals.append(v)
        self.rhs.append(rhs)

    def matrix(self, nv: int) -> sparse.csr_matrix:
        return sparse.csr_matrix((self.vals, (self.rows, self.cols)), shape=(len(self.rhs), nv))


def relaxation_bound(config: FarmConfig | str, tight: bool = True) -> BoundResult:
    """Solve the relaxed problem (module docstring) and return its optimum as a :class:`BoundResult`.

    Args:
        config: the farm (a FarmConfig or anything :func:`envs.scenarios.load_scenario` takes).
        tight: add the per-type caps and the blocking cuts (default); ``False`` is the loose
            relaxation of the first version, kept for comparison (always >= the tight value).
    """
    if not isinstance(tight, bool):
        raise ValueError(f"tight: expected True or False, got {tight!r}")
    c = load_scenario(config)
    K, J = c.n_groups, c.n_job_types
    lam = c.arrival_rates.mean(axis=0)  # [J]
    avail = c.availability  # [J, K]
    Lam_k = (lam[:, None] * avail).sum(axis=0)  # [K]
    mu, pw = c.mu_table, c.power_table
    pairs = [(j, int(k)) for j in range(J) for k in np.flatnonzero(avail[j])]

    # variable layout (Charnes-Cooper scaled by t = 1 / power): y[k, n] (n = 0..B_k),
    # b[k, n] (n = 0..B_k-1), the type flows (per group; per group and level when tight), and t
    y_idx: dict[tuple[int, int], int] = {}
    b_idx: dict[tuple[int, int], int] = {}
    nv = 0
    for k, grp in enumerate(c.groups):
        for n in range(grp.buffer + 1):
            y_idx[k, n] = nv
            nv += 1
        for n in range(grp.buffer):
            b_idx[k, n] = nv
            nv += 1
    # flow[j, k] -> list of variable indices whose sum is f[j, k]
    flow: dict[tuple[int, int], list[int]] = {}
    lvl_idx: dict[tuple[int, int, int], int] = {}
    for j, k in pairs:
        if tight:
            flow[j, k] = []
            for n in range(c.groups[k].buffer):
                lvl_idx[j, k, n] = nv
                flow[j, k].append(nv)
                nv += 1
        else:
            flow[j, k] = [nv]
            nv += 1
    t_idx = nv
    nv += 1

    obj = np.zeros(nv)
    for (k, n), i in y_idx.items():
        obj[i] = -mu[k, n]  # linprog minimises

    eq, ub = _Rows(), _Rows()
    # normalisation: scaled power = 1
    eq.add([(i, pw[k, n]) for (k, n), i in y_idx.items()], 1.0)
    for k, grp in enumerate(c.groups):
        # servers conserved: sum_n y = R_k t
        eq.add([(y_idx[k, n], 1.0) for n in range(grp.buffer + 1)] + [(t_idx, -float(grp.count))])
        users = [j for j in range(J) if avail[j, k]]
        for n in range(grp.buffer):
            # level-crossing balance and the arrival-rate cap
            eq.add([(b_idx[k, n], 1.0), (y_idx[k, n + 1], -mu[k, n + 1])])
            ub.add([(b_idx[k, n], 1.0), (y_idx[k, n], -Lam_k[k])])
            if tight:
                # the level's accepted flow is the types' flows at that level, each capped
                eq.add([(b_idx[k, n], 1.0)] + [(lvl_idx[j, k, n], -1.0) for j in users])
                for j in users:
                    ub.add([(lvl_idx[j, k, n], 1.0), (y_idx[k, n], -lam[j])])
        if not tight:
            # accepted flow into group k = sum of the types' flows
            eq.add(
                [(b_idx[k, n], 1.0) for n in range(grp.buffer)]
                + [(flow[j, k][0], -1.0) for j in users]
            )
    for j in range(J):
        ks = [int(k) for k in np.flatnonzero(avail[j])]
        accepted = [(i, 1.0) for k in ks for i in flow[j, k]]
        ub.add([*accepted, (t_idx, -lam[j])])
        if tight:
            # blocking cut: lam_j t - accepted_j <= lam_j y[k, B_k] / R_k for each k in K_j
            for k in ks:
                grp = c.groups[k]
                ub.add(
                    [(i, -v) for i, v in accepted]
                    + [(t_idx, lam[j]), (y_idx[k, grp.buffer], -lam[j] / grp.count)]
                )

    res = linprog(
        obj,
        A_ub=ub.matrix(nv),
        b_ub=np.array(ub.rhs),
        A_eq=eq.matrix(nv),
        b_eq=np.array(eq.rhs),
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
    for (j, k), idx in flow.items():
        flows[j, k] = z[idx].sum() / t
    throughput = float((mu * occ).sum())
    power = float((pw * occ).sum())
    return BoundResult(
        efficiency=float(-res.fun),
        throughput=throughput,
        power=power,
        occupancy=occ,
        group_flows=flows,
        n_variables=nv,
        n_constraints=len(eq.rhs) + len(ub.rhs),
        meta={
            "scenario": c.name,
            "tight": tight,
            "offered_rate": float(lam.sum()),
            "time_varying_rates_averaged": c.is_time_varying,
        },
    )
