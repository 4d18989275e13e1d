"""RLlib: PPO with RLlib's action-masking RLModule and one remote env runner.

    python examples/rllib_ppo.py --iterations 1

The env runner is a separate Ray worker process in which nothing of serverfarm-gym has been
imported: the env creator below builds the env from its namespaced id alone
(``gym.make("serverfarm_gym:ServerFarm-v0")`` imports the package, which registers the ids),
then puts the mask into the observation the way RLlib's ``ActionMaskingTorchRLModule`` reads
it (``MaskInObservation``'s ``"rllib"`` preset). ``invalid_action="raise"`` makes any sampled
masked action an error, so a finished iteration proves 0 invalid actions.
"""

from __future__ import annotations

import argparse
from typing import Any

import gymnasium as gym


def make_env(config: dict[str, Any]) -> gym.Env:
    """Env creator, run inside the env runner process."""
    env = gym.make("serverfarm_gym:ServerFarm-v0", **config)
    from serverfarm_gym import MaskInObservation  # already imported by the make above

    return MaskInObservation.preset(env, "rllib")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iterations", type=int, default=1)
    p.add_argument("--scenario", default="paper-100")
    args = p.parse_args(argv)

    import ray
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec
    from ray.rllib.examples.rl_modules.classes.action_masking_rlm import (
        ActionMaskingTorchRLModule,
    )
    from ray.tune.registry import register_env

    register_env("serverfarm", make_env)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        config = (
            PPOConfig()
            .environment(
                "serverfarm",
                env_config={
                    "scenario": args.scenario,
                    "max_episode_steps": 100,
                    "invalid_action": "raise",
                },
            )
            .env_runners(num_env_runners=1, rollout_fragment_length=100)
            .training(train_batch_size_per_learner=200, minibatch_size=100, num_epochs=1)
            .rl_module(
                rl_module_spec=RLModuleSpec(
                    module_class=ActionMaskingTorchRLModule,
                    model_config={"head_fcnet_hiddens": [32, 32]},
                )
            )
            .debugging(seed=0)
        )
        algo = config.build_algo()
        try:
            for _ in range(args.iterations):
                result = algo.train()
            steps = result["env_runners"]["num_env_steps_sampled_lifetime"]
            assert result["training_iteration"] == args.iterations and steps >= 200
            print(f"rllib PPO: {result['training_iteration']} iteration(s), {steps} env steps "
                  "on a remote env runner; invalid actions: 0")  # fmt: skip
        finally:
            algo.stop()
    finally:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
