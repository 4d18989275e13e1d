"""Train a MaskablePPO dispatcher on a server-farm scenario and compare it with PAS and the optimum.

    python train.py                                   # the default job: preset "tiny", < 10 min
    python train.py --scenario small-2 --seed 1
    python train.py --scenario paper-100 --action-mode group --total-timesteps 1000000
    python train.py --scenario my_farm.yaml --hyperparams none --learning-rate 1e-4
    python train.py --output-dir runs/tiny-server-s0 --resume   # continue after a kill

Precedence of settings: the defaults of :class:`Args` < the hyperparameter file's ``default`` entry
< its entry for the scenario (preset name or the scenario file's ``name``) < its entry
``<scenario>:<action mode>`` < options given on the command line.

A run directory (``--output-dir``, default ``runs/<scenario>-<mode>-s<seed>``) receives
``args.json`` (the resolved arguments: replay a run with ``--args-file``), ``checkpoints/``,
``evaluations.jsonl``, TensorBoard logs in ``tb/``, ``best_model.zip`` and ``final_model.zip``
(each with its JSON sidecar for ``agents.ppo.PPOAgent.load``) and ``summary.json``.
See docs/training.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from agents.callbacks import (
    AtomicCheckpointCallback,
    EfficiencyEvalCallback,
    RolloutStatsCallback,
    latest_checkpoint,
    load_checkpoint,
    read_evaluations,
    save_model_atomic,
    saved_best_efficiency,
    vecnormalize_path,
)
from agents.ppo import atomic_write_json, model_predictor, write_sidecar
from agents.run_report import format_report, plot_learning_curves
from agents.wrappers import TrainingWrapper
from envs.files import load_mapping_file
from envs.observation import check_action_mode
from envs.scenarios import PRESETS, load_scenario
from envs.server_farm import ServerFarmEnv
from evaluation.cli import run_cli
from evaluation.harness import epochs_per_duration
from evaluation.measure import (
    EfficiencyEstimate,
    References,
    measure_efficiency,
    reference_efficiencies,
)
from evaluation.provenance import versions
from evaluation.stats import gaps

ROOT = Path(__file__).resolve().parent
DEFAULT_HYPERPARAMS = ROOT / "hyperparams" / "ppo.yml"

#: options that may change when a run is resumed (the rest must match the saved args.json)
RESUME_OVERRIDABLE = ("total_timesteps", "progress_bar", "verbose", "vec_env", "final_eval_epochs")


@dataclass
class Args:
    """Training arguments (CleanRL style: one flat dataclass, every field a CLI option)."""

    scenario: str = field(default="tiny", metadata={"help": "preset name or scenario file path"})
    action_mode: str = field(default="server", metadata={"help": "'server' or 'group'"})
    total_timesteps: int = field(default=150_000, metadata={"help": "environment steps in total"})
    n_envs: int = field(default=4, metadata={"help": "parallel environments"})
    vec_env: str = field(
        default="dummy", metadata={"help": "'dummy' (in-process) or 'subproc' vectorisation"}
    )
    seed: int = field(default=0, metadata={"help": "seed of the model and the envs"})
    net_arch: str = field(
        default="64,64", metadata={"help": "hidden layer sizes of the policy and value MLPs"}
    )
    activation: str = field(default="tanh", metadata={"help": "'tanh' or 'relu'"})
    learning_rate: float = field(default=3e-4, metadata={"help": "Adam learning rate"})
    lr_schedule: str = field(
        default="linear", metadata={"help": "'constant' or 'linear' (decays to 0)"}
    )
    gamma: float = field(default=0.9, metadata={"help": "discount factor"})
    gae_lambda: float = field(default=0.95, metadata={"help": "GAE lambda"})
    n_steps: int = field(default=1024, metadata={"help": "steps per env per rollout"})
    batch_size: int = field(default=64, metadata={"help": "minibatch size"})
    n_epochs: int = field(default=10, metadata={"help": "optimisation epochs per rollout"})
    clip_range: float = field(default=0.2, metadata={"help": "PPO clip range"})
    ent_coef: float = field(default=0.0, metadata={"help": "entropy bonus coefficient"})
    vf_coef: float = field(default=0.5, metadata={"help": "value loss coefficient"})
    max_grad_norm: float = field(default=0.5, metadata={"help": "gradient clipping norm"})
    target_kl: float = field(
        default=0.0, metadata={"help": "stop an update early above this KL (0: never)"}
    )
    reward: str = field(
        default="env",
        metadata={
            "help": "'env' (the env's reward: integral of W - eta*P to the next decision) or "
            "'expected' (W - eta*P of the next decision's state over its decision rate: same "
            "long-run average, no exponential-duration noise; see docs/training.md)"
        },
    )
    reward_eta: str = field(
        default="running", metadata={"help": "'running' or a fixed eta (a number)"}
    )
    eta_tau: float = field(default=10_000.0, metadata={"help": "memory of the running eta"})
    normalize_reward: bool = field(
        default=False, metadata={"help": "wrap in VecNormalize(norm_obs=False, norm_reward=True)"}
    )
    episode_steps: int = field(
        default=0, metadata={"help": "truncate episodes after this many steps (0: continuing)"}
    )
    warmup_epochs: int = field(
        default=-1,
        metadata={
            "help": "PAS warm-up epochs at each env reset (-1: 50 mean job durations, >= 1000)"
        },
    )
    eval_freq: int = field(default=10_000, metadata={"help": "timesteps between evaluations"})
    eval_epochs: int = field(
        default=20_000, metadata={"help": "epochs per replication of a simulated evaluation"}
    )
    eval_replications: int = field(default=8, metadata={"help": "replications per evaluation"})
    eval_exact: bool = field(
        default=True, metadata={"help": "evaluate exactly (CTMC) when the farm is small enough"}
    )
    final_eval_epochs: int = field(
        default=100_000,
        metadata={"help": "epochs per replication of the final simulated evaluation"},
    )
    checkpoint_freq: int = field(default=25_000, metadata={"help": "timesteps between checkpoints"})
    output_dir: str = field(
        default="", metadata={"help": "run directory (default runs/<scenario>-<mode>-s<seed>)"}
    )
    hyperparams: str = field(
        default=str(DEFAULT_HYPERPARAMS.relative_to(ROOT)),
        metadata={"help": "RL-Zoo style YAML file, or 'none'"},
    )
    args_file: str = field(
        default="", metadata={"help": "args.json of an earlier run to replay (CLI still overrides)"}
    )
    resume: bool = field(
        default=False,
        metadata={"help": "continue the run in --output-dir from its last checkpoint"},
    )
    progress_bar: bool = field(default=True, metadata={"help": "show a progress bar"})
    tensorboard: bool = field(default=True, metadata={"help": "write TensorBoard logs"})
    device: str = field(default="cpu", metadata={"help": "torch device"})
    torch_threads: int = field(
        default=1, metadata={"help": "torch CPU threads (small MLPs: 1 is fastest)"}
    )
    verbose: int = field(default=0, metadata={"help": "0 quiet, 1 sb3's tables and evaluations"})


FIELDS = {f.name: f for f in dataclasses.fields(Args)}


# ---------------------------------------------------------------------------------------------
# argument handling
# ---------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="train.py",
        description="Train MaskablePPO on a server-farm scenario (see docs/training.md). The "
        "defaults shown are train.Args'; the hyperparameter file (--hyperparams) overrides some "
        "of them per scenario, and options given here override the file.",
    )
    for f in dataclasses.fields(Args):
        opt = "--" + f.name.replace("_", "-")
        helptext = f.metadata.get("help", "") + f" (default: {f.default})"
        if f.type in ("bool", bool):
            parser.add_argument(
                opt, action=argparse.BooleanOptionalAction, default=None, help=helptext
            )
        else:
            conv = {"int": int, "float": float}.get(str(f.type), str)
            parser.add_argument(opt, type=conv, default=None, help=helptext)
    return parser


def _coerce(name: str, value: Any) -> Any:
    """Convert a value from a YAML/JSON file to the field's type, with a clear error."""
    if name not in FIELDS:
        raise ValueError(
            f"hyperparameters: unknown setting {name!r}; valid names are the train.py options "
            f"({', '.join(sorted(FIELDS))})"
        )
    t = str(FIELDS[name].type)
    try:
        if t == "bool":
            if not isinstance(value, bool):
                raise TypeError
            return value
        if t == "int":
            if isinstance(value, float) and not value.is_integer():
                raise TypeError
            return int(value)
        if t == "float":
            return float(value)
        return str(value)
    except (TypeError, ValueError):
        raise ValueError(f"hyperparameters: {name}={value!r} is not a valid {t}") from None


def load_hyperparams(path: str | Path, scenario_key: str, action_mode: str) -> dict[str, Any]:
    """Merged settings for a scenario from an RL-Zoo style YAML file (``default``, then the
    scenario's entry, then ``<scenario>:<mode>``); an empty dict for ``none``."""
    if str(path).lower() in ("", "none"):
        return {}
    p = Path(path)
    if not p.is_absolute() and not p.exists():
        p = ROOT / p
    if not p.exists():
        raise ValueError(f"hyperparams: file {path} not found (pass 'none' to use no file)")

    data = load_mapping_file(p)
    out: dict[str, Any] = {}
    for key in ("default", scenario_key, f"{scenario_key}:{action_mode}"):
        entry = data.get(key) or {}
        if not isinstance(entry, dict):
            raise ValueError(f"hyperparams: entry {key!r} in {p} must be a mapping")
        out.update({k: _coerce(k, v) for k, v in entry.items()})
    for k in ("scenario", "hyperparams", "output_dir", "resume", "args_file"):
        if k in out:
            raise ValueError(f"hyperparams: {k!r} cannot be set in a hyperparameter file")
    return out


def resolve_args(argv: list[str] | None = None) -> tuple[Args, dict[str, Any]]:
    """Parse the command line and merge it with the files; returns (args, explicit CLI values)."""
    cli = {k: v for k, v in vars(build_parser().parse_args(argv)).items() if v is not None}
    base: dict[str, Any] = {}

    if cli.get("args_file"):
        saved = load_mapping_file(cli["args_file"])
        base = {k: _coerce(k, v) for k, v in saved.items() if k in FIELDS}
        base.update(resume=False, args_file="")
    if cli.get("resume"):
        out = cli.get("output_dir") or default_output_dir(
            cli.get("scenario", base.get("scenario", Args.scenario)),
            cli.get("action_mode", base.get("action_mode", Args.action_mode)),
            cli.get("seed", base.get("seed", Args.seed)),
        )
        saved_path = Path(out) / "args.json"
        if saved_path.exists():
            saved = load_mapping_file(saved_path)
            fixed = {k: v for k, v in cli.items() if k not in (*RESUME_OVERRIDABLE, "resume")}
            for k, v in fixed.items():
                if k in saved and k != "output_dir" and _coerce(k, saved[k]) != v:
                    raise ValueError(
                        f"--resume: --{k.replace('_', '-')} {v!r} differs from the run's saved "
                        f"{saved[k]!r}; only {', '.join(RESUME_OVERRIDABLE)} may change on resume"
                    )
            args = Args(**{k: _coerce(k, v) for k, v in saved.items() if k in FIELDS})
            for k in RESUME_OVERRIDABLE:
                if k in cli:
                    setattr(args, k, cli[k])
            args.resume, args.output_dir = True, str(out)
            return check_args(args), cli
    scenario = cli.get("scenario", base.get("scenario", Args.scenario))
    mode = cli.get("action_mode", base.get("action_mode", Args.action_mode))
    hp_file = cli.get("hyperparams", base.get("hyperparams", Args.hyperparams))
    merged: dict[str, Any] = dict(base)
    if not base:
        key = scenario_key(scenario, load_scenario(scenario).name)
        file_vals = load_hyperparams(hp_file, key, mode)
        if "action_mode" in file_vals and "action_mode" not in cli:
            mode = file_vals["action_mode"]
            file_vals = load_hyperparams(hp_file, key, mode)
        merged.update(file_vals)
    merged.update(cli)
    return check_args(Args(**merged)), cli


def scenario_key(spec: str, config_name: str) -> str:
    """The hyperparameter-file key of a scenario: the preset name, or the file's scenario name."""

    return spec if spec in PRESETS else config_name


def default_output_dir(scenario: str, action_mode: str, seed: int) -> str:
    stem = (
        Path(scenario).stem
        if ("/" in scenario or scenario.endswith((".yaml", ".yml", ".json")))
        else scenario
    )
    return str(Path("runs") / f"{stem}-{action_mode}-s{seed}")


def check_args(a: Args) -> Args:
    """Validate values, naming the option and the fix."""

    check_action_mode(a.action_mode)
    if a.vec_env not in ("dummy", "subproc"):
        raise ValueError(f"--vec-env: choose 'dummy' or 'subproc', got {a.vec_env!r}")
    if a.reward not in ("env", "expected"):
        raise ValueError(f"--reward: choose 'env' or 'expected', got {a.reward!r}")
    if a.lr_schedule not in ("constant", "linear"):
        raise ValueError(f"--lr-schedule: choose 'constant' or 'linear', got {a.lr_schedule!r}")
    if a.activation not in ("tanh", "relu"):
        raise ValueError(f"--activation: choose 'tanh' or 'relu', got {a.activation!r}")
    if a.reward_eta != "running":
        try:
            eta = float(a.reward_eta)
        except ValueError:
            raise ValueError(
                f"--reward-eta: expected 'running' or a number, got {a.reward_eta!r}"
            ) from None
        if not (math.isfinite(eta) and eta >= 0):
            raise ValueError(f"--reward-eta: a fixed eta must be finite and >= 0, got {eta}")
    parse_net_arch(a.net_arch)
    check_device(a.device)
    for name in ("total_timesteps", "n_envs", "n_steps", "batch_size", "n_epochs"):
        if getattr(a, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')}: must be >= 1, got {getattr(a, name)}")
    if a.n_steps * a.n_envs < 2:
        raise ValueError("--n-steps x --n-envs: a rollout needs at least 2 samples")
    if a.batch_size > a.n_steps * a.n_envs:
        raise ValueError(
            f"--batch-size {a.batch_size} exceeds the rollout size n_steps x n_envs = "
            f"{a.n_steps * a.n_envs}; lower it or raise --n-steps"
        )
    if not 0 < a.gamma <= 1 or not 0 <= a.gae_lambda <= 1:
        raise ValueError("--gamma must be in (0, 1] and --gae-lambda in [0, 1]")
    if a.learning_rate <= 0:
        raise ValueError(f"--learning-rate: must be > 0, got {a.learning_rate}")
    if a.eval_replications < 2 and not a.eval_exact:
        raise ValueError("--eval-replications: at least 2 are needed for a confidence interval")
    if not a.output_dir:
        a.output_dir = default_output_dir(a.scenario, a.action_mode, a.seed)
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


def parse_net_arch(text: str) -> list[int]:
    try:
        sizes = [int(x) for x in str(text).replace(" ", "").split(",") if x]
    except ValueError:
        sizes = []
    if not sizes or any(s < 1 for s in sizes):
        raise ValueError(
            f"--net-arch: expected comma-separated layer sizes like '64,64', got {text!r}"
        )
    return sizes


# ---------------------------------------------------------------------------------------------
# environments and model
# ---------------------------------------------------------------------------------------------
def make_env_fn(config: Any, a: Args, rank: int):
    """Factory of one training env (picklable for SubprocVecEnv)."""

    def _init():
        if a.vec_env == "subproc":
            import multiprocessing
            import signal

            if multiprocessing.parent_process() is not None:
                # a worker process: Ctrl-C is the main process's to handle (it saves a
                # checkpoint); workers would each print a KeyboardInterrupt traceback
                signal.signal(signal.SIGINT, signal.SIG_IGN)
        eta: str | float = "running" if a.reward_eta == "running" else float(a.reward_eta)
        warmup = a.warmup_epochs
        if warmup < 0:  # the farm starts empty: reach steady state before learning from it
            warmup = max(1_000, math.ceil(50 * epochs_per_duration(config)))
        env: Any = ServerFarmEnv(
            config,
            action_mode=a.action_mode,
            reward_eta=eta,
            eta_tau=a.eta_tau,
            warmup_epochs=warmup,
        )
        env = TrainingWrapper(env, reward=a.reward)
        if a.episode_steps > 0:
            from gymnasium.wrappers import TimeLimit

            env = TimeLimit(env, max_episode_steps=a.episode_steps)
        return env

    return _init


def make_vec_env(config: Any, a: Args):
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    fns = [make_env_fn(config, a, i) for i in range(a.n_envs)]
    if a.vec_env == "subproc" and a.n_envs > 1:
        return SubprocVecEnv(fns)
    return DummyVecEnv(fns)


def new_model(a: Args, venv: Any, tb_dir: str | None):
    import torch
    from sb3_contrib import MaskablePPO

    sizes = parse_net_arch(a.net_arch)
    lr: Any = a.learning_rate
    if a.lr_schedule == "linear":
        lr = _LinearSchedule(a.learning_rate)
    return MaskablePPO(
        "MlpPolicy",
        venv,
        learning_rate=lr,
        n_steps=a.n_steps,
        batch_size=a.batch_size,
        n_epochs=a.n_epochs,
        gamma=a.gamma,
        gae_lambda=a.gae_lambda,
        clip_range=a.clip_range,
        ent_coef=a.ent_coef,
        vf_coef=a.vf_coef,
        max_grad_norm=a.max_grad_norm,
        target_kl=a.target_kl if a.target_kl > 0 else None,
        policy_kwargs={
            "net_arch": {"pi": sizes, "vf": sizes},
            "activation_fn": torch.nn.Tanh if a.activation == "tanh" else torch.nn.ReLU,
        },
        tensorboard_log=tb_dir,
        seed=a.seed,
        device=a.device,
        verbose=a.verbose,
    )


class _LinearSchedule:
    """lr * progress_remaining (a class, not a lambda, so that saved models load anywhere)."""

    def __init__(self, start: float):
        self.start = float(start)

    def __call__(self, progress_remaining: float) -> float:
        return self.start * progress_remaining


# ---------------------------------------------------------------------------------------------
# the job
# ---------------------------------------------------------------------------------------------
def train(a: Args) -> dict[str, Any]:
    """Run (or resume) one training job; returns the summary written to ``summary.json``."""
    import torch
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.callbacks import CallbackList, ProgressBarCallback
    from stable_baselines3.common.vec_env import VecNormalize

    t_start, cpu_start = time.perf_counter(), time.process_time()
    torch.set_num_threads(max(1, a.torch_threads))
    config = load_scenario(a.scenario)
    out = Path(a.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    ckpt_dir = out / "checkpoints"
    check_output_dir(a)
    venv = make_vec_env(config, a)
    tb_dir = str(out / "tb") if a.tensorboard else None
    loaded = None
    if a.resume:
        loaded = load_checkpoint(
            ckpt_dir,
            venv,
            device=a.device,
            normalize_reward=a.normalize_reward,
            gamma=a.gamma,
            tensorboard_log=tb_dir,
        )
    if a.resume and loaded is None:
        print(f"--resume: no checkpoint in {ckpt_dir}; starting a new run", file=sys.stderr)
    start_steps = 0
    if loaded is not None:
        model, venv, ckpt, start_steps = loaded
        if start_steps > a.total_timesteps:
            venv.close()
            raise ValueError(
                f"--resume: --total-timesteps {a.total_timesteps:,} is below the "
                f"{start_steps:,} timesteps of the run's checkpoint {ckpt}; a run cannot be "
                "shortened (its result is in summary.json): give a larger total to train on"
            )
        # fresh random streams for the continuation (the first ones were seeded with a.seed)
        model.set_random_seed(a.seed + model.num_timesteps)
        print(f"resuming {out} from {ckpt.name} ({model.num_timesteps} timesteps)")
    else:
        if a.normalize_reward:
            venv = VecNormalize(venv, norm_obs=False, norm_reward=True, gamma=a.gamma)
        model = new_model(a, venv, tb_dir)
    atomic_write_json(out / "args.json", dataclasses.asdict(a) | {"resume": False})

    # reference points, computed once per run directory
    ref_file = out / "references.json"
    if ref_file.exists():
        r = json.loads(ref_file.read_text())
        refs = References.from_dict(r)
    else:
        refs = reference_efficiencies(config)
        atomic_write_json(ref_file, refs.as_dict())

    sidecar = {"train_args": dataclasses.asdict(a)}
    best_path = out / "best_model.zip"

    def save_best(m: Any) -> None:
        path = save_model_atomic(m, best_path)
        write_sidecar(
            path,
            config,
            a.action_mode,
            timesteps=int(m.num_timesteps),
            eval_efficiency=evaluator.best_efficiency,
            **sidecar,
        )

    eval_log = out / "evaluations.jsonl"
    history = read_evaluations(eval_log) if loaded is not None else []
    measure = partial(
        measure_efficiency,
        config=config,
        action_mode=a.action_mode,
        exact=a.eval_exact,
        n_epochs=a.eval_epochs,
        replications=a.eval_replications,
        seed=1_000_000 + a.seed * 1000,  # evaluation streams distinct from training streams
    )
    evaluator = EfficiencyEvalCallback(
        lambda p: measure(p),
        refs,
        a.eval_freq,
        log_path=eval_log,
        save_best=save_best,
        history=history,
        best_efficiency=saved_best_efficiency(best_path, history) if loaded is not None else None,
        verbose=a.verbose,
    )
    checkpointer = AtomicCheckpointCallback(a.checkpoint_freq, ckpt_dir, verbose=a.verbose)
    # SB3's own progress bar, as a callback of ours so that an interruption can close it
    progress = ProgressBarCallback() if a.progress_bar else None
    callbacks = CallbackList(
        [RolloutStatsCallback(refs.pas.efficiency), evaluator, checkpointer]
        + ([progress] if progress is not None else [])
    )
    remaining = max(0, a.total_timesteps - start_steps)
    t_learn, cpu_learn = time.perf_counter(), time.process_time()
    if remaining > 0:
        try:
            model.learn(
                remaining,
                callback=callbacks,
                reset_num_timesteps=loaded is None,
                tb_log_name="ppo",
            )
        except KeyboardInterrupt:
            if progress is not None and getattr(progress, "pbar", None) is not None:
                progress.pbar.close()
            saved = checkpointer.save_interrupted()
            again = f"continue with: python train.py --output-dir {out} --resume"
            if saved is not None:
                what = f"saved checkpoint {saved[0]} ({saved[1]:,} timesteps)"
            elif loaded is not None:
                what = f"nothing trained since the checkpoint {ckpt} ({start_steps:,} timesteps)"
            else:
                what = "no policy update had finished, nothing to save"
                again = "run the same command again to start over"
            print(f"train.py: interrupted; {what}; {again}", file=sys.stderr)
            raise SystemExit(130) from None
    learn_s, learn_cpu_s = time.perf_counter() - t_learn, time.process_time() - cpu_learn
    final_path = save_model_atomic(model, out / "final_model.zip")
    write_sidecar(final_path, config, a.action_mode, timesteps=int(model.num_timesteps), **sidecar)
    if a.normalize_reward:
        model.get_vec_normalize_env().save(str(vecnormalize_path(final_path)))
    venv.close()

    # final measurement: exact where solvable; else long fresh-seed replications
    if not best_path.exists():  # e.g. evaluations disabled
        save_best(model)
    best = MaskablePPO.load(best_path, device=a.device)
    best_steps = json.loads((out / "best_model.json").read_text()).get("timesteps")
    final_kw = {
        "config": config,
        "action_mode": a.action_mode,
        "exact": a.eval_exact,
        "n_epochs": a.final_eval_epochs,
        "replications": max(2, a.eval_replications),
        "seed": 2_000_000 + a.seed * 1000,
    }
    est_best = measure_efficiency(model_predictor(best), **final_kw)
    est_final = measure_efficiency(model_predictor(model), **final_kw)
    pas, opt = refs.pas.efficiency, refs.optimum

    def report(est: EfficiencyEstimate) -> dict[str, Any]:
        return est.as_dict() | gaps(est.efficiency, pas, opt, refs.upper_bound)

    summary = {
        "scenario": config.name,
        "scenario_spec": a.scenario,
        "action_mode": a.action_mode,
        "seed": a.seed,
        "config": dataclasses.asdict(a),
        "versions": versions(),
        "timesteps": int(model.num_timesteps),
        "learn_wall_s": learn_s,
        "learn_cpu_s": learn_cpu_s,  # this process's CPU time: the wall time on an idle core
        "total_wall_s": time.perf_counter() - t_start,
        "total_cpu_s": time.process_time() - cpu_start,
        "resumed_from": start_steps if loaded is not None else None,
        "references": refs.as_dict(),
        "best": {"timesteps": best_steps, "path": str(best_path), **report(est_best)},
        "final": {"path": str(final_path), **report(est_final)},
        "best_eval_efficiency": evaluator.best_efficiency,
        "n_evaluations": len(evaluator.history),
        "gap_convention": "gap_to_pas_pct = 100 (ppo - pas) / pas (positive: PPO better); "
        "gap_to_optimum_pct / gap_to_bound_pct = 100 (X - ppo) / X (shortfall)",
        "paths": {"run_dir": str(out), "tensorboard": tb_dir, "evaluations": str(eval_log)},
    }
    plot_learning_curves([out], out / "learning_curve.png")
    summary["paths"]["learning_curve"] = str(out / "learning_curve.png")
    summary["total_wall_s"] = time.perf_counter() - t_start
    summary["total_cpu_s"] = time.process_time() - cpu_start
    atomic_write_json(out / "summary.json", summary)
    print(format_report(summary))
    return summary


def check_output_dir(a: Args) -> None:
    """A new run must not overwrite another run's checkpoints."""

    if not a.resume and latest_checkpoint(Path(a.output_dir) / "checkpoints") is not None:
        raise ValueError(
            f"--output-dir {a.output_dir} already holds a run; pass --resume to continue it, "
            "or choose another --output-dir"
        )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Command-line entry point; returns the run's summary. Bad settings or files exit with status
    2 and a one-line message (``evaluation.cli.run_cli``, as evaluate.py and sweep.py), Ctrl-C
    with 130 after saving a checkpoint."""

    result: dict[str, Any] = {}

    def run() -> None:
        args, _ = resolve_args(argv)
        check_output_dir(args)
        result.update(train(args))

    # Ctrl-C inside learn() is handled by train() (it saves a checkpoint); elsewhere (references,
    # final evaluation) every checkpoint saved so far is complete
    code = run_cli(
        build_parser(),
        run,
        interrupted="interrupted; the checkpoints saved so far are kept (--resume continues "
        "from the newest)",
    )
    if code:
        raise SystemExit(code)
    return result


if __name__ == "__main__":
    main()
