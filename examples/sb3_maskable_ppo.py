"""Stable-Baselines3 / sb3-contrib: MaskablePPO on serverfarm-gym.

    python examples/sb3_maskable_ppo.py --steps 512

The env is built from its namespaced id alone (``serverfarm_gym:`` imports the package, which
registers the ids). MaskablePPO reads ``action_masks()``; ``ActionMasker`` with
``e.unwrapped.action_masks()`` reaches it through Gymnasium's ``TimeLimit`` and
``OrderEnforcing`` wrappers. ``invalid_action="raise"`` turns any masked action into an error,
so finishing the run proves the policy took 0 invalid actions.
"""

from __future__ import annotations

import argparse

import gymnasium as gym
import numpy as np
from sb3_contrib import MaskablePPO
from sb3_contrib.common.wrappers import ActionMasker


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=512, help="environment steps to train")
    parser.add_argument("--scenario", default="paper-100")
    args = parser.parse_args(argv)

    env = gym.make(
        "serverfarm_gym:ServerFarm-v0",
        scenario=args.scenario,
        invalid_action="raise",
        max_episode_steps=256,
    )
    env = ActionMasker(env, lambda e: e.unwrapped.action_masks())
    model = MaskablePPO("MlpPolicy", env, n_steps=256, batch_size=64, n_epochs=1, seed=0)
    model.learn(total_timesteps=args.steps)

    # the trained policy, greedy, on a fresh episode: every action must be allowed
    obs, info = env.reset(seed=1)
    invalid = 0
    for _ in range(200):
        action, _ = model.predict(obs, action_masks=env.action_masks(), deterministic=True)
        invalid += int(info["action_mask"][int(action)] == 0)
        obs, _, _, _, info = env.step(int(action))
    assert invalid == 0 and info["invalid_actions"] == 0
    print(f"sb3 MaskablePPO: trained {model.num_timesteps} steps; invalid actions: {invalid}")
    print(f"efficiency since reset: {float(np.asarray(info['efficiency'])):.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
