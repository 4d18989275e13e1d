"""RLlib support (serverfarm_gym.envs.rllib): the Dict-observation wrapper, and RLlib's PPO with its example
action-masking RLModule training for two iterations (skipped when RLlib is not installed)."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from serverfarm_gym.envs.rllib import ActionMaskObservation, RLlibServerFarmEnv, make_rllib_env


@pytest.mark.parametrize("env_id", ["ServerFarm-v0", "ServerFarmGroup-v0"])
def test_wrapper_observation_carries_the_current_mask(env_id: str) -> None:
    env = make_rllib_env({"env_id": env_id, "scenario": "small-1", "max_episode_steps": 20})
    assert isinstance(env, ActionMaskObservation)
    obs, _ = env.reset(seed=0)
    for _ in range(30):
        assert obs in env.observation_space
        mask = env.unwrapped.action_masks()
        np.testing.assert_array_equal(obs["action_mask"], mask.astype(np.float32))
        np.testing.assert_array_equal(env.action_masks(), mask)
        obs, _, term, trunc, info = env.step(int(np.flatnonzero(mask)[0]))
        assert not info["invalid_action"]
        if term or trunc:
            obs, _ = env.reset()


def test_wrapped_env_passes_gymnasium_checker() -> None:
    check_env(RLlibServerFarmEnv({"scenario": "tiny"}).unwrapped)  # the env itself
    env = RLlibServerFarmEnv({"scenario": "tiny", "max_episode_steps": 5})
    obs, _ = env.reset(seed=1)
    assert set(obs) == {"action_mask", "observations"}
    assert obs["observations"].shape == (6,) and obs["action_mask"].shape == (4,)


@pytest.mark.ray
def test_rllib_ppo_with_action_masking_module_trains() -> None:
    """Two PPO iterations with RLlib's ActionMaskingTorchRLModule; ``invalid_action="raise"``
    makes any sampled masked action an error, so finishing proves the masks are honoured."""
    pytest.importorskip("ray.rllib")
    import ray
    from ray.rllib.algorithms.ppo import PPOConfig

    from serverfarm_gym.envs.rllib import action_masking_module_spec

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        config = (
            PPOConfig()
            .environment(
                env=RLlibServerFarmEnv,
                env_config={"scenario": "tiny", "max_episode_steps": 50, "invalid_action": "raise"},
            )
            .env_runners(num_env_runners=0)
            .training(train_batch_size_per_learner=100, minibatch_size=50, num_epochs=1)
            .rl_module(rl_module_spec=action_masking_module_spec((16, 16)))
            .debugging(seed=0)
        )
        algo = config.build_algo()
        try:
            for _ in range(2):
                result = algo.train()
            assert result["training_iteration"] == 2
            assert result["num_env_steps_sampled_lifetime"] >= 200
        finally:
            algo.stop()
    finally:
        ray.shutdown()
