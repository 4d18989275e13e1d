"""``best-priority``: the best static priority table found by search against the farm itself.

Every priority-table policy (PAS, Whittle, most heuristics: :mod:`serverfarm_gym.baselines.priority`) is one
point of a finite space: what matters is, for each job type, the ranking of the (group, level)
pairs it may use. This module searches that space and keeps the table with the highest
long-run efficiency, measured directly on the farm:

* **exactly** (``method="exact"``): the stationary efficiency of the per-server CTMC
  (:func:`serverfarm_gym.baselines.solvers.ctmc.evaluate_policy`) when job sizes are exponential, the rates constant
  and the chain has at most ``exact_max_states`` states;
* **by simulation** otherwise (``method="simulated"``): the compiled simulator's built-in priority
  dispatcher (``FarmSimulator.run``) with **common random numbers**: every candidate is run from
  the empty farm with the same seed, so differences between candidates are not drowned by
  sampling noise; a warm-up is discarded and the window is long in model time (at least
  ``horizon_durations`` mean job durations of the slowest group, and at least ``n_epochs``
  decision epochs).

Search (``budget`` distinct evaluations at most; candidates that make the same decisions as one
already measured are recognised from their per-type rankings and cost nothing):

1. the PAS and Whittle tables (so the result is never worse than either on the measure used);
2. **group orders** (level-constant tables): all ``K!`` orders for ``K <= exhaustive_max_groups``
   (default 5, 120 orders), else a first-improvement coordinate search over insertion moves
   (take one group out, put it back at another rank) from the PAS order;
3. **reservation** (trunk reservation, the classic rule of loss networks): from the best table
   so far, first-improvement passes that move the *top* levels ``L..B_k-1`` of one group k
   together just below another distinct priority value, so that a type with a good alternative
   leaves the last places of group k's servers to the types that have none. One-entry moves cannot
   find this: a block must usually pass several groups before it pays (on ``paper-100``, demoting
   ``new``'s level 4 below ``mid`` gains 0.21% over PAS, each single step towards it nothing);
4. **level refinement**: from the best table so far, coordinate passes over every usable
   (group, level) entry, moving it one distinct priority value up or down, keeping a move when it
   improves the measure; until a pass improves nothing or the budget is spent.

Per-type tables. The compiled simulator's dispatcher (``serverfarm_gym.envs.kernels.dispatch.pick_priority_kb``) reads one
table ``[K, Bmax+1]`` shared by all job types: type j ranks its own groups K_j by that table. A
per-type table ``[J, K, Bmax+1]`` would need a kernel change, so the simulated *search* is over
shared tables (where two types need opposite rankings of two groups they both use, a shared table
cannot express it). With the exact measure a fourth, opt-in stage (``per_type=True``) continues
the level passes on one table per type, each evaluated exactly as a per-server rule on the CTMC.
:class:`BestPriorityPolicy` dispatches per-type tables (found, or given as ``type_tables=``) in
``predict``; such a policy has no built-in equivalent (``builtin = None``, rolled out through the
env) unless all its types' tables are equal.

Results are cached per process (an LRU cache keyed on the farm and every search setting: the
search is deterministic given them), so ``make_policy("best-priority", config)`` is fast on
re-use. The winner's measured value is optimistic by the selection over candidates when it is
simulated (the same sample path chose it); measure it again with other seeds to report it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from serverfarm_gym.baselines.pas import pas_table
from serverfarm_gym.baselines.priority import PriorityPolicy, check_table
from serverfarm_gym.baselines.solvers.ctmc import evaluate_policy, full_states, n_full_states
from serverfarm_gym.baselines.whittle import initial_eta, whittle_table
from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.simulator import FarmSimulator

__all__ = [
    "BestPriorityPolicy",
    "SearchResult",
    "SearchSettings",
    "group_order_table",
    "search_best_table",
    "table_evaluator",
]


@dataclass(frozen=True)
class SearchSettings:
    """What the search may spend (every field is part of the cache key).

    Attributes:
        budget: distinct table evaluations at most (each is one CTMC solve or one simulation).
            The search stops earlier when a stage converges (the presets use a few hundred at
            most); the budget leaves room for the reservation and level stages after the
            group-order stage, which alone can take hundreds of evaluations on 8-group farms.
        n_epochs: minimum decision epochs of each simulated evaluation.
        horizon_durations: minimum window of each simulated evaluation, in mean job durations
            of the slowest group (a farm scaled by f needs f times more epochs for the same
            model time).
        exact_max_states: evaluate exactly (CTMC) up to this many per-server states.
        exhaustive_max_groups: enumerate every group order up to this many groups.
        seed: the common random-number seed of every simulated evaluation.
        objective: what a simulated evaluation measures: ``"energy"`` (jobs per unit energy, the
            farm's efficiency) or ``"cost"`` (jobs per unit of energy cost, the scenario's
            prices; always simulated, as the exact CTMC is of energy).
        reserve_levels: run the reservation stage.
        refine_levels: run the level-refinement stage.
        per_type: then refine one table per job type (exact measure only: ValueError otherwise).
    """

    budget: int = 1_500
    n_epochs: int = 200_000
    horizon_durations: float = 200.0
    exact_max_states: int = 20_000
    exhaustive_max_groups: int = 5
    seed: int = 0
    objective: str = "energy"
    reserve_levels: bool = True
    refine_levels: bool = True
    per_type: bool = False

    def __post_init__(self) -> None:
        for name in ("budget", "n_epochs", "exact_max_states", "exhaustive_max_groups"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name}: expected a positive integer, got {v!r}")
        if not (
            isinstance(self.horizon_durations, (int, float)) and self.horizon_durations > 0
        ) or not math.isfinite(self.horizon_durations):
            raise ValueError(
                f"horizon_durations: expected a positive number, got {self.horizon_durations!r}"
            )
        if not isinstance(self.seed, (int, np.integer)) or isinstance(self.seed, bool):
            raise ValueError(f"seed: expected an integer, got {self.seed!r}")
        if self.objective not in ("energy", "cost"):
            raise ValueError(f"objective: expected 'energy' or 'cost', got {self.objective!r}")
        for name in ("reserve_levels", "refine_levels", "per_type"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}: expected True or False, got {getattr(self, name)!r}")


@dataclass(frozen=True)
class SearchResult:
    """Outcome of :func:`search_best_table`.

    Attributes:
        table: read-only float64[K, Bmax+1], the best table found (integer-valued priorities).
        value: its efficiency on the search's measure (exact, or the common-random-number run).
        method: ``"exact"`` or ``"simulated"``.
        n_evaluations: distinct evaluations spent.
        reference_values: the measure's value of the ``"pas"`` and ``"whittle"`` tables.
        stages: ``{"seed": v, "group_orders": v, "reservation": v, "levels": v, "per_type": v}``,
            the best value after each stage that ran.
        type_tables: read-only float64[J, K, Bmax+1] when the per-type stage found per-type
            tables better than :attr:`table` (then they are the result), else None.
        window: ``(warmup, horizon)`` epochs of a simulated evaluation (None if exact).
        settings: the :class:`SearchSettings` used.
    """

    table: np.ndarray
    value: float
    method: str
    n_evaluations: int
    reference_values: dict[str, float]
    stages: dict[str, float]
    window: tuple[int, int] | None
    settings: SearchSettings = field(repr=False)
    type_tables: np.ndarray | None = None


# ---------------------------------------------------------------------------------------------
# tables and their decision-equivalence classes
# ---------------------------------------------------------------------------------------------
def _usable(config: FarmConfig) -> np.ndarray:
    """bool[K, Bmax+1]: entries a dispatcher can use (level below the buffer)."""
    levels = np.arange(config.max_buffer + 1)
    return levels[None, :] < config.buffers[:, None]


def group_order_table(config: FarmConfig, order: tuple[int, ...] | list[int]) -> np.ndarray:
    """Level-constant table ranking the groups as ``order`` (first = highest priority)."""
    K = config.n_groups
    if sorted(int(k) for k in order) != list(range(K)):
        raise ValueError(f"order: expected a permutation of 0..{K - 1}, got {list(order)}")
    values = np.empty(K)
    for rank, k in enumerate(order):
        values[int(k)] = float(K - rank)
    return np.repeat(values[:, None], config.max_buffer + 1, axis=1)


def _normalise(config: FarmConfig, table: np.ndarray) -> np.ndarray:
    """The same decisions with dense integer priorities 1..m on the usable entries (exact floats,
    so that midpoints between two of them are exact too) and 0 on the others."""
    use = _usable(config)
    out = np.zeros_like(table, dtype=np.float64)
    vals = np.unique(table[use])
    out[use] = np.searchsorted(vals, table[use]).astype(np.float64) + 1.0
    return out


def _decision_key(config: FarmConfig, table: np.ndarray) -> bytes:
    """Equal for two tables (shared [K, Bmax+1] or per type [J, K, Bmax+1]) iff every type ranks
    its usable (group, level) pairs alike (ties included): they make the same decisions in every
    state."""
    use = _usable(config)
    parts = []
    for j in range(config.n_job_types):
        m = use & config.availability[j][:, None]
        v = table[j][m] if table.ndim == 3 else table[m]
        parts.append(np.unique(v, return_inverse=True)[1].astype(np.int16).tobytes())
        parts.append(b"|")
    return b"".join(parts)


# ---------------------------------------------------------------------------------------------
# measuring a table
# ---------------------------------------------------------------------------------------------
def _exact_ok(config: FarmConfig, settings: SearchSettings) -> bool:
    return (
        settings.objective == "energy"
        and config.all_exponential
        and not config.is_time_varying
        and n_full_states(config) <= settings.exact_max_states
    )


def _window(config: FarmConfig, settings: SearchSettings) -> tuple[int, int]:
    """(warm-up, horizon) in decision epochs: a duration of the slowest group holds about
    ``total_rate / slowest_rate`` arrivals (at most that many epochs: blocked ones are not)."""
    slowest = min(max(g.service_rate) for g in config.groups)
    per_duration = config.total_arrival_rate / slowest
    horizon = max(settings.n_epochs, math.ceil(settings.horizon_durations * per_duration))
    if config.is_time_varying:
        # a static table serves every interval: measure it over at least one whole cycle of the
        # schedule (the expected arrivals of a cycle), not over a few of its intervals
        horizon = max(horizon, math.ceil(config.cycle_arrivals))
    warmup = max(horizon // 10, math.ceil(50.0 * per_duration))
    return warmup, horizon


def table_evaluator(
    config: FarmConfig, settings: SearchSettings | None = None
) -> tuple[Callable[[np.ndarray], float], str]:
    """(``evaluate(table) -> efficiency``, method) for the search's measure (module docstring)."""
    s = settings or SearchSettings()
    if _exact_ok(config, s):

        def exact(table: np.ndarray) -> float:
            return float(evaluate_policy(config, table, max_states=s.exact_max_states).efficiency)

        return exact, "exact"
    warmup, horizon = _window(config, s)

    def simulated(table: np.ndarray) -> float:
        # common random numbers: the same seed, hence the same arrival stream, for every table
        sim = FarmSimulator(config, seed=s.seed)
        sim.run(warmup, "priority", table)
        st = sim.run(horizon, "priority", table)
        return float(st.cost_efficiency if s.objective == "cost" else st.efficiency)

    return simulated, "simulated"


def _per_type_evaluator(
    config: FarmConfig, settings: SearchSettings
) -> Callable[[np.ndarray], float]:
    """Exact efficiency of per-type tables [J, K, Bmax+1] (the CTMC of the per-server rule: the
    available non-full server maximising type j's table, ties to the smallest index)."""
    states, strides = full_states(config)
    occ = states.astype(np.int64)
    sg = config.server_group
    vacant = occ < config.buffers[sg][None, :]
    cand = [vacant & config.server_availability[j][None, :] for j in range(config.n_job_types)]

    def evaluate(tables: np.ndarray) -> float:
        choice = np.empty((occ.shape[0], config.n_job_types), dtype=np.int64)
        for j, cj in enumerate(cand):
            score = np.where(cj, tables[j][sg[None, :], occ], -np.inf)
            choice[:, j] = np.argmax(score, axis=1)  # first maximum: smallest index
            choice[~cj.any(axis=1), j] = -1

        def rule(o: np.ndarray, j: int) -> int:
            return int(choice[int(o @ strides), j])

        return float(evaluate_policy(config, rule, max_states=settings.exact_max_states).efficiency)

    return evaluate


class _Budget(Exception):
    """Raised inside the search when the evaluation budget is spent."""


class _Measured:
    """Memoised, budgeted measure: equivalent tables are measured once."""

    def __init__(self, config: FarmConfig, settings: SearchSettings):
        self.config = config
        self.evaluate, self.method = table_evaluator(config, settings)
        self.budget = settings.budget
        self.cache: dict[bytes, float] = {}
        self.best_table: np.ndarray | None = None
        self.best = -math.inf

        self.evaluate_types: Callable[[np.ndarray], float] | None = None
        self.best_types: np.ndarray | None = None

    def __call__(self, table: np.ndarray) -> float:
        """Measure a shared table [K, Bmax+1] or (per-type stage) per-type tables [J, K, Bmax+1];
        both are keyed by their per-type rankings, so equal decisions share one entry."""
        key = _decision_key(self.config, table)
        if key not in self.cache:
            if len(self.cache) >= self.budget:
                raise _Budget
            run = self.evaluate if table.ndim == 2 else self.evaluate_types
            self.cache[key] = run(table)
        v = self.cache[key]
        if v > self.best:  # strict: the first table measured at a value keeps it
            self.best = v
            if table.ndim == 2:
                self.best_table = _normalise(self.config, table)
            else:
                self.best_types = np.stack([_normalise(self.config, t) for t in table])
        return v


# ---------------------------------------------------------------------------------------------
# the search
# ---------------------------------------------------------------------------------------------
def _group_orders(config: FarmConfig, m: _Measured, settings: SearchSettings) -> None:
    n_groups = config.n_groups
    if n_groups <= settings.exhaustive_max_groups:
        for order in itertools.permutations(range(n_groups)):
            m(group_order_table(config, order))
        return
    # coordinate search over insertion moves from the PAS order (ties: smaller index first)
    order = list(np.argsort(-config.group_efficiency, kind="stable"))
    cur = m(group_order_table(config, order))
    improved = True
    while improved:
        improved = False
        for i in range(n_groups):
            for p in range(n_groups):
                if p == i:
                    continue
                cand = order[:i] + order[i + 1 :]
                cand.insert(p, order[i])
                v = m(group_order_table(config, cand))
                if v > cur:
                    order, cur, improved = cand, v, True
                    break
            if improved:
                break


def _reservation_moves(config: FarmConfig, table: np.ndarray) -> Iterator[np.ndarray]:
    """Trunk-reservation candidates from ``table`` (module docstring, stage 3): levels
    ``L..B_k-1`` of group k, for L from the top down, placed together just below each lower
    distinct value, nearest first."""
    use = _usable(config)
    vals = np.unique(table[use])
    for k in range(config.n_groups):
        top = int(config.buffers[k])
        for low in range(top - 1, 0, -1):
            for v in vals[vals < table[k, low:top].min()][::-1]:
                cand = table.copy()
                cand[k, low:top] = v - 0.5
                yield _normalise(config, cand)


def _reserve_levels(config: FarmConfig, m: _Measured) -> None:
    """First-improvement passes over :func:`_reservation_moves`, restarting from the improved
    table until a pass improves nothing (or the budget is spent)."""
    table, cur = m.best_table.copy(), m.best
    improved = True
    while improved:
        improved = False
        for cand in _reservation_moves(config, table):
            val = m(cand)
            if val > cur:
                table, cur, improved = cand, val, True
                break


def _refine_levels(config: FarmConfig, m: _Measured) -> None:
    use = np.argwhere(_usable(config))
    table = m.best_table.copy()
    cur = m.best
    improved = True
    while improved:
        improved = False
        for k, b in use:
            for new in _moves(table, use, int(k), int(b)):
                cand = table.copy()
                cand[k, b] = new
                cand = _normalise(config, cand)
                v = m(cand)
                if v > cur:
                    table, cur, improved = cand, v, True
                    break


def _refine_per_type(config: FarmConfig, m: _Measured) -> None:
    """Level passes on one table per type: entry (j, k, b) for k in K_j moves within type j's
    own ranking, the other types' tables unchanged."""
    J = config.n_job_types
    tables = np.stack([m.best_table] * J)
    cur = m.best
    use_j = [np.argwhere(_usable(config) & config.availability[j][:, None]) for j in range(J)]
    improved = True
    while improved:
        improved = False
        for j in range(J):
            for k, b in use_j[j]:
                for new in _moves(tables[j], use_j[j], int(k), int(b)):
                    cand = tables.copy()
                    cand[j, k, b] = new
                    cand[j] = _normalise(config, cand[j])
                    v = m(cand)
                    if v > cur:
                        tables, cur, improved = cand, v, True
                        break


def _moves(table: np.ndarray, use: np.ndarray, k: int, b: int) -> list[float]:
    """New values for entry (k, b) of a normalised table (integer priorities): out of its tie
    (just above / below the entries it ties with), then one distinct value up / down (strictly
    between that value and the next one, so it ties with nothing)."""
    vals = np.unique(table[use[:, 0], use[:, 1]])
    v = table[k, b]
    i = int(np.searchsorted(vals, v))
    out = []
    if np.count_nonzero(table[use[:, 0], use[:, 1]] == v) > 1:
        out += [v + 0.5, v - 0.5]
    if i + 1 < len(vals):
        out.append(vals[i + 1] + 0.5)
    if i - 1 >= 0:
        out.append(vals[i - 1] - 0.5)
    return out


def _search(config: FarmConfig, settings: SearchSettings) -> SearchResult:
    m = _Measured(config, settings)
    if settings.per_type:
        if m.method != "exact":
            raise ValueError(
                "per_type: the per-type stage needs the exact measure (exponential sizes, "
                f"constant rates, at most exact_max_states={settings.exact_max_states} per-server "
                "states); the simulator's dispatcher has one table for all types"
            )
        m.evaluate_types = _per_type_evaluator(config, settings)
    refs: dict[str, float] = {}
    stages: dict[str, float] = {}
    try:
        refs["pas"] = m(pas_table(config))
        refs["whittle"] = m(whittle_table(config, initial_eta(config)))
        stages["seed"] = m.best
        _group_orders(config, m, settings)
        stages["group_orders"] = m.best
        if settings.reserve_levels:
            _reserve_levels(config, m)
            stages["reservation"] = m.best
        if settings.refine_levels:
            _refine_levels(config, m)
            stages["levels"] = m.best
        if settings.per_type:
            _refine_per_type(config, m)
            stages["per_type"] = m.best
    except _Budget:
        pass
    table = m.best_table
    table.setflags(write=False)
    types = m.best_types
    if types is not None:
        types.setflags(write=False)
    return SearchResult(
        table=table,
        value=float(m.best),
        method=m.method,
        n_evaluations=len(m.cache),
        reference_values=refs,
        stages=stages,
        window=None if m.method == "exact" else _window(config, settings),
        settings=settings,
        type_tables=types,
    )


@lru_cache(maxsize=32)
def _cached_search(config: FarmConfig, settings: SearchSettings) -> SearchResult:
    return _search(config, settings)


def search_best_table(config: FarmConfig, settings: SearchSettings | None = None) -> SearchResult:
    """The best shared priority table found for ``config`` (module docstring); cached per process
    on ``(config, settings)``."""
    return _cached_search(config, settings or SearchSettings())


# ---------------------------------------------------------------------------------------------
# the policy
# ---------------------------------------------------------------------------------------------
class BestPriorityPolicy(PriorityPolicy):
    """Dispatch by the best static priority table found by :func:`search_best_table`.

    Args:
        config, action_mode, seed: as every policy (``seed`` is unused: deterministic).
        table: use this shared float64[K, Bmax+1] table instead of searching.
        type_tables: float64[J, K, Bmax+1], one table per job type (no search); dispatched in
            Python (``builtin = None``) unless all are equal.
        budget, n_epochs, horizon_durations, exact_max_states, exhaustive_max_groups,
        search_seed, search_objective, reserve_levels, refine_levels, per_type: the
            :class:`SearchSettings` (``search_seed`` is its ``seed``, ``search_objective`` its
            ``objective``).

    Attributes:
        search: the :class:`SearchResult` (None when a table was given).
    """

    name = "best-priority"

    def __init__(
        self,
        config: FarmConfig,
        action_mode: str = "server",
        seed: int | None = None,
        table: np.ndarray | None = None,
        type_tables: np.ndarray | None = None,
        budget: int = 1_500,
        n_epochs: int = 200_000,
        horizon_durations: float = 200.0,
        exact_max_states: int = 20_000,
        exhaustive_max_groups: int = 5,
        search_seed: int = 0,
        search_objective: str = "energy",
        reserve_levels: bool = True,
        refine_levels: bool = True,
        per_type: bool = False,
    ):
        self.search: SearchResult | None = None
        if table is not None and type_tables is not None:
            raise ValueError("table/type_tables: give one of them, not both")
        found = None  # the per-type tables, given or found
        if type_tables is not None:
            tt = np.asarray(type_tables, dtype=np.float64)
            shape = (config.n_job_types, config.n_groups, config.max_buffer + 1)
            if tt.shape != shape:
                raise ValueError(
                    f"type_tables: expected shape {shape} (job types, groups, max buffer + 1), "
                    f"got {tt.shape}"
                )
            found = np.stack([check_table(config, t) for t in tt])
            table = found[0]
        elif table is None:
            settings = SearchSettings(
                budget=budget,
                n_epochs=n_epochs,
                horizon_durations=horizon_durations,
                exact_max_states=exact_max_states,
                exhaustive_max_groups=exhaustive_max_groups,
                seed=search_seed,
                objective=search_objective,
                reserve_levels=reserve_levels,
                refine_levels=refine_levels,
                per_type=per_type,
            )
            self.search = search_best_table(config, settings)
            table = self.search.table
            if self.search.type_tables is not None:
                found = self.search.type_tables.copy()
        super().__init__(config, action_mode, seed, table=table)
        shared = found is None or all(np.array_equal(t, found[0]) for t in found)
        self.per_type = not shared
        if self.per_type:
            self.builtin = None  # instance attribute: the harness reads it per policy
            found.setflags(write=False)
        self.type_tables = (
            found
            if found is not None
            else np.broadcast_to(self.table, (config.n_job_types, *self.table.shape))
        )

    def priority_table(self) -> np.ndarray:
        if self.per_type:
            raise ValueError(
                "priority_table: this policy has one table per job type (type_tables), which "
                "the compiled dispatcher cannot run; use type_tables[j]"
            )
        return self.table

    def _act_batch(
        self, obs: np.ndarray, masks: np.ndarray, deterministic: bool = True
    ) -> np.ndarray:
        if not self.per_type:
            return super()._act_batch(obs, masks)
        jt = np.argmax(obs[:, -self.config.n_job_types :], axis=1)
        out = np.empty(obs.shape[0], dtype=np.int64)
        for j in np.unique(jt):
            rows = jt == j
            # swap in type j's table (the flat view used in server mode and the 2-D one)
            self.table, self._flat = self.type_tables[j], self.type_tables[j].ravel()
            out[rows] = super()._act_batch(obs[rows], masks[rows])
        self.table, self._flat = self.type_tables[0], self.type_tables[0].ravel()
        return out
