"""Train a masked PPO dispatcher on a server-farm scenario and compare it with PAS and the optimum.

    python train.py                                   # the default job: preset "tiny", ~1 min
    python train.py --scenario small-2 --seed 1
    python train.py --scenario my_farm.yaml           # settings derived from the farm
    python train.py --scenario paper-100 --init random --total-timesteps 1000000
    python train.py --trainer sb3                     # the reference: sb3-contrib MaskablePPO
    python train.py --output-dir runs/tiny-server-s0 --resume   # continue after a kill
    python train.py --generalist                      # the farm-agnostic generalist (docs/generalist.md)

Two trainers: ``lean`` (the default; ``agents.ppo.train``: the CleanRL-style masked PPO of
``agents.ppo.algorithm`` on the compiled vector env, many times the steps per CPU second; see
BENCHMARKS.md) and ``sb3`` (``agents.ppo_sb3.train``: sb3-contrib ``MaskablePPO`` on a
``DummyVecEnv``, the reference).

Precedence of settings, lean trainer: the defaults of :class:`Args` < the settings derived from
the farm (``agents.common.farm_settings.derive_settings``, printed with their reasons) < the
hyperparameter file's ``default`` entry < its entry for the scenario (preset name or the
scenario file's ``name``) < its entry ``<scenario>:<action mode>`` < options given on the
command line. The sb3 trainer reads the file's ``sb3``, ``sb3:<scenario>`` and
``sb3:<scenario>:<mode>`` entries instead, over the defaults of :class:`Args`.

A run directory (``--output-dir``, default ``runs/<scenario>-<mode>-s<seed>``) receives
``args.json`` (the resolved arguments: replay a run with ``--args-file``), ``checkpoints/``,
``evaluations.jsonl``, TensorBoard logs in ``tb/``, ``best_model.zip`` and ``final_model.zip``
(each with its JSON sidecar for ``agents.ppo.PPOAgent.load``) and ``summary.json``; while a run
is going, ``train.lock`` (its pid: a second run into the directory is refused, see
``agents.common.run_dir``). ``--resume`` needs ``args.json`` and the farm it records, unchanged.
See docs/training.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.common.checkpoints import atomic_write_json, latest_checkpoint
from agents.common.farm_settings import INITS, derive_settings
from agents.common.run_checks import check_numbers
from agents.common.run_dir import RunDirLock, check_resume_identity
from agents.common.run_report import format_report, plot_learning_curves
from agents.generalist.run import build_parser as build_generalist_parser
from agents.generalist.run import main as generalist_main
from agents.ppo.train import train_lean
from agents.ppo_sb3.train import parse_net_arch, train_sb3
from envs.files import load_mapping_file
from envs.observation import check_action_mode
from envs.scenarios import PRESETS, load_scenario
from evaluation.cli import run_cli

ROOT = Path(__file__).resolve().parent
DEFAULT_HYPERPARAMS = ROOT / "hyperparams" / "ppo.yml"

#: options that may change when a run is resumed (the rest must match the saved args.json)
RESUME_OVERRIDABLE = ("total_timesteps", "progress_bar", "verbose", "vec_env", "final_eval_epochs")


@dataclass
class Args:
    """Training arguments (CleanRL style: one flat dataclass, every field a CLI option)."""

    scenario: str = field(default="tiny", metadata={"help": "preset name or scenario file path"})
    trainer: str = field(
        default="lean",
        metadata={"help": "'lean' (fast masked PPO on the vector env) or 'sb3' (MaskablePPO)"},
    )
    action_mode: str = field(
        default="auto", metadata={"help": "'server', 'group' or 'auto' (derived from the farm)"}
    )
    server_network: str = field(
        default="tied",
        metadata={
            "help": "lean, server actions: 'tied' (one network over (group, level) pairs, shared "
            "by a group's exchangeable servers; the job goes to the smallest allowed server of "
            "the chosen pair) or 'mlp' (one output per server)"
        },
    )
    objective: str = field(
        default="energy",
        metadata={
            "help": "lean: what the env's reward and every evaluation measure: 'energy' (jobs "
            "per unit energy) or 'cost' (jobs per unit of energy cost, with the scenario's "
            "prices; always simulated, no optimum or bound)"
        },
    )
    train_scale: int = field(
        default=1,
        metadata={
            "help": "lean, group network: train on the farm scaled down this many times "
            "(FarmConfig.scaled_down: the same spaces), evaluate on the farm itself; 1: train "
            "on the farm (derived: large farms train on a twin of ~120 decisions per duration)"
        },
    )
    init: str = field(
        default="pas",
        metadata={
            "help": "lean: the policy cloned before PPO starts: 'pas' (PAS's decisions), "
            "'best-priority' (the best static priority table, searched against the farm first), "
            "'generalist' (the shipped farm-agnostic network, distilled), or 'random'"
        },
    )
    pas_confidence: float = field(
        default=0.2,
        metadata={
            "help": "lean, a cloned --init: after cloning, how far the sampling policy's "
            "probability of the cloned policy's action is from uniform (0) to certain (1), on "
            "average (the logits are scaled; the deterministic policy stays the clone's)"
        },
    )
    advantage: str = field(
        default="discounted",
        metadata={"help": "lean: 'discounted' (GAE with --gamma) or 'average' (no discount)"},
    )
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
        metadata={
            "help": "continue the run in --output-dir from its last checkpoint (needs its "
            "args.json; the farm must be the one it records)"
        },
    )
    progress_bar: bool = field(default=True, metadata={"help": "show a progress bar"})
    tensorboard: bool = field(default=True, metadata={"help": "write TensorBoard logs"})
    device: str = field(default="cpu", metadata={"help": "torch device"})
    torch_threads: int = field(
        default=1, metadata={"help": "torch CPU threads (small MLPs: 1 is fastest)"}
    )
    verbose: int = field(default=0, metadata={"help": "0 quiet, 1 the evaluations (sb3: tables)"})
    # ---- training to an SLO (lean; scenarios with slo: {mean_response_time: D}) -----------------
    slo_step: float = field(
        default=-1.0,
        metadata={
            "help": "lean, a scenario with an SLO: step size of the dual ascent on the reward's "
            "multiplier beta between rollouts, in units of beta per relative violation of D "
            "(-1: 1/D, beta's own default; 0: beta held at 1/D)"
        },
    )


FIELDS = {f.name: f for f in dataclasses.fields(Args)}


# ---------------------------------------------------------------------------------------------
# argument handling
# ---------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="train.py",
        description="Train a masked PPO dispatcher on a server-farm scenario (see "
        "docs/training.md). The defaults shown are train.Args'; with the lean trainer the "
        "settings derived from the farm (printed at the start) replace them, the hyperparameter "
        "file (--hyperparams) overrides those per scenario, and options given here override the "
        "file.",
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
        if t in ("int", "float") and isinstance(value, bool):
            raise TypeError  # YAML's true is no 1: a typo, not a count
        if t == "int":
            if isinstance(value, float) and not value.is_integer():
                raise TypeError
            return int(value)
        if t == "float":
            return float(value)
        return str(value)
    except (TypeError, ValueError):
        raise ValueError(f"hyperparameters: {name}={value!r} is not a valid {t}") from None


def load_hyperparams(
    path: str | Path, scenario_key: str, action_mode: str, trainer: str = "lean"
) -> dict[str, Any]:
    """Merged settings for a scenario from an RL-Zoo style YAML file; an empty dict for ``none``.

    The lean trainer reads ``default``, then the scenario's entry, then ``<scenario>:<mode>``;
    the sb3 trainer ``sb3``, ``sb3:<scenario>``, ``sb3:<scenario>:<mode>`` (its settings are
    today's hand-tuned ones, which would be wrong for the lean trainer)."""
    if str(path).lower() in ("", "none"):
        return {}
    p = Path(path)
    if not p.is_absolute() and not p.exists():
        p = ROOT / p
    if not p.exists():
        raise ValueError(f"hyperparams: file {path} not found (pass 'none' to use no file)")

    data = load_mapping_file(p)
    keys = ["default", scenario_key, f"{scenario_key}:{action_mode}"]
    if trainer == "sb3":
        keys = ["sb3", f"sb3:{scenario_key}", f"sb3:{scenario_key}:{action_mode}"]
    out: dict[str, Any] = {}
    for key in keys:
        entry = data.get(key) or {}
        if not isinstance(entry, dict):
            raise ValueError(f"hyperparams: entry {key!r} in {p} must be a mapping")
        out.update({k: _coerce(k, v) for k, v in entry.items()})
    for k in ("scenario", "hyperparams", "output_dir", "resume", "args_file", "trainer"):
        if k in out:
            raise ValueError(f"hyperparams: {k!r} cannot be set in a hyperparameter file")
    return out


def _saved_args(path: str | Path) -> dict[str, Any]:
    """The fields of a saved ``args.json``; files written before the lean trainer existed have
    no ``trainer``: they were MaskablePPO (sb3) runs; lean runs from before ``server_network``
    trained one output per server (``mlp``)."""
    saved = load_mapping_file(path)
    out = {k: _coerce(k, v) for k, v in saved.items() if k in FIELDS}
    out.setdefault("trainer", "sb3")
    out.setdefault("server_network", "mlp")
    if out["trainer"] == "sb3":
        out = LEAN_ONLY | out
    return out


def _mode(scenario: str, mode: str) -> str:
    """``mode``, or for ``auto`` the farm's derived one (agents.common.farm_settings)."""
    return derive_settings(load_scenario(scenario)).action_mode if mode == "auto" else mode


def resolve_args(argv: list[str] | None = None) -> tuple[Args, dict[str, Any]]:
    """Parse the command line and merge it with the derived settings and the files; returns
    (args, explicit CLI values)."""
    cli = {k: v for k, v in vars(build_parser().parse_args(argv)).items() if v is not None}
    base: dict[str, Any] = {}

    if cli.get("args_file"):
        base = _saved_args(cli["args_file"])
        base.update(resume=False, args_file="")
    scenario = cli.get("scenario", base.get("scenario", Args.scenario))
    mode = cli.get("action_mode", base.get("action_mode", Args.action_mode))
    if cli.get("resume"):
        seed = cli.get("seed", base.get("seed", Args.seed))
        out = cli.get("output_dir") or default_output_dir(scenario, _mode(scenario, mode), seed)
        saved_path = Path(out) / "args.json"
        _check_resumable(Path(out))
        if saved_path.exists():
            saved = _saved_args(saved_path)
            fixed = {k: v for k, v in cli.items() if k not in (*RESUME_OVERRIDABLE, "resume")}
            for k, v in fixed.items():
                if k in saved and k != "output_dir" and saved[k] != v:
                    raise ValueError(
                        f"--resume: --{k.replace('_', '-')} {v!r} differs from the run's saved "
                        f"{saved[k]!r}; only {', '.join(RESUME_OVERRIDABLE)} may change on resume"
                    )
            args = Args(**saved)
            for k in RESUME_OVERRIDABLE:
                if k in cli:
                    setattr(args, k, cli[k])
            args.resume, args.output_dir = True, str(out)
            return check_args(args), cli
    trainer = cli.get("trainer", base.get("trainer", Args.trainer))
    if trainer not in ("lean", "sb3"):
        raise ValueError(f"--trainer: choose 'lean' or 'sb3', got {trainer!r}")
    hp_file = cli.get("hyperparams", base.get("hyperparams", Args.hyperparams))
    config = load_scenario(scenario)
    file_vals: dict[str, Any] = {}
    if not base:
        key = scenario_key(scenario, config.name)
        file_vals = load_hyperparams(hp_file, key, _mode(scenario, mode), trainer)
        if "action_mode" in file_vals and "action_mode" not in cli:
            mode = file_vals["action_mode"]
            file_vals = load_hyperparams(hp_file, key, _mode(scenario, mode), trainer)
    mode = _mode(scenario, mode)
    merged: dict[str, Any] = {}
    if trainer == "lean":  # derived from the farm, below anything given
        merged.update(derive_settings(config, mode).as_args())
    else:
        merged.update(LEAN_ONLY)
    merged.update(base)
    merged.update(file_vals)
    merged.update(cli)
    merged["action_mode"] = mode
    return check_args(Args(**merged)), cli


#: what a run directory holds once a run has started (args.json is written with the first of them)
RUN_FILES = ("checkpoints", "evaluations.jsonl", "best_model.zip", "final_model.zip",
             "summary.json", "references.json")  # fmt: skip


def _check_resumable(out: Path) -> None:
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

    if a.trainer not in ("lean", "sb3"):
        raise ValueError(f"--trainer: choose 'lean' or 'sb3', got {a.trainer!r}")
    a.action_mode = _mode(a.scenario, a.action_mode)
    check_action_mode(a.action_mode)
    if a.server_network not in ("tied", "mlp"):
        raise ValueError(f"--server-network: choose 'tied' or 'mlp', got {a.server_network!r}")
    if a.objective not in ("energy", "cost"):
        raise ValueError(f"--objective: choose 'energy' or 'cost', got {a.objective!r}")
    if a.train_scale < 1:
        raise ValueError(f"--train-scale: must be >= 1 (1: the farm itself), got {a.train_scale}")
    if a.train_scale > 1 and (a.trainer != "lean" or a.action_mode != "group"):
        raise ValueError(
            f"--train-scale {a.train_scale}: only a group-action network of the lean trainer "
            "fits every size of a farm; use --action-mode group (and --trainer lean), or "
            "--train-scale 1"
        )
    if a.init not in INITS:
        raise ValueError(f"--init: choose one of {', '.join(INITS)}, got {a.init!r}")
    if not 0.0 < a.pas_confidence < 1.0:
        raise ValueError(f"--pas-confidence: must be in (0, 1), got {a.pas_confidence}")
    if a.advantage not in ("discounted", "average"):
        raise ValueError(f"--advantage: choose 'discounted' or 'average', got {a.advantage!r}")
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
    check_numbers(a)
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
    if a.trainer == "lean":
        check_lean_args(a)
    else:
        for k, v in LEAN_ONLY.items():
            if getattr(a, k) != v:
                raise ValueError(
                    f"--{k.replace('_', '-')} {getattr(a, k)}: an option of the lean trainer "
                    f"(MaskablePPO starts from a random policy, discounted, one output per server): "
                    "drop it or use "
                    "--trainer lean"
                )
    if not a.output_dir:
        a.output_dir = default_output_dir(a.scenario, a.action_mode, a.seed)
    return a


#: options of the sb3 trainer only, with the value that means "not used"
SB3_ONLY = {"vec_env": "dummy", "reward": "env", "normalize_reward": False, "episode_steps": 0,
            "target_kl": 0.0}  # fmt: skip
#: options of the lean trainer only (the sb3 trainer starts from a random policy, discounted)
LEAN_ONLY = {"init": "random", "advantage": "discounted", "server_network": "mlp",
             "objective": "energy"}  # fmt: skip


def check_lean_args(a: Args) -> None:
    """Options the lean trainer does not have are refused, not ignored."""
    for k, unused in SB3_ONLY.items():
        if getattr(a, k) != unused:
            raise ValueError(
                f"--{k.replace('_', '-')}: an option of --trainer sb3 only (the lean trainer "
                f"has no {k}); drop it or add --trainer sb3"
            )
    if a.device not in ("cpu", "auto"):
        raise ValueError(
            f"--device {a.device}: the lean trainer trains on the CPU (its 64x64 MLPs are "
            "fastest on one core, docs/training.md); use --device cpu, or --trainer sb3"
        )


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


def make_output_dir(a: Args) -> Path:
    """Create ``--output-dir`` (and its parents), naming the option when it cannot be: a file,
    a path under a file, or a directory without write permission (found by the lock file)."""
    out = Path(a.output_dir)
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


def check_output_dir(a: Args) -> None:
    """A new run must not overwrite another run's checkpoints."""

    if not a.resume and latest_checkpoint(Path(a.output_dir) / "checkpoints") is not None:
        raise ValueError(
            f"--output-dir {a.output_dir} already holds a run; pass --resume to continue it, "
            "or choose another --output-dir"
        )


def derived_settings(a: Args, config: Any) -> dict[str, Any]:
    """The settings derived from the farm, their reasons, and those the files or the command
    line replaced (printed at the start of a lean run, stored in its summary)."""
    auto = derive_settings(config)
    st = derive_settings(config, a.action_mode)
    if auto.action_mode == a.action_mode:
        st.reasons["action_mode"] = auto.reasons["action_mode"]
    derived = st.as_args()
    overridden = {k: getattr(a, k) for k, v in derived.items() if getattr(a, k) != v}
    return {"values": derived, "reasons": st.reasons, "overridden": overridden}


def train(a: Args) -> dict[str, Any]:
    """Run (or resume) one training job; writes ``summary.json``, prints the report and returns
    the summary."""
    out = make_output_dir(a)
    with RunDirLock(out):  # one process per run directory (agents.common.run_dir)
        return _train_locked(a)


def _train_locked(a: Args) -> dict[str, Any]:
    t_start, cpu_start = time.perf_counter(), time.process_time()
    check_output_dir(a)
    config = load_scenario(a.scenario)
    if a.resume:  # before anything is written: the farm must be the run's
        _check_resumable(Path(a.output_dir))
        check_resume_identity(Path(a.output_dir), config, a.scenario)
    if a.trainer == "lean":
        d = derived_settings(a, config)
        print(f"{config.name}: settings derived from the farm (agents/common/farm_settings.py), "
              "replaced where the hyperparameter file or the command line set them:")  # fmt: skip
        for k, v in d["values"].items():
            if k in d["overridden"]:
                print(f"  {k} = {d['overridden'][k]}  (set; derived {v}: {d['reasons'][k]})")
            else:
                print(f"  {k} = {v}  ({d['reasons'][k]})")
        summary = train_lean(a, config, d)
    else:
        summary = train_sb3(a)
    out = Path(a.output_dir)
    plot_learning_curves([out], out / "learning_curve.png")
    summary["paths"]["learning_curve"] = str(out / "learning_curve.png")
    summary["total_wall_s"] = time.perf_counter() - t_start
    summary["total_cpu_s"] = time.process_time() - cpu_start
    atomic_write_json(out / "summary.json", summary)
    print(format_report(summary))
    return summary


#: write errors that mean the disk (or the file system's file size, or a quota) is full
DISK_FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Command-line entry point; returns the run's summary. Bad settings or files exit with status
    2 and a one-line message (``evaluation.cli.run_cli``, as evaluate.py and sweep.py), Ctrl-C
    with 130 after saving a checkpoint."""

    result: dict[str, Any] = {}
    rest = sys.argv[1:] if argv is None else list(argv)
    if rest[:1] == ["--generalist"]:  # its own options (agents.generalist.run)
        generalist = build_generalist_parser()
        code = run_cli(generalist, lambda: result.update(generalist_main(rest[1:])))
        if code:
            raise SystemExit(code)
        return result

    def run() -> None:
        args, _ = resolve_args(argv)
        check_output_dir(args)
        try:
            result.update(train(args))
        except OSError as err:
            if err.errno not in DISK_FULL:
                raise
            # not bad input (exit 2) but no traceback either: the file and the cause, exit 1
            where = f"cannot write {err.filename}: " if err.filename else ""
            print(f"train.py: error: {where}{' '.join(str(err).split())}", file=sys.stderr)
            raise SystemExit(1) from None

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
