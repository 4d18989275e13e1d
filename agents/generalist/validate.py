"""Validation of the generalist on held-out farms, and the choice of its anchor from it.

The validation farms (:func:`validation_farms`) are the first draws of ``serverfarm_gym.envs.farm_sampler``
from :data:`HELD_OUT_SEEDS` (never used by training) whose per-server chain is small enough for
an exact evaluation; :func:`validate` gives the exact gain over PAS on each, so a validation
curve has no sampling noise. :func:`select_anchor` picks the PAS anchor on them: the highest mean
gain among the candidates that keep at least ``min_share`` of the farms at PAS or above, else the
most conservative (largest) anchor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from serverfarm_gym.agents.generalist.network import TokenPolicyNet
from serverfarm_gym.agents.generalist.train import GeneralistTrainer
from serverfarm_gym.baselines.pas import PASPolicy
from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.farm_sampler import HELD_OUT_SEEDS, sample_farm
from serverfarm_gym.evaluation.efficiency import measure
from serverfarm_gym.evaluation.exact import exact_solvable

__all__ = ["select_anchor", "validate", "validation_farms", "with_anchor"]


def validation_farms(n: int, max_states: int = 5_000) -> list[FarmConfig]:
    """The first ``n`` held-out draws whose per-server chain is small enough to solve exactly
    (a few milliseconds each), the validation set of every run."""
    out, seed = [], HELD_OUT_SEEDS.start
    while len(out) < n:
        config = sample_farm(seed)
        if config.job_size.is_exponential and exact_solvable(config, max_states):
            out.append(config)
        seed += 1
    return out


def with_anchor(net: TokenPolicyNet, anchor: float) -> TokenPolicyNet:
    """The same weights under another PAS anchor (a prior added at decision time)."""
    out = TokenPolicyNet(replace(net.cfg, anchor=float(anchor)))
    out.load_state_dict(net.state_dict())
    return out.eval()


def validate(trainer: GeneralistTrainer, farms: Sequence[FarmConfig]) -> dict[str, float]:
    """Exact efficiency against PAS on each validation farm: mean and worst relative gain (%)."""
    gains = []
    for config in farms:
        gen = measure(
            trainer.policy(config, "server"), config, action_mode="server", method="exact"
        )
        pas = measure(PASPolicy(config), config, action_mode="server", method="exact")
        gains.append(100.0 * (gen.efficiency - pas.efficiency) / pas.efficiency)
    g = np.array(gains)
    return {"mean_vs_pas_pct": float(g.mean()), "worst_vs_pas_pct": float(g.min()),
            "share_at_least_pas": float(np.mean(g >= -1e-7))}  # fmt: skip


def select_anchor(
    trainer: GeneralistTrainer,
    farms: Sequence[FarmConfig],
    anchors: Sequence[float],
    min_share: float,
) -> tuple[float, list[dict[str, float]]]:
    """The anchor with the highest mean validation gain over PAS among those that keep at least
    ``min_share`` of ``farms`` at PAS's efficiency or above (the largest anchor if none does):
    a larger anchor deviates from PAS only where the network is more confident, so it trades
    mean gain for safety; this picks the point of that trade-off on held-out farms."""
    rows = []
    net = trainer.net
    try:  # validate() measures trainer.net: lend it each anchored copy, then restore it
        for a in anchors:
            trainer.net = with_anchor(net, a)
            rows.append({"anchor": float(a), **validate(trainer, farms)})
    finally:
        trainer.net = net
    ok = [r for r in rows if r["share_at_least_pas"] >= min_share - 1e-12]
    if not ok:
        return max(r["anchor"] for r in rows), rows
    # ties (e.g. anchors that never deviate on these farms) go to the larger, safer anchor
    return max(ok, key=lambda r: (round(r["mean_vs_pas_pct"], 9), r["anchor"]))["anchor"], rows
