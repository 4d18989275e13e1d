"""serverfarm_gym.envs.scenarios.random_farms: seeded random farms in the paper's style."""

from __future__ import annotations

import pytest

from serverfarm_gym.envs.config import ConfigError, JobSizeConfig
from serverfarm_gym.envs.scenarios import random_farm


def test_random_farm_is_seeded_and_valid() -> None:
    a, b = random_farm(7), random_farm(7)
    assert a == b and a != random_farm(8)
    c = random_farm(3, n_groups=3, n_job_types=2, servers_per_group=2, buffer=2, load=0.8)
    assert c.n_groups == 3 and c.n_job_types == 2 and c.n_servers == 6
    assert c.load == pytest.approx(0.8, rel=2e-3)  # rates are rounded to 4 digits
    assert c.availability.any(axis=0).all() and c.availability.any(axis=1).all()
    p = random_farm(3, job_size={"distribution": "pareto", "alpha": 2.5})
    assert p.size_of(0) == JobSizeConfig("pareto", alpha=2.5)
    with pytest.raises(ConfigError, match="n_groups"):
        random_farm(0, n_groups=0)
