"""What a PPO run (``serverfarm_gym.agents.ppo.run``) resumes from: its checkpoints (written every
``checkpoint_freq`` steps, pruned to the newest :data:`KEEP_CHECKPOINTS`, the newest one that
loads found on ``--resume``: :func:`load_newest`) and the :class:`Snapshot` that Ctrl-C saves."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from serverfarm_gym.agents.common.checkpoints import list_checkpoints, newest_loadable
from serverfarm_gym.agents.ppo.config import ppo_config
from serverfarm_gym.agents.ppo.ppo import PPO

if TYPE_CHECKING:  # the resolved arguments of train.py (serverfarm_gym.agents.common.run_args)
    from serverfarm_gym.agents.common.run_args import PPOArgs

__all__ = ["KEEP_CHECKPOINTS", "Snapshot", "checkpoint_path", "load_newest", "prune_checkpoints"]

#: checkpoints kept (the newest)
KEEP_CHECKPOINTS = 3


def checkpoint_path(ckpt_dir: Path, steps: int) -> Path:
    return ckpt_dir / f"ckpt_{steps}_steps.zip"


def prune_checkpoints(ckpt_dir: Path) -> None:
    for path, _ in list_checkpoints(ckpt_dir)[KEEP_CHECKPOINTS:]:
        path.with_suffix(".json").unlink(missing_ok=True)
        path.unlink(missing_ok=True)


def load_newest(ckpt_dir: Path, a: PPOArgs) -> tuple[PPO, Path, int] | None:
    """The newest checkpoint that loads: (trainer, path, timesteps); None if there is none.
    A damaged one (cut short, no sidecar, wrong step count) is skipped with a warning."""

    def load(path: Path, steps: int) -> PPO:
        # fresh random streams for the continuation (the first ones were seeded with a.seed)
        overrides = dataclasses.asdict(ppo_config(a, seed=a.seed + steps))
        trainer = PPO.load(path, **overrides)
        if trainer.num_timesteps != steps:
            raise ValueError(f"it holds {trainer.num_timesteps} timesteps, its name says {steps}")
        return trainer

    return newest_loadable(ckpt_dir, load)


class Snapshot:
    """The trainer's parameters after its latest update (policy, Adam, step count, running
    average reward): what Ctrl-C saves, whether it came during a rollout or an update."""

    def __init__(self, trainer: PPO):
        self.take(trainer)

    def take(self, t: PPO) -> None:
        self.steps = int(t.num_timesteps)
        self.policy = copy.deepcopy(t.policy.state_dict())
        self.optim = copy.deepcopy(t.optimizer.state_dict())
        self.rho, self.rho_init = t.rho, t._rho_init

    def restore(self, t: PPO) -> None:
        t.policy.load_state_dict(self.policy)
        t.optimizer.load_state_dict(self.optim)
        t.num_timesteps, t.rho, t._rho_init = self.steps, self.rho, self.rho_init
