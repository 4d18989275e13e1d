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

Both are linear in (x, g, f) and scale with the Charnes-Cooper variable like the others. Each
blocking cut is written with one extra variable per type, its blocked rate
``lambda_j t - sum_k f[j, k]`` (one equality row), so that a cut has two entries instead of all of
the type's flows. The LP size is independent of the number of servers.

Size. Job types with the same set K_j are merged first (summed rates): the merged LP has the same
optimum (``_type_classes`` gives the argument), so J below counts the *distinct* sets, at most
2^K - 1 whatever the number of job types. The tight LP has ``sum_k (2 B_k + 1) + sum_j sum_{k in
K_j} B_k + J + 1`` variables and ``1 + K + 2 sum_k B_k + sum_j sum_{k in K_j} B_k + J + sum_j
|K_j|`` rows; the loose one ``sum_k (2 B_k + 1) + sum_j |K_j| + 1`` variables
(:func:`bound_lp_size` counts them without building anything). HiGHS's time depends on the
structure more than on the size: measured on 2 busy cores, 10,000 groups with one job type
(40,000 variables) solve in 3-12 s, but 4,000 groups with 4,000 types each on its own pair of
groups (24,000 variables) take 56 s and twice that size several minutes. So there are two limits:
an LP above :data:`MAX_BOUND_VARIABLES` (200,000; building it in Python takes seconds and tens
of MB) is refused before it is built, and HiGHS stops after :data:`MAX_BOUND_SECONDS` (120 s).
Both raise :class:`BoundTooLarge` (a ``ValueError``); the evaluation reports then carry
``"upper_bound": null`` with the message as ``"upper_bound_reason"``. The bound is the reference
the "deviation" is measured against for large farms (``serverfarm_gym.evaluation.references`` uses the default,
tight).

Limits: exponential sizes (for other sizes the balance equations still hold for insensitive
single-server quantities but the bound is not proven here); time-varying scenarios use the mean
arrival rates (a bound on the stationary problem with averaged rates, not on the schedule).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import sparse
from scipy.optimize import OptimizeResult, linprog

from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.scenarios import load_scenario

__all__ = [
    "MAX_BOUND_SECONDS",
    "MAX_BOUND_VARIABLES",
    "BoundResult",
    "BoundTooLarge",
    "bound_lp_size",
    "check_bound_size",
    "relaxation_bound",
]

#: size and time limits of the relaxation LP (see "Size" in the module docstring)
MAX_BOUND_VARIABLES = 200_000
MAX_BOUND_SECONDS = 120.0


class BoundTooLarge(ValueError):
    """The relaxation LP is beyond :data:`MAX_BOUND_VARIABLES` variables or did not finish within
    the time limit; callers that can go without the bound (``serverfarm_gym.evaluation.references``) skip it
    and report this message as the reason."""


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


def _type_classes(config: FarmConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(avail, lam, members)``: the job types merged by their set of usable groups.

    ``avail`` is bool[C, K] (one row per distinct set K_j), ``lam`` float64[C] the classes' summed
    mean arrival rates and ``members`` int64[J] each type's class. Types with the same K_j are
    interchangeable in the relaxation: a solution for the merged class, split among its types in
    proportion to their rates, satisfies every per-type cap and blocking cut (each is linear in
    lambda_j), and summing a per-type solution gives one for the class. So the merged LP has the
    same optimum, and its size depends on the distinct sets (at most 2^K - 1), not on J.
    """
    avail, members = np.unique(config.availability, axis=0, return_inverse=True)
    members = np.asarray(members).reshape(-1)
    lam = np.bincount(members, weights=config.arrival_rates.mean(axis=0), minlength=len(avail))
    return avail, lam, members


def bound_lp_size(config: FarmConfig, tight: bool = True) -> tuple[int, int]:
    """``(n_variables, n_constraints)`` of the relaxation LP of ``config`` (job types with the
    same groups merged, see :func:`_type_classes`), counted without building it (the module
    docstring gives the formulas)."""
    avail = _type_classes(config)[0].astype(np.int64)  # [C, K]
    B = config.buffers  # [K]
    K, J = config.n_groups, len(avail)
    levels, pairs = int(B.sum()), int(avail.sum())
    base_v, base_r = 2 * levels + K + 1, 1 + K + levels
    if not tight:
        return base_v + pairs, base_r + levels + K + J
    pair_levels = int((avail * B).sum())  # sum_j sum_{k in K_j} B_k
    return base_v + pair_levels + J, base_r + levels + pair_levels + J + pairs


def check_bound_size(
    config: FarmConfig, tight: bool = True, max_variables: int | None = None
) -> None:
    """Raise ``ValueError`` naming the size and the limit when the relaxation LP of ``config``
    has more than ``max_variables`` (default :data:`MAX_BOUND_VARIABLES`) variables."""
    limit = MAX_BOUND_VARIABLES if max_variables is None else max_variables
    nv, nc = bound_lp_size(config, tight)
    if nv > limit:
        raise BoundTooLarge(
            f"scenario {config.name!r}: the relaxation-bound LP has {nv:,} variables and "
            f"{nc:,} constraints, above the limit of {limit:,} variables "
            "(serverfarm_gym.baselines.solvers.bounds.MAX_BOUND_VARIABLES); it grows with the distinct sets of "
            "groups the job types may use x the buffers of those groups: use fewer distinct sets "
            "or smaller buffers"
        )


@dataclass
class _Layout:
    """Column indices of the LP's variables (module docstring; all scaled by t = 1/power)."""

    y: dict[tuple[int, int], int] = field(default_factory=dict)  # x[k, n], n = 0..B_k
    b: dict[tuple[int, int], int] = field(default_factory=dict)  # a[k, n], n = 0..B_k-1
    lvl: dict[tuple[int, int, int], int] = field(default_factory=dict)  # g[j, k, n] (tight)
    flow: dict[tuple[int, int], list[int]] = field(default_factory=dict)  # f[j, k] = sum
    blocked: dict[int, int] = field(default_factory=dict)  # blocked rate of type j (tight)
    t: int = 0
    n: int = 0

    def new(self) -> int:
        self.n += 1
        return self.n - 1


def _layout(c: FarmConfig, avail: np.ndarray, tight: bool) -> _Layout:
    """Variables for the farm's groups and the type classes ``avail`` (bool[C, K])."""
    lay = _Layout()
    for k, grp in enumerate(c.groups):
        for n in range(grp.buffer + 1):
            lay.y[k, n] = lay.new()
        for n in range(grp.buffer):
            lay.b[k, n] = lay.new()
    for j in range(len(avail)):
        for k in np.flatnonzero(avail[j]).tolist():
            if tight:
                lay.flow[j, k] = [lay.new() for _ in range(c.groups[k].buffer)]
                for n, i in enumerate(lay.flow[j, k]):
                    lay.lvl[j, k, n] = i
            else:
                lay.flow[j, k] = [lay.new()]
        if tight:
            lay.blocked[j] = lay.new()
    lay.t = lay.new()
    return lay


def _constraints(
    c: FarmConfig, lay: _Layout, avail: np.ndarray, lam: np.ndarray, tight: bool
) -> tuple[_Rows, _Rows]:
    """The equality and inequality rows of the relaxation (module docstring) for the type
    classes ``avail`` (bool[C, K]) with rates ``lam`` (float64[C])."""
    mu, pw = c.mu_table, c.power_table
    Lam_k = (lam[:, None] * avail).sum(axis=0)  # [K]
    eq, ub = _Rows(), _Rows()
    # normalisation: scaled power = 1
    eq.add([(i, pw[k, n]) for (k, n), i in lay.y.items()], 1.0)
    for k, grp in enumerate(c.groups):
        # servers conserved: sum_n y = R_k t
        eq.add([(lay.y[k, n], 1.0) for n in range(grp.buffer + 1)] + [(lay.t, -float(grp.count))])
        users = np.flatnonzero(avail[:, k]).tolist()
        for n in range(grp.buffer):
            # level-crossing balance
            eq.add([(lay.b[k, n], 1.0), (lay.y[k, n + 1], -mu[k, n + 1])])
            if tight:
                # the level's accepted flow is the types' flows at that level, each capped (the
                # caps sum to the loose arrival-rate cap, which they therefore imply)
                eq.add([(lay.b[k, n], 1.0)] + [(lay.lvl[j, k, n], -1.0) for j in users])
                for j in users:
                    ub.add([(lay.lvl[j, k, n], 1.0), (lay.y[k, n], -lam[j])])
            else:
                ub.add([(lay.b[k, n], 1.0), (lay.y[k, n], -Lam_k[k])])
        if not tight:
            # accepted flow into group k = sum of the types' flows
            eq.add(
                [(lay.b[k, n], 1.0) for n in range(grp.buffer)]
                + [(lay.flow[j, k][0], -1.0) for j in users]
            )
    for j in range(len(avail)):
        ks = np.flatnonzero(avail[j]).tolist()
        accepted = [(i, 1.0) for k in ks for i in lay.flow[j, k]]
        if not tight:
            ub.add([*accepted, (lay.t, -lam[j])])
            continue
        # accepted + blocked = offered; the blocking cut for each k in K_j is then
        # blocked_j <= lam_j y[k, B_k] / R_k: one short row per (j, k), where writing blocked_j
        # out as lam_j t - accepted_j would repeat all of type j's flows in every cut
        eq.add([*accepted, (lay.blocked[j], 1.0), (lay.t, -lam[j])])
        for k in ks:
            grp = c.groups[k]
            ub.add([(lay.blocked[j], 1.0), (lay.y[k, grp.buffer], -lam[j] / grp.count)])
    return eq, ub


def _check_bound_args(tight: bool, max_variables: int | None, time_limit_s: float | None) -> None:
    """ValueError naming the argument when one of relaxation_bound's options is malformed."""
    if not isinstance(tight, bool):
        raise ValueError(f"tight: expected True or False, got {tight!r}")
    if max_variables is not None and (
        isinstance(max_variables, bool) or not isinstance(max_variables, int) or max_variables < 1
    ):
        raise ValueError(f"max_variables: expected a positive integer, got {max_variables!r}")
    if time_limit_s is not None and not (
        isinstance(time_limit_s, (int, float))
        and not isinstance(time_limit_s, bool)
        and math.isfinite(time_limit_s)
        and time_limit_s > 0
    ):
        raise ValueError(
            f"time_limit_s: expected a positive number of seconds, got {time_limit_s!r}"
        )


def _solve_bound_lp(
    c: FarmConfig, lay: _Layout, eq: _Rows, ub: _Rows, time_limit_s: float | None
) -> OptimizeResult:
    """HiGHS's result on the Charnes-Cooper LP: max throughput over the layout's variables."""
    nv = lay.n
    obj = np.zeros(nv)
    for (k, n), i in lay.y.items():
        obj[i] = -c.mu_table[k, n]  # linprog minimises
    res = linprog(
        obj,
        A_ub=ub.matrix(nv),
        b_ub=np.array(ub.rhs),
        A_eq=eq.matrix(nv),
        b_eq=np.array(eq.rhs),
        bounds=(0, None),
        method="highs",
        options={} if time_limit_s is None else {"time_limit": float(time_limit_s)},
    )
    if res.status == 1:  # HiGHS stopped at its time (or iteration) limit
        raise BoundTooLarge(
            f"scenario {c.name!r}: the relaxation-bound LP ({nv:,} variables) did not finish "
            f"within {time_limit_s:g} s ({res.message}); pass a larger time_limit_s or use a "
            "farm with fewer distinct job-type group sets"
        )
    if res.status != 0:
        raise RuntimeError(f"relaxation LP failed for {c.name!r}: {res.message}")
    return res


def _occupancy_and_flows(
    c: FarmConfig,
    lay: _Layout,
    z: np.ndarray,
    avail: np.ndarray,
    lam_class: np.ndarray,
    members: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(occupancy[K, B+1], per-type group flows[J, K]) undone from the Charnes-Cooper scaling."""
    K = c.n_groups
    lam = c.arrival_rates.mean(axis=0)  # [J]
    t = z[lay.t]
    occ = np.zeros((K, c.max_buffer + 1))
    for (k, n), i in lay.y.items():
        occ[k, n] = z[i] / t
    class_flows = np.zeros((len(avail), K))
    for (j, k), idx in lay.flow.items():
        class_flows[j, k] = z[idx].sum() / t
    # each type takes its share of its class's flows (the split that keeps every per-type
    # constraint, see _type_classes)
    flows = class_flows[members] * (lam / lam_class[members])[:, None]
    return occ, flows


def relaxation_bound(
    config: FarmConfig | str,
    tight: bool = True,
    max_variables: int | None = None,
    time_limit_s: float | None = MAX_BOUND_SECONDS,
) -> BoundResult:
    """Solve the relaxed problem (module docstring) and return its optimum as a :class:`BoundResult`.

    Args:
        config: the farm (a FarmConfig or anything :func:`serverfarm_gym.envs.scenarios.load_scenario` takes).
        tight: add the per-type caps and the blocking cuts (default); ``False`` is the loose
            relaxation of the first version, kept for comparison (always >= the tight value).
        max_variables: refuse (``ValueError``, before building anything) an LP with more
            variables (default :data:`MAX_BOUND_VARIABLES`; :func:`bound_lp_size` counts them).
        time_limit_s: HiGHS's time limit; an LP that does not finish in time raises
            :class:`BoundTooLarge` (None: no limit).

    Raises:
        BoundTooLarge: beyond ``max_variables`` or ``time_limit_s`` (a ``ValueError``).
    """
    _check_bound_args(tight, max_variables, time_limit_s)
    c = load_scenario(config)
    check_bound_size(c, tight, max_variables)
    lam = c.arrival_rates.mean(axis=0)  # [J]
    avail, lam_class, members = _type_classes(c)
    lay = _layout(c, avail, tight)
    eq, ub = _constraints(c, lay, avail, lam_class, tight)
    res = _solve_bound_lp(c, lay, eq, ub, time_limit_s)
    occ, flows = _occupancy_and_flows(c, lay, res.x, avail, lam_class, members)
    return BoundResult(
        efficiency=float(-res.fun),
        throughput=float((c.mu_table * occ).sum()),
        power=float((c.power_table * occ).sum()),
        occupancy=occ,
        group_flows=flows,
        n_variables=lay.n,
        n_constraints=len(eq.rhs) + len(ub.rhs),
        meta={
            "scenario": c.name,
            "tight": tight,
            "offered_rate": float(lam.sum()),
            "time_varying_rates_averaged": c.is_time_varying,
        },
    )
