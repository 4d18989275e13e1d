"""Exact CTMC evaluation of fixed policies (baselines/solvers/ctmc.py)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from serverfarm_gym.baselines.solvers.ctmc import (
    GeneratorSolver,
    evaluate_policy,
    n_full_states,
    occupancy_distribution,
)
from serverfarm_gym.baselines.solvers.efficiency_optimum import AggregatedSpace, evaluate_aggregated
from serverfarm_gym.envs.config import farm_from_dict
from tests.helpers.exact import random_small_farm, reference_farm

# exact PAS efficiencies (smallest-index ties) of the reference farms, copied from the shared
# reference data
PAS_REFERENCE = {
    "tiny": 0.3273379092816369,
    "public-1": 0.5910345757882287,
    "public-2": 0.26458510460282,
    "public-3": 0.3540995212186525,
}


def one_server(mu, eps, idle, B, lam):
    return farm_from_dict(
        {
            "groups": [{"name": "s", "count": 1, "service_rate": mu, "busy_power": eps,
                        "idle_power": idle, "buffer": B}],
            "job_types": [{"name": "x", "arrival_rate": lam, "groups": ["s"]}],
        }
    )  # fmt: skip


def birth_death(lam: float, mu: np.ndarray) -> np.ndarray:
    """Stationary law of the M/M(n)/1/B birth-death chain (mu[n-1] = rate at level n)."""
    p = np.concatenate([[1.0], np.cumprod(lam / np.asarray(mu))])
    return p / p.sum()


@pytest.mark.parametrize("name", sorted(PAS_REFERENCE))
def test_pas_reference_efficiencies(name):
    r = evaluate_policy(reference_farm(name), "pas")
    assert r.efficiency == pytest.approx(PAS_REFERENCE[name], rel=1e-9)
    assert r.efficiency == pytest.approx(r.throughput / r.power, rel=1e-14)
    assert r.pi.sum() == pytest.approx(1.0) and r.pi.min() >= 0


def test_pas_table_and_function_forms_agree():
    cfg = reference_farm("tiny")
    table = np.repeat(cfg.group_efficiency[:, None], cfg.max_buffer + 1, axis=1)

    def pas_rule(occ, j):
        ok = (occ < cfg.buffers[cfg.server_group]) & cfg.server_availability[j]
        if not ok.any():
            return -1
        return int(np.argmax(np.where(ok, cfg.group_efficiency[cfg.server_group], -np.inf)))

    a = evaluate_policy(cfg, table)
    b = evaluate_policy(cfg, pas_rule)
    c = evaluate_policy(cfg, "priority", table=table)
    for other in (b, c):
        np.testing.assert_allclose(other.pi, a.pi, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(other.blocking, a.blocking, rtol=1e-12)


@pytest.mark.parametrize("B", [1, 3, 5])
def test_single_server_is_mm1b(B):
    lam, mu = 0.8, 1.3
    cfg = one_server(mu, 2.0, 0.5, B, lam)
    p = birth_death(lam, np.full(B, mu))
    r = evaluate_policy(cfg, "random")
    np.testing.assert_allclose(r.occupancy_dist[0, : B + 1], p, rtol=1e-12)
    assert r.blocking[0] == pytest.approx(p[-1], rel=1e-12)  # PASTA
    assert r.throughput == pytest.approx(lam * (1 - p[-1]), rel=1e-12)  # flow balance
    assert r.power == pytest.approx(0.5 * p[0] + 2.0 * (1 - p[0]), rel=1e-12)
    assert r.mean_occupancy[0] == pytest.approx(p @ np.arange(B + 1), rel=1e-12)


def test_single_server_speed_scaling_is_birth_death():
    mu, eps = [1.0, 1.7, 2.2], [2.0, 3.0, 4.5]
    cfg = one_server(mu, eps, 0.7, 3, 1.5)
    p = birth_death(1.5, np.array(mu))
    dist = occupancy_distribution(cfg, "pas")
    np.testing.assert_allclose(dist[0], p, rtol=1e-12)
    r = evaluate_policy(cfg, "pas")
    assert r.power == pytest.approx(p @ np.array([0.7, *eps]), rel=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_random_policy_matches_the_aggregated_chain(seed):
    # uniform over non-full available servers is symmetric within a group: in histogram terms
    # it picks level b of group k with probability m_kb / (non-full available servers)
    cfg = random_small_farm(seed, max_count=2, max_buffer=2)
    full = evaluate_policy(cfg, "random")
    space = AggregatedSpace(cfg)
    counts = np.stack([space.counts_of(s) for s in range(space.n_states)])  # [N, K, Bmax+1]
    m = counts[:, space.act_k, space.act_b].astype(float)  # [N, A]
    probs = np.where(space.valid, m[:, None, :], 0.0)
    tot = probs.sum(axis=2, keepdims=True)
    probs = np.divide(probs, tot, out=np.zeros_like(probs), where=tot > 0)
    eff, _ = evaluate_aggregated(space, probs)
    assert full.efficiency == pytest.approx(eff, rel=1e-10)


def test_blocking_is_probability_all_available_servers_full():
    cfg = reference_farm("public-3")
    r = evaluate_policy(cfg, "pas")
    full = r.states >= cfg.buffers[cfg.server_group][None, :]
    for j in range(cfg.n_job_types):
        all_full = np.all(full | ~cfg.server_availability[j][None, :], axis=1)
        assert r.blocking[j] == pytest.approx(r.pi[all_full].sum(), rel=1e-12)


def test_too_many_states_refused_with_count_and_limit():
    cfg = reference_farm("tiny").scaled(3)  # 4^12 states
    n = n_full_states(cfg)
    assert n == 4**12
    with pytest.raises(ValueError, match=rf"{n} states.*max_states=1000"):
        evaluate_policy(cfg, "pas", max_states=1000)


def test_bad_inputs_are_refused():
    cfg = reference_farm("tiny")
    with pytest.raises(ValueError, match="exponential"):
        evaluate_policy(cfg.with_job_size({"distribution": "deterministic"}))
    with pytest.raises(ValueError, match="table"):
        evaluate_policy(cfg, "priority")
    with pytest.raises(ValueError, match="shape"):
        evaluate_policy(cfg, np.zeros((3, 4)))
    with pytest.raises(ValueError, match="must return an available, non-full server"):
        evaluate_policy(cfg, lambda occ, j: 0)  # server 0 is not available to type 1
    with pytest.raises(ValueError, match="unknown policy"):
        evaluate_policy(cfg, "jsq")


def _random_generator(n: int, seed: int) -> sp.csr_matrix:
    """A random sparse generator that reaches state 0 from everywhere (one recurrent class)."""
    rng = np.random.default_rng(seed)
    rows = np.concatenate([np.arange(1, n), rng.integers(0, n, 6 * n)])
    cols = np.concatenate([np.arange(n - 1), rng.integers(0, n, 6 * n)])
    vals = rng.uniform(0.1, 3.0, rows.size)
    keep = rows != cols
    Q = sp.csr_matrix((vals[keep], (rows[keep], cols[keep])), shape=(n, n))
    return (Q - sp.diags(np.asarray(Q.sum(axis=1)).ravel())).tocsr()


@pytest.mark.parametrize("seed", range(3))
def test_direct_and_iterative_solvers_agree(seed):
    Q = _random_generator(700, seed)  # (random graphs fill in badly under LU: keep it small)
    r = np.random.default_rng(seed + 10).normal(size=Q.shape[0])
    d = GeneratorSolver(Q, method="direct")
    i = GeneratorSolver(Q, method="iterative")
    pd, pi_ = d.stationary(), i.stationary()
    np.testing.assert_allclose(pi_, pd, rtol=1e-8, atol=1e-14)
    assert np.abs(Q.T @ pd).max() < 1e-12 * np.abs(Q).max()
    # relative values of the centred reward agree up to a constant
    hc = r - pd @ r
    hd, hi = d.relative_values(hc), i.relative_values(hc)
    np.testing.assert_allclose(hd - hd.mean(), hi - hi.mean(), atol=1e-8 * np.abs(hd).max())
    assert np.abs(Q @ hd + hc).max() < 1e-9 * np.abs(hc).max()
