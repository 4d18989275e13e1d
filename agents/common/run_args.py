"""``train.py``'s arguments: one typed dataclass per trainer, and how a run's values are resolved.

* :class:`CommonArgs`: what every trainer reads (the farm, the seed, the run directory, the
  network's shape, the output). :class:`PPOArgs` (``--trainer ppo``, ``serverfarm_gym.agents.ppo.run``) and
  :class:`Sb3Args` (``--trainer sb3``, ``serverfarm_gym.agents.ppo_sb3.train``) add their own options, with
  their own defaults: the PPO trainer's settings marked *derived* have no default, they come
  from the farm (``serverfarm_gym.agents.common.farm_settings.derive_settings``).
* The command line (:func:`build_parser`) has one option per field of the three classes; an
  option of the other trainer is accepted only at its "not used" value (``PPO_UNUSED``,
  ``SB3_UNUSED``; ``serverfarm_gym.agents.common.run_checks``) and refused by name otherwise.
* Precedence (:func:`resolve_args`): the trainer's defaults < the settings derived from the farm
  (ppo) < the hyperparameter file's entries (ppo: ``default``, ``<scenario>``,
  ``<scenario>:<mode>``; sb3: ``sb3``, ``sb3:<scenario>``, ``sb3:<scenario>:<mode>``) < the
  command line. ``--args-file`` (an earlier run's ``args.json``) replaces the file's entries;
  ``--resume`` takes the run's ``args.json`` whole, only ``RESUME_OVERRIDABLE`` may change.

The farm is loaded once and its settings derived once per run (:class:`ResolvedRun` carries
both to the trainer).
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from serverfarm_gym.agents.common.farm_settings import derive_action_mode, derive_settings
from serverfarm_gym.agents.common.run_checks import (
    PPO_UNUSED,
    SB3_UNUSED,
    check_args,
    check_resumable,
    check_trainer,
)
from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.mapping_files import load_mapping_file
from serverfarm_gym.envs.observation import check_action_mode
from serverfarm_gym.envs.scenarios import PRESETS, load_scenario

__all__ = ["DEFAULT_HYPERPARAMS", "RESUME_OVERRIDABLE", "CommonArgs", "PPOArgs", "ResolvedRun", "Sb3Args",
           "build_parser", "default_output_dir", "load_hyperparams", "resolve_args", "saved_args",
           "scenario_key"]  # fmt: skip

#: the project's root (the hyperparameter file's path is relative to it)
ROOT = Path(__file__).resolve().parents[2]
#: the shipped hyperparameter file: hyperparams/ in a source checkout; in an installed wheel
#: (ROOT is the serverfarm_gym package there) beside the scripts, in _scripts/hyperparams/
DEFAULT_HYPERPARAMS = next(
    (p for p in (ROOT / "hyperparams" / "ppo.yml", ROOT / "_scripts" / "hyperparams" / "ppo.yml")
     if p.is_file()),
    ROOT / "hyperparams" / "ppo.yml",
)  # fmt: skip
#: options that may change when a run is resumed (the rest must match the saved args.json)
RESUME_OVERRIDABLE = ("total_timesteps", "progress_bar", "verbose", "vec_env", "final_eval_epochs")
#: options no hyperparameter file may set
NOT_IN_FILES = ("scenario", "hyperparams", "output_dir", "resume", "args_file", "trainer")


def _opt(default: Any, text: str) -> Any:
    return field(default=default, metadata={"help": text})


def _derived(text: str) -> Any:
    """A PPO setting without a default: derived from the farm (farm_settings.derive_settings)."""
    return field(metadata={"help": text, "derived": True})


@dataclass(kw_only=True)
class CommonArgs:
    """Options of every trainer."""

    scenario: str = _opt("tiny", "preset name or scenario file path")
    trainer: str = _opt("ppo", "'ppo' (fast masked PPO on the vector env) or 'sb3' (MaskablePPO)")
    action_mode: str = _opt("auto", "'server', 'group' or 'auto' (derived from the farm)")
    seed: int = _opt(0, "seed of the model and the envs")
    net_arch: str = _opt("64,64", "hidden layer sizes of the policy and value MLPs")
    activation: str = _opt("tanh", "'tanh' or 'relu'")
    lr_schedule: str = _opt("linear", "'constant' or 'linear' (decays to 0)")
    clip_range: float = _opt(0.2, "PPO clip range")
    ent_coef: float = _opt(0.0, "entropy bonus coefficient")
    vf_coef: float = _opt(0.5, "value loss coefficient")
    max_grad_norm: float = _opt(0.5, "gradient clipping norm")
    reward_eta: str = _opt("running", "'running' or a fixed eta (a number)")
    eta_tau: float = _opt(10_000.0, "memory of the running eta")
    output_dir: str = _opt("", "run directory (default runs/<scenario>-<mode>-s<seed>)")
    hyperparams: str = _opt(
        str(DEFAULT_HYPERPARAMS.relative_to(ROOT)), "RL-Zoo style YAML file, or 'none'"
    )
    args_file: str = _opt("", "args.json of an earlier run to replay (CLI still overrides)")
    resume: bool = _opt(
        False,
        "continue the run in --output-dir from its last checkpoint (needs its args.json; the "
        "farm must be the one it records)",
    )
    progress_bar: bool = _opt(True, "show a progress bar")
    tensorboard: bool = _opt(True, "write TensorBoard logs")
    device: str = _opt("cpu", "torch device")
    torch_threads: int = _opt(1, "torch CPU threads (small MLPs: 1 is fastest)")
    verbose: int = _opt(0, "0 quiet, 1 the evaluations (sb3: tables)")


@dataclass(kw_only=True)
class PPOArgs(CommonArgs):
    """``--trainer ppo`` (serverfarm_gym.agents.ppo.run.train_ppo): the settings without a default are
    derived from the farm; a hyperparameter file or the command line may replace them."""

    server_network: str = _opt(
        "tied",
        "server actions: 'tied' (one network over (group, level) pairs, shared by a group's "
        "exchangeable servers; the job goes to the smallest allowed server of the chosen pair) "
        "or 'mlp' (one output per server)",
    )
    objective: str = _opt(
        "energy",
        "what the env's reward and every evaluation measure: 'energy' (jobs per unit energy) "
        "or 'cost' (jobs per unit of energy cost, with the scenario's prices; always simulated, "
        "no optimum or bound)",
    )
    train_scale: int = _derived(
        "group network: train on the farm scaled down this many times (FarmConfig.scaled_down: "
        "the same spaces), evaluate on the farm itself; 1: train on the farm (large farms train "
        "on a twin of ~120 decisions per duration)"
    )
    slo_step: float = _opt(
        -1.0,
        "a scenario with an SLO: step size of the dual ascent on the reward's multiplier beta "
        "between rollouts, in units of beta per relative violation of D (-1: 1/D, beta's own "
        "default; 0: beta held at 1/D)",
    )
    init: str = _derived(
        "the policy cloned before PPO starts: 'pas' (PAS's decisions), 'best-priority' (the "
        "best static priority table, searched against the farm first), 'generalist' (the "
        "shipped farm-agnostic network, distilled), or 'random'"
    )
    pas_confidence: float = _derived(
        "a cloned --init: after cloning, how far the sampling policy's probability of the "
        "cloned policy's action is from uniform (0) to certain (1), on average (the logits are "
        "scaled; the deterministic policy stays the clone's)"
    )
    advantage: str = _derived(
        "'discounted' (GAE with --gamma), 'average' (no discount) or 'afterstate' (no discount, "
        "the value of the farm after the placement)"
    )
    total_timesteps: int = _derived("environment steps in total")
    n_envs: int = _derived("parallel environments")
    learning_rate: float = _derived("Adam learning rate")
    gamma: float = _derived("discount factor")
    gae_lambda: float = _derived("GAE lambda")
    n_steps: int = _derived("steps per env per rollout")
    batch_size: int = _derived("minibatch size")
    n_epochs: int = _derived("optimisation epochs per rollout")
    warmup_epochs: int = _derived("PAS warm-up epochs at each env reset")
    eval_freq: int = _derived("timesteps between evaluations")
    eval_epochs: int = _derived("epochs per replication of a simulated evaluation")
    eval_replications: int = _derived("replications per evaluation")
    eval_exact: bool = _derived("evaluate exactly (CTMC) when the farm is small enough")
    final_eval_epochs: int = _derived("epochs per replication of the final simulated evaluation")
    checkpoint_freq: int = _derived("timesteps between checkpoints")


@dataclass(kw_only=True)
class Sb3Args(CommonArgs):
    """``--trainer sb3`` (serverfarm_gym.agents.ppo_sb3.train.train_sb3, MaskablePPO from a random policy)."""

    total_timesteps: int = _opt(150_000, "environment steps in total")
    n_envs: int = _opt(4, "parallel environments")
    vec_env: str = _opt("dummy", "'dummy' (in-process) or 'subproc' vectorisation")
    learning_rate: float = _opt(3e-4, "Adam learning rate")
    gamma: float = _opt(0.9, "discount factor")
    gae_lambda: float = _opt(0.95, "GAE lambda")
    n_steps: int = _opt(1024, "steps per env per rollout")
    batch_size: int = _opt(64, "minibatch size")
    n_epochs: int = _opt(10, "optimisation epochs per rollout")
    target_kl: float = _opt(0.0, "stop an update early above this KL (0: never)")
    reward: str = _opt(
        "env",
        "'env' (the env's reward: integral of W - eta*P to the next decision) or 'expected' "
        "(W - eta*P of the next decision's state over its decision rate: same long-run average, "
        "no exponential-duration noise; see docs/training.md)",
    )
    normalize_reward: bool = _opt(False, "wrap in VecNormalize(norm_obs=False, norm_reward=True)")
    episode_steps: int = _opt(0, "truncate episodes after this many steps (0: continuing)")
    warmup_epochs: int = _opt(
        -1, "PAS warm-up epochs at each env reset (-1: 50 mean job durations, >= 1000)"
    )
    eval_freq: int = _opt(10_000, "timesteps between evaluations")
    eval_epochs: int = _opt(20_000, "epochs per replication of a simulated evaluation")
    eval_replications: int = _opt(8, "replications per evaluation")
    eval_exact: bool = _opt(True, "evaluate exactly (CTMC) when the farm is small enough")
    final_eval_epochs: int = _opt(
        100_000, "epochs per replication of the final simulated evaluation"
    )
    checkpoint_freq: int = _opt(25_000, "timesteps between checkpoints")


ROUTES: dict[str, type[CommonArgs]] = {"ppo": PPOArgs, "sb3": Sb3Args}
#: every option: the PPO trainer's field where both trainers have one
FIELDS = {f.name: f for cls in (Sb3Args, PPOArgs) for f in dataclasses.fields(cls)}
#: a field missing from an args.json written before it existed: the value such runs trained with
SAVED_DEFAULTS = {"init": "pas", "pas_confidence": 0.2, "advantage": "discounted", "train_scale": 1}


def _defaults(cls: type[CommonArgs]) -> dict[str, Any]:
    return {f.name: f.default for f in dataclasses.fields(cls) if "derived" not in f.metadata}


def _help(name: str) -> str:
    ppo = {f.name: f for f in dataclasses.fields(PPOArgs)}
    sb3 = {f.name: f for f in dataclasses.fields(Sb3Args)}
    text = FIELDS[name].metadata["help"]
    if name not in sb3:
        where = "derived from the farm" if "derived" in ppo[name].metadata else ppo[name].default
        return f"ppo: {text} (default: {where})"
    if name not in ppo:
        return f"sb3: {text} (default: {sb3[name].default})"
    if "derived" in ppo[name].metadata:
        return f"{text} (default: ppo derived from the farm, sb3 {sb3[name].default})"
    return f"{text} (default: {sb3[name].default})"


def build_parser() -> argparse.ArgumentParser:
    """One option per field of the trainers' arguments (``--no-X`` for the booleans); a value
    not given is ``None`` (the precedence fills it in)."""
    parser = argparse.ArgumentParser(
        prog="train.py",
        description="Train a masked PPO dispatcher on a server-farm scenario (see "
        "docs/training.md). With the PPO trainer the settings derived from the farm (printed at "
        "the start) are the defaults, the hyperparameter file (--hyperparams) overrides those "
        "per scenario, and options given here override the file. 'python train.py "
        "token-generalist ...' and 'python train.py table-generalist STAGE ...' train the "
        "farm-agnostic generalists instead (their own options: token-generalist -h, "
        "table-generalist -h).",
    )
    for name, f in FIELDS.items():
        opt = "--" + name.replace("_", "-")
        if f.type == "bool":
            parser.add_argument(
                opt, action=argparse.BooleanOptionalAction, default=None, help=_help(name)
            )
        else:
            conv = {"int": int, "float": float}.get(str(f.type), str)
            parser.add_argument(opt, type=conv, default=None, help=_help(name))
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
    path: str | Path, scenario_key: str, action_mode: str, trainer: str = "ppo"
) -> dict[str, Any]:
    """Merged settings for a scenario from an RL-Zoo style YAML file; an empty dict for ``none``.

    The PPO trainer reads ``default``, then the scenario's entry, then ``<scenario>:<mode>``;
    the sb3 trainer ``sb3``, ``sb3:<scenario>``, ``sb3:<scenario>:<mode>`` (its settings are
    hand-tuned ones, which would be wrong for the PPO trainer)."""
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
    for k in NOT_IN_FILES:
        if k in out:
            raise ValueError(f"hyperparams: {k!r} cannot be set in a hyperparameter file")
    return out


def saved_args(path: str | Path) -> dict[str, Any]:
    """The fields of a saved ``args.json``; files written before the PPO trainer existed have
    no ``trainer``: they were MaskablePPO (sb3) runs; PPO runs from before ``server_network``
    trained one output per server (``mlp``); earlier versions named the PPO trainer ``lean``."""
    saved = load_mapping_file(path)
    out = {k: _coerce(k, v) for k, v in saved.items() if k in FIELDS}
    out.setdefault("trainer", "sb3")
    if out["trainer"] == "lean":
        out["trainer"] = "ppo"
    out.setdefault("server_network", "mlp")
    if out["trainer"] == "sb3":
        out = PPO_UNUSED | out
    return out


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


@dataclass
class ResolvedRun:
    """A run's arguments, its farm (loaded once) and, for the PPO trainer, the settings derived
    from it (``values``, ``reasons``, and ``overridden``: those a file or the command line
    replaced), derived once."""

    args: PPOArgs | Sb3Args
    config: FarmConfig
    derived: dict[str, Any] | None
    cli: dict[str, Any]


class _Farms:
    """Each scenario of a resolution loaded once."""

    def __init__(self) -> None:
        self._loaded: dict[str, FarmConfig] = {}

    def __call__(self, spec: str) -> FarmConfig:
        if spec not in self._loaded:
            self._loaded[spec] = load_scenario(spec)
        return self._loaded[spec]

    def mode(self, spec: str, mode: str) -> str:
        """``mode``, or for ``auto`` the farm's derived one."""
        return derive_action_mode(self(spec))[0] if mode == "auto" else mode


def _finish(
    flat: dict[str, Any], config: FarmConfig, cli: dict[str, Any], settings: Any = None
) -> ResolvedRun:
    """Validate the merged values (run_checks.check_args) and build the trainer's arguments."""
    ns = check_args(SimpleNamespace(**flat), config)
    if not ns.output_dir:
        ns.output_dir = default_output_dir(ns.scenario, ns.action_mode, ns.seed)
    cls = ROUTES[ns.trainer]
    args = cls(**{f.name: getattr(ns, f.name) for f in dataclasses.fields(cls)})
    derived = None
    if isinstance(args, PPOArgs):
        settings = settings or derive_settings(config, args.action_mode)
        values = settings.as_args()
        overridden = {k: getattr(args, k) for k, v in values.items() if getattr(args, k) != v}
        derived = {"values": values, "reasons": settings.reasons, "overridden": overridden}
    return ResolvedRun(args, config, derived, cli)


def _resume(out: Path, cli: dict[str, Any], farms: _Farms) -> ResolvedRun | None:
    """The saved run in ``out`` with the command line's ``RESUME_OVERRIDABLE`` options; None
    where ``out`` holds no ``args.json`` (a new run starts there)."""
    check_resumable(out)
    if not (out / "args.json").exists():
        return None
    saved = saved_args(out / "args.json")
    if saved["trainer"] == "ppo":  # the sb3 options it does not record are at "not used"
        saved = SB3_UNUSED | saved
    fixed = {k: v for k, v in cli.items() if k not in (*RESUME_OVERRIDABLE, "resume")}
    for k, v in fixed.items():
        if k in saved and k != "output_dir" and saved[k] != v:
            raise ValueError(
                f"--resume: --{k.replace('_', '-')} {v!r} differs from the run's saved "
                f"{saved[k]!r}; only {', '.join(RESUME_OVERRIDABLE)} may change on resume"
            )
    check_trainer(saved["trainer"])
    route = ROUTES[saved["trainer"]]
    flat = SB3_UNUSED | _defaults(Sb3Args) | _defaults(route) | SAVED_DEFAULTS
    flat |= saved | {k: cli[k] for k in RESUME_OVERRIDABLE if k in cli}
    flat.update(resume=True, output_dir=str(out))
    return _finish(flat, farms(flat["scenario"]), cli)


def resolve_args(argv: list[str] | None = None) -> ResolvedRun:
    """Parse the command line and merge it with the derived settings and the files (the module
    docstring's precedence); the farm is loaded and its settings derived once."""
    cli = {k: v for k, v in vars(build_parser().parse_args(argv)).items() if v is not None}
    base: dict[str, Any] = {}
    if cli.get("args_file"):
        base = saved_args(cli["args_file"])
        base.update(resume=False, args_file="")
    farms = _Farms()
    common = _defaults(CommonArgs)
    scenario = cli.get("scenario", base.get("scenario", common["scenario"]))
    mode = cli.get("action_mode", base.get("action_mode", common["action_mode"]))
    if cli.get("resume"):
        seed = cli.get("seed", base.get("seed", common["seed"]))
        out = cli.get("output_dir") or default_output_dir(
            scenario, farms.mode(scenario, mode), seed
        )
        resumed = _resume(Path(out), cli, farms)
        if resumed is not None:
            return resumed
    trainer = check_trainer(cli.get("trainer", base.get("trainer", common["trainer"])))
    config = farms(scenario)
    file_vals: dict[str, Any] = {}
    if not base:
        hp_file = cli.get("hyperparams", common["hyperparams"])
        key = scenario_key(scenario, config.name)
        file_vals = load_hyperparams(hp_file, key, farms.mode(scenario, mode), trainer)
        if "action_mode" in file_vals and "action_mode" not in cli:
            mode = file_vals["action_mode"]
            file_vals = load_hyperparams(hp_file, key, farms.mode(scenario, mode), trainer)
    mode = farms.mode(scenario, mode)
    settings = None
    if trainer == "ppo":  # derived from the farm, below anything given
        check_action_mode(mode)
        settings = derive_settings(config, mode)
        flat = SB3_UNUSED | _defaults(PPOArgs) | settings.as_args()
    else:
        flat = PPO_UNUSED | _defaults(Sb3Args)
    flat |= base | file_vals | cli | {"action_mode": mode}
    return _finish(flat, config, cli, settings)
