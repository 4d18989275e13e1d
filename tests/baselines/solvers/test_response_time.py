"""Exact mean response time (Little's law) of the per-server and aggregated chains."""

from __future__ import annotations

import numpy as np
import pytest

from serverfarm_gym.baselines.solvers.aggregated import (
    AggregatedSpace,
    aggregated_response_time,
    evaluate_aggregated,
)
from serverfarm_gym.baselines.solvers.ctmc import evaluate_policy
from serverfarm_gym.baselines.solvers.efficiency_optimum import solve_lp
from serverfarm_gym.envs.config import farm_from_dict
from tests.helpers.exact import random_small_farm, reference_farm


def one_server(mu: float, B: int, lam: float):
    return farm_from_dict(
        {
            "groups": [{"name": "s", "count": 1, "service_rate": mu, "busy_power": 2.0,
                        "idle_power": 0.5, "buffer": B}],
            "job_types": [{"name": "x", "arrival_rate": lam, "groups": ["s"]}],
        }
    )  # fmt: skip


def mm1b(lam: float, mu: float, B: int) -> tuple[float, float]:
    """(E[N], E[T]) of the M/M/1/B queue in closed form (rho != 1)."""
    rho = lam / mu
    en = rho / (1 - rho) - (B + 1) * rho ** (B + 1) / (1 - rho ** (B + 1))
    p_full = (1 - rho) * rho**B / (1 - rho ** (B + 1))
    return en, en / (lam * (1 - p_full))


@pytest.mark.parametrize(("lam", "B"), [(0.8, 1), (0.8, 4), (2.0, 3), (1.1, 12)])
def test_per_server_chain_is_mm1b(lam, B):
    mu = 1.3
    r = evaluate_policy(one_server(mu, B, lam), "pas")
    en, et = mm1b(lam, mu, B)
    assert r.mean_jobs == pytest.approx(en, rel=1e-10)
    assert r.mean_response_time == pytest.approx(et, rel=1e-10)
    # flow balance: the admitted rate is the departure rate (unit mean sizes)
    assert r.accepted_rate == pytest.approx(r.throughput, rel=1e-10)


@pytest.mark.parametrize(("lam", "B"), [(0.8, 4), (2.0, 3)])
def test_aggregated_chain_is_mm1b(lam, B):
    space = AggregatedSpace(one_server(1.3, B, lam))
    act = np.where(space.has_vacancy, np.argmax(space.valid, axis=2), -1)
    _, pi = evaluate_aggregated(space, act)
    en, _, et = aggregated_response_time(space, pi)
    assert (en, et) == pytest.approx(mm1b(lam, 1.3, B), rel=1e-10)


def test_large_buffer_tends_to_mm1():
    lam, mu = 0.7, 1.0
    r = evaluate_policy(one_server(mu, 80, lam), "pas")
    assert r.mean_response_time == pytest.approx(1 / (mu - lam), rel=1e-9)


@pytest.mark.parametrize("seed", range(4))
def test_per_server_and_aggregated_agree(seed):
    """The uniformly random policy is symmetric: both chains give the same E[N] and E[T]."""
    cfg = random_small_farm(seed)
    r = evaluate_policy(cfg, "random")
    space = AggregatedSpace(cfg)
    # uniform over servers, not over (k, b) pairs: weight each action by its server count
    counts = np.stack([space.counts_of(s) for s in range(space.n_states)])  # [N, K, Bmax+1]
    m = counts[:, space.act_k, space.act_b]  # [N, A]
    w = space.valid * m[:, None, :]
    probs = w / np.maximum(w.sum(axis=2, keepdims=True), 1)
    _, pi = evaluate_aggregated(space, probs)
    en, acc, et = aggregated_response_time(space, pi)
    assert en == pytest.approx(r.mean_jobs, rel=1e-9)
    assert acc == pytest.approx(r.accepted_rate, rel=1e-9)
    assert et == pytest.approx(r.mean_response_time, rel=1e-9)


def test_lp_optimum_reports_its_response_time():
    sol = solve_lp(reference_farm("tiny"))
    _, pi = evaluate_aggregated(sol.space, sol.policy())
    assert sol.mean_response_time == pytest.approx(aggregated_response_time(sol.space, pi)[2])
    assert np.isfinite(sol.mean_response_time) and sol.mean_response_time > 0
