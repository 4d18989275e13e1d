"""Domain randomisation as one env (envs/sampled_farm_env.py): fixed spaces over changing farms,
reproducible from the seed, held-out farms apart from training ones."""

from __future__ import annotations

import numpy as np
import pytest

from serverfarm_gym.envs.farm_sampler import HELD_OUT_SEEDS
from serverfarm_gym.envs.rllib import RLlibSampledFarmEnv
from serverfarm_gym.envs.sampled_farm_env import SampledFarmTokenEnv

SMALL = {"n_servers": [2, 50]}


def _run(env: SampledFarmTokenEnv, seed: int, episodes: int) -> list[tuple[str, float]]:
    out = []
    obs, info = env.reset(seed=seed)
    for _ in range(episodes):
        total = 0.0
        while True:
            assert env.observation_space.contains(obs)
            m = env.action_masks()
            obs, r, term, trunc, info2 = env.step(int(np.flatnonzero(m)[-1]))
            total += r
            assert not info2["invalid_action"] and info2["farm"] == info["farm"]
            if term or trunc:
                break
        out.append((info["farm"], total))
        obs, info = env.reset()
    return out


def test_every_episode_is_a_new_farm_in_the_same_spaces() -> None:
    env = SampledFarmTokenEnv(SMALL, episode_steps=20, warmup_epochs=100)
    runs = _run(env, seed=0, episodes=6)
    farms = [f for f, _ in runs]
    assert len(set(farms)) == 6
    assert all(int(f.split("-")[1]) < HELD_OUT_SEEDS.start for f in farms)
    assert runs == _run(SampledFarmTokenEnv(SMALL, episode_steps=20, warmup_epochs=100), 0, 6)


def test_held_out_farms_come_from_the_held_out_range() -> None:
    env = SampledFarmTokenEnv(SMALL, episode_steps=5, held_out=True, warmup_epochs=100)
    for f, _ in _run(env, seed=1, episodes=3):
        assert int(f.split("-")[1]) in HELD_OUT_SEEDS


def test_limits_that_do_not_cover_the_distribution_are_refused() -> None:
    with pytest.raises(ValueError, match="raise the limits to at least those"):
        SampledFarmTokenEnv(max_groups=4)
    with pytest.raises(ValueError, match="episode_steps: must be >= 1"):
        SampledFarmTokenEnv(episode_steps=0)
    with pytest.raises(RuntimeError, match="reset"):
        SampledFarmTokenEnv().step(0)


def test_rllib_view_carries_the_token_mask() -> None:
    env = RLlibSampledFarmEnv({"distribution": SMALL, "episode_steps": 10, "warmup_epochs": 100})
    obs, _ = env.reset(seed=2)
    for _ in range(10):
        assert obs in env.observation_space
        np.testing.assert_array_equal(obs["action_mask"], env.action_masks().astype(np.float32))
        obs, *_ = env.step(int(np.flatnonzero(obs["action_mask"])[0]))
