"""Training of the table network (:mod:`serverfarm_gym.agents.generalist.table_net`) by distillation of
``best-priority``.

Labels (:mod:`serverfarm_gym.agents.generalist.labels`): the teacher, ``best-priority``'s search with capped
budgets (exact where the per-server chain is small, else simulated; a farm of more than
:data:`TWIN_SERVERS` servers is searched on its scaled-down twin, whose table it shares), and
the entry pairs its table orders or ties, one cache file a farm.

Farms: the default sampler's training seeds, the small-farm stream
:data:`serverfarm_gym.agents.generalist.labels.SMALL`, and more of it where the teacher is exact
(``--exact-farms``: cheap, noise-free labels of the small farms, the ones where the exact
evaluation is made).

Parameterisation: the network's scores are a correction to PAS's group ranking (``--prior``,
see :mod:`serverfarm_gym.agents.generalist.table_net`), with an L2 penalty on the correction (``--l2``).

Model selection (``--val-farms``): held-out validation farms, measured exactly against PAS
(:class:`Validation`): the epoch kept, then the weight of the PAS prior (a larger one keeps more
of PAS's table), is the one of best mean improvement over PAS among those whose worst farm is
at most ``--floor`` % below PAS.

Loss: the teacher's table says, for every pair of usable entries that some job type can both
use, which of the two the dispatcher takes first (two levels of one group that it ties: the
higher level first, as its smallest-index tie-break packs), or that two groups tie. A pairwise
logistic loss on the score difference for the ordered pairs, and an absolute-difference penalty
for the tied ones, each averaged per farm. Every ordered pair weighs 1, or, with
``--pair-floor F``, what exchanging the two entries in the teacher's table costs (%, measured
by the teacher's evaluator: :func:`serverfarm_gym.agents.generalist.labels.pair_costs`) plus ``F``: a farm
where the order matters then weighs more than one where it does not, and a poor group placed
before a good one more than two levels that could go either way.

    python -m serverfarm_gym.agents.generalist.table_train --farms 1000 --small-farms 183 --epochs 60 \
        --layers 2 --width 64 --batch-size 16 --pair-floor 0.1 --members 4 --workers 2 \
        --keep-expert agents/generalist/models/generalist_table.npz \
        --out agents/generalist/models/generalist_table

writes the shipped model's main network (four networks, their scores averaged) beside the
small-farm expert already in that file (``--keep-expert``; docs/generalist.md).

``--prior``, ``--val-farms``, ``--exact-farms`` are off by default: with them (``--prior 1
--val-farms 100 --exact-farms 120``) the small held-out farms improve (at least PAS on 96%
instead of 84%) but the large presets lose what the teacher's table gains there (overlap-100:
15% below best-priority), because the validation farms are all small; see docs/generalist.md.
"""

from __future__ import annotations

import argparse
import json
import math
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from serverfarm_gym.agents.generalist.labels import (
    EXACT_SEARCH,
    SIM_SEARCH,
    cached_labels,
    exact_seeds,
    farm_labels,
    label_all,
)
from serverfarm_gym.agents.generalist.policy import generalist_table
from serverfarm_gym.agents.generalist.table_net import (
    MAIN_ENSEMBLE,
    SMALL_EXPERT,
    TWIN_SERVERS,
    load_weights,
    save_weights,
)
from serverfarm_gym.agents.generalist.table_torch import (
    MAIN_FEATURES,
    TableNet,
    batch_loss,
    collate,
)
from serverfarm_gym.baselines.pas import pas_table
from serverfarm_gym.baselines.priority import PriorityPolicy
from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.farm_sampler import HELD_OUT_SEEDS, sample_farm
from serverfarm_gym.evaluation.efficiency import measure
from serverfarm_gym.evaluation.exact import exact_table_solvable
from serverfarm_gym.evaluation.parallel import parallel_map

__all__ = [
    "EXACT_SEARCH",
    "SIM_SEARCH",
    "TableNet",
    "Validation",
    "cached_labels",
    "exact_seeds",
    "farm_labels",
    "fit",
    "fit_member",
    "fit_members",
    "main",
]

DIVERGED = 2.0
"""A fit whose last epoch's mean loss exceeds this many times its lowest epoch's has diverged
(:func:`fit` then keeps the lowest epoch's weights)."""


def fit(
    data: Sequence[dict[str, Any]],
    epochs: int = 60,
    lr: float = 3e-3,
    width: int = 48,
    tie_weight: float = 0.3,
    seed: int = 0,
    log: Any = None,
    prior: float = 0.0,
    l2: float = 0.0,
    validation: Validation | None = None,
    pair_floor: float | None = None,
    n_features: int | None = None,
    layers: int = 0,
    heads: int = 4,
    batch_size: int = 1,
    warmup: float = 0.0,
    clip: float | None = None,
) -> TableNet:
    """Train a :class:`TableNet` on the examples of :func:`farm_labels` (Adam, ``batch_size``
    farms a step, shuffled each epoch, cosine learning rate). With ``validation``, the weights
    are scored on its farms every 5 epochs and after the last, and the best scoring are kept.
    With ``pair_floor``, examples that carry pair weights (``weight``, exact labels) weigh each
    ordered pair by ``weight + pair_floor``; ``n_features``: the network reads the first
    ``n_features`` of ``FEATURES`` (default: the 25 the main network reads); ``layers`` /
    ``heads``: its attention blocks over the entries (0: none). ``warmup`` > 0: a one-cycle
    rate instead (rising over that share of the steps, then annealed), and ``clip``: the
    gradient's norm clipped, both for the deeper experts, whose first steps otherwise jump."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    net = TableNet(width, prior, n_features or MAIN_FEATURES, layers, heads)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    n_steps = epochs * math.ceil(len(data) / batch_size)
    sched: torch.optim.lr_scheduler.LRScheduler = (
        torch.optim.lr_scheduler.OneCycleLR(opt, lr, total_steps=n_steps, pct_start=warmup)
        if warmup > 0
        else torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=n_steps)
    )
    best: tuple[tuple[float, ...], dict[str, torch.Tensor]] | None = None
    lowest: tuple[float, dict[str, torch.Tensor]] | None = None  # the fallback if it diverges
    mean = math.nan  # the last epoch's mean loss
    for epoch in range(epochs):
        total = 0.0
        order = rng.permutation(len(data))
        for i in range(0, len(data), batch_size):
            batch = collate([data[j] for j in order[i : i + batch_size]], pair_floor)
            loss = batch_loss(net, batch, tie_weight, l2)
            if not loss.requires_grad:  # farms with one usable entry: nothing to rank
                continue
            opt.zero_grad()
            loss.backward()
            if clip is not None:
                nn.utils.clip_grad_norm_(net.parameters(), clip)
            opt.step()
            sched.step()
            total += loss.item() * batch.n_farms
        mean = total / len(data)
        msg = f"epoch {epoch}: loss {mean:.4f}"
        if math.isfinite(mean) and (lowest is None or mean < lowest[0]):
            lowest = (mean, _snapshot(net))
        if validation is not None and (epoch % 5 == 4 or epoch == epochs - 1):
            score = validation.score(net.numpy_weights())
            msg += f" validation {score}"
            if best is None or validation.key(score) > validation.key(best[0]):
                best = (score, _snapshot(net))
        if log is not None and (epoch % 5 == 4 or epoch == epochs - 1):
            log(msg)
    if best is not None:
        net.load_state_dict(best[1])
        net.validation_score = best[0]  # type: ignore[assignment]
    elif epochs > 0:
        _undo_divergence(net, mean, lowest, log)
    return net.eval()


def _snapshot(net: TableNet) -> dict[str, torch.Tensor]:
    """A copy of the network's weights that later steps do not change."""
    return {k: v.clone() for k, v in net.state_dict().items()}


def _undo_divergence(
    net: TableNet,
    final: float,
    lowest: tuple[float, dict[str, torch.Tensor]] | None,
    log: Any,
) -> None:
    """A fit whose last epoch's loss is not finite or over :data:`DIVERGED` times its lowest
    epoch's has blown up (a step too large for the network; annealed fits end at or near their
    lowest): its weights go back to that lowest epoch's, with a warning, rather than an
    ensemble member that scores at random. None finite at all: ``ValueError``."""
    if lowest is None:
        raise ValueError("fit: the training loss was never finite; lower --lr")
    if final <= DIVERGED * lowest[0]:
        return
    msg = (
        f"fit diverged (last epoch's loss {final:.4g}, lowest {lowest[0]:.4g}): the weights of "
        "the epoch of lowest loss are kept; a lower --lr avoids it"
    )
    warnings.warn(msg, RuntimeWarning, stacklevel=3)
    if log is not None:
        log(msg)
    net.load_state_dict(lowest[1])


def fit_member(
    job: tuple[Sequence[dict[str, Any]], dict[str, Any]],
) -> tuple[dict[str, np.ndarray], float]:
    """One network of an ensemble, ``fit(data, **kwargs)``: its numpy weights and the CPU
    seconds of its fit (module-level: a worker process's unit; one thread each, so a member's
    weights do not depend on the number of workers)."""
    data, kwargs = job
    torch.set_num_threads(1)
    t0 = time.process_time()
    weights = fit(data, **kwargs).numpy_weights()
    return weights, time.process_time() - t0


def fit_members(
    data: Sequence[dict[str, Any]], kwargs: dict[str, Any], seed: int, n: int, workers: int
) -> tuple[list[dict[str, np.ndarray]], float]:
    """An ensemble: ``fit(data, seed=seed + i, **kwargs)`` for i < ``n``, fitted by ``workers``
    processes (:func:`fit_member` each); their numpy weights and the CPU seconds of their fits,
    measured where they ran."""
    jobs = [(data, kwargs | {"seed": seed + i}) for i in range(n)]
    fitted = parallel_map(fit_member, jobs, workers)
    return [w for w, _ in fitted], float(sum(cpu for _, cpu in fitted))


class Validation:
    """Held-out validation farms (``sample_farm`` seeds from ``HELD_OUT_SEEDS.start``, never
    trained on, disjoint from the evaluation's): the first ``n`` with exponential sizes and a
    per-server chain of at most 5,000 states, where a table is measured exactly against PAS.

    ``score(weights)`` = (share of farms at least PAS, worst and mean relative difference to PAS,
    %); :meth:`key` ranks scores: a worst difference above ``-floor`` first, then the mean."""

    def __init__(self, n: int, floor: float = 0.5) -> None:
        self.floor = floor

        self.farms: list[FarmConfig] = []
        seed = HELD_OUT_SEEDS.start
        while len(self.farms) < n:
            c = sample_farm(seed)
            seed += 1
            if exact_table_solvable(c, 5_000):
                self.farms.append(c)
        self.pas = np.array([self._eff(c, pas_table(c)) for c in self.farms])

    @staticmethod
    def _eff(config: FarmConfig, table: np.ndarray) -> float:
        pol = PriorityPolicy(config, table=table)
        return measure(pol, config, action_mode="server", method="exact").efficiency

    def key(self, score: tuple[float, float, float]) -> tuple[bool, float, float]:
        """Sort key of a :meth:`score`: (worst above ``-floor``, mean, share at least PAS)."""
        return (score[1] >= -self.floor, score[2], score[0])

    def calibrate(self, net: TableNet, factors: Sequence[float], log: Any = None) -> None:
        """Set ``net.prior`` to the best (by :meth:`key`) of ``net.prior`` times each factor:
        a larger prior keeps more of PAS's table (fewer, surer corrections)."""
        base, best = net.prior, None
        for f in factors:
            net.prior = base * f
            score = self.score(net.numpy_weights())
            if log is not None:
                log(f"prior {net.prior:.3g}: validation {score}")
            if best is None or self.key(score) > self.key(best[1]):
                best = (net.prior, score)
        assert best is not None
        net.prior, net.validation_score = best  # type: ignore[assignment]

    def score(self, weights: dict[str, np.ndarray]) -> tuple[float, float, float]:
        eff = np.array([self._eff(c, generalist_table(c, weights=weights)) for c in self.farms])
        rel = 100.0 * (eff - self.pas) / self.pas
        return (
            round(float(np.mean(rel >= -1e-7)), 4),
            round(float(rel.min()), 4),
            round(float(rel.mean()), 4),
        )


def add_network_options(
    p: argparse.ArgumentParser, width: int, layers: int, batch_size: int
) -> None:
    """The network's form and its batches on a command line (this trainer's and the small-farm
    expert's), with the given defaults; :func:`check_network_options` refuses bad values."""
    p.add_argument("--width", type=int, default=width)
    p.add_argument("--layers", type=int, default=layers, help="attention blocks over the entries")
    p.add_argument("--heads", type=int, default=4, help="attention heads (divides --width)")
    p.add_argument("--batch-size", type=int, default=batch_size, help="farms a training step")


def add_ensemble_options(p: argparse.ArgumentParser, members: int, what: str) -> None:
    """``--seed``, ``--members``, ``--workers``: an ensemble of ``what`` (this trainer's main
    network, the small-farm expert) and the processes that fit it; checked by
    :func:`check_network_options`."""
    p.add_argument("--seed", type=int, default=0, help="seed of the first network")
    p.add_argument(
        "--members",
        type=int,
        default=members,
        help=f"networks in {what} (seeds --seed, --seed+1, ...; scores averaged)",
    )
    p.add_argument("--workers", type=int, default=1, help="processes fitting the members")


def check_network_options(p: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    """Exit 2 naming the option when :func:`add_network_options`' values cannot build a
    :class:`TableNet` or a batch, or :func:`add_ensemble_options`' an ensemble."""
    if min(a.members, a.workers) < 1:
        p.error("--members/--workers: must be >= 1")
    if min(a.width, a.heads, a.batch_size) < 1 or a.layers < 0:
        p.error("--width/--heads/--batch-size: must be >= 1; --layers: must be >= 0")
    if a.layers and a.width % a.heads:
        p.error(f"--heads: must divide --width ({a.width}), got {a.heads}")


def build_parser() -> argparse.ArgumentParser:
    """The command line of the table network's training (module doc)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--farms", type=int, default=400, help="training farms (seeds from --first)")
    p.add_argument(
        "--small-farms",
        type=int,
        default=400,
        help="more farms from the small-farm stream SMALL (seeds from --first)",
    )
    p.add_argument("--first", type=int, default=0, help="first training seed")
    p.add_argument(
        "--exact-farms",
        type=int,
        default=0,
        help="more small-stream farms, only those the teacher searches exactly",
    )
    p.add_argument("--exact-first", type=int, default=200, help="first seed of --exact-farms")
    p.add_argument("--epochs", type=int, default=60)
    add_network_options(p, width=48, layers=0, batch_size=1)
    add_ensemble_options(p, members=1, what="the main network")
    p.add_argument(
        "--prior", type=float, default=0.0, help="weight of PAS's group ranking (0 = no prior)"
    )
    p.add_argument("--l2", type=float, default=0.01, help="penalty on the correction to PAS")
    p.add_argument(
        "--val-farms",
        type=int,
        default=0,
        help="held-out validation farms (exact) that pick the epoch kept (0 = the last)",
    )
    p.add_argument(
        "--floor",
        type=float,
        default=0.5,
        help="validation: the worst %% below PAS a kept model may be (then the best mean)",
    )
    p.add_argument(
        "--prior-factors",
        default="1",
        help="comma-separated multiples of --prior tried on the validation farms (the kept one: "
        "best by --floor, then the mean); the small farms favour larger ones, but the large "
        "farms, which validation does not see, need the corrections that a larger one damps",
    )
    p.add_argument(
        "--pair-floor",
        type=float,
        default=None,
        help="weigh each ordered pair by what exchanging it costs (%%, by the teacher's "
        "evaluator) plus this floor (default: every pair weighs 1, no costs measured)",
    )
    p.add_argument(
        "--keep-expert",
        default=None,
        help="a model file whose small-farm expert (weights and training record) the output "
        "keeps beside the new main network (default: none; exact_expert adds one)",
    )
    p.add_argument("--cache", default="runs/table-labels", help="teacher labels, one file a farm")
    p.add_argument("--out", default="runs/generalist-table/generalist_table")
    return p


def _kept_expert(p: argparse.ArgumentParser, path: str | None) -> tuple[dict[str, Any], Any]:
    """(the small-farm expert's weights, its training record) in the model file ``path`` (none:
    empty); exit 2 naming the file when it cannot be read or holds no expert."""
    if path is None:
        return {}, None
    try:
        w, meta = load_weights(path)
    except (OSError, ValueError) as e:
        p.error(f"--keep-expert: {e}")
    kept = {k: v for k, v in w.items() if k.startswith(SMALL_EXPERT)}
    if not kept or "small_expert" not in meta:
        p.error(f"--keep-expert: {path} holds no small-farm expert")
    return kept, meta["small_expert"]


def _check(p: argparse.ArgumentParser, a: argparse.Namespace) -> tuple[float, ...]:
    """Refuse bad options (exit 2, naming them); the prior's factors tried."""
    try:
        factors = tuple(float(f) for f in a.prior_factors.split(","))
    except ValueError:
        p.error(f"--prior-factors: comma-separated numbers, got {a.prior_factors!r}")
    if min(factors) <= 0:
        p.error("--prior-factors: every factor must be > 0")
    check_network_options(p, a)
    if a.members > 1 and a.val_farms:
        p.error("--val-farms: selects one network's epoch; use it with --members 1")
    if min(a.prior, a.l2, a.floor, a.val_farms, a.exact_farms, a.exact_first) < 0:
        p.error("--prior/--l2/--floor/--val-farms/--exact-farms/--exact-first: must be >= 0")
    if a.pair_floor is not None and a.pair_floor <= 0:
        p.error(
            f"--pair-floor: must be > 0 (a pair that costs nothing still counts), got {a.pair_floor}"
        )
    if (
        min(a.farms, a.small_farms, a.first) < 0
        or a.first + max(a.farms, a.small_farms) > HELD_OUT_SEEDS.start
    ):
        p.error("--farms/--first: training seeds must lie in 0..HELD_OUT_SEEDS.start-1")
    return factors


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = build_parser()
    a = p.parse_args(argv)
    factors = _check(p, a)
    expert, expert_meta = _kept_expert(p, a.keep_expert)  # fail now, before the labels
    torch.set_num_threads(1)
    t0 = time.process_time()
    cache = Path(a.cache) if a.cache else None
    w = a.pair_floor is not None  # labels with what breaking each pair costs
    data = label_all(range(a.first, a.first + a.farms), cache, weighted=w)
    data += label_all(range(a.first, a.first + a.small_farms), cache, small=True, weighted=w)
    extra = exact_seeds(a.exact_farms, a.exact_first)
    extra = [s for s in extra if not a.first <= s < a.first + a.small_farms]  # no duplicates
    data += label_all(extra, cache, small=True, weighted=w)
    if not data:
        p.error("--farms/--small-farms: at least one training farm is needed")
    label_cpu = float(sum(float(ex["cpu_s"]) for ex in data))
    t1 = time.process_time()
    common = {"epochs": a.epochs, "width": a.width, "log": print, "prior": a.prior, "l2": a.l2,
              "layers": a.layers, "heads": a.heads, "batch_size": a.batch_size,
              "pair_floor": a.pair_floor}  # fmt: skip
    if a.members > 1:  # an ensemble (main.0., main.1., ...): its members fitted in parallel
        nets, fit_cpu = fit_members(data, common, a.seed, a.members, a.workers)
        weights = {f"{MAIN_ENSEMBLE}{i}.{k}": v for i, w in enumerate(nets) for k, v in w.items()}
        prior_kept, val_score = a.prior, None
    else:
        val = Validation(a.val_farms, a.floor) if a.val_farms else None
        net = fit(data, seed=a.seed, validation=val, **common)
        if val is not None and a.prior > 0:
            val.calibrate(net, factors, log=print)
        weights, fit_cpu = net.numpy_weights(), time.process_time() - t1
        prior_kept, val_score = net.prior, getattr(net, "validation_score", None)
    methods = {
        m: int(sum(str(ex["method"]) == m for ex in data)) for m in ("exact", "simulated", "twin")
    }
    meta = {"width": a.width, "trained": {
        "layers": a.layers, "heads": a.heads, "batch_size": a.batch_size,
        "farms": a.farms, "small_farms": a.small_farms, "members": a.members,
        "exact_farms": a.exact_farms, "exact_first": a.exact_first, "first_seed": a.first, "epochs": a.epochs, "seed": a.seed,
        "pair_floor": a.pair_floor, "prior": a.prior, "prior_kept": prior_kept, "l2": a.l2, "val_farms": a.val_farms,
        "floor_pct": a.floor, "validation_share_pas_worst_mean": val_score,
        "teacher": {"exact": EXACT_SEARCH.__dict__, "simulated": SIM_SEARCH.__dict__,
                    "twin_above_servers": TWIN_SERVERS, "farms_by_method": methods},
        "label_cpu_s": round(label_cpu, 1), "fit_cpu_s": round(fit_cpu, 1),
        "run_cpu_s": round(t1 - t0 + fit_cpu, 1)}}  # fmt: skip
    if expert:
        meta["small_expert"] = expert_meta | {"kept_from": str(a.keep_expert)}
    path = save_weights(weights | expert, a.out, **meta)
    print(json.dumps({"model": str(path), **meta["trained"]}, default=str))
    return meta


if __name__ == "__main__":
    main()
