"""Distilling the exact optimum of small farms into the generalist (``train.py --generalist
--oracle-farms N``).

Why: PPO's signal for one decision is weak and noisy (the return of a few hundred decisions of a
stochastic farm), and the generalist's PPO did not learn the overlap effect that makes PAS lose
up to 6.9% on small farms (a job type that may use every group takes the efficient group that
another type, with a poor alternative, needs). On a farm small enough for ``serverfarm_gym.baselines.solvers.efficiency_optimum``
the optimal decision of every state is *known*, without noise. So the generalist is also fitted
to it: for ``oracle_farms`` farms drawn from the training distribution (seeds from the trainer's
own stream, never the held-out range) whose optimum the solver reaches, the group-mode env runs
under the optimal policy (with a share ``explore`` of uniformly random valid actions, so that the
states next to the optimal path are labelled too, as DAgger does), and every visited state is
labelled with the optimal (group, level). The network is then fitted by cross-entropy on its
*anchored* logits (``serverfarm_gym.agents.generalist.network``): where the optimum is PAS the anchor already says so;
where it is not, the network must learn to outweigh the anchor.

Farms the solver cannot reach (large ones) get no labels: there the anchor keeps the network at
PAS unless its own preference is strong (the deviation it learned on small farms carries over
only as far as the tokens, which are size-free, make it look the same).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from serverfarm_gym.agents.generalist.network import pas_anchor
from serverfarm_gym.agents.generalist.train import LABEL_COLUMNS, GeneralistTrainer
from serverfarm_gym.baselines.optimal_policy import OptimalPolicy
from serverfarm_gym.envs.farm_sampler import sample_farm
from serverfarm_gym.envs.scenarios import random_farm

__all__ = ["ORACLE_FAMILIES", "ORACLE_MAX_STATES", "RANDOM_FARM_TRAIN_SEEDS", "distill_optimum",
           "oracle_dataset"]  # fmt: skip

#: the largest aggregated chain the distillation solves (policy iteration): the labelled region
ORACLE_MAX_STATES = 5_000
#: where the distilled farms come from (``family``)
ORACLE_FAMILIES = ("sampler", "mixed")

#: seeds of ``random_farm`` that training may use (``family="mixed"``)
RANDOM_FARM_TRAIN_SEEDS = range(1_000_000, 2_000_000)


def oracle_dataset(
    trainer: GeneralistTrainer,
    n_farms: int,
    steps: int = 256,
    n_envs: int = 8,
    explore: float = 0.2,
    max_states: int = ORACLE_MAX_STATES,
    family: str = "sampler",
) -> dict[str, Any]:
    """States and optimal token actions on ``n_farms`` farms with a reachable optimum.

    Returns ``{"groups", "group_mask", "job", "masks", "target"}`` (numpy arrays, one row per
    decision) plus ``"farms"`` (names used), ``"tried"`` (draws, including those the solver
    refused) and ``"agrees_with_pas"`` (share of labels equal to PAS's anchor action).

    ``family``: ``"sampler"`` (draws of the trainer's farm distribution) or ``"mixed"`` (every
    other farm from ``serverfarm_gym.envs.scenarios.random_farm``, the random_farm family, with seeds in
    :data:`RANDOM_FARM_TRAIN_SEEDS`, far from the seeds 0-99 that the random_farm test farms and the zero-shot
    evaluation use and from the user-farm seeds of docs/training.md).
    """
    if family not in ORACLE_FAMILIES:
        raise ValueError(f"family: one of {ORACLE_FAMILIES}, got {family!r}")
    if n_farms < 1 or steps < 1 or n_envs < 1 or not 0.0 <= explore < 1.0:
        raise ValueError(
            "oracle_dataset: n_farms, steps, n_envs must be >= 1 and explore in [0, 1), got "
            f"{n_farms}, {steps}, {n_envs}, {explore}"
        )
    rng = np.random.default_rng(trainer.cfg.seed + 7)
    cols: dict[str, list[np.ndarray]] = {k: [] for k in LABEL_COLUMNS}
    names, tried = [], 0
    while len(names) < n_farms:
        tried += 1
        if tried > 50 * n_farms:
            raise ValueError(
                f"oracle_farms: only {len(names)} of {tried} draws had a solvable optimum; "
                "ask for fewer farms or raise max_states"
            )
        if family == "mixed" and len(names) % 2 == 1:  # alternate by farms kept
            seed = RANDOM_FARM_TRAIN_SEEDS.start + int(rng.integers(len(RANDOM_FARM_TRAIN_SEEDS)))
            config = random_farm(seed)
        else:
            seed = trainer.next_farm_seed()
            config = sample_farm(seed, trainer.distribution)
        if not config.job_size.is_exponential or config.is_time_varying:
            continue
        try:
            opt = OptimalPolicy(config, "group", seed=seed, method="pi",
                                max_states=max_states)  # fmt: skip
        except ValueError:  # too large for the solver: no labels on this farm
            continue
        farm = trainer._draw_farm_for(config, n_envs, seed)
        trainer.label_states(farm, opt, steps, cols, explore=explore, rng=rng)
        farm.venv.close()
        names.append(config.name)
    data = {k: np.concatenate(v) for k, v in cols.items()}
    anchor = pas_anchor(torch.as_tensor(data["groups"]), torch.as_tensor(data["masks"]),
                        trainer.cfg.max_levels).numpy()  # fmt: skip
    agree = anchor[np.arange(len(data["target"])), data["target"]]
    return data | {"farms": names, "tried": tried, "agrees_with_pas": float(agree.mean())}


def distill_optimum(
    trainer: GeneralistTrainer,
    n_farms: int,
    epochs: int = 8,
    steps: int = 256,
    explore: float = 0.2,
    family: str = "sampler",
) -> dict[str, Any]:
    """Fit ``trainer.net`` to the optimal decisions of ``n_farms`` solvable farms
    (:func:`oracle_dataset`); returns the dataset's size, the fit's accuracy and its cost."""
    t0 = time.process_time()
    data = oracle_dataset(trainer, n_farms, steps=steps, n_envs=trainer.cfg.envs_per_farm,
                          explore=explore, family=family)  # fmt: skip
    t1 = time.process_time()
    x = {k: torch.as_tensor(data[k]) for k in LABEL_COLUMNS}
    valid = x["masks"].any(-1)  # blocking states carry no decision
    x = {k: v[valid] for k, v in x.items()}
    n = len(x["target"])
    acc = trainer.fit_labels(x, epochs, clip=trainer.cfg.max_grad_norm)
    return {"samples": n, "farms": len(data["farms"]), "draws": data["tried"],
            "label_is_pas": data["agrees_with_pas"], "accuracy": acc,
            "data_cpu_s": t1 - t0, "fit_cpu_s": time.process_time() - t1}  # fmt: skip
