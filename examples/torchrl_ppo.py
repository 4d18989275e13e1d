"""TorchRL: masked PPO (``MaskedCategorical`` policy, ``ClipPPOLoss``, ``GAE``) on serverfarm-gym.

    python examples/torchrl_ppo.py --iterations 2

``MaskInObservation``'s ``"torchrl"`` preset gives ``{"observation", "action_mask" (bool)}``
observations; ``GymWrapper`` turns them into the tensordict entries of the same names, the
``ActionMask`` transform keeps the action spec's mask current (random exploration) and the
policy's ``MaskedCategorical`` reads ``"action_mask"``. ``invalid_action="raise"`` makes any
masked action an error; each batch is also checked against the masks it was sampled under.
"""

from __future__ import annotations

import argparse

import gymnasium as gym
import torch
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.collectors import Collector
from torchrl.envs import ActionMask, GymWrapper, TransformedEnv
from torchrl.modules import MaskedCategorical, ProbabilisticActor, ValueOperator
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE

from serverfarm_gym import MaskInObservation


def make_env(scenario: str) -> TransformedEnv:
    env = gym.make("serverfarm_gym:ServerFarm-v0", scenario=scenario, invalid_action="raise",
                   max_episode_steps=256)  # fmt: skip
    return TransformedEnv(
        GymWrapper(MaskInObservation.preset(env, "torchrl"), categorical_action_encoding=True),
        ActionMask(),
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iterations", type=int, default=2)
    p.add_argument("--frames", type=int, default=256, help="frames per iteration")
    p.add_argument("--scenario", default="paper-100")
    args = p.parse_args(argv)
    torch.manual_seed(0)
    env = make_env(args.scenario)
    n_obs = env.observation_spec["observation"].shape[-1]
    n_act = env.action_spec.space.n
    net = nn.Sequential(nn.Linear(n_obs, 64), nn.Tanh(), nn.Linear(64, n_act))
    actor = ProbabilisticActor(
        TensorDictModule(net, in_keys=["observation"], out_keys=["logits"]),
        in_keys={"logits": "logits", "mask": "action_mask"},
        distribution_class=MaskedCategorical,
        spec=env.action_spec,
        return_log_prob=True,
    )
    critic = ValueOperator(
        nn.Sequential(nn.Linear(n_obs, 64), nn.Tanh(), nn.Linear(64, 1)), in_keys=["observation"]
    )
    loss = ClipPPOLoss(actor, critic, entropy_coeff=0.01)
    gae = GAE(gamma=0.99, lmbda=0.95, value_network=critic)
    opt = torch.optim.Adam(loss.parameters(), lr=3e-4)
    collector = Collector(
        env,
        actor,
        frames_per_batch=args.frames,
        total_frames=args.frames * args.iterations,
        auto_register_policy_transforms=False,
    )
    invalid = 0
    for it, data in enumerate(collector, start=1):
        chosen = data["action_mask"].gather(-1, data["action"].unsqueeze(-1))
        invalid += int((~chosen).sum())
        with torch.no_grad():
            gae(data)
        for batch in data.reshape(-1).split(64):
            out = loss(batch)
            total = out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]
            opt.zero_grad()
            total.backward()
            opt.step()
        print(f"iteration {it}: {it * args.frames} frames, invalid actions: {invalid}")
    collector.shutdown()
    assert invalid == 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
