"""The relaxation bound (baselines/solvers/bounds.py) is an upper bound on every admissible
policy."""

from __future__ import annotations

import numpy as np
import pytest

from serverfarm_gym.baselines.solvers.bounds import BoundTooLarge, bound_lp_size, relaxation_bound
from serverfarm_gym.baselines.solvers.efficiency_optimum import estimate_size, solve
from serverfarm_gym.envs.config import farm_from_dict
from serverfarm_gym.envs.scenarios import load_preset, random_farm
from serverfarm_gym.evaluation.references import reference_values
from tests.helpers.exact import REFERENCE, random_small_farm, reference_farm, wide_farm_dict

# exact optimal efficiencies from an independent solver (reference-farms data)
EXACT_OPTIMUM = {
    "tiny": 0.3289309341181227,
    "small-1": 0.593175867673168,
    "small-2": 0.26601006909497354,
    "small-3": 0.35437184448997305,
    "speed-scaling": 0.3624534239921697,
}


@pytest.mark.parametrize("name", sorted(EXACT_OPTIMUM))
@pytest.mark.parametrize("tight", [True, False])
def test_bound_dominates_exact_optimum(name, tight):
    assert relaxation_bound(name, tight=tight).efficiency >= EXACT_OPTIMUM[name] * (1 - 1e-9)


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_tight_bound_between_optimum_and_loose_bound(name):
    cfg = reference_farm(name)
    opt = REFERENCE[name][2]
    tight = relaxation_bound(cfg).efficiency
    loose = relaxation_bound(cfg, tight=False).efficiency
    # the tight LP is the loose one plus valid constraints: never above it, never below the
    # optimum (relative slack 1e-9: HiGHS's optimality tolerance on values of order 1)
    assert opt * (1 - 1e-9) <= tight <= loose * (1 + 1e-9)


def test_tight_bound_closes_most_of_small_1_gap():
    # small-1's loose relaxation blocks most of the overloaded type with the efficient groups
    # nearly idle, which no admissible policy can do; the blocking cuts remove that (4.1% -> 1.1%)
    opt = EXACT_OPTIMUM["small-1"]
    gap = {t: 1 - opt / relaxation_bound("small-1", tight=t).efficiency for t in (False, True)}
    assert gap[False] > 0.04
    assert gap[True] < 0.012


def _random_tiny_farms(n: int, max_states: int = 400) -> list:
    out, seed = [], 0
    while len(out) < n:
        c = random_small_farm(seed, max_count=2, max_buffer=2)
        seed += 1
        if estimate_size(c)[0] <= max_states:
            out.append(c)
    return out


@pytest.mark.parametrize("cfg", _random_tiny_farms(60), ids=lambda c: c.name)
def test_tight_bound_is_valid_on_random_tiny_farms(cfg):
    """Brute-force validity check of the added cuts: exact admissible optimum <= tight bound <=
    loose bound on many random farms (loads 0.3-1.3, overlapping available sets, speed scaling)."""
    opt = solve(cfg).value
    tight = relaxation_bound(cfg).efficiency
    loose = relaxation_bound(cfg, tight=False).efficiency
    assert opt * (1 - 1e-9) <= tight <= loose * (1 + 1e-9), (opt, tight, loose)


def test_tight_flag_is_checked():
    with pytest.raises(ValueError, match="tight"):
        relaxation_bound("tiny", tight="yes")


@pytest.mark.parametrize("seed", range(20))
def test_bound_dominates_exact_optimum_on_random_farms(seed):
    cfg = random_farm(seed, servers_per_group=(1, 2), buffer=(1, 2))
    opt = solve(cfg).value
    tight = relaxation_bound(cfg).efficiency
    assert opt * (1 - 1e-9) <= tight <= relaxation_bound(cfg, tight=False).efficiency * (1 + 1e-9)


@pytest.mark.parametrize("tight", [True, False])
def test_relaxed_solution_is_consistent(tight):
    cfg = load_preset("paper-100")
    r = relaxation_bound(cfg, tight=tight)
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
    assert relaxation_bound(cfg.scaled(100), tight=tight).n_variables == r.n_variables
    assert r.meta["tight"] is tight


def test_tight_solution_satisfies_the_blocking_cuts():
    # small-1 is overloaded: the cuts bind there
    cfg = load_preset("small-1")
    r = relaxation_bound(cfg)
    lam = cfg.arrival_rates.mean(axis=0)
    blocked = lam - r.group_flows.sum(axis=1)
    for j in range(cfg.n_job_types):
        for k in np.flatnonzero(cfg.availability[j]):
            g = cfg.groups[k]
            assert blocked[j] <= lam[j] * r.occupancy[k, g.buffer] / g.count + 1e-7
    assert r.blocked_share == pytest.approx(1 - r.group_flows.sum() / lam.sum())


@pytest.mark.parametrize("tight", [True, False])
def test_bound_is_invariant_under_proportional_scaling(tight):
    # on tiny the arrival-rate caps do not bind (they are not scale-free: E[count at level n]
    # grows with the farm while the cap's rate does too, so they loosen as the farm grows, e.g.
    # on small-1); the servers-conserved and balance rows and the blocking cuts are scale-free
    cfg = load_preset("tiny")
    assert relaxation_bound(cfg.scaled(50), tight=tight).efficiency == pytest.approx(
        relaxation_bound(cfg, tight=tight).efficiency, rel=1e-7
    )


def test_single_server_bound_is_exact():
    # one server, one type: the only admissible policy accepts whenever possible, and the
    # relaxation may additionally refuse; for an on/off server refusing never helps, so the bound
    # equals the M/M/1/B efficiency
    cfg = load_preset("tiny").to_dict()
    cfg["groups"] = [cfg["groups"][0] | {"count": 1}]
    cfg["job_types"] = [{"name": "a", "arrival_rate": 0.7, "groups": ["slow"]}]
    c = farm_from_dict(cfg)
    rho, B = 0.7, 3
    p = np.array([rho**n for n in range(B + 1)])
    p /= p.sum()
    thr = 1.0 * (1 - p[0])
    power = 1.0 * p[0] + 2.0 * (1 - p[0])
    for tight in (True, False):
        assert relaxation_bound(c, tight=tight).efficiency == pytest.approx(thr / power, rel=1e-7)


# ---- size: merged job types, counted size, limits ---------------------------------------------
@pytest.mark.parametrize("name", ["tiny", "small-1", "pas-gap", "paper-100", "overlap-100"])
@pytest.mark.parametrize("tight", [True, False])
def test_bound_lp_size_counts_the_lp_that_is_built(name, tight):
    r = relaxation_bound(name, tight=tight)
    assert bound_lp_size(load_preset(name), tight) == (r.n_variables, r.n_constraints)


@pytest.mark.parametrize("tight", [True, False])
def test_job_types_with_the_same_groups_are_merged_without_changing_the_bound(tight):
    # split every type of small-1 into three with the same groups and rates 1/2, 1/3, 1/6 of it:
    # the same farm for every admissible policy, and the same relaxation once merged
    base = load_preset("small-1")
    d = base.to_dict()
    d["job_types"] = [
        {**jt, "name": f"{jt['name']}-{i}", "arrival_rate": jt["arrival_rate"] * w}
        for jt in d["job_types"]
        for i, w in enumerate((1 / 2, 1 / 3, 1 / 6))
    ]
    split = farm_from_dict(d)
    r0, r = relaxation_bound(base, tight=tight), relaxation_bound(split, tight=tight)
    assert r.efficiency == pytest.approx(r0.efficiency, rel=1e-9)
    assert r.n_variables == r0.n_variables
    # each part gets its share of its type's flows
    np.testing.assert_allclose(r.group_flows.reshape(-1, 3, base.n_groups).sum(axis=1),
                               r0.group_flows, rtol=1e-7, atol=1e-9)  # fmt: skip
    np.testing.assert_allclose(r.group_flows[0::3], 3 * r.group_flows[2::3], rtol=1e-7, atol=1e-12)


def test_many_job_types_give_an_lp_of_the_distinct_group_sets():
    # 20,000 job types on 10 distinct sets: the LP of 10 types (it used to hold one flow per
    # type and level, and 1,000 types on one set already took a minute)
    many = farm_from_dict(wide_farm_dict(10, 20_000, 3))
    few = farm_from_dict(wide_farm_dict(10, 10, 3))
    r = relaxation_bound(many)
    assert r.n_variables == relaxation_bound(few).n_variables
    assert r.efficiency == pytest.approx(relaxation_bound(few).efficiency, rel=1e-9)
    assert r.group_flows.shape == (20_000, 10)


@pytest.mark.slow
@pytest.mark.parametrize("shape", [(10, 100_000, 2), (10_000, 1, 10_000)])
def test_the_documented_extremes_are_solved(shape):
    # 100,000 job types, or 10,000 groups (MAX_LEVELS single-level groups): solved, not hung
    r = relaxation_bound(farm_from_dict(wide_farm_dict(*shape)))
    assert 0 < r.efficiency < np.inf


def test_an_lp_over_the_size_limit_is_refused_before_it_is_built():
    cfg = farm_from_dict(wide_farm_dict(1000, 1000, 2))
    nv, _ = bound_lp_size(cfg)
    with pytest.raises(BoundTooLarge, match=rf"{nv:,} variables .* above the limit of 5,000"):
        relaxation_bound(cfg, max_variables=5_000)


def test_an_lp_over_the_time_limit_is_stopped_with_a_named_error():
    # 6,000 variables: seconds of HiGHS time, far beyond the 1 ms limit
    cfg = farm_from_dict(wide_farm_dict(1000, 1000, 2))
    with pytest.raises(BoundTooLarge, match=r"did not finish within 0.001 s"):
        relaxation_bound(cfg, time_limit_s=0.001)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "10"])
def test_the_limits_are_checked(bad):
    with pytest.raises(ValueError, match="max_variables"):
        relaxation_bound("tiny", max_variables=bad)
    if not isinstance(bad, (int, float)) or isinstance(bad, bool) or bad <= 0:
        with pytest.raises(ValueError, match="time_limit_s"):
            relaxation_bound("tiny", time_limit_s=bad)


def test_evaluation_skips_a_refused_bound_with_the_reason(monkeypatch):
    monkeypatch.setattr("serverfarm_gym.baselines.solvers.bounds.MAX_BOUND_VARIABLES", 10)
    refs = reference_values(load_preset("tiny"), compute_optimum=False)
    assert refs["upper_bound"] is None
    assert "above the limit of 10 variables" in refs["upper_bound_reason"]
