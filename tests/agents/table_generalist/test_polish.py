"""A farm's table polished by exact gradient ascent (serverfarm_gym.agents.table_generalist.polish):
the soft table's exact gradient against finite differences, its limit (the argmax table) and the
polish's ascent from a poor table."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from serverfarm_gym.agents.table_generalist.labels import SMALL, exact_seeds
from serverfarm_gym.agents.table_generalist.polish import (
    argmax_efficiency,
    polish,
    soft_efficiency,
    soft_policy,
)
from serverfarm_gym.baselines.solvers.aggregated import AggregatedSpace, evaluate_aggregated
from serverfarm_gym.envs.farm_sampler import sample_farm


def _space(i: int = 2) -> AggregatedSpace:
    return AggregatedSpace(sample_farm(exact_seeds(i + 1, 0)[i], SMALL))


@pytest.mark.parametrize("tau", [0.3, 2.0])
def test_the_gradient_is_the_derivative_of_the_exact_efficiency(tau: float) -> None:
    space = _space()
    z = np.random.default_rng(0).normal(size=space.n_actions)
    eff, grad = soft_efficiency(space, z, tau)
    # the efficiency is the stationary one of the randomised policy
    assert eff == pytest.approx(
        evaluate_aggregated(space, soft_policy(space, z, tau))[0], rel=1e-12
    )
    h = 1e-5  # central differences: error O(h^2) ~ 1e-10 against gradients ~ 1e-3
    fd = np.array([
        (soft_efficiency(space, z + h * e, tau)[0] - soft_efficiency(space, z - h * e, tau)[0])
        / (2 * h)
        for e in np.eye(space.n_actions)
    ])  # fmt: skip
    assert np.abs(grad).max() > 1e-4
    np.testing.assert_allclose(grad, fd, atol=1e-8)


def test_a_table_per_job_type_has_its_exact_gradient_too() -> None:
    space = _space()
    n_types = len(space.lam)
    assert n_types > 1  # else a table per type is the one table
    z = np.random.default_rng(2).normal(size=(n_types, space.n_actions))
    _, grad = soft_efficiency(space, z, 0.5)
    assert grad.shape == z.shape and np.abs(grad).max() > 1e-4
    h = 1e-5
    fd = np.zeros_like(z)
    for j in range(n_types):
        for a in range(space.n_actions):
            e = np.zeros_like(z)
            e[j, a] = h
            fd[j, a] = (
                soft_efficiency(space, z + e, 0.5)[0] - soft_efficiency(space, z - e, 0.5)[0]
            ) / (2 * h)
    np.testing.assert_allclose(grad, fd, atol=1e-8)
    # the same table for every type is the one table; its gradient is the types' sum
    one = z[0]
    e1, g1 = soft_efficiency(space, one, 0.5)
    e2, g2 = soft_efficiency(space, np.tile(one, (n_types, 1)), 0.5)
    assert e1 == pytest.approx(e2, rel=1e-13)
    np.testing.assert_allclose(g1, g2.sum(axis=0), atol=1e-14)
    # the cold limit: each type to its own best available entry
    ranks = np.stack(
        [np.random.default_rng(j).permutation(space.n_actions) for j in range(n_types)]
    )
    choice = np.where(
        space.has_vacancy,
        np.where(space.valid, ranks[None].astype(float), -np.inf).argmax(axis=2),
        -1,
    )
    assert argmax_efficiency(space, ranks) == pytest.approx(
        evaluate_aggregated(space, choice)[0], rel=1e-12
    )
    with pytest.raises(ValueError, match="z: scores of shape"):
        soft_efficiency(space, np.zeros(space.n_actions + 1), 0.5)


def test_polish_climbs_from_a_poor_table_and_keeps_the_best_seen() -> None:
    space = _space()
    z = -np.arange(space.n_actions, dtype=float)  # an arbitrary order
    start = argmax_efficiency(space, z)
    got, eff = polish(space, z, steps=30)
    assert eff == argmax_efficiency(space, got) and eff >= start
    assert polish(space, z, steps=0)[1] == start
    with pytest.raises(ValueError, match="steps/lr/tau"):
        polish(space, z, steps=-1)


def test_a_cold_soft_table_is_the_argmax_table() -> None:
    space = _space()
    z = np.random.default_rng(1).permutation(space.n_actions).astype(float)  # distinct scores
    choice = np.where(space.has_vacancy, np.where(space.valid, z, -np.inf).argmax(axis=2), -1)
    want = evaluate_aggregated(space, choice)[0]
    assert soft_efficiency(space, z, 0.01)[0] == pytest.approx(want, rel=1e-12)
    assert soft_efficiency(space, z, 3.0)[0] != pytest.approx(want, rel=1e-6)
    with pytest.raises(ValueError, match="tau"):
        soft_efficiency(space, z, 0.0)
