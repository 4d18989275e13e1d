"""The shipped generalist (agents/generalist/models/generalist.pt): it loads by name, acts on farms it never
saw in both action modes, and beats the random dispatcher (paired, common random numbers)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from agents.generalist import SHIPPED_MODEL, GeneralistPolicy
from baselines.registry import make_policy
from envs.farm_sampler import HELD_OUT_SEEDS, sample_farm
from envs.server_farm import ServerFarmEnv
from evaluation.measure import Window, consecutive_seeds, measure
from evaluation.stats import mean_ci


def test_the_model_ships_small_and_loads_by_name() -> None:
    assert SHIPPED_MODEL.is_file() and SHIPPED_MODEL.stat().st_size < 4 * 2**20
    # the network alone on a held-out 8,390-server draw ("generalist-checked" would first run
    # its paired check there: minutes; tests/agents/generalist/test_guard.py covers the check)
    policy = make_policy("generalist", "paper-100", "group")
    assert isinstance(policy, GeneralistPolicy)
    for mode in ("server", "group"):
        config = sample_farm(HELD_OUT_SEEDS.start + 3)
        p = make_policy("generalist", config, mode)
        env = ServerFarmEnv(config, action_mode=mode, warmup_epochs=200)
        obs, _ = env.reset(seed=0)
        for _ in range(200):
            m = env.action_masks()
            a, _ = p.predict(obs, action_masks=m)
            assert m[a]
            obs, *_ = env.step(a)


@pytest.mark.parametrize("scenario", ["small-1", "pas-gap"])
def test_it_beats_random(scenario: str) -> None:
    cfg = scenario_config(scenario)
    kw = {"window": Window.for_farm(cfg, 4_000, pas_warmup=True), "action_mode": "group",
          "seeds": consecutive_seeds(123, 8), "method": "vector"}  # fmt: skip
    gen = measure(make_policy("generalist", scenario, "group"), cfg, **kw)
    rnd = measure(make_policy("random", scenario, "group", seed=0), cfg, **kw)
    diff, half = mean_ci(gen.per_replication - rnd.per_replication, 0.95)
    assert diff - half > 0, (gen.efficiency, rnd.efficiency)


def scenario_config(name: str):
    from envs.scenarios import load_scenario

    return load_scenario(name)


def test_mask_is_respected_everywhere() -> None:
    config = sample_farm(HELD_OUT_SEEDS.start + 11)
    p = make_policy("generalist", config, "group")
    rng = np.random.default_rng(0)
    env = ServerFarmEnv(config, action_mode="group", warmup_epochs=100)
    obs, _ = env.reset(seed=1)
    for _ in range(100):
        m = env.action_masks() & (rng.random(env.action_space.n) < 0.7)  # a thinner mask
        if not m.any():
            m = env.action_masks()
        a, _ = p.predict(obs, action_masks=m)
        assert m[a]
        obs, *_ = env.step(a)
