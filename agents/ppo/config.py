"""Settings of the masked PPO (:class:`PPOConfig`), the farm-derived discount
(:func:`auto_gamma`) and the farm-dependent settings of :func:`recommended`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.evaluation.policy_report import epochs_per_duration

if TYPE_CHECKING:  # the resolved arguments of train.py (serverfarm_gym.agents.common.run_args)
    from serverfarm_gym.agents.common.run_args import PPOArgs

__all__ = ["ADVANTAGES", "LARGE_FARM_EPOCHS_PER_DURATION", "PPOConfig", "auto_gamma", "network_mode",
           "ppo_config", "recommended"]  # fmt: skip


#: PPO's advantage estimates (PPO's module doc; ``"afterstate"``: serverfarm_gym.agents.ppo.afterstate)
ADVANTAGES = ("discounted", "average", "afterstate")

#: farms with more decision epochs per mean job duration than this count as "large" in
#: :func:`recommended`: with many decisions per duration one decision's signal is weak, and
#: without an anchor to PAS the policy walks away from it
LARGE_FARM_EPOCHS_PER_DURATION = 30.0


def auto_gamma(config: FarmConfig, horizon_durations: float = 4.0) -> float:
    """Discount with an effective horizon of ``horizon_durations`` mean job durations in model
    time: ``1 - 1 / (horizon_durations * epochs_per_duration)`` (tiny: 0.9, paper-100: ~0.998)."""
    if horizon_durations <= 0:
        raise ValueError(f"horizon_durations: must be > 0, got {horizon_durations}")
    return 1.0 - 1.0 / max(1.0 + 1e-9, horizon_durations * epochs_per_duration(config))


def recommended(config: FarmConfig) -> dict[str, Any]:
    """Farm-dependent :class:`PPOConfig` settings (BENCHMARKS.md, "Learned efficiency"),
    from one feature: ``E = epochs_per_duration(config)``, decisions per mean job duration
    (about the number of busy servers: it sets how much of the reward after a decision is
    other servers' noise). Small farms learn from a random start; use a PAS clone
    (:meth:`PPO.clone_pas`) first on large ones.

    * small farms (E <= 30): the average-reward advantage (``advantage="average"``: the
      average of ``W - eta P`` per decision, Dinkelbach's criterion, whose best policy is the
      most efficient one; ``serverfarm_gym.agents.ppo.criterion`` shows it over every deterministic policy of
      the exact farms, and that a horizon of one mean job duration ranks best a policy 3.9%
      below the optimum on tiny, 0.23% on speed-scaling); 16 envs x 128 steps, minibatches of
      128, 10 epochs (160 Adam steps per 2,048 samples): the signal per decision is strong, so
      learn a lot per sample.
    * large farms: a discount horizon of one mean job duration, ``horizon_durations=1`` (the
      life of the decision's own job; longer horizons add E decisions of other servers' noise
      per duration).
    * large farms (E > 30): rollouts of 16,384 steps, minibatches of 4,096, 4 epochs, lr 1e-4,
      an anchor to PAS's decisions (``pas_anchor=1``) and 5 critic-only rollouts after the
      clone: without the anchor the normalised advantages (mostly noise) walk the policy below
      PAS. 64 envs x 256 steps, but 16 x 1,024 when E > 1,000: every env
      starts with a PAS warm-up of 50 durations (50 E epochs; large-10k: 600k each).
    """
    E = epochs_per_duration(config)
    common: dict[str, Any] = {
        "gamma": "auto",
        "horizon_durations": 1.0,
        "clone_smoothing": 0.2,
    }
    if E <= LARGE_FARM_EPOCHS_PER_DURATION:
        return common | {"n_envs": 16, "n_steps": 128, "batch_size": 128, "n_epochs": 10,
                         "advantage": "average"}  # fmt: skip
    n_envs = 64 if E <= 1_000 else 16
    return common | {
        "n_envs": n_envs, "n_steps": 16_384 // n_envs, "batch_size": 4096, "n_epochs": 4,
        "learning_rate": 1e-4, "pas_anchor": 1.0, "critic_warmup": 5,
    }  # fmt: skip


@dataclass
class PPOConfig:
    """Settings of :class:`PPO` (the names of ``train.Args`` where they coincide)."""

    n_envs: int = 64
    n_steps: int = 256
    batch_size: int = 4096
    n_epochs: int = 4
    learning_rate: float = 3e-4
    lr_schedule: str = "linear"  # "linear" (to 0) or "constant"
    advantage: str = "discounted"  # "discounted", "average" or "afterstate" (ADVANTAGES)
    gamma: float | str = "auto"  # a number in (0, 1], or "auto" (see auto_gamma)
    horizon_durations: float = 1.0  # the discount's horizon in mean job durations (recommended)
    gae_lambda: float = 0.95
    rho_tau: float = 0.1  # step of the running average reward (advantage="average")
    clip_range: float = 0.2
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    normalize_advantage: bool = True
    net_arch: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    torch_threads: int = 1
    seed: int = 0
    # environment
    action_mode: str = "group"
    reward_eta: str | float = "running"
    eta_tau: float = 10_000.0
    warmup_epochs: int = -1  # -1: 50 mean job durations, >= 1000 (as train.py)
    env_parallel: bool = False
    objective: str = "energy"  # the env's: "energy" (jobs per energy) or "cost" (per money)
    # PAS initialisation (clone_pas) and what follows it
    clone_smoothing: float = 0.2  # label smoothing of the PAS targets (keeps entropy to explore)
    clone_epochs: int = 20  # passes over the PAS states (fewer: a softer clone)
    critic_warmup: int = 0  # first rollouts of learn() that fit only the value function
    pas_anchor: float = 0.0  # weight of clone_loss to PAS's choices on the rollout's states
    anchor_smoothing: float = 0.2  # the label smoothing of that anchor
    extra: dict[str, Any] = field(default_factory=dict)

    def check(self) -> PPOConfig:
        for name in (
            "n_envs",
            "n_steps",
            "batch_size",
            "n_epochs",
            "torch_threads",
            "clone_epochs",
        ):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.batch_size > self.n_envs * self.n_steps:
            raise ValueError(
                f"batch_size: {self.batch_size} exceeds the rollout n_envs x n_steps = "
                f"{self.n_envs * self.n_steps}; lower it or raise n_steps"
            )
        if self.advantage not in ADVANTAGES:
            raise ValueError(
                f"advantage: choose one of {', '.join(map(repr, ADVANTAGES))}, got {self.advantage!r}"
            )
        if self.lr_schedule not in ("linear", "constant"):
            raise ValueError(
                f"lr_schedule: choose 'linear' or 'constant', got {self.lr_schedule!r}"
            )
        if self.activation not in ("tanh", "relu"):
            raise ValueError(f"activation: choose 'tanh' or 'relu', got {self.activation!r}")
        if self.gamma != "auto" and not 0.0 < float(self.gamma) <= 1.0:
            raise ValueError(f"gamma: must be in (0, 1] or 'auto', got {self.gamma!r}")
        if not 0.0 <= self.gae_lambda <= 1.0:
            raise ValueError(f"gae_lambda: must be in [0, 1], got {self.gae_lambda}")
        # a NaN passes every comparison's negation: each bound is stated positively
        for name, lo, strict in (("learning_rate", 0.0, True), ("clip_range", 0.0, True),
                                 ("max_grad_norm", 0.0, True), ("ent_coef", 0.0, False),
                                 ("vf_coef", 0.0, False), ("rho_tau", 0.0, False)):  # fmt: skip
            v = float(getattr(self, name))
            if not (math.isfinite(v) and (v > lo if strict else v >= lo)):
                raise ValueError(
                    f"{name}: must be finite and {'>' if strict else '>='} {lo:g}, got {v}"
                )
        if not 0.0 <= self.clone_smoothing < 1.0:
            raise ValueError(
                f"clone_smoothing: must be in [0, 1) (0: a hard clone), got {self.clone_smoothing}"
            )
        if self.objective not in ("energy", "cost"):
            raise ValueError(f"objective: choose 'energy' or 'cost', got {self.objective!r}")
        if self.pas_anchor < 0:
            raise ValueError(f"pas_anchor: must be >= 0 (0: off), got {self.pas_anchor}")
        if not 0.0 <= self.anchor_smoothing < 1.0:
            raise ValueError(f"anchor_smoothing: must be in [0, 1), got {self.anchor_smoothing}")
        if int(self.critic_warmup) < 0:
            raise ValueError(f"critic_warmup: must be >= 0 rollouts, got {self.critic_warmup}")
        return self


# ---------------------------------------------------------------------------------------------
# the math (pure functions: tested against hand-computed values)
# ---------------------------------------------------------------------------------------------


def network_mode(a: PPOArgs) -> str:
    """The encoding the network trains in: server actions with ``server_network="tied"`` train
    a (group, level) network, which acts on servers through ``serverfarm_gym.envs.symmetry.GroupView`` (the
    trajectories are the same step for step, and an optimal policy can be taken symmetric over
    exchangeable servers); otherwise the action mode itself."""
    tied = a.action_mode == "server" and a.server_network == "tied"
    return "group" if tied else a.action_mode


def ppo_config(a: PPOArgs, seed: int | None = None) -> PPOConfig:
    """The ``PPOConfig`` of train.py's resolved arguments ``a`` (its ``action_mode`` is the
    network's, :func:`network_mode`)."""
    eta: str | float = "running" if a.reward_eta == "running" else float(a.reward_eta)
    return PPOConfig(
        n_envs=a.n_envs, n_steps=a.n_steps, batch_size=a.batch_size, n_epochs=a.n_epochs,
        learning_rate=a.learning_rate, lr_schedule=a.lr_schedule, advantage=a.advantage,
        gamma=a.gamma, gae_lambda=a.gae_lambda, clip_range=a.clip_range, ent_coef=a.ent_coef,
        vf_coef=a.vf_coef, max_grad_norm=a.max_grad_norm,
        net_arch=tuple(int(x) for x in str(a.net_arch).split(",") if x.strip()),
        activation=a.activation, torch_threads=a.torch_threads,
        seed=a.seed if seed is None else seed, action_mode=network_mode(a), reward_eta=eta,
        eta_tau=a.eta_tau,
        # a twin's envs warm up for 50 of its own durations; a.warmup_epochs is the farm's
        warmup_epochs=-1 if a.train_scale > 1 else a.warmup_epochs,
        objective=a.objective,
    )  # fmt: skip
