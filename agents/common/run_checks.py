"""Checks of ``train.py``'s resolved options (``serverfarm_gym.agents.common.run_args``), shared by the command
line, the hyperparameter file and a resumed run's ``args.json``: each choice named with its
alternatives, an option of the other trainer refused unless at its "not used" value, every number
finite and in range, work that cannot fit refused up front with the limit named (not a
``MemoryError`` later), and the run directory usable."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from serverfarm_gym.agents.common.checkpoints import latest_checkpoint
from serverfarm_gym.agents.common.farm_settings import INITS
from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.observation import check_action_mode, n_actions, obs_size
from serverfarm_gym.envs.scenarios import load_scenario

__all__ = [
    "FLOAT_RANGES",
    "INT_MINIMA",
    "MAX_N_ENVS",
    "MAX_ROLLOUT_BYTES",
    "MAX_SEED",
    "PPO_UNUSED",
    "RUN_FILES",
    "SB3_UNUSED",
    "check_args",
    "check_device",
    "check_numbers",
    "check_output_dir",
    "check_resumable",
    "check_trainer",
    "make_output_dir",
    "parse_net_arch",
]  # fmt: skip

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


def check_numbers(a: Any, config: FarmConfig | None = None) -> None:
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
    config = config if config is not None else load_scenario(a.scenario)
    mode = "group" if a.trainer == "ppo" and a.server_network == "tied" else a.action_mode
    per_step = 4 * obs_size(config, mode) + n_actions(config, mode) + 64
    need = a.n_steps * a.n_envs * per_step
    if need > MAX_ROLLOUT_BYTES:
        raise ValueError(
            f"--n-steps x --n-envs: a rollout of {a.n_steps:,} x {a.n_envs:,} steps of "
            f"{config.name!r} needs {need / 2**30:,.1f} GiB, above the limit of "
            f"{MAX_ROLLOUT_BYTES / 2**30:g} GiB; lower --n-steps or --n-envs"
        )


#: options of the sb3 trainer only, with the value that means "not used"
SB3_UNUSED = {"vec_env": "dummy", "reward": "env", "normalize_reward": False, "episode_steps": 0,
              "target_kl": 0.0}  # fmt: skip
#: options of the PPO trainer only, at what an sb3 run is (a random start, discounted, one
#: output per server); the first four are refused at any other value, ``pas_confidence`` is
#: ignored and a ``train_scale`` above 1 refused by its own check
PPO_UNUSED = {"init": "random", "advantage": "discounted", "server_network": "mlp",
              "objective": "energy", "pas_confidence": 0.2, "train_scale": 1,
              "slo_step": -1.0}  # fmt: skip
_PPO_REFUSED = ("init", "advantage", "server_network", "objective", "slo_step")
#: the choices of the string options
CHOICES = {
    "server_network": ("tied", "mlp"), "objective": ("energy", "cost"),
    "advantage": ("discounted", "average", "afterstate"), "vec_env": ("dummy", "subproc"),
    "reward": ("env", "expected"), "lr_schedule": ("constant", "linear"),
    "activation": ("tanh", "relu"),
}  # fmt: skip


def check_trainer(trainer: str) -> str:
    if trainer not in ("ppo", "sb3"):
        raise ValueError(f"--trainer: choose 'ppo' or 'sb3', got {trainer!r}")
    return trainer


def parse_net_arch(text: str) -> list[int]:
    """``--net-arch`` ``"64,64"`` as layer sizes."""
    try:
        sizes = [int(x) for x in str(text).replace(" ", "").split(",") if x]
    except ValueError:
        sizes = []
    if not sizes or any(s < 1 for s in sizes):
        raise ValueError(
            f"--net-arch: expected comma-separated layer sizes like '64,64', got {text!r}"
        )
    return sizes


def _quoted(choices: tuple[str, ...]) -> str:
    return " or ".join(f"'{c}'" for c in choices) if len(choices) == 2 else ", ".join(choices)


def _check_choices(a: Any) -> None:
    """Every string option one of its choices, named with them."""
    check_trainer(a.trainer)
    check_action_mode(a.action_mode)
    for name, choices in CHOICES.items():
        v = getattr(a, name)
        if v not in choices:
            raise ValueError(f"--{name.replace('_', '-')}: choose {_quoted(choices)}, got {v!r}")
    if a.train_scale < 1:
        raise ValueError(f"--train-scale: must be >= 1 (1: the farm itself), got {a.train_scale}")
    if a.train_scale > 1 and (a.trainer != "ppo" or a.action_mode != "group"):
        raise ValueError(
            f"--train-scale {a.train_scale}: only a group-action network of the PPO trainer "
            "fits every size of a farm; use --action-mode group (and --trainer ppo), or "
            "--train-scale 1"
        )
    if a.init not in INITS:
        raise ValueError(f"--init: choose one of {', '.join(INITS)}, got {a.init!r}")
    if not 0.0 < a.pas_confidence < 1.0:
        raise ValueError(f"--pas-confidence: must be in (0, 1), got {a.pas_confidence}")
    if a.reward_eta != "running":
        try:
            eta = float(a.reward_eta)
        except ValueError:
            raise ValueError(
                f"--reward-eta: expected 'running' or a number, got {a.reward_eta!r}"
            ) from None
        if not (math.isfinite(eta) and eta >= 0):
            raise ValueError(f"--reward-eta: a fixed eta must be finite and >= 0, got {eta}")


def _check_route(a: Any) -> None:
    """Options the chosen trainer does not have are refused, not ignored."""
    if a.trainer == "sb3":
        for k in _PPO_REFUSED:
            if getattr(a, k) != PPO_UNUSED[k]:
                raise ValueError(
                    f"--{k.replace('_', '-')} {getattr(a, k)}: an option of the PPO trainer "
                    "(MaskablePPO starts from a random policy, discounted, one output per "
                    "server): drop it or use --trainer ppo"
                )
        return
    for k, unused in SB3_UNUSED.items():
        if getattr(a, k) != unused:
            raise ValueError(
                f"--{k.replace('_', '-')}: an option of --trainer sb3 only (the PPO trainer "
                f"has no {k}); drop it or add --trainer sb3"
            )
    if a.device not in ("cpu", "auto"):
        raise ValueError(
            f"--device {a.device}: the PPO trainer trains on the CPU (its 64x64 MLPs are "
            "fastest on one core, docs/training.md); use --device cpu, or --trainer sb3"
        )


def check_args(a: Any, config: FarmConfig | None = None) -> Any:
    """Validate the merged options of a run (any object with their names as attributes; the
    farm ``config`` of ``a.scenario`` if loaded already), naming the option and the fix."""
    _check_choices(a)
    parse_net_arch(a.net_arch)
    check_device(a.device)
    check_numbers(a, config)
    if a.n_steps * a.n_envs < 2:
        raise ValueError("--n-steps x --n-envs: a rollout needs at least 2 samples")
    if a.batch_size > a.n_steps * a.n_envs:
        raise ValueError(
            f"--batch-size {a.batch_size} exceeds the rollout size n_steps x n_envs = "
            f"{a.n_steps * a.n_envs}; lower it or raise --n-steps"
        )
    if not 0 < a.gamma <= 1 or not 0 <= a.gae_lambda <= 1:
        raise ValueError("--gamma must be in (0, 1] and --gae-lambda in [0, 1]")
    if a.eval_replications < 2 and not a.eval_exact:
        raise ValueError("--eval-replications: at least 2 are needed for a confidence interval")
    _check_route(a)
    slo_step = getattr(a, "slo_step", -1.0)
    if slo_step != -1.0 and not (math.isfinite(slo_step) and slo_step >= 0):
        raise ValueError(f"--slo-step: must be -1 (the default, 1/D) or >= 0, got {slo_step}")
    if slo_step != -1.0 and config is not None and config.slo is None:
        raise ValueError(
            f"--slo-step {slo_step}: the scenario has no slo: {{mean_response_time: D}}, so "
            "there is no multiplier to update; drop the option or give the farm an SLO"
        )
    return a


def check_device(device: str) -> None:
    """Refuse a torch device that is not there (SB3 would fall back to the CPU without a word)."""
    if device in ("cpu", "auto"):  # "auto": SB3's documented choice, the GPU if there is one
        return
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise ValueError(
            f"--device: {device!r} is not a torch device; use 'cpu' (the default), 'cuda', "
            "'cuda:N' or 'auto'"
        ) from None
    fix = "use --device cpu (the default: these small networks train fastest on one CPU core)"
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            build = "a CPU-only build" if torch.version.cuda is None else "no GPU visible"
            raise ValueError(
                f"--device {device}: torch {torch.__version__} ({build}) has no CUDA device; {fix}"
            )
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(
                f"--device {device}: only {torch.cuda.device_count()} CUDA device(s) are visible"
            )
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"--device {device}: the MPS backend is not available here; {fix}")


# ---------------------------------------------------------------------------------------------
# the run directory
# ---------------------------------------------------------------------------------------------
#: what a run directory holds once a run has started (args.json is written with the first of them)
RUN_FILES = ("checkpoints", "evaluations.jsonl", "best_model.zip", "final_model.zip",
             "summary.json", "references.json")  # fmt: skip


def check_resumable(out: Path) -> None:
    """``--resume`` needs the run's ``args.json``, its identity: without it the arguments (and
    the farm) would be guessed from the command line. An empty or new directory starts a run."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--output-dir {out}: is a file, not a run directory")
    if (out / "args.json").exists() or not out.is_dir():
        return
    found = [n for n in RUN_FILES if (out / n).exists()]
    if found:
        raise ValueError(
            f"--resume: {out} holds a run ({', '.join(found)}) but no args.json, the run's "
            "arguments and farm; it cannot be resumed without guessing them. Restore args.json, "
            "or start a new run in another --output-dir"
        )


def make_output_dir(output_dir: str) -> Path:
    """Create ``--output-dir`` (and its parents), naming the option when it cannot be: a file,
    a path under a file, or a directory without write permission (found by the lock file)."""
    out = Path(output_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--output-dir {out}: is a file, not a directory; choose another path")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        above = next((p for p in out.parents if p.exists() and not p.is_dir()), out.parent)
        raise ValueError(
            f"--output-dir {out}: cannot be created, {above} is a file; choose another path"
        ) from None
    except OSError as err:
        raise ValueError(
            f"--output-dir {out}: cannot be created ({err.strerror}); choose a writable path"
        ) from None
    return out


def check_output_dir(output_dir: str, resume: bool) -> None:
    """A new run must not overwrite another run's checkpoints."""
    if not resume and latest_checkpoint(Path(output_dir) / "checkpoints") is not None:
        raise ValueError(
            f"--output-dir {output_dir} already holds a run; pass --resume to continue it, "
            "or choose another --output-dir"
        )
