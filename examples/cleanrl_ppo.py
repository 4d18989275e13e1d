"""A CleanRL-style single-file masked PPO on serverfarm-gym's native vector env.

    python examples/cleanrl_ppo.py --iterations 2

``gym.make_vec`` builds :class:`~serverfarm_gym.envs.vector.ServerFarmVectorEnv` (one compiled call steps all
envs; Gymnasium 1.x next-step autoreset). Invalid actions get logit -1e8 from the ``int8`` masks
in ``infos["action_mask"]``; ``invalid_action="raise"`` makes any masked action an error, and
``infos["invalid_action"]`` (per env, per step) is counted and checked to stay 0.
"""

from __future__ import annotations

import argparse

import gymnasium as gym
import numpy as np
import torch
from torch import nn

import serverfarm_gym

gym.register_envs(serverfarm_gym)


def layer(n_in: int, n_out: int, std: float = np.sqrt(2)) -> nn.Linear:
    lin = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(lin.weight, std)
    nn.init.zeros_(lin.bias)
    return lin


class Agent(nn.Module):
    def __init__(self, n_obs: int, n_act: int):
        super().__init__()
        self.critic = nn.Sequential(layer(n_obs, 64), nn.Tanh(), layer(64, 1, 1.0))
        self.actor = nn.Sequential(layer(n_obs, 64), nn.Tanh(), layer(64, n_act, 0.01))

    def act(self, x: torch.Tensor, mask: torch.Tensor, action: torch.Tensor | None = None):
        logits = self.actor(x).masked_fill(~mask, -1e8)  # masked actions: probability 0
        dist = torch.distributions.Categorical(logits=logits)
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.critic(x).squeeze(-1)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iterations", type=int, default=2)
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--num-steps", type=int, default=64)
    p.add_argument("--scenario", default="paper-100")
    args = p.parse_args(argv)
    torch.manual_seed(0)
    envs = gym.make_vec("ServerFarm-v0", num_envs=args.num_envs, scenario=args.scenario,
                        invalid_action="raise", max_episode_steps=256)  # fmt: skip
    n_obs, n_act = envs.single_observation_space.shape[0], int(envs.single_action_space.n)
    agent = Agent(n_obs, n_act)
    opt = torch.optim.Adam(agent.parameters(), lr=3e-4, eps=1e-5)
    T, N = args.num_steps, args.num_envs
    obs_b, logp_b, rew_b, val_b = (torch.zeros(T, N, *s) for s in ((n_obs,), (), (), ()))
    act_b = torch.zeros(T, N, dtype=torch.long)
    mask_b = torch.zeros(T, N, n_act, dtype=torch.bool)
    done_b = torch.zeros(T, N)
    obs, infos = envs.reset(seed=0)
    next_done = torch.zeros(N)
    invalid = 0  # masked actions the env replaced (none: invalid_action="raise" would stop it)
    for it in range(1, args.iterations + 1):
        for t in range(T):
            x = torch.as_tensor(obs)
            m = torch.as_tensor(infos["action_mask"]).bool()
            with torch.no_grad():
                a, logp, _, v = agent.act(x, m)
            obs_b[t], mask_b[t], act_b[t], logp_b[t], val_b[t], done_b[t] = (
                x,
                m,
                a,
                logp,
                v,
                next_done,
            )
            obs, r, term, trunc, infos = envs.step(a.numpy())
            invalid += int(infos["invalid_action"].sum())
            rew_b[t] = torch.as_tensor(r, dtype=torch.float32)
            next_done = torch.as_tensor(term | trunc, dtype=torch.float32)
        assert invalid == 0
        with torch.no_grad():  # GAE (gamma 0.99, lambda 0.95)
            next_v = agent.act(torch.as_tensor(obs), torch.as_tensor(infos["action_mask"]).bool())[
                3
            ]
            adv, last = torch.zeros(T, N), torch.zeros(N)
            for t in reversed(range(T)):
                nv, nd = (next_v, next_done) if t == T - 1 else (val_b[t + 1], done_b[t + 1])
                delta = rew_b[t] + 0.99 * nv * (1 - nd) - val_b[t]
                adv[t] = last = delta + 0.99 * 0.95 * (1 - nd) * last
            ret = adv + val_b
        b = [z.reshape(T * N, *z.shape[2:]) for z in (obs_b, mask_b, act_b, logp_b, adv, ret)]
        for idx in torch.randperm(T * N).split(128):
            o, m, a, old_logp, ad, rt = (z[idx] for z in b)
            _, logp, ent, v = agent.act(o, m, a)
            ratio = (logp - old_logp).exp()
            ad = (ad - ad.mean()) / (ad.std() + 1e-8)
            pg = torch.max(-ad * ratio, -ad * ratio.clamp(0.8, 1.2)).mean()
            loss = pg + 0.5 * ((v - rt) ** 2).mean() - 0.01 * ent.mean()
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
            opt.step()
        print(
            f"iteration {it}: {it * T * N} steps, loss {loss.item():.4f}, invalid actions: {invalid}"
        )
    envs.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
