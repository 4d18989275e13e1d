"""Exact policy-gradient tuning of the small-farm expert: the network learns from the
efficiency itself, not from a teacher's table.

Why: the expert (:mod:`serverfarm_gym.agents.table_generalist.exact_expert`) imitates ``best-priority``'s tables,
but many tables are nearly as good on a farm and the search returns one of them, so the labels
of similar farms disagree, and a ranking loss spends the network's capacity on orders that cost
nothing. On the farms the expert reads (a per-server chain of at most ``small.max_states``
states) the objective itself is exact and differentiable, and needs no label.

The soft table and its exact gradient are :mod:`serverfarm_gym.agents.table_generalist.polish`'s
(:func:`~serverfarm_gym.agents.table_generalist.polish.soft_efficiency`); here the scores are
the networks' (the average of the expert's members, the way the policy reads them), so they
need no labels to be tuned. The tuner (:func:`tune`) ascends the mean of ``log E`` over
training farms (each farm weighs the same in relative terms) with Adam, a few epochs from the
distilled expert. None of its tunings is in the shipped model (experiments/README.md, "Variants
tried and not shipped").

Farms: the small-farm stream's training seeds that the exact teacher takes
(:func:`serverfarm_gym.agents.table_generalist.labels.exact_seeds`), with ``--sampled-farms`` the default sampler's
training seeds and with ``--random-farms`` ``random_farm``'s training seeds (from 1,000,000;
the random_farm test farms are its seeds from 0), each that the expert reads (exponential sizes, no
sleep, a chain of at most ``small.max_states`` states): no labels, so any number of farms costs
only their solves, a few milliseconds each. Held-out seeds are never drawn.

    python -m experiments.studies.exact_tune --farms 12000 --epochs 2 \\
        --model agents/table_generalist/models/generalist_table.npz \\
        --out runs/tuned/generalist_table

writes the model with its small-farm expert tuned (its main network is kept bit for bit) and records the
tuning in the sidecar (``small_expert.exact_tune``). With ``--keep-start`` the tuned networks
are written beside the start's instead (``small.5.`` .. after ``small.0.`` .. ``small.4.``),
and the expert averages all of them: the distilled and the tuned members' errors differ.
``--pas-weight W`` weighs a farm whose table (the policy's own, measured on the per-server
chain, as the evaluation measures it) is below PAS's by ``1 + W`` in its step.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np
import torch

from serverfarm_gym.agents.table_generalist.labels import SMALL, exact_seeds
from serverfarm_gym.agents.table_generalist.polish import argmax_efficiency, soft_efficiency
from serverfarm_gym.agents.table_generalist.table_net import (
    SMALL_EXPERT,
    load_weights,
    members,
    merge_expert,
    save_weights,
    table_features,
    table_from_scores,
)
from serverfarm_gym.agents.table_generalist.table_torch import TableNet
from serverfarm_gym.agents.token_generalist.oracle import RANDOM_FARM_TRAIN_SEEDS
from serverfarm_gym.baselines.solvers.aggregated import AggregatedSpace
from serverfarm_gym.baselines.solvers.ctmc import evaluate_policy
from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.farm_sampler import HELD_OUT_SEEDS, sample_farm
from serverfarm_gym.envs.observation import level_offsets
from serverfarm_gym.envs.scenarios import random_farm
from serverfarm_gym.evaluation.exact import exact_table_solvable

__all__ = [
    "TuneFarm",
    "expert_nets",
    "farm_gradient",
    "main",
    "random_seeds",
    "sampled_seeds",
    "tie_gradient",
    "tune",
]


def tie_gradient(
    space: AggregatedSpace, z: np.ndarray, action: np.ndarray, gap: float, tau: float
) -> np.ndarray:
    """d(-tie loss)/dz: for each two entries next to each other in the table's order whose
    scores are less than ``gap`` apart, the exact log efficiency of the table ``z`` against the
    table with the two exchanged (d), and a logistic loss ``|d| softplus(-sign(d) (z_a - z_b) /
    tau)`` that pulls the two apart on the better side.

    Why: the soft table can gain by mixing two entries whose scores nearly tie (a randomised
    policy is richer than a table), and its gradient then holds them at the mix, where the
    table (the argmax) falls on either side; the exchange is measured on the tables themselves.
    """
    z = np.asarray(z, dtype=np.float64)
    ranked = action[np.argsort(-z[action], kind="stable")]
    grad = np.zeros_like(z)
    base: float | None = None
    for a, b in itertools.pairwise(ranked):
        diff = z[a] - z[b]
        if diff >= gap:
            continue
        if base is None:
            base = math.log(argmax_efficiency(space, z))
        swapped = z.copy()
        swapped[a], swapped[b] = z[b], z[a]
        d = base - math.log(argmax_efficiency(space, swapped))  # > 0: the order is the better
        if d == 0.0:
            continue
        sign = math.copysign(1.0, d)
        pull = abs(d) / tau / (1.0 + math.exp(min(sign * diff / tau, 50.0)))
        grad[a] += sign * pull
        grad[b] -= sign * pull
    return grad


@dataclass
class TuneFarm:
    """A training farm: its tokens (as the policy reads them), the action of each token and
    its aggregated chain."""

    seed: int
    x: torch.Tensor
    group: torch.Tensor
    action: np.ndarray
    space: AggregatedSpace
    config: FarmConfig
    level: np.ndarray
    _pas: float | None = field(default=None, init=False, repr=False)  # pas_efficiency's

    @classmethod
    def of(cls, seed: int, config: FarmConfig) -> TuneFarm:
        x, group, level = table_features(config)
        return cls(
            seed=seed,
            x=torch.as_tensor(np.asarray(x, dtype=np.float32)),
            group=torch.as_tensor(group),
            action=level_offsets(config)[group] + level,
            space=AggregatedSpace(config),
            config=config,
            level=level,
        )

    def pas_efficiency(self) -> float:
        """PAS's exact efficiency on the farm (the per-server chain; computed once)."""
        if self._pas is None:
            self._pas = float(evaluate_policy(self.config, "pas").efficiency)
        return self._pas

    def table_efficiency(self, scores: np.ndarray) -> float:
        """The exact efficiency of the policy's own table of the token ``scores`` (packing runs
        tied, the per-server chain): what the evaluation measures, unlike the argmax in the
        aggregated chain that the soft table tends to."""
        table = table_from_scores(self.config, scores, self.group.numpy(), self.level)
        return float(evaluate_policy(self.config, table).efficiency)

    def scores_to_actions(self, scores: np.ndarray) -> np.ndarray:
        z = np.zeros(self.space.n_actions)  # entries no type uses are never available
        z[self.action] = scores
        return z


def _readable_seeds(make: Callable[[int], FarmConfig], seeds: range, n: int, cap: int) -> list[int]:
    out = []
    for s in seeds:
        if len(out) == n:
            break
        c = make(s)
        if exact_table_solvable(c, cap):
            out.append(s)
    return out


def sampled_seeds(n: int, max_states: int, first: int = 0) -> list[int]:
    """The first ``n`` training seeds from ``first`` of the default sampler whose farm the
    small-farm expert reads and the exact chain takes (exponential sizes, no sleep, at most
    ``max_states`` per-server states)."""
    return _readable_seeds(sample_farm, range(first, HELD_OUT_SEEDS.start), n, max_states)


def random_seeds(n: int, max_states: int) -> list[int]:
    """The first ``n`` seeds of ``random_farm`` that training may use
    (:data:`serverfarm_gym.agents.token_generalist.oracle.RANDOM_FARM_TRAIN_SEEDS`) whose farm the expert reads and
    the exact chain takes: another family than the sampler's (1-3 servers a group, buffers 1-3,
    constant-rate servers)."""
    return _readable_seeds(random_farm, RANDOM_FARM_TRAIN_SEEDS, n, max_states)


def expert_nets(w: dict[str, np.ndarray]) -> list[TableNet]:
    """The small-farm expert's networks of a model's weights, as torch modules."""
    nets = [TableNet.from_numpy(w, m) for m in members(w, SMALL_EXPERT)]
    if not nets:
        raise ValueError("model: it has no small-farm expert (small.* weights) to tune")
    return nets


def _batch_scores(nets: Sequence[TableNet], batch: Sequence[TuneFarm]) -> torch.Tensor:
    """The mean of the networks' scores on the batch's stacked tokens (each farm apart)."""
    groups, farms, offset = [], [], 0
    for i, f in enumerate(batch):
        groups.append(f.group + offset)
        farms.append(torch.full((len(f.group),), i))
        offset += int(f.group.max()) + 1
    x, group, farm = torch.cat([f.x for f in batch]), torch.cat(groups), torch.cat(farms)
    which = farm if len(batch) > 1 else None
    return torch.stack([n.correction(x, group, which) for n in nets]).mean(0)


def farm_gradient(
    farm: TuneFarm, scores: np.ndarray, tau: float, tie_gap: float = 0.0, pas_weight: float = 0.0
) -> tuple[float, np.ndarray]:
    """(log E, its gradient in the token ``scores``) of ``farm``'s soft table, as :func:`tune`
    takes a step: with ``tie_gap`` > 0 the near ties' term (:func:`tie_gradient`), with
    ``pas_weight`` > 0 the gradient times ``1 + pas_weight`` when the table itself is below
    PAS."""
    z = farm.scores_to_actions(scores)
    eff, dz = soft_efficiency(farm.space, z, tau)
    dz = dz / eff  # d log E
    if tie_gap > 0:
        dz += tie_gradient(farm.space, z, farm.action, tie_gap, tau)
    if pas_weight > 0 and farm.table_efficiency(scores) < farm.pas_efficiency():
        dz = dz * (1.0 + pas_weight)
    return math.log(eff), dz[farm.action]


def tune(
    nets: Sequence[TableNet],
    farms: Sequence[TuneFarm],
    epochs: int = 2,
    lr: float = 1e-4,
    tau: float = 0.3,
    batch_size: int = 16,
    seed: int = 0,
    log: Callable[[str], None] | None = None,
    on_epoch: Callable[[int, list[float]], None] | None = None,
    tie_gap: float = 0.0,
    pas_weight: float = 0.0,
) -> list[float]:
    """Ascend the mean ``log E`` of the soft tables over ``farms`` (Adam on all the networks'
    parameters, ``batch_size`` farms a step, shuffled each epoch by ``seed``); returns each
    epoch's mean ``log E`` (measured on the way, before each step). ``on_epoch(epoch,
    history)`` is called after each epoch (the command saves the model there). ``tie_gap`` >
    0: near ties are settled on the tables themselves (:func:`tie_gradient`). ``pas_weight``
    > 0: a farm whose table (:meth:`TuneFarm.table_efficiency`) is below PAS's weighs ``1 +
    pas_weight`` in its step (the mean log efficiency alone does not see PAS, and trades a
    farm where PAS is near the optimum for a small gain elsewhere)."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    opt = torch.optim.Adam([p for n in nets for p in n.parameters()], lr=lr)
    history = []
    for epoch in range(epochs):
        total, t0 = 0.0, time.process_time()
        order = rng.permutation(len(farms))
        for i in range(0, len(order), batch_size):
            batch = [farms[j] for j in order[i : i + batch_size]]
            scores = _batch_scores(nets, batch)
            values = scores.detach().numpy()
            grads, offset = [], 0
            for f in batch:
                n = len(f.action)
                log_eff, dz = farm_gradient(
                    f, values[offset : offset + n], tau, tie_gap, pas_weight
                )
                grads.append(dz)
                total += log_eff
                offset += n
            loss = -(scores * torch.as_tensor(np.concatenate(grads))).sum() / len(batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
        history.append(total / len(farms))
        if log:
            log(
                f"epoch {epoch}: mean log E {history[-1]:.6f} ({time.process_time() - t0:.0f} CPU-s)"
            )
        if on_epoch:
            on_epoch(epoch, history)
    return history


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--farms", type=int, default=12000, help="small-stream training farms")
    p.add_argument("--sampled-farms", type=int, default=0,
                   help="default-sampler training farms the expert reads")  # fmt: skip
    p.add_argument("--random-farms", type=int, default=0,
                   help="random_farm training farms (seeds from 1,000,000) the expert reads")  # fmt: skip
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--tau", type=float, default=0.3, help="temperature of the soft table")
    p.add_argument("--tie-gap", type=float, default=0.0,
                   help="settle entries whose scores are nearer than this on the tables (0: off)")  # fmt: skip
    p.add_argument("--pas-weight", type=float, default=0.0,
                   help="weight added to a farm whose table is below PAS's (0: off)")  # fmt: skip
    p.add_argument("--keep-start", action="store_true",
                   help="write the tuned networks beside the start's (scores averaged over all)")  # fmt: skip
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", default="agents/table_generalist/models/generalist_table.npz",
                   help="model whose small-farm expert is tuned (its main network is kept)")  # fmt: skip
    p.add_argument("--out", default="runs/generalist-table/generalist_table")
    return p


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = build_parser()
    a = p.parse_args(argv)
    if a.epochs < 1 or a.batch_size < 1 or min(a.farms, a.sampled_farms, a.random_farms) < 0:
        p.error("--epochs/--batch-size: must be >= 1; --farms/--sampled-farms/--random-farms: "
                "must be >= 0")  # fmt: skip
    if a.farms + a.sampled_farms + a.random_farms < 1:
        p.error("--farms/--sampled-farms/--random-farms: at least one training farm is needed")
    if not (a.lr > 0 and a.tau > 0) or min(a.tie_gap, a.pas_weight) < 0:
        p.error("--lr/--tau: must be > 0; --tie-gap/--pas-weight: must be >= 0")
    w, meta = load_weights(a.model)  # fail now, naming the file
    try:
        nets = expert_nets(w)
    except ValueError as e:
        p.error(f"--model: {e}")
    cap = int(np.asarray(w[SMALL_EXPERT + "max_states"]).reshape(-1)[0])
    torch.set_num_threads(1)
    t0 = time.process_time()
    small = exact_seeds(a.farms, 0)
    sampled = sampled_seeds(a.sampled_farms, cap)
    farms = [TuneFarm.of(s, sample_farm(s, SMALL)) for s in small]
    farms += [TuneFarm.of(s, sample_farm(s)) for s in sampled]
    randoms = random_seeds(a.random_farms, cap)
    farms += [TuneFarm.of(s, random_farm(s)) for s in randoms]
    base_meta = {k: v for k, v in meta.items() if k != "features"}
    out: dict[str, Any] = {}

    def save(epoch: int, history: list[float]) -> None:
        # after every epoch, atomically: an interrupted run keeps the epochs it finished; with
        # --keep-start the start's members keep their places and the tuned ones follow them
        tuned = merge_expert(w, [net.numpy_weights() for net in nets], cap, a.keep_start)
        record = {"farms": len(small), "sampled_farms": len(sampled),
                  "random_farms": len(randoms), "epochs": epoch + 1,
                  "lr": a.lr, "tau": a.tau, "tie_gap": a.tie_gap, "pas_weight": a.pas_weight, "keep_start": a.keep_start, "batch_size": a.batch_size, "seed": a.seed,
                  "mean_log_eff": [round(h, 6) for h in history],
                  "cpu_s": round(time.process_time() - t0, 1)}  # fmt: skip
        expert = dict(meta.get("small_expert") or {}) | {"exact_tune": record}
        out.update(base_meta | {"small_expert": expert})
        path = save_weights(tuned, a.out, **out)
        print(json.dumps({"model": str(path), **record}))

    tune(nets, farms, a.epochs, a.lr, a.tau, a.batch_size, a.seed, print, save, a.tie_gap,
         a.pas_weight)  # fmt: skip
    return out


if __name__ == "__main__":
    main()
