"""The lean trainer of ``train.py`` (:class:`LeanTrainer`: :class:`~serverfarm_gym.agents.ppo.algorithm.LeanPPO`
built from train.py's resolved arguments), its checkpoints (written, pruned to the newest
:data:`KEEP_CHECKPOINTS`, the newest loadable one found on resume), the snapshot Ctrl-C saves
and the progress bar. The training loop itself is :func:`serverfarm_gym.agents.ppo.train.train_lean`."""

from __future__ import annotations

import copy
import dataclasses
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from serverfarm_gym.agents.common.checkpoints import (
    list_checkpoints,
    newest_loadable,
)
from serverfarm_gym.agents.ppo.algorithm import LeanPPO, LeanPPOConfig, masked_logits

if TYPE_CHECKING:  # the resolved arguments of train.py (serverfarm_gym.agents.common.run_args)
    from serverfarm_gym.agents.common.run_args import LeanArgs

__all__ = [
    "KEEP_CHECKPOINTS",
    "LeanTrainer",
    "ProgressBar",
    "Snapshot",
    "checkpoint_path",
    "lean_config",
    "load_newest",
    "network_mode",
    "prune_checkpoints",
]

#: checkpoints kept (the newest)
KEEP_CHECKPOINTS = 3


class LeanTrainer(LeanPPO):
    """``LeanPPO`` whose linear learning-rate schedule runs over the whole run
    (``schedule_total`` steps), not over one ``learn`` call: a resumed run continues the
    schedule where the checkpoint left it, as SB3's ``reset_num_timesteps=False`` does."""

    schedule_total: int = 0

    def update(self, buf: dict[str, torch.Tensor], progress_remaining: float) -> dict[str, float]:
        if self.schedule_total > 0:
            per = self.cfg.n_steps * self.cfg.n_envs
            done = (self.num_timesteps - per) / self.schedule_total
            progress_remaining = min(1.0, max(0.0, 1.0 - done))
        return super().update(buf, progress_remaining)

    @torch.no_grad()
    def soften(self, confidence: float, n_steps: int = 64, teacher: Any = "pas") -> float:
        """Scale the policy head (weights and bias, i.e. the logits) so that on states visited
        by ``teacher`` (PAS by default, or the policy it was cloned from: ``LeanPPO.teacher``)
        the sampling policy's probability of its argmax is, on average, ``confidence`` of
        the way from uniform (over the allowed actions) to certain: the mean of ``(p - 1/n) /
        (1 - 1/n)`` over states with ``n >= 2`` allowed actions. Returns the scale (1: already
        at or below ``confidence``).

        Why: the behaviour-cloned policy is nearly deterministic, so PPO samples little else
        and barely moves it (BENCHMARKS.md). Scaling the logits keeps every argmax, so the
        deterministic policy, and its efficiency, stay exactly the clone's, while the
        sampling policy explores the other actions. Normalising per state makes the setting
        mean the same on farms with 2 or 20 allowed actions (a mean probability of 0.4 cannot
        be reached in states with two actions, and drove tiny's scale to 0.013, where the
        trunk got too little gradient to learn)."""
        if not 0.0 < confidence < 1.0:
            raise ValueError(f"pas_confidence: must be in (0, 1), got {confidence}")
        policy = self.teacher(teacher)
        if self._obs is None:
            self._start()
        obs_l, mask_l = [], []
        for _ in range(n_steps):
            m = self.venv.action_masks()
            a, _ = policy.predict(self._obs, action_masks=m)
            obs_l.append(self._obs)
            mask_l.append(m)
            self._obs = self.venv.step(a)[0]
        masks = torch.from_numpy(np.concatenate(mask_l))
        keep = masks.sum(-1) >= 2
        if not bool(keep.any()):
            return 1.0
        logits, _ = self.forward(torch.from_numpy(np.concatenate(obs_l))[keep])
        masks = masks[keep]
        uniform = 1.0 / masks.sum(-1).float()

        def certainty(scale: float) -> float:
            p = torch.softmax(masked_logits(logits * scale, masks), -1).max(-1).values
            return float(((p - uniform) / (1.0 - uniform)).mean())

        if certainty(1.0) <= confidence:
            return 1.0
        lo, hi = 1e-4, 1.0  # certainty is increasing in the scale: bisect on a log scale
        for _ in range(50):
            mid = math.sqrt(lo * hi)
            lo, hi = (lo, mid) if certainty(mid) > confidence else (mid, hi)
        head = self.policy.action_net
        head.weight.mul_(hi)
        head.bias.mul_(hi)
        return hi


def network_mode(a: LeanArgs) -> str:
    """The encoding the network trains in: server actions with ``server_network="tied"`` train
    a (group, level) network, which acts on servers through ``serverfarm_gym.envs.symmetry.GroupView`` (the
    trajectories are the same step for step, and an optimal policy can be taken symmetric over
    exchangeable servers); otherwise the action mode itself."""
    tied = a.action_mode == "server" and a.server_network == "tied"
    return "group" if tied else a.action_mode


def lean_config(a: LeanArgs, seed: int | None = None) -> LeanPPOConfig:
    """The ``LeanPPOConfig`` of train.py's resolved arguments ``a`` (its ``action_mode`` is the
    network's, :func:`network_mode`)."""
    eta: str | float = "running" if a.reward_eta == "running" else float(a.reward_eta)
    return LeanPPOConfig(
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


def checkpoint_path(ckpt_dir: Path, steps: int) -> Path:
    return ckpt_dir / f"ckpt_{steps}_steps.zip"


def prune_checkpoints(ckpt_dir: Path) -> None:
    for path, _ in list_checkpoints(ckpt_dir)[KEEP_CHECKPOINTS:]:
        path.with_suffix(".json").unlink(missing_ok=True)
        path.unlink(missing_ok=True)


def load_newest(ckpt_dir: Path, a: LeanArgs) -> tuple[LeanTrainer, Path, int] | None:
    """The newest checkpoint that loads: (trainer, path, timesteps); None if there is none.
    A damaged one (cut short, no sidecar, wrong step count) is skipped with a warning."""

    def load(path: Path, steps: int) -> LeanTrainer:
        # fresh random streams for the continuation (the first ones were seeded with a.seed)
        overrides = dataclasses.asdict(lean_config(a, seed=a.seed + steps))
        trainer = LeanTrainer.load(path, **overrides)
        if trainer.num_timesteps != steps:
            raise ValueError(f"it holds {trainer.num_timesteps} timesteps, its name says {steps}")
        return trainer

    return newest_loadable(ckpt_dir, load)


class ProgressBar:
    """A rich progress bar on stderr (rich is a dependency of the ``train`` extra, as for SB3's
    own bar)."""

    def __init__(self, start: int, end: int):
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._p = Progress(
            BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
            console=Console(file=sys.stderr),
        )  # fmt: skip
        self._task = self._p.add_task("train", total=end, completed=start)
        self._p.start()

    def update(self, steps: int) -> None:
        self._p.update(self._task, completed=steps)

    def close(self) -> None:
        self._p.stop()


class Snapshot:
    """The trainer's parameters after its latest update (policy, Adam, step count, running
    average reward): what Ctrl-C saves, whether it came during a rollout or an update."""

    def __init__(self, trainer: LeanTrainer):
        self.take(trainer)

    def take(self, t: LeanTrainer) -> None:
        self.steps = int(t.num_timesteps)
        self.policy = copy.deepcopy(t.policy.state_dict())
        self.optim = copy.deepcopy(t.optimizer.state_dict())
        self.rho, self.rho_init = t.rho, t._rho_init

    def restore(self, t: LeanTrainer) -> None:
        t.policy.load_state_dict(self.policy)
        t.optimizer.load_state_dict(self.optim)
        t.num_timesteps, t.rho, t._rho_init = self.steps, self.rho, self.rho_init
