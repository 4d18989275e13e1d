"""The relaxation bound (baselines/bounds.py) is an upper bound on every admissible policy."""

from __future__ import annotations

import numpy as np
import pytest

from baselines.bounds import relaxation_bound
from envs.scenarios import load_preset, random_farm

# exact optimal efficiencies from an independent solver (reference-farms data)
EXACT_OPTIMUM = {
    "tiny": 0.3289309341181227,
    "small-1": 0.593175867673168,
    "small-2": 0.26601006909497354,
    "small-3": 0.35437184448997305,
    "speed-scaling": 0.3624534239921697,
}


@pytest.mark.parametrize("name", sorted(EXACT_OPTIMUM))
def test_bound_dominates_exact_optimum(name):
    assert relaxation_bound(name).efficiency >= EXACT_OPTIMUM[name] * (1 - 1e-9)


@pytest.mark.parametrize("seed", range(20))
def test_bound_dominates_exact_optimum_on_random_farms(seed):
    optimum = pytest.importorskip("baselines.optimum")
    cfg = random_farm(seed, servers_per_group=(1, 2), buffer=(1, 2))
    opt = optimum.solve(cfg).value
    assert relaxation_bound(cfg).efficiency >= opt * (1 - 1e-9)


def test_relaxed_solution_is_consistent():
    cfg = load_preset("paper-100")
    r = relaxation_bound(cfg)
    counts = np.array([g.count for g in cfg.groups], dtype=float)
    np.testing.assert_allclose(r.occupancy.sum(axis=1), counts, rtol=1e-7)
    assert r.efficiency == pytest.approx(r.throughput / r.power, rel=1e-7)
    # accepted flow never exceeds the offered rate of a type, and only uses its groups
    lam = cfg.arrival_rates.mean(axis=0)
    assert np.all(r.group_flows.sum(axis=1) <= lam * (1 + 1e-7))
    assert np.all(r.group_flows[~cfg.availability] == 0)
    # throughput equals the accepted flow (level-crossing balance)
    assert r.throughput == pytest.approx(r.group_flows.sum(), rel=1e-7)
    # size independent of the number of servers
    assert relaxation_bound(cfg.scaled(100)).n_variables == r.n_variables


def test_bound_is_invariant_under_proportional_scaling():
    cfg = load_preset("tiny")
    assert relaxation_bound(cfg.scaled(50)).efficiency == pytest.approx(
        relaxation_bound(cfg).efficiency, rel=1e-7
    )


def test_single_server_bound_is_exact():
    # one server, one type: the only admissible policy accepts whenever possible, and the
    # relaxation may additionally refuse; for an on/off server refusing never helps, so the bound
    # equals the M/M/1/B efficiency
    cfg = load_preset("tiny").to_dict()
    cfg["groups"] = [cfg["groups"][0] | {"count": 1}]
    cfg["job_types"] = [{"name": "a", "arrival_rate": 0.7, "groups": ["slow"]}]
    from envs.config import farm_from_dict

    c = farm_from_dict(cfg)
    rho, B = 0.7, 3
    p = np.array([rho**n for n in range(B + 1)])
    p /= p.sum()
    thr = 1.0 * (1 - p[0])
    power = 1.0 * p[0] + 2.0 * (1 - p[0])
    assert relaxation_bound(c).efficiency == pytest.approx(thr / power, rel=1e-7)
