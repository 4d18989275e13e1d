"""The small-farm expert of the table network, trained on exact labels weighted by what they are
worth.

On the farms the exact teacher reaches (a per-server chain of at most
``EXACT_SEARCH.exact_max_states`` states: a handful of servers) the generalist's table is read
by its own expert (:func:`serverfarm_gym.agents.table_generalist.table_net.expert_prefix`); larger farms by the main
network. Why a separate expert: on these farms every entry of the table is reached, so one
misplaced entry costs whole percents, and the labels are exact and cheap, so the expert can be
fitted to them closely; the main network's labels on large farms are simulated and its
corrections there (reservations) are what a network tuned to small farms damps.

Farms (:func:`exact_seeds`): the training seeds of the small-farm stream
:data:`serverfarm_gym.agents.table_generalist.labels.SMALL` (2-24 servers, exponential sizes) that the exact
teacher takes, never the held-out seeds.

Labels (:func:`exact_labels`): ``best-priority``'s exact search (budget
``EXACT_SEARCH``), its ordered and tied entry pairs (as for the main network), and a weight per
ordered pair: the exact efficiency lost, in %, when the teacher's order is broken between the
two: for entries at places p < q of the teacher's order, the largest loss among exchanging
neighbours p..q (one exact evaluation per neighbouring pair: a farm costs its search plus T-1
evaluations for T entries; :func:`serverfarm_gym.agents.table_generalist.labels.pair_weights`).
Pairs whose order costs nothing weigh ``--floor``.

With ``--polish-from MODEL`` the teacher is MODEL's own table on each farm polished by
``--polish-steps`` steps of exact gradient ascent of its soft table
(:func:`serverfarm_gym.agents.table_generalist.polish.polished_table`: a search from the network's table,
measured exactly, as in expert iteration); ``--keep-base-expert`` writes the new networks beside
the base file's expert (all averaged) instead of over it.

Features: all of :data:`serverfarm_gym.agents.table_generalist.table_net.FEATURES`, including the marginal efficiency
and speed of each level (speed-scaling servers, where the teacher interleaves levels by them).

    python train.py table-generalist small-expert --farms 6000 --epochs 60 --members 5 \
        --workers 2 --base agents/table_generalist/models/generalist_table.npz \
        --out agents/table_generalist/models/generalist_table

writes a model file with the base file's main network and this expert (``small.*`` weights,
``small.max_states``); the sidecar records both trainings. The shipped model's three commands
are in :mod:`serverfarm_gym.agents.table_generalist.run`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from serverfarm_gym.agents.table_generalist.labels import (
    EXACT_SEARCH,
    SMALL,
    cached_labels,
    entry_pairs,
    exact_seeds,
    pair_weights,
)
from serverfarm_gym.agents.table_generalist.policy import generalist_table
from serverfarm_gym.agents.table_generalist.polish import polished_table
from serverfarm_gym.agents.table_generalist.table_net import (
    FEATURES,
    SMALL_EXPERT,
    load_weights,
    members,
    merge_expert,
    save_weights,
    table_features,
)
from serverfarm_gym.agents.table_generalist.table_train import (
    add_ensemble_options,
    add_network_options,
    check_network_options,
    fit_members,
)
from serverfarm_gym.baselines.best_priority import search_best_table, table_evaluator
from serverfarm_gym.envs.farm_sampler import HELD_OUT_SEEDS, sample_farm

__all__ = ["exact_labels", "label_all", "main", "model_digest", "pair_weights"]


def exact_labels(
    seed: int,
    start: dict[str, np.ndarray] | None = None,
    polish_steps: int = 100,
) -> dict[str, Any]:
    """A training example of the small-farm stream's farm ``seed`` (the exact teacher must reach
    it): features, the teacher's table, its pairs and their weights: the neighbours' exchanges
    between the two (:func:`pair_weights`).

    The teacher's table: ``best-priority``'s exact search, or with ``start`` (a model's
    weights) that model's table on the farm polished by ``polish_steps`` steps of exact
    gradient ascent (:func:`serverfarm_gym.agents.table_generalist.polish.polished_table`; never worse than the
    model's own table, since the best table seen is kept)."""
    if seed >= HELD_OUT_SEEDS.start:
        raise ValueError(
            f"seed: {seed} is held out (training seeds are below {HELD_OUT_SEEDS.start})"
        )
    config = sample_farm(seed, SMALL)
    evaluate, method = table_evaluator(config, EXACT_SEARCH)
    if method != "exact":
        raise ValueError(f"seed: the small-stream farm {seed} is beyond the exact teacher")
    t0 = time.process_time()
    if start is None:
        table = search_best_table(config, EXACT_SEARCH).table
    else:
        table = polished_table(config, generalist_table(config, weights=start), polish_steps)
    x, group, level = table_features(config)
    ordered, tied = entry_pairs(config, group, level, table)
    weight = pair_weights(table, group, level, ordered.reshape(-1, 2), evaluate)
    return {"seed": seed, "x": x, "group": group, "level": level, "table": table,
            "ordered": ordered.reshape(-1, 2), "tied": tied.reshape(-1, 2), "weight": weight,
            "method": method, "servers": config.n_servers, "cpu_s": time.process_time() - t0}  # fmt: skip


def label_all(
    seeds: Sequence[int],
    cache: Path | None,
    start: str | Path | None = None,
    polish_steps: int = 100,
) -> list[dict[str, Any]]:
    """:func:`exact_labels` of every seed, one ``exact-SEED.npz`` each in ``cache`` (:func:`serverfarm_gym.agents.table_generalist.labels.cached_labels`:
    atomic, resumable; the features are recomputed from the farm). With ``start`` (a model
    file) the teacher is that model's table polished on each farm; its files are named by the
    steps and the model file's digest (``exactp100-1a2b3c4d-SEED.npz``), so labels of another
    start are never read."""
    stem = "exact"
    weights = None
    if start is not None:
        weights = load_weights(start)[0]
        stem = f"{stem}p{polish_steps}-{model_digest(start)}"
    make = lambda s: exact_labels(s, weights, polish_steps)  # noqa: E731
    return cached_labels(seeds, cache, stem, make, SMALL)


def model_digest(path: str | Path) -> str:
    """The first 8 hex digits of the model file's SHA-256: what names the labels polished from
    it, and what the sidecar records (a path alone does not say which file it was)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:8]


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The command line of the small-farm expert's training (module doc; ``prog``: the
    command's name in its messages, ``train.py table-generalist small-expert`` there)."""
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    p.add_argument("--farms", type=int, default=1500, help="exactly labelled training farms")
    p.add_argument("--first", type=int, default=0, help="first seed of the small-farm stream")
    p.add_argument("--epochs", type=int, default=60)
    add_ensemble_options(p, members=5, what="the expert")
    add_network_options(p, width=64, layers=2, batch_size=16)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--floor", type=float, default=0.01, help="weight of a pair that costs nothing")
    p.add_argument(
        "--polish-from",
        default=None,
        metavar="MODEL",
        help="teacher: MODEL's table polished on each farm (exact gradient), not best-priority",
    )
    p.add_argument("--polish-steps", type=int, default=100, help="steps of --polish-from")
    p.add_argument(
        "--keep-base-expert",
        action="store_true",
        help="write the new networks beside --base's expert (all of them averaged), not over it",
    )
    p.add_argument("--base", default="agents/table_generalist/models/generalist_table.npz",
                   help="model whose main network the output keeps")  # fmt: skip
    p.add_argument("--cache", default="runs/table-labels", help="labels, one file a farm")
    p.add_argument("--out", default="runs/generalist-table/generalist_table")
    return p


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> dict[str, Any]:
    """Train from the command line ``argv`` (exit 2 naming a bad option); returns the written
    model's sidecar."""
    p = build_parser(prog)
    a = p.parse_args(argv)
    if min(a.farms, a.epochs) < 1:
        p.error("--farms/--epochs: must be >= 1")
    if min(a.first, a.floor, a.polish_steps) < 0 or a.lr <= 0:
        p.error("--first/--floor/--polish-steps: must be >= 0; --lr: must be > 0")
    if a.polish_from is not None and not Path(a.polish_from).is_file():
        p.error(f"--polish-from: no model file {a.polish_from}")
    check_network_options(p, a)
    base, base_meta = load_weights(a.base)  # fail now, naming the file
    if a.keep_base_expert and not members(base, SMALL_EXPERT):
        p.error(f"--keep-base-expert: {a.base} has no small-farm expert to keep")
    torch.set_num_threads(1)
    t0 = time.process_time()
    seeds = exact_seeds(a.farms, a.first)
    if len(seeds) < a.farms:
        p.error(f"--farms: only {len(seeds)} exact small-stream farms below the held-out seeds")
    cache = Path(a.cache) if a.cache else None
    data = label_all(seeds, cache, a.polish_from, a.polish_steps)
    common = {"epochs": a.epochs, "width": a.width, "log": print, "pair_floor": a.floor,
              "n_features": len(FEATURES), "layers": a.layers, "heads": a.heads,
              "batch_size": a.batch_size, "lr": a.lr, "warmup": 0.05, "clip": 1.0}  # fmt: skip
    t1 = time.process_time()
    nets, fit_cpu = fit_members(data, common, a.seed, a.members, a.workers)
    # the fits' CPU is measured where they run (in this process or in workers), so the time
    # this process spent around them is replaced by it
    fit_wait = time.process_time() - t1
    weights = merge_expert(base, nets, EXACT_SEARCH.exact_max_states, a.keep_base_expert)
    expert = {"farms": a.farms, "first_seed": a.first, "seeds": [seeds[0], seeds[-1]],
              "epochs": a.epochs, "width": a.width, "seed": a.seed, "floor": a.floor,
              "members": a.members, "layers": a.layers, "heads": a.heads,
              "batch_size": a.batch_size, "lr": a.lr,
              "features": len(FEATURES), "max_states": EXACT_SEARCH.exact_max_states,
              "teacher": EXACT_SEARCH.__dict__ if a.polish_from is None else
              {"polished_from": a.polish_from, "digest": model_digest(a.polish_from),
               "steps": a.polish_steps},
              "label_cpu_s": round(float(sum(float(ex["cpu_s"]) for ex in data)), 1),
              "fit_cpu_s": round(fit_cpu, 1),
              "run_cpu_s": round(time.process_time() - t0 - fit_wait + fit_cpu, 1)}  # fmt: skip
    if a.keep_base_expert:  # the kept members' training, as the base file recorded it
        expert["beside"] = base_meta.get("small_expert")
    meta = {k: v for k, v in base_meta.items() if k != "features"} | {"small_expert": expert}
    path = save_weights(weights, a.out, **meta)
    print(json.dumps({"model": str(path), **expert}, default=str))
    return meta
