"""serverfarm_gym.envs.symmetry.GroupView: the group view of server-mode decisions is the group-mode env's, state
for state (observations bit for bit, masks) and step for step (a group policy acting on servers
through the view follows the group-mode env's trajectory exactly)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from serverfarm_gym import envs  # noqa: F401  (registers the env ids)
from serverfarm_gym.baselines.registry import make_policy
from serverfarm_gym.envs.observation import decode_group_action, encode_occupancy
from serverfarm_gym.envs.scenarios import load_scenario
from serverfarm_gym.envs.symmetry import GroupView
from tests.helpers.farms import random_env_configs, random_occupancy

FARMS = ["tiny", "pas-gap", "speed-scaling", "paper-100"]


def _configs() -> list:
    return [load_scenario(n) for n in FARMS] + random_env_configs()[:3]


@pytest.mark.parametrize("config", _configs(), ids=lambda c: c.name)
def test_observation_and_masks_match_group_encoding(config) -> None:
    rng = np.random.default_rng(7)
    view = GroupView(config)
    occ = np.stack([random_occupancy(rng, config) for _ in range(40)])
    for j in range(config.n_job_types):
        s_obs, s_mask = encode_occupancy(config, "server", occ, j)
        g_obs, g_mask = encode_occupancy(config, "group", occ, j)
        np.testing.assert_array_equal(view.observation(s_obs), g_obs)
        np.testing.assert_array_equal(view.masks(s_obs, s_mask), g_mask)


@pytest.mark.parametrize("config", _configs(), ids=lambda c: c.name)
def test_server_actions_are_the_smallest_allowed_server_of_the_pair(config) -> None:
    rng = np.random.default_rng(3)
    view = GroupView(config)
    occ = np.stack([random_occupancy(rng, config) for _ in range(40)])
    j = config.n_job_types - 1
    s_obs, s_mask = encode_occupancy(config, "server", occ, j)
    g_mask = view.masks(s_obs, s_mask)
    for i in np.flatnonzero(g_mask.any(axis=1)):
        for a in np.flatnonzero(g_mask[i]):
            s = view.server_actions(s_obs[i : i + 1], s_mask[i : i + 1], np.array([a]))[0]
            k, b = decode_group_action(config, int(a))
            # the smallest allowed server of group k at level b, by brute force
            want = min(
                t
                for t in range(config.n_servers)
                if s_mask[i, t] and config.server_group[t] == k and occ[i, t] == b
            )
            assert s == want


def test_masked_pair_is_refused() -> None:
    config = load_scenario("tiny")
    view = GroupView(config)
    occ = np.array([[3, 3, 0, 0]])  # the slow group is full
    s_obs, s_mask = encode_occupancy(config, "server", occ, 0)
    with pytest.raises(ValueError, match="no allowed server"):
        view.server_actions(s_obs, s_mask, np.array([0]))  # (slow, level 0): no such server
    # a blocked job (nothing allowed) gets server 0, as an all-masked argmax does
    blocked = np.zeros_like(s_mask)
    assert view.server_actions(s_obs, blocked, np.array([0]))[0] == 0


@pytest.mark.parametrize("scenario", ["tiny", "pas-gap", "paper-100"])
def test_group_policy_through_the_view_follows_the_group_env(scenario: str) -> None:
    """A random group-level policy acting on servers through the view and the same policy in
    the group-mode env see the same observations and rewards, step for step."""
    config = load_scenario(scenario)
    view = GroupView(config)
    s_env = gym.make("ServerFarm-v0", scenario=config)
    g_env = gym.make("ServerFarmGroup-v0", scenario=config)
    s_obs, _ = s_env.reset(seed=5)
    g_obs, _ = g_env.reset(seed=5)
    rng = np.random.default_rng(1)
    pas = make_policy("pas", config, "group")
    for t in range(2_000):
        np.testing.assert_array_equal(view.observation(s_obs[None])[0], g_obs)
        s_mask = s_env.unwrapped.action_masks()
        g_mask = g_env.unwrapped.action_masks()
        np.testing.assert_array_equal(view.masks(s_obs[None], s_mask[None])[0], g_mask)
        if t % 3:  # a mix of PAS's group form and uniform choices
            a = int(rng.choice(np.flatnonzero(g_mask)))
        else:
            a = int(pas.predict(g_obs, action_masks=g_mask)[0])
        s = int(view.server_actions(s_obs[None], s_mask[None], np.array([a]))[0])
        s_obs, s_r, *_ = s_env.step(s)
        g_obs, g_r, *_ = g_env.step(a)
        assert s_r == pytest.approx(g_r, rel=1e-12, abs=1e-12)
