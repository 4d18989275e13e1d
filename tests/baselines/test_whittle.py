"""Whittle index: formula vs brute force, equality with PAS on on/off farms, state dependence."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from serverfarm_gym.baselines.pas import PASPolicy, pas_table
from serverfarm_gym.baselines.whittle import (
    WhittlePolicy,
    indexability,
    induced_ordering,
    level_marginal_costs,
    offered_rates,
    simulated_efficiency,
    whittle_table,
)
from serverfarm_gym.envs.config import farm_from_dict
from tests.helpers.env import group_obs, server_obs, valid_group_mask, valid_server_mask
from tests.helpers.farms import random_dyadic_farm, random_occupancy


def brute_force_R_A(mu, eps, lam, eta, m):
    """(R, A, throughput) of threshold m from the stationary law of the generator on {0..m}."""
    Q = np.zeros((m + 1, m + 1))
    for n in range(m + 1):
        if n < m:
            Q[n, n + 1] = lam
        if n > 0:
            Q[n, n - 1] = mu[n]
        Q[n, n] = -Q[n].sum()
    M = np.vstack([Q.T, np.ones(m + 1)])
    rhs = np.zeros(m + 2)
    rhs[-1] = 1.0
    pi = np.linalg.lstsq(M, rhs, rcond=None)[0]
    R = pi @ (mu[: m + 1] - eta * eps[: m + 1])
    A = lam * (1.0 - pi[m]) if m > 0 else 0.0
    return R, A, pi @ mu[: m + 1]


def test_index_matches_brute_force_marginal_productivity() -> None:
    rng = np.random.default_rng(10)
    for _ in range(40):
        B = int(rng.integers(1, 7))
        mu = np.concatenate([[0.0], np.cumsum(rng.uniform(0.2, 2.0, B))])
        idle = rng.uniform(0.0, 1.0)
        eps = np.concatenate([[idle], idle + np.cumsum(rng.uniform(0.1, 2.0, B))])
        lam = rng.uniform(0.2, 4.0)
        eta = rng.uniform(0.1, 2.0)
        c, log_dA = level_marginal_costs(mu, eps, lam)
        RA = [brute_force_R_A(mu, eps, lam, eta, m) for m in range(B + 1)]
        for m in range(1, B + 1):  # flow balance: throughput == acceptance rate
            assert RA[m][2] == pytest.approx(RA[m][1], rel=1e-10)
        for n in range(B):
            dR = RA[n + 1][0] - RA[n][0]
            dA = RA[n + 1][1] - RA[n][1]
            assert np.exp(log_dA[n]) == pytest.approx(dA, rel=1e-8)
            assert 1.0 - eta * c[n] == pytest.approx(dR / dA, rel=1e-8, abs=1e-10)


def test_on_off_index_is_constant_and_rate_free() -> None:
    mu = np.array([0.0, 2.0, 2.0, 2.0])
    eps = np.array([1.0, 3.0, 3.0, 3.0])
    for lam in (0.0, 0.1, 1.0, 30.0):
        c, _ = level_marginal_costs(mu, eps, lam)
        np.testing.assert_allclose(c, 1.0, rtol=1e-12)


def on_off_farm(rng: np.random.Generator):
    return random_dyadic_farm(rng, state_dependent=0.0, max_count=5)


def test_whittle_table_on_off_closed_form_and_same_ordering_as_pas() -> None:
    rng = np.random.default_rng(11)
    for _ in range(10):
        cfg = on_off_farm(rng)
        for eta in (0.05, 0.4, 1.7):
            t = whittle_table(cfg, eta)
            np.testing.assert_array_equal(t, 1.0 - eta / pas_table(cfg))
            np.testing.assert_array_equal(
                induced_ordering(cfg, t), induced_ordering(cfg, pas_table(cfg))
            )


@pytest.mark.parametrize("mode", ["server", "group"])
def test_whittle_decisions_equal_pas_on_on_off_farms(mode: str) -> None:
    rng = np.random.default_rng(12)
    n_ties = 0
    for _ in range(8):
        cfg = on_off_farm(rng)
        eff = cfg.group_efficiency
        n_ties += len(eff) - len(set(eff.tolist()))
        wp = WhittlePolicy(cfg, mode, eta=float(rng.uniform(0.1, 2.0)))
        pp = PASPolicy(cfg, mode)
        obs, masks = [], []
        for _ in range(150):
            occ = random_occupancy(rng, cfg)
            j = int(rng.integers(cfg.n_job_types))
            if mode == "server":
                obs.append(server_obs(cfg, occ, j))
                valid = valid_server_mask(cfg, occ, j)
            else:
                obs.append(group_obs(cfg, occ, j))
                valid = valid_group_mask(cfg, occ, j)
            mask = valid & (rng.random(valid.size) < 0.7)
            masks.append(mask if mask.any() else valid)
        obs_a, masks_a = np.stack(obs), np.stack(masks)
        np.testing.assert_array_equal(
            wp.predict(obs_a, action_masks=masks_a)[0], pp.predict(obs_a, action_masks=masks_a)[0]
        )
    assert n_ties > 0  # the farms exercised exact efficiency ties


def sd_farm(arrival_rate: float = 1.0):
    """a: on/off, PAS efficiency 1. b: two speeds, PAS efficiency 2/(4-1) = 2/3 < 1."""
    return farm_from_dict(
        {
            "name": "speed-scaling",
            "groups": [
                {"name": "a", "count": 2, "service_rate": 1.0, "busy_power": 2.0, "idle_power": 1.0, "buffer": 2},
                {"name": "b", "count": 2, "service_rate": [1.0, 2.0], "busy_power": [1.5, 4.0],
                 "idle_power": 1.0, "buffer": 2},
            ],
            "job_types": [{"name": "x", "arrival_rate": arrival_rate, "groups": ["a", "b"]}],
        }
    )  # fmt: skip


def test_state_dependent_index_depends_on_level_and_differs_from_pas() -> None:
    cfg = sd_farm()
    eta = 0.5
    t = whittle_table(cfg, eta)
    # c_b(0) = (1.5-1)/1; c_b(1) = (1*(4-1) + 1*(4-1.5)) / (1*2 + 1*(2-1)) with weights (1, lam/mu(1))
    np.testing.assert_allclose(t[1, :2], [1 - eta * 0.5, 1 - eta * 5.5 / 3], rtol=1e-12)
    assert t[0, 0] == t[0, 1] == 1 - eta * 1.0
    # Whittle: idle b > a > b at level 1.  PAS: a > b at every level.
    assert t[1, 0] > t[0, 0] > t[1, 1]
    assert not np.array_equal(induced_ordering(cfg, t), induced_ordering(cfg, pas_table(cfg)))
    w, p = WhittlePolicy(cfg, eta=eta), PASPolicy(cfg)
    empty = server_obs(cfg, np.array([0, 0, 0, 0]), 0)
    assert int(w.predict(empty)[0]) == 2 and int(p.predict(empty)[0]) == 0
    b_busy = server_obs(cfg, np.array([0, 0, 1, 1]), 0)
    assert int(w.predict(b_busy)[0]) == 0 and int(p.predict(b_busy)[0]) == 0
    assert indexability(cfg)["b"]["indexable"]


def test_ordering_does_not_depend_on_eta() -> None:
    rng = np.random.default_rng(13)
    for _ in range(15):
        cfg = random_dyadic_farm(rng, state_dependent=0.7)
        ref = induced_ordering(cfg, whittle_table(cfg, 0.3))
        for eta in (0.01, 1.0, 5.0):
            np.testing.assert_array_equal(induced_ordering(cfg, whittle_table(cfg, eta)), ref)


def non_indexable_farm():
    # c(0) = (3-1)/1 = 2 > c(1) = (1*2.2 + 1*0.2)/(1*3 + 1*2) = 0.48 at lam = 1
    return farm_from_dict(
        {
            "name": "economies-of-scale",
            "groups": [{"name": "g", "count": 1, "service_rate": [1.0, 3.0], "busy_power": [3.0, 3.2],
                        "idle_power": 1.0, "buffer": 2}],
            "job_types": [{"name": "x", "arrival_rate": 1.0, "groups": ["g"]}],
        }
    )  # fmt: skip


def test_non_indexable_group_modes() -> None:
    cfg = non_indexable_farm()
    eta = 0.5
    rep = indexability(cfg)["g"]
    assert not rep["indexable"]
    np.testing.assert_allclose(rep["c"], [2.0, 0.48], rtol=1e-12)
    with pytest.raises(ValueError, match="not indexable"):
        whittle_table(cfg, eta, on_violation="raise")
    raw = whittle_table(cfg, eta, on_violation="ignore")
    np.testing.assert_allclose(raw[0, :2], [1 - eta * 2.0, 1 - eta * 0.48], rtol=1e-12)
    # ironed: one pooled index, the hull slope (R(2) - R(0)) / (A(2) - A(0)) of the brute force
    mu, eps = cfg.mu_table[0], cfg.power_table[0]
    R0, A0, _ = brute_force_R_A(mu, eps, 1.0, eta, 0)
    R2, A2, _ = brute_force_R_A(mu, eps, 1.0, eta, 2)
    ironed = whittle_table(cfg, eta)
    np.testing.assert_allclose(ironed[0, :2], (R2 - R0) / (A2 - A0), rtol=1e-10)
    with pytest.warns(RuntimeWarning, match="not indexable"):
        whittle_table(cfg, eta, on_violation="warn")
    assert WhittlePolicy(cfg, eta=eta).non_indexable == ["g"]


def test_index_undefined_when_acceptance_drops() -> None:
    cfg = farm_from_dict(
        {
            "name": "slower-when-loaded",
            "groups": [{"name": "g", "count": 1, "service_rate": [2.0, 1.0], "busy_power": 3.0,
                        "idle_power": 1.0, "buffer": 2}],
            "job_types": [{"name": "x", "arrival_rate": 4.0, "groups": ["g"]}],
        }
    )  # fmt: skip
    with pytest.raises(ValueError, match="acceptance rate does not increase"):
        whittle_table(cfg, 0.5)


def test_argument_validation() -> None:
    cfg = sd_farm()
    for eta in (0.0, -1.0, np.nan):
        with pytest.raises(ValueError, match="eta"):
            whittle_table(cfg, eta)
    with pytest.raises(ValueError, match="on_violation"):
        whittle_table(cfg, 0.5, on_violation="nope")
    with pytest.raises(ValueError, match="arrival_rate"):
        whittle_table(cfg, 0.5, arrival_rate="nope")
    with pytest.raises(ValueError, match="arrival_rate"):
        whittle_table(cfg, 0.5, arrival_rate=-1.0)


def test_offered_rates() -> None:
    cfg = farm_from_dict(
        {
            "name": "rates",
            "groups": [
                {"name": "a", "count": 2, "service_rate": 1.0, "busy_power": 2.0, "idle_power": 1.0, "buffer": 1},
                {"name": "b", "count": 1, "service_rate": [1.0, 2.0], "busy_power": 3.0, "idle_power": 1.0,
                 "buffer": 2},
            ],
            "job_types": [
                {"name": "x", "arrival_rate": [1.0, 3.0], "groups": ["a", "b"]},  # mean 2
                {"name": "y", "arrival_rate": 0.5, "groups": ["b"]},
            ],
        }
    )  # fmt: skip
    np.testing.assert_allclose(offered_rates(cfg, "full"), [2.0, 2.5])
    # share: x splits 2 over capacities 2*1 and 1*2 -> 1 per group -> a: 1/2 per server, b: 1 + 0.5
    np.testing.assert_allclose(offered_rates(cfg, "share"), [0.5, 1.5])
    np.testing.assert_allclose(offered_rates(cfg, [1.0, 2.0]), [1.0, 2.0])


def test_fixed_point_iteration_with_stub_evaluator() -> None:
    cfg = sd_farm()
    calls = []

    def evaluate(table: np.ndarray) -> float:
        calls.append(table.copy())
        return 0.37

    pol = WhittlePolicy(cfg, evaluate=evaluate)
    # the ranking does not depend on eta, so one evaluation settles it
    assert len(calls) == 1
    assert pol.eta == 0.37
    assert len(pol.iterations) == 1 and not pol.iterations[0]["ordering_changed"]
    assert pol.iterations[0]["efficiency"] == 0.37
    np.testing.assert_array_equal(pol.table, whittle_table(cfg, 0.37))


@pytest.mark.skipif(
    importlib.util.find_spec("serverfarm_gym.envs.simulator") is None,
    reason="needs serverfarm_gym.envs.simulator",
)
def test_fixed_point_with_simulator_matches_pas_on_on_off_farm() -> None:
    """Identical decisions + the same seed -> bit-identical simulated efficiency."""
    cfg = on_off_farm(np.random.default_rng(14))
    pol = WhittlePolicy(cfg, n_epochs=20_000, sim_seed=3)
    assert len(pol.iterations) == 1
    assert pol.eta == simulated_efficiency(cfg, pas_table(cfg), n_epochs=20_000, seed=3)


@pytest.mark.skipif(
    importlib.util.find_spec("serverfarm_gym.baselines.solvers.ctmc") is None,
    reason="needs serverfarm_gym.baselines.solvers.ctmc",
)
def test_exact_ctmc_whittle_equals_pas_reference_and_beats_pas_when_state_dependent() -> None:
    from serverfarm_gym.baselines.solvers.ctmc import evaluate_policy

    # reference-farms.yaml "tiny": exact PAS efficiency from an independent solver
    tiny = farm_from_dict(
        {
            "name": "tiny",
            "groups": [
                {"name": "slow", "count": 2, "service_rate": 1.0, "busy_power": 2.0, "idle_power": 1.0, "buffer": 3},
                {"name": "fast", "count": 2, "service_rate": 2.0, "busy_power": 5.0, "idle_power": 1.0, "buffer": 3},
            ],
            "job_types": [
                {"name": "web", "arrival_rate": 1.5, "groups": ["slow", "fast"]},
                {"name": "gpu", "arrival_rate": 1.0, "groups": ["fast"]},
            ],
        }
    )  # fmt: skip
    eff = evaluate_policy(tiny, WhittlePolicy(tiny, eta=0.3).priority_table()).efficiency
    assert eff == pytest.approx(0.3273379092816369, rel=1e-12)
    # speed-scaling farm: the level-aware index uses group b's efficient first level; PAS does not
    for lam in (0.3, 1.0, 4.0):
        cfg = sd_farm(lam)
        pas = evaluate_policy(cfg, pas_table(cfg)).efficiency
        whittle = evaluate_policy(cfg, WhittlePolicy(cfg, eta=0.5).priority_table()).efficiency
        assert whittle > 1.02 * pas, (lam, whittle, pas)
