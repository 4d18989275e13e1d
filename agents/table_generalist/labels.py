"""The table network's training labels: ``best-priority``'s table on a farm (the teacher), the
ordered and tied pairs of entries it implies, what breaking each ordered pair costs, and the
cache that keeps them (one file a farm, so an interrupted run loses nothing).

Teacher (:func:`teacher`): :func:`serverfarm_gym.baselines.best_priority.search_best_table` with capped budgets
(:data:`EXACT_SEARCH`, :data:`SIM_SEARCH`): the exact measure where the per-server chain is
small, else the simulated one (common random numbers); a farm of more than
:data:`~serverfarm_gym.agents.table_generalist.table_net.TWIN_SERVERS` servers is searched on its scaled-down twin
(``FarmConfig.scaled_down``: the same groups, sets and load at ~100 servers), whose table it
shares.

Pair weights (:func:`pair_weights`): for entries at places p < q of the teacher's order, the
largest efficiency loss (%) among the exchanges of neighbours p..q, measured by the teacher's
own evaluator (exact, or simulated with common random numbers on the farm or its twin): one
evaluation per neighbouring pair, so a farm of T entries costs its search plus T-1 evaluations.
Pair costs (:func:`pair_costs`): for each ordered pair, the efficiency lost when the two
entries themselves exchange places: one evaluation per pair, and unlike the neighbours'
exchanges (which near a good table all cost little) it sees what a far jump costs. A ranking
loss weighted by either spends its capacity on the orders that matter (a group placed before a
better one) rather than on the many that cost nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from serverfarm_gym.agents.table_generalist.table_net import TWIN_SERVERS, table_features
from serverfarm_gym.baselines.best_priority import (
    SearchSettings,
    search_best_table,
    table_evaluator,
)
from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.farm_sampler import (
    HELD_OUT_SEEDS,
    SMALL_FARMS,
    FarmDistribution,
    sample_farm,
)

__all__ = [
    "EXACT_SEARCH",
    "SIM_SEARCH",
    "SMALL",
    "cached_labels",
    "entry_pairs",
    "exact_seeds",
    "farm_labels",
    "label_all",
    "pack_ties",
    "pair_costs",
    "pair_weights",
    "teacher",
    "teacher_farm",
]

#: the teacher's search where the chain is small (each evaluation a CTMC solve of milliseconds)
EXACT_SEARCH = SearchSettings(budget=600, exact_max_states=5_000)
#: the teacher's search by simulation (common random numbers), capped to fit a CPU budget
SIM_SEARCH = SearchSettings(budget=150, n_epochs=20_000, horizon_durations=40.0,
                            exact_max_states=5_000)  # fmt: skip
#: the small-farm stream (``serverfarm_gym.envs.farm_sampler.SMALL_FARMS``): the exact teacher's farms
SMALL = SMALL_FARMS


def teacher_farm(config: FarmConfig) -> tuple[FarmConfig, SearchSettings, str]:
    """(the farm the teacher searches, its settings, ``"exact"`` / ``"simulated"`` /
    ``"twin"``): the farm itself where the exact measure reaches it or it has at most
    ``TWIN_SERVERS`` servers, else its scaled-down twin (the same groups and buffers, so the
    same table's shape)."""
    if table_evaluator(config, EXACT_SEARCH)[1] == "exact":
        return config, EXACT_SEARCH, "exact"
    if config.n_servers > TWIN_SERVERS:
        return config.scaled_down(max(1, config.n_servers // 100)), SIM_SEARCH, "twin"
    return config, SIM_SEARCH, "simulated"


def teacher(config: FarmConfig) -> tuple[np.ndarray, str]:
    """(best-priority table, ``"exact"`` / ``"simulated"`` / ``"twin"``) under the capped
    budgets."""
    farm, settings, method = teacher_farm(config)
    return search_best_table(farm, settings).table, method


def entry_pairs(
    config: FarmConfig, group: np.ndarray, level: np.ndarray, t: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(ordered i, j: i first; tied i, j) over the entry pairs some type can both use. Two levels
    of one group that the teacher ties are ordered higher level first: the dispatcher breaks the
    tie by the smallest server index, which packs, as "the fuller server first" does."""
    A = config.availability
    share = (A.T.astype(np.int64) @ A.astype(np.int64)) > 0  # [K, K]: some type uses both
    v = t[group, level]
    i, j = np.triu_indices(len(group), k=1)  # i < j: same group means level[i] < level[j]
    keep = share[group[i], group[j]]
    i, j = i[keep], j[keep]
    hi, lo = v[i] > v[j], v[i] < v[j]
    pack = ~hi & ~lo & (group[i] == group[j])
    tie = ~hi & ~lo & ~pack
    ordered = np.concatenate(
        [np.stack([i[hi], j[hi]]), np.stack([j[lo], i[lo]]), np.stack([j[pack], i[pack]])], axis=1
    )
    return ordered.T, np.stack([i[tie], j[tie]]).T


def pack_ties(ex: dict[str, Any]) -> dict[str, Any]:
    """Order the tied pairs of one group's levels higher level first (as :func:`entry_pairs`
    does; idempotent: for label files that kept them tied; pairs added so weigh 0). Tokens are
    group by group, level ascending, so within a group the higher index is the higher level."""
    tied, g = np.asarray(ex["tied"]).reshape(-1, 2), ex["group"]
    same = g[tied[:, 0]] == g[tied[:, 1]]
    hi_first = np.where((tied[:, 0] > tied[:, 1])[:, None], tied, tied[:, ::-1])[same]
    ordered = np.asarray(ex["ordered"]).reshape(-1, 2)
    out = ex | {"ordered": np.concatenate([ordered, hi_first]), "tied": tied[~same]}
    if "weight" in ex:
        out["weight"] = np.concatenate([np.asarray(ex["weight"]), np.zeros(len(hi_first))])
    return out


def _exchange_loss(
    table: np.ndarray,
    base: float,
    first: tuple[int, int],
    second: tuple[int, int],
    evaluate: Callable[[np.ndarray], float],
) -> float:
    """The efficiency lost (%, against ``base``) when the (group, level) entries ``first`` and
    ``second`` (ranked in that order) exchange places in ``table``; a tie (a pack tie: the
    higher level first) is broken by setting ``second`` just above ``first``."""
    t = table.copy()
    if table[first] == table[second]:
        t[second] = table[first] + 1e-6
    else:
        t[first], t[second] = table[second], table[first]
    return 100.0 * (base - evaluate(t)) / base


def pair_weights(
    table: np.ndarray,
    group: np.ndarray,
    level: np.ndarray,
    ordered: np.ndarray,
    evaluate: Callable[[np.ndarray], float],
) -> np.ndarray:
    """float64[len(ordered)]: for each ordered pair (i first), the largest efficiency loss (%,
    >= 0 not enforced: a loss below 0 means the exchange helps, which a search of capped budget
    can leave) among the exchanges of neighbours in the teacher's order between the two.

    The teacher's order: by table value, best first; a group's tied levels higher level first
    (the dispatcher's smallest-index tie-break packs). Exchanging a pack tie moves the lower
    level just above the higher one."""
    v = table[group, level]
    order = np.lexsort((-level, -v))
    pos = np.empty(len(order), dtype=np.int64)
    pos[order] = np.arange(len(order))
    base = evaluate(table)
    adj = np.zeros(max(len(order) - 1, 0))
    for p in range(len(order) - 1):
        i, j = order[p], order[p + 1]
        adj[p] = _exchange_loss(table, base, (group[i], level[i]), (group[j], level[j]), evaluate)
    pi, pj = pos[ordered[:, 0]], pos[ordered[:, 1]]
    return np.array([adj[a:b].max() if b > a else 0.0 for a, b in zip(pi, pj, strict=True)])


def pair_costs(
    table: np.ndarray,
    group: np.ndarray,
    level: np.ndarray,
    ordered: np.ndarray,
    evaluate: Callable[[np.ndarray], float],
) -> np.ndarray:
    """float64[len(ordered)]: for each ordered pair (i first), the efficiency lost (%) when the
    two exchange places in the teacher's table (a pack tie: the lower level set just above the
    higher one); below 0 where the exchange helps (a search of capped budget can leave that).
    Unlike :func:`pair_weights`' exchanges of neighbours, which near a good table all cost
    little, this sees what a far jump costs: a poor group placed before a good one."""
    base = evaluate(table)
    return np.array(
        [
            _exchange_loss(table, base, (group[i], level[i]), (group[j], level[j]), evaluate)
            for i, j in ordered
        ],
        dtype=np.float64,
    )


def farm_labels(seed: int, small: bool = False, weighted: bool = False) -> dict[str, Any]:
    """A training example: the features of ``sample_farm(seed)`` (from :data:`SMALL` when
    ``small``) and its teacher's pairs; ``weighted``: also what breaking each ordered pair costs
    (:func:`pair_costs`, by the teacher's evaluator) and the teacher's table."""
    if seed >= HELD_OUT_SEEDS.start:
        raise ValueError(
            f"seed: {seed} is held out (training seeds are below {HELD_OUT_SEEDS.start})"
        )
    config = sample_farm(seed, SMALL if small else None)
    t0 = time.process_time()
    farm, settings, method = teacher_farm(config)
    table = search_best_table(farm, settings).table
    x, group, level = table_features(config)
    ordered, tied = entry_pairs(config, group, level, table)
    ex = {"seed": seed, "x": x, "group": group, "ordered": ordered, "tied": tied,
          "method": method, "servers": config.n_servers}  # fmt: skip
    if weighted:
        evaluate = table_evaluator(farm, settings)[0]
        w = pair_costs(table, group, level, ordered.reshape(-1, 2), evaluate)
        ex |= {"weight": w, "table": table, "level": level}
    return ex | {"cpu_s": time.process_time() - t0}


def cached_labels(
    seeds: Sequence[int],
    cache: Path | None,
    stem: str,
    make: Callable[[int], dict[str, Any]],
    distribution: FarmDistribution | None,
) -> list[dict[str, Any]]:
    """``make(seed)`` of every seed, kept in ``cache`` (one ``STEM-SEED.npz`` a farm, written
    atomically) so that nothing computed is lost when a run is interrupted. The features of a
    cached example are recomputed from its farm (``sample_farm(seed, distribution)``), so cached
    teacher labels outlive a change of the feature set (tokens keep their order: group by
    group, level ascending)."""
    out = []
    for s in seeds:
        f = cache / f"{stem}-{s}.npz" if cache else None
        if f is not None and f.is_file():
            with np.load(f, allow_pickle=False) as z:
                ex = {k: z[k] for k in z.files}
            ex["method"] = str(ex["method"])
            ex["x"] = table_features(sample_farm(int(s), distribution))[0]
        else:
            ex = make(int(s))
            if f is not None:
                f.parent.mkdir(parents=True, exist_ok=True)
                tmp = f.with_name(f".{f.stem}.tmp.npz")
                np.savez(tmp, **{k: np.asarray(v) for k, v in ex.items()})
                tmp.replace(f)
        out.append(ex)
    return out


def label_all(
    seeds: Sequence[int], cache: Path | None, small: bool = False, weighted: bool = False
) -> list[dict[str, Any]]:
    """The main network's labels of every seed (:func:`farm_labels`, cached: ``farm-SEED`` /
    ``small-SEED``, with pair weights ``wfarm-SEED`` / ``wsmall-SEED``)."""
    stem = ("w" if weighted else "") + ("small" if small else "farm")
    make = lambda s: farm_labels(s, small, weighted)  # noqa: E731
    return [
        pack_ties(ex) for ex in cached_labels(seeds, cache, stem, make, SMALL if small else None)
    ]


def exact_seeds(n: int, first: int) -> list[int]:
    """The first ``n`` seeds from ``first`` of the small-farm stream :data:`SMALL` whose
    teacher is the exact search (the chain has at most ``EXACT_SEARCH.exact_max_states``
    states): cheap, noise-free labels of the small farms."""
    out, s = [], first
    while len(out) < n and s < HELD_OUT_SEEDS.start:
        if table_evaluator(sample_farm(s, SMALL), EXACT_SEARCH)[1] == "exact":
            out.append(s)
        s += 1
    return out
