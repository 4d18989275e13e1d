"""Tianshou: masked DQN on serverfarm-gym.

    python examples/tianshou_dqn.py --steps 256

Tianshou's DQN masks actions through the observation: ``obs.mask`` (1 = valid) lowers the Q
value of masked actions below every valid one, also for epsilon-greedy exploration, and the
network gets ``obs.obs``. ``MaskInObservation``'s ``"tianshou"`` preset builds exactly those
``{"obs", "mask" (int8)}`` observations. ``invalid_action="raise"`` makes any masked action an
error, so a finished epoch proves 0 invalid actions; the envs' counts are checked as well.

Tianshou 2.0 pins ``pandas<3``; next to RLlib's pandas 3 install it with ``--no-deps`` (see
docs/ecosystem.md): the parts used here do not import pandas.
"""

from __future__ import annotations

import argparse

import gymnasium as gym
import torch
from tianshou.algorithm import DQN
from tianshou.algorithm.modelfree.dqn import DiscreteQLearningPolicy
from tianshou.algorithm.optim import AdamOptimizerFactory
from tianshou.data import Collector, VectorReplayBuffer
from tianshou.env import DummyVectorEnv
from tianshou.trainer import OffPolicyTrainerParams
from tianshou.utils.net.common import Net

from serverfarm_gym import MaskInObservation


def make_env(scenario: str) -> gym.Env:
    env = gym.make("serverfarm_gym:ServerFarm-v0", scenario=scenario, invalid_action="raise",
                   max_episode_steps=128)  # fmt: skip
    return MaskInObservation.preset(env, "tianshou")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=256, help="environment steps of the epoch")
    p.add_argument("--scenario", default="paper-100")
    args = p.parse_args(argv)
    torch.manual_seed(0)
    envs = DummyVectorEnv([lambda: make_env(args.scenario) for _ in range(4)])
    envs.seed(0)
    probe = make_env(args.scenario)
    obs_space = probe.observation_space["obs"]
    net = Net(state_shape=obs_space.shape, action_shape=int(probe.action_space.n),
              hidden_sizes=[64, 64])  # fmt: skip
    policy = DiscreteQLearningPolicy(
        model=net, action_space=probe.action_space, observation_space=obs_space, eps_training=0.1
    )
    algorithm = DQN(policy=policy, optim=AdamOptimizerFactory(lr=1e-3), target_update_freq=50)
    collector = Collector(
        algorithm, envs, VectorReplayBuffer(10_000, len(envs)), exploration_noise=True
    )
    collector.reset()
    result = algorithm.run_training(
        OffPolicyTrainerParams(
            training_collector=collector,
            max_epochs=1,
            epoch_num_steps=args.steps,
            collection_step_num_env_steps=64,
            batch_size=64,
            update_step_num_gradient_steps_per_sample=0.1,
            test_in_training=False,
            show_progress=False,
            verbose=False,
        )
    )
    buf = collector.buffer
    idx = buf.sample_indices(0)  # every stored transition, across the per-env sub-buffers
    invalid = int((buf.obs.mask[idx, buf.act[idx]] == 0).sum())  # mask of the obs acted on
    assert invalid == 0
    print(f"tianshou DQN: {result.timing.total_time:.1f} s, {len(idx)} transitions; "
          f"invalid actions: {invalid}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
