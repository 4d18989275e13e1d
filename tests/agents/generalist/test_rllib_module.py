"""RLlib's PPO with the permutation-invariant token RLModule on the domain-randomised env (a new
farm per episode): two training iterations on a local Ray (skipped without RLlib)."""

from __future__ import annotations

import pytest


@pytest.mark.ray
def test_rllib_ppo_trains_the_token_module_on_random_farms() -> None:
    pytest.importorskip("ray.rllib")
    import ray
    from ray.rllib.algorithms.ppo import PPOConfig

    from serverfarm_gym.agents.generalist.rllib_module import token_module_spec
    from serverfarm_gym.envs.rllib import RLlibSampledFarmEnv

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        config = (
            PPOConfig()
            .environment(
                env=RLlibSampledFarmEnv,
                # invalid_action="raise": a sampled masked (or padded) action would be an error
                env_config={
                    "distribution": {"n_servers": [2, 30]},
                    "episode_steps": 40,
                    "warmup_epochs": 100,
                    "invalid_action": "raise",
                },
            )
            .env_runners(num_env_runners=0)
            .training(train_batch_size_per_learner=120, minibatch_size=60, num_epochs=1)
            .rl_module(rl_module_spec=token_module_spec(d_model=16, n_heads=2, n_layers=1))
            .debugging(seed=0)
        )
        algo = config.build_algo()
        try:
            for _ in range(2):
                result = algo.train()
            assert result["training_iteration"] == 2
            assert result["num_env_steps_sampled_lifetime"] >= 240
        finally:
            algo.stop()
    finally:
        ray.shutdown()
