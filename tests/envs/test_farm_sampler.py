"""The wide farm distribution (envs/farm_sampler.py): every draw is a valid farm inside the stated
ranges, reproducible, with each available-set structure and the optional features present."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from serverfarm_gym.envs.config import ConfigError
from serverfarm_gym.envs.farm_sampler import HELD_OUT_SEEDS, FarmDistribution, sample_farm

SEEDS = range(300)


@pytest.fixture(scope="module")
def farms():
    return [sample_farm(s) for s in SEEDS]


def test_draws_lie_in_the_ranges(farms) -> None:
    d = FarmDistribution()
    for f in farms:
        assert d.n_groups[0] <= f.n_groups <= d.n_groups[1]
        assert d.n_job_types[0] <= f.n_job_types <= d.n_job_types[1]
        assert d.n_servers[0] <= f.n_servers <= d.n_servers[1]
        assert all(d.buffer[0] <= g.buffer <= d.buffer[1] for g in f.groups)
        assert all(g.count >= 1 for g in f.groups)
        # every group is used, and the load is the drawn one up to the rates' rounding
        assert f.availability.any(axis=0).all()
        assert d.load[0] * 0.99 <= f.load <= d.load[1] * 1.01


def test_the_family_is_wide(farms) -> None:
    sizes = np.array([f.n_servers for f in farms])
    # log-uniform over [2, 10^4]: each decade about a quarter of the draws (binomial 95% band)
    for lo, hi in ((2, 10), (10, 100), (100, 1000), (1000, 10_001)):
        share = np.mean((sizes >= lo) & (sizes < hi))
        p = np.log(hi / lo) / np.log(10_001 / 2)
        assert abs(share - p) < 1.96 * np.sqrt(p * (1 - p) / len(sizes)) + 0.02
    structures = [f.description.split(": ")[1].split()[0] for f in farms]
    assert set(structures) == {"random", "nested", "overlapping"}
    assert any(not g.is_on_off for f in farms for g in f.groups)  # speed scaling present
    general = [f for f in farms if not f.job_size.is_exponential]
    assert 0.1 < len(general) / len(farms) < 0.3  # general_size_share 0.2
    assert {f.n_groups for f in farms} == set(range(2, 9))


def test_nested_sets_are_nested(farms) -> None:
    nested = [f for f in farms if "nested" in f.description]
    assert nested
    for f in nested:
        sets = sorted((set(jt.groups) for jt in f.job_types), key=len)
        assert all(a <= b for a, b in itertools.pairwise(sets))
        assert sets[-1] == set(range(f.n_groups))


def test_state_dependent_groups_speed_up_and_draw_more() -> None:
    d = FarmDistribution(state_dependent_share=1.0, buffer=(3, 8))
    for s in range(20):
        for g in sample_farm(s, d).groups:
            assert np.all(np.diff(g.service_rate) >= 0) and np.all(np.diff(g.busy_power) >= 0)
            assert min(g.busy_power) > g.idle_power


def test_a_seed_is_a_farm() -> None:
    a, b = sample_farm(7), sample_farm(7)
    assert a.to_dict() == b.to_dict()
    assert sample_farm(8).to_dict() != a.to_dict()
    held = sample_farm(HELD_OUT_SEEDS.start)
    assert held.name == f"sampled-{HELD_OUT_SEEDS.start}"


def test_distribution_round_trips_and_refuses_bad_ranges() -> None:
    d = FarmDistribution(n_groups=(2, 3), set_structures=("nested",))
    assert FarmDistribution.from_dict(d.to_dict()) == d
    with pytest.raises(ConfigError, match=r"n_groups: expected \(low, high\)"):
        FarmDistribution(n_groups=(3, 2))
    with pytest.raises(ConfigError, match="set_structures: unknown"):
        FarmDistribution(set_structures=("ring",))
    with pytest.raises(ConfigError, match="general_size_share: a probability"):
        FarmDistribution(general_size_share=1.5)
    with pytest.raises(ConfigError, match="unknown keys"):
        FarmDistribution.from_dict({"groups": 3})
    with pytest.raises(ConfigError, match="cannot fill"):
        FarmDistribution(n_servers=(1, 1))
