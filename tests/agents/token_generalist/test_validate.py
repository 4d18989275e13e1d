"""Validation sets and the anchor's choices (agents/token_generalist/validate.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from serverfarm_gym.agents.token_generalist import GeneralistConfig, GeneralistTrainer
from serverfarm_gym.agents.token_generalist import validate as sel
from serverfarm_gym.envs.farm_sampler import HELD_OUT_SEEDS
from serverfarm_gym.evaluation.exact import exact_solvable


def test_validation_farms_are_held_out_and_exactly_solvable() -> None:
    farms = sel.validation_farms(5)
    assert len(farms) == 5 and len({f.name for f in farms}) == 5
    for f in farms:
        assert int(f.name.split("-")[1]) in HELD_OUT_SEEDS
        assert exact_solvable(f, 5_000) and f.job_size.is_exponential
    assert [f.name for f in sel.validation_farms(5)] == [f.name for f in farms]


def test_anchor_selection_keeps_the_required_share_at_pas() -> None:
    tr = GeneralistTrainer(GeneralistConfig(anchor=4.0))
    farms = sel.validation_farms(3)
    # the untrained head is flat: with no anchor its argmax is the first valid action (below
    # PAS somewhere); any anchor makes it PAS, every farm at PAS exactly
    chosen, rows = sel.select_anchor(tr, farms, [0.0, 50.0], 0.95)
    assert chosen == 50.0 and [r["anchor"] for r in rows] == [0.0, 50.0]
    assert rows[1]["share_at_least_pas"] == 1.0 and rows[1]["mean_vs_pas_pct"] == 0.0
    assert rows[0]["share_at_least_pas"] < 1.0
    assert tr.net.cfg.anchor == 4.0  # the trainer's own network is left as it was
    assert sel.with_anchor(tr.net, 7.0).cfg.anchor == 7.0
