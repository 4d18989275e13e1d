"""Range checks of ``train.py``'s numeric options (its ``Args``), shared by the command line,
the hyperparameter file and a resumed run's ``args.json``: every number finite and in range, and
work that cannot fit refused up front with the limit named (not a ``MemoryError`` later)."""

from __future__ import annotations

import math
from typing import Any

from envs.observation import n_actions, obs_size
from envs.scenarios import load_scenario

__all__ = ["FLOAT_RANGES", "INT_MINIMA", "MAX_N_ENVS", "MAX_ROLLOUT_BYTES", "MAX_SEED",
           "check_numbers"]  # fmt: skip

#: the largest --seed: the final and confirmation evaluations draw 3,000,000 + 1000 x seed
#: (+ replications), and SB3 seeds numpy's legacy generator with seed + timesteps, both < 2**32
MAX_SEED = 4_000_000
#: the most parallel envs (each has its own simulator state; the vector env's arrays grow with it)
MAX_N_ENVS = 4096
#: the largest rollout buffer (n_steps x n_envs observations of float32, masks, ...)
MAX_ROLLOUT_BYTES = 8 << 30

#: float options: (lower bound, whether the bound itself is allowed, upper bound or None)
FLOAT_RANGES = {
    "learning_rate": (0.0, False, None), "clip_range": (0.0, False, None),
    "max_grad_norm": (0.0, False, None), "ent_coef": (0.0, True, None),
    "vf_coef": (0.0, True, None), "target_kl": (0.0, True, None), "eta_tau": (0.0, False, None),
    "gamma": (0.0, False, 1.0), "gae_lambda": (0.0, True, 1.0),
    "pas_confidence": (0.0, False, 1.0),
}  # fmt: skip
#: int options: their smallest value (-1 for warmup_epochs means "derived from the farm")
INT_MINIMA = {
    "total_timesteps": 1, "n_envs": 1, "n_steps": 1, "batch_size": 1, "n_epochs": 1,
    "eval_freq": 1, "checkpoint_freq": 1, "eval_epochs": 1, "eval_replications": 1,
    "final_eval_epochs": 1, "episode_steps": 0, "torch_threads": 1, "verbose": 0,
    "train_scale": 1, "seed": 0, "warmup_epochs": -1,
}  # fmt: skip


def check_numbers(a: Any) -> None:
    """Every number finite and in range, named (``--learning-rate inf`` trained a NaN network
    to the end and reported it; ``--eval-freq 0`` left the best model unmeasured), and the
    work that would not fit in memory refused up front."""
    for name, (lo, closed, hi) in FLOAT_RANGES.items():
        v = getattr(a, name)
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        ok = ok and (v >= lo if closed else v > lo) and (hi is None or v <= hi)
        if not ok:
            where = f"{'>=' if closed else '>'} {lo:g}" + (f" and <= {hi:g}" if hi else "")
            raise ValueError(
                f"--{name.replace('_', '-')}: must be a finite number {where}, got {v}"
            )
    for name, lo in INT_MINIMA.items():
        v = getattr(a, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            extra = " (-1: derived from the farm)" if name == "warmup_epochs" else ""
            raise ValueError(
                f"--{name.replace('_', '-')}: must be an integer >= {lo}{extra}, got {v!r}"
            )
    if a.seed > MAX_SEED:
        raise ValueError(
            f"--seed: at most {MAX_SEED:,} (the evaluation streams are 3,000,000 + 1000 x seed, "
            f"below numpy's 2**32), got {a.seed:,}"
        )
    if a.n_envs > MAX_N_ENVS:
        raise ValueError(f"--n-envs: at most {MAX_N_ENVS:,} parallel envs, got {a.n_envs:,}")
    config = load_scenario(a.scenario)
    mode = "group" if a.trainer == "lean" and a.server_network == "tied" else a.action_mode
    per_step = 4 * obs_size(config, mode) + n_actions(config, mode) + 64
    need = a.n_steps * a.n_envs * per_step
    if need > MAX_ROLLOUT_BYTES:
        raise ValueError(
            f"--n-steps x --n-envs: a rollout of {a.n_steps:,} x {a.n_envs:,} steps of "
            f"{config.name!r} needs {need / 2**30:,.1f} GiB, above the limit of "
            f"{MAX_ROLLOUT_BYTES / 2**30:g} GiB; lower --n-steps or --n-envs"
        )
