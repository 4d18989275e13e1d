"""The afterstate critic of :class:`~serverfarm_gym.agents.ppo.ppo.PPO` (``advantage="afterstate"``).

A decision places the arriving job on a server; what follows depends only on the farm *after*
the placement (the afterstate: the occupancy with that server one job fuller), not on the action
that led there. The value net learns ``U(y)``, the differential value of the afterstate ``y``,
and an action's advantage is read off it instead of off the sampled return:

    A(s, a) = U(y_a) - sum_b pi(b | s) U(y_b)

Each afterstate is reached by many (state, action) pairs (on speed-scaling the afterstate "one
DVFS server busy" follows both a type-a job sent there and every type-b job, which may only go
there), so ``U`` is learnt from all of them, and the advantage of an action the policy rarely
takes costs no samples of that action. GAE's advantage, by contrast, is a sampled return: on the
exact farms its standard error per rollout is several times the advantages that separate the
optimum from its neighbours (docs/learning.md).

``U`` is fitted to the average-reward lambda-return of afterstates,

    G_t = r_t - rho + (1 - lam) V(s_{t+1}) + lam G_{t+1},   V(s) = sum_b pi(b | s) U(y_b),

bootstrapped with ``V(s_T)``; ``rho`` is the running average reward, as for ``"average"``.
The afterstate observation is the decision's observation with the chosen (group, level) or
server one job fuller and the job-type one-hot cleared (the next arrival is not known yet).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from serverfarm_gym.agents.ppo.losses import masked_logits
from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.observation import hist_offsets, obs_size

__all__ = ["AfterstateCritic", "AfterstateMap", "afterstate_returns", "afterstate_values"]


class AfterstateMap:
    """The afterstates of every action from a batch of observations of ``config`` in
    ``action_mode``: ``after(obs)[n, a]`` is the observation ``obs[n]`` with action ``a``'s
    server one job fuller (masked actions give meaningless rows: weigh them by 0)."""

    def __init__(self, config: FarmConfig, action_mode: str):
        if config.has_sleep:
            raise ValueError(
                "advantage: 'afterstate' needs a farm without right-sizing (sleep): a job sent "
                "to an off server changes its mode too; use 'average' or 'discounted'"
            )
        d = obs_size(config, action_mode)
        J = config.n_job_types
        if action_mode == "group":
            off = hist_offsets(config)
            rows = [(int(off[k]) + b, 1.0 / g.count) for k, g in enumerate(config.groups)
                    for b in range(g.buffer)]  # fmt: skip
            delta = np.zeros((len(rows), d), np.float32)
            for a, (i, share) in enumerate(rows):  # a server moves from level b to b + 1
                delta[a, i] -= share
                delta[a, i + 1] += share
        else:
            S = config.n_servers
            delta = np.zeros((S, d), np.float32)
            delta[np.arange(S), np.arange(S)] = 1.0 / config.buffers[config.server_group]
        keep = np.ones(d, np.float32)
        keep[d - J :] = 0.0  # the next job's type is not part of the afterstate
        self.delta = torch.from_numpy(delta)
        self.keep = torch.from_numpy(keep)

    def after(self, obs: torch.Tensor) -> torch.Tensor:
        """float32[n, A, d]: the afterstate of each action from ``obs`` float32[n, d]."""
        return obs[:, None, :] * self.keep + self.delta[None, :, :]


def afterstate_returns(
    rewards: torch.Tensor,
    state_values: torch.Tensor,
    last_state_value: torch.Tensor,
    lam: float,
    rho: float,
) -> torch.Tensor:
    """The lambda-returns ``G[T, N]`` of the afterstates of a ``[T, N]`` rollout (module doc):
    ``state_values[t]`` is ``V(s_t)``, ``last_state_value`` is ``V(s_T)``."""
    T = rewards.shape[0]
    out = torch.zeros_like(rewards)
    run = nxt_v = last_state_value  # G_T := V(s_T), so G_{T-1} = r_{T-1} - rho + V(s_T)
    for t in range(T - 1, -1, -1):
        run = rewards[t] - rho + (1.0 - lam) * nxt_v + lam * run
        out[t] = run
        nxt_v = state_values[t]
    return out


def afterstate_values(
    after: torch.Tensor,
    value_of: Callable[[torch.Tensor], torch.Tensor],
    logp: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(U[n, A], V[n])`` of the afterstates ``after[n, A, d]`` of decisions with masked
    log-probabilities ``logp[n, A]`` (masked actions at probability 0): the value net
    ``value_of`` on every action's afterstate and its expectation under the policy."""
    n, A = logp.shape
    U = value_of(after.reshape(n * A, -1)).reshape(n, A)
    p = torch.exp(logp)
    return U, (p * U).sum(-1)


class AfterstateCritic:
    """What :class:`~serverfarm_gym.agents.ppo.ppo.PPO` does with the afterstates: the rollout's
    extra buffers, the value net's ``U`` recorded at each decision, and the advantages and
    value targets of a rollout (module doc). ``value_of`` is the value net."""

    def __init__(
        self, config: FarmConfig, action_mode: str, value_of: Callable[[torch.Tensor], torch.Tensor]
    ):
        self.map = AfterstateMap(config, action_mode)
        self.value_of = value_of

    def buffers(self, T: int, N: int, d: int) -> dict[str, torch.Tensor]:
        """The rollout's ``V(s_t)`` and the taken actions' afterstate observations."""
        return {"state_values": torch.zeros(T, N), "after": torch.zeros(T, N, d)}

    @torch.no_grad()
    def record(self, buf: dict[str, torch.Tensor], t: int, obs: torch.Tensor,
               logp: torch.Tensor, actions: torch.Tensor) -> None:  # fmt: skip
        """Step ``t``: ``values`` becomes ``U`` of the taken afterstate (the value loss's old
        prediction), ``state_values`` ``V(s_t)``, ``after`` the afterstate itself."""
        after = self.map.after(obs)
        U, V = afterstate_values(after, self.value_of, logp)
        buf["values"][t] = U.gather(1, actions[:, None]).squeeze(1)
        buf["state_values"][t] = V
        buf["after"][t] = after[torch.arange(len(actions)), actions]

    @torch.no_grad()
    def state_value(
        self, obs: torch.Tensor, logits: torch.Tensor, masks: np.ndarray
    ) -> torch.Tensor:
        """``V(s)`` of the decisions ``obs`` with the policy's ``logits`` and the action
        ``masks`` (the rollout's bootstrap)."""
        logp = torch.log_softmax(masked_logits(logits, torch.from_numpy(masks)), -1)
        return afterstate_values(self.map.after(obs), self.value_of, logp)[1]

    @staticmethod
    def advantages(
        buf: dict[str, torch.Tensor], lam: float, rho: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(advantages ``U(y_a) - V(s)``, value targets ``G``) of a recorded rollout."""
        ret = afterstate_returns(buf["rewards"], buf["state_values"], buf["last_value"], lam, rho)
        return buf["values"] - buf["state_values"], ret
