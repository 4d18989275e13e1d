"""skrl: PPO with a masked categorical policy on serverfarm-gym.

    python examples/skrl_ppo.py --timesteps 256

skrl has no action-mask API of its own; its models see the observation, so the policy reads
the mask there: ``MaskInObservation`` (float mask, RLlib's keys) builds ``{"action_mask",
"observations"}``, skrl flattens it, and the policy unflattens it with skrl's own
``unflatten_tensorized_space`` and sets masked logits to -1e8. ``invalid_action="raise"``
makes any masked action an error, so finished updates prove 0 invalid actions (counted too).
"""

from __future__ import annotations

import argparse
import tempfile

import gymnasium as gym
import torch
from skrl.agents.torch.ppo import PPO, PPO_CFG
from skrl.envs.wrappers.torch import wrap_env
from skrl.memories.torch import RandomMemory
from skrl.models.torch import CategoricalMixin, DeterministicMixin, Model
from skrl.trainers.torch import SequentialTrainer
from skrl.utils.spaces.torch import unflatten_tensorized_space
from torch import nn

from serverfarm_gym import MaskInObservation


class MaskedPolicy(CategoricalMixin, Model):
    def __init__(self, observation_space, action_space, device=None):
        Model.__init__(self, observation_space=observation_space, action_space=action_space,
                       device=device)  # fmt: skip
        CategoricalMixin.__init__(self, unnormalized_log_prob=True)
        n_obs = observation_space["observations"].shape[0]
        self.net = nn.Sequential(nn.Linear(n_obs, 64), nn.Tanh(), nn.Linear(64, action_space.n))

    def compute(self, inputs, role=""):
        obs = unflatten_tensorized_space(self.observation_space, inputs["observations"])
        logits = self.net(obs["observations"])
        return logits.masked_fill(obs["action_mask"] < 0.5, -1e8), {}


class Value(DeterministicMixin, Model):
    def __init__(self, observation_space, action_space, device=None):
        Model.__init__(self, observation_space=observation_space, action_space=action_space,
                       device=device)  # fmt: skip
        DeterministicMixin.__init__(self)
        n_obs = observation_space["observations"].shape[0]
        self.net = nn.Sequential(nn.Linear(n_obs, 64), nn.Tanh(), nn.Linear(64, 1))

    def compute(self, inputs, role=""):
        obs = unflatten_tensorized_space(self.observation_space, inputs["observations"])
        return self.net(obs["observations"]), {}


class CountSteps(gym.Wrapper):
    """Counts the steps and the masked actions the env saw (``info["invalid_action"]``)."""

    steps = invalid = 0

    def step(self, action):
        out = super().step(action)
        self.steps += 1
        self.invalid += bool(out[4]["invalid_action"])
        return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--timesteps", type=int, default=256)
    p.add_argument("--scenario", default="paper-100")
    args = p.parse_args(argv)
    torch.manual_seed(0)
    base = gym.make("serverfarm_gym:ServerFarm-v0", scenario=args.scenario,
                    invalid_action="raise", max_episode_steps=128)  # fmt: skip
    counted = CountSteps(base)
    env = wrap_env(MaskInObservation.preset(counted, "rllib"), wrapper="gymnasium")
    obs_space, act_space = env.observation_space, env.action_space
    models = {
        "policy": MaskedPolicy(obs_space, act_space, env.device),
        "value": Value(obs_space, act_space, env.device),
    }
    rollouts = 64
    cfg = PPO_CFG(rollouts=rollouts, learning_epochs=2, mini_batches=2)
    with tempfile.TemporaryDirectory() as logs:
        cfg.experiment.directory = logs  # skrl writes TensorBoard files and checkpoints there
        cfg.experiment.write_interval = 0
        cfg.experiment.checkpoint_interval = 0
        memory = RandomMemory(memory_size=rollouts, num_envs=env.num_envs, device=env.device)
        agent = PPO(models=models, memory=memory, observation_space=obs_space,
                    action_space=act_space, device=env.device, cfg=cfg)  # fmt: skip
        trainer = SequentialTrainer(
            env=env,
            agents=agent,
            cfg={"timesteps": args.timesteps, "headless": True, "disable_progressbar": True,
                 "close_environment_at_exit": False},
        )  # fmt: skip
        trainer.train()
    assert counted.steps == args.timesteps and counted.invalid == 0
    print(f"skrl PPO: {counted.steps} env steps, {args.timesteps // rollouts} updates; "
          f"invalid actions: {counted.invalid}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
