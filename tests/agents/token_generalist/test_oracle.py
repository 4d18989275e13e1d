"""Distilling the exact optimum into the generalist (agents/token_generalist/oracle.py): the labels are
the optimal policy's own decisions, the fit moves the network towards them, farms stay drawn
outside the held-out range."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from serverfarm_gym.agents.token_generalist import GeneralistConfig, GeneralistTrainer  # noqa: E402
from serverfarm_gym.agents.token_generalist.oracle import distill_optimum, oracle_dataset  # noqa: E402
from serverfarm_gym.envs.farm_sampler import HELD_OUT_SEEDS, sample_farm  # noqa: E402

SMALL = {"n_servers": [2, 12]}


def _trainer() -> GeneralistTrainer:
    return GeneralistTrainer(GeneralistConfig(anchor=3.0, envs_per_farm=4, batch_size=256,
                                              distribution=SMALL))  # fmt: skip


def test_labels_are_the_optimal_decisions_of_training_farms() -> None:
    tr = _trainer()
    d = oracle_dataset(tr, 2, steps=16, n_envs=4, explore=0.0)
    assert len(d["farms"]) == 2 and len(d["target"]) == 2 * 16 * 4
    assert 0.0 <= d["agrees_with_pas"] <= 1.0
    # every label is a valid token action; the farms come from the training seeds only
    assert d["masks"][np.arange(len(d["target"])), d["target"]].all()
    seeds = [int(s) for s in tr._seeds[: tr._next_seed]]
    assert all(s not in HELD_OUT_SEEDS for s in seeds)
    assert set(d["farms"]) <= {sample_farm(s, tr.distribution).name for s in seeds}


def test_distillation_fits_the_optimum() -> None:
    tr = _trainer()
    st = distill_optimum(tr, 3, epochs=150, steps=32)
    assert st["farms"] == 3 and st["samples"] > 0
    # the optimum differs from PAS somewhere on most farms; the fit must at least reproduce
    # the labels better than PAS's anchor alone does
    assert st["accuracy"] > st["label_is_pas"]
    assert st["accuracy"] > 0.9


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="n_farms, steps, n_envs must be >= 1"):
        oracle_dataset(_trainer(), 0)
