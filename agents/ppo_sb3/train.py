"""train.py's reference trainer (``--trainer sb3``): sb3-contrib ``MaskablePPO`` on a
``DummyVecEnv`` (or ``SubprocVecEnv``) of ``TrainingWrapper(ServerFarmEnv)``, with the callbacks
of ``serverfarm_gym.agents.ppo_sb3.callbacks`` (exact or simulated evaluations, atomic checkpoints, resume, Ctrl-C).

Kept as the reference implementation the PPO trainer (``serverfarm_gym.agents.ppo.run``, the default) is
measured against (BENCHMARKS.md, "Training throughput"): its per-step Python overhead limits it
to ~1,500 steps per CPU second.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from serverfarm_gym.agents.common.artefacts import read_json_object
from serverfarm_gym.agents.common.checkpoints import (
    TrainingDiverged,
    read_evaluations,
    save_model_atomic,
)
from serverfarm_gym.agents.common.run_checks import parse_net_arch
from serverfarm_gym.agents.common.run_dir import write_run_args
from serverfarm_gym.agents.ppo.agent import (
    PPOAgent,
    atomic_write_json,
    model_predictor,
    write_sidecar,
)
from serverfarm_gym.agents.ppo_sb3.callbacks import (
    AtomicCheckpointCallback,
    EfficiencyEvalCallback,
    FiniteGuardCallback,
    RolloutStatsCallback,
    load_checkpoint,
    save_vecnormalize,
    saved_best_efficiency,
    vecnormalize_path,
)
from serverfarm_gym.agents.ppo_sb3.wrappers import TrainingWrapper
from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.server_farm import ServerFarmEnv
from serverfarm_gym.evaluation.efficiency import (
    Estimate,
    References,
    reference_efficiencies,
    replication_seeds,
)
from serverfarm_gym.evaluation.efficiency import measure as measure_policy
from serverfarm_gym.evaluation.policy_report import epochs_per_duration
from serverfarm_gym.evaluation.provenance import versions
from serverfarm_gym.evaluation.stats import gaps

if TYPE_CHECKING:  # the resolved arguments of train.py (serverfarm_gym.agents.common.run_args)
    from serverfarm_gym.agents.common.run_args import Sb3Args

__all__ = ["make_vec_env", "new_model", "parse_net_arch", "train_sb3"]


# ---------------------------------------------------------------------------------------------
# environments and model
# ---------------------------------------------------------------------------------------------
def make_env_fn(config: FarmConfig, a: Sb3Args, rank: int):
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


def make_vec_env(config: FarmConfig, a: Sb3Args):
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    fns = [make_env_fn(config, a, i) for i in range(a.n_envs)]
    if a.vec_env == "subproc" and a.n_envs > 1:
        return SubprocVecEnv(fns)
    return DummyVecEnv(fns)


def new_model(a: Sb3Args, venv: Any, tb_dir: str | None):
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
@dataclass
class _Run:
    """One job's model, env and where it started (a checkpoint when resumed)."""

    model: Any
    venv: Any
    loaded: bool
    start_steps: int = 0
    ckpt: Path | None = None


def _open(a: Sb3Args, config: FarmConfig, out: Path, tb_dir: str | None) -> _Run:
    """The model to train: the newest checkpoint on ``--resume``, else a new one."""
    from stable_baselines3.common.vec_env import VecNormalize

    ckpt_dir = out / "checkpoints"
    venv = make_vec_env(config, a)
    loaded = None
    if a.resume:
        loaded = load_checkpoint(
            ckpt_dir,
            venv,
            lambda env: new_model(a, env, tb_dir),
            device=a.device,
            normalize_reward=a.normalize_reward,
            gamma=a.gamma,
        )
        if loaded is None:
            print(f"--resume: no checkpoint in {ckpt_dir}; starting a new run", file=sys.stderr)
    if loaded is None:
        if a.normalize_reward:
            venv = VecNormalize(venv, norm_obs=False, norm_reward=True, gamma=a.gamma)
        return _Run(new_model(a, venv, tb_dir), venv, loaded=False)
    # SB3 runs whole rollouts: a run ends at the total rounded up to them, and a checkpoint at
    # that step (a run interrupted in its final evaluation) finishes the run
    per = a.n_steps * a.n_envs
    end = max(1, math.ceil(a.total_timesteps / per)) * per
    model, venv, ckpt, start_steps = loaded
    if start_steps > end:
        venv.close()
        raise ValueError(
            f"--resume: --total-timesteps {a.total_timesteps:,} is below the {start_steps:,} "
            f"timesteps of the run's checkpoint {ckpt} (even rounded up to whole rollouts "
            f"of {per:,} steps: {end:,}); a run cannot be shortened (its result is in "
            "summary.json): give a larger total to train on"
        )
    # fresh random streams for the continuation (the first ones were seeded with a.seed)
    model.set_random_seed(a.seed + model.num_timesteps)
    print(f"resuming {out} from {ckpt.name} ({model.num_timesteps} timesteps)")
    return _Run(model, venv, True, start_steps, ckpt)


def _references(out: Path, config: FarmConfig) -> References:
    """PAS, the optimum and the bound, computed once per run directory."""
    ref_file = out / "references.json"
    if ref_file.exists():
        return References.from_dict(read_json_object(ref_file, "a references file"))
    refs = reference_efficiencies(config)
    atomic_write_json(ref_file, refs.as_dict())
    return refs


def _learn(
    a: Sb3Args, run: _Run, out: Path, callbacks: Any, progress: Any, checkpointer: Any
) -> None:
    """Train up to ``--total-timesteps``; Ctrl-C saves a checkpoint and exits 130, a diverged
    update stops naming the last finite checkpoint."""
    remaining = max(0, a.total_timesteps - run.start_steps)
    if remaining <= 0:
        return
    try:
        run.model.learn(
            remaining, callback=callbacks, reset_num_timesteps=not run.loaded, tb_log_name="ppo"
        )
    except (KeyboardInterrupt, TrainingDiverged) as err:
        if progress is not None and getattr(progress, "pbar", None) is not None:
            progress.pbar.close()
        # the snapshot of the latest rollout start precedes the update that diverged
        saved = checkpointer.save_interrupted()
        if isinstance(err, TrainingDiverged):
            kept = f"checkpoint {saved[0]}" if saved is not None else "the checkpoints"
            raise TrainingDiverged(f"{err}; kept {kept}, the last finite one") from None
        again = f"continue with: python train.py --output-dir {out} --resume"
        if saved is not None:
            what = f"saved checkpoint {saved[0]} ({saved[1]:,} timesteps)"
        elif run.loaded:
            what = (
                f"nothing trained since the checkpoint {run.ckpt} ({run.start_steps:,} timesteps)"
            )
        else:
            what = "no policy update had finished, nothing to save"
            again = "run the same command again to start over"
        print(f"train.py: interrupted; {what}; {again}", file=sys.stderr)
        raise SystemExit(130) from None


def _evaluator(
    a: Sb3Args, config: FarmConfig, out: Path, refs: References, run: _Run
) -> tuple[EfficiencyEvalCallback, Any, Any]:
    """The periodic evaluation, the measurement it uses and how it keeps ``best_model.zip``."""
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
    history = read_evaluations(eval_log) if run.loaded else []
    measure = partial(
        measure_policy,
        config=config,
        window=a.eval_epochs,
        # evaluation streams distinct from training streams
        seeds=replication_seeds(1_000_000 + a.seed * 1000, a.eval_replications),
        action_mode=a.action_mode,
        method="auto" if a.eval_exact else "env",
    )
    evaluator = EfficiencyEvalCallback(
        lambda p: measure(p),
        refs,
        a.eval_freq,
        log_path=eval_log,
        save_best=save_best,
        history=history,
        best_efficiency=saved_best_efficiency(best_path, history) if run.loaded else None,
        verbose=a.verbose,
    )
    return evaluator, measure, save_best


def train_sb3(a: Sb3Args, config: FarmConfig) -> dict[str, Any]:
    """Run (or resume) one MaskablePPO job described by train.py's resolved arguments ``a``
    (``serverfarm_gym.agents.common.run_args.Sb3Args``) on the farm ``config``; returns the summary (train.py
    writes ``summary.json`` and prints the report)."""
    import torch
    from stable_baselines3.common.callbacks import CallbackList, ProgressBarCallback

    torch.set_num_threads(max(1, a.torch_threads))
    out = Path(a.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    tb_dir = str(out / "tb") if a.tensorboard else None
    run = _open(a, config, out, tb_dir)
    write_run_args(out, a, config)
    refs = _references(out, config)
    evaluator, measure, save_best = _evaluator(a, config, out, refs, run)
    checkpointer = AtomicCheckpointCallback(
        a.checkpoint_freq, out / "checkpoints", verbose=a.verbose
    )
    # SB3's own progress bar, as a callback of ours so that an interruption can close it
    progress = ProgressBarCallback() if a.progress_bar else None
    # the guard first: a diverged model is neither evaluated nor saved
    callbacks = CallbackList(
        [FiniteGuardCallback(), RolloutStatsCallback(refs.pas.efficiency), evaluator, checkpointer]
        + ([progress] if progress is not None else [])
    )
    t_learn, cpu_learn = time.perf_counter(), time.process_time()
    _learn(a, run, out, callbacks, progress, checkpointer)
    learn_s, learn_cpu_s = time.perf_counter() - t_learn, time.process_time() - cpu_learn
    model = run.model
    final_path = save_model_atomic(model, out / "final_model.zip")
    write_sidecar(
        final_path, config, a.action_mode, timesteps=int(model.num_timesteps),
        train_args=dataclasses.asdict(a),
    )  # fmt: skip
    if a.normalize_reward:
        save_vecnormalize(model.get_vec_normalize_env(), vecnormalize_path(final_path))
    run.venv.close()
    # final measurement: exact where solvable; else long fresh-seed replications
    best_path = out / "best_model.zip"
    if not best_path.exists():  # e.g. removed: the final model, measured now, is the best known
        evaluator.best_efficiency = measure(model_predictor(model)).efficiency
        save_best(model)
    paths = {
        "run_dir": str(out),
        "tensorboard": tb_dir,
        "evaluations": str(out / "evaluations.jsonl"),
    }
    return _final_summary(
        a, config, run, refs, final_path, (learn_s, learn_cpu_s), evaluator, paths
    )


def _final_summary(
    a: Sb3Args, config: FarmConfig, run: _Run, refs: References, final_path: Path,
    learn: tuple[float, float], evaluator: EfficiencyEvalCallback, paths: dict[str, Any],
) -> dict[str, Any]:  # fmt: skip
    """The summary: the best and the final model measured on fresh seeds (exact where
    solvable), with their gaps to PAS, the optimum and the bound."""
    best_path = Path(a.output_dir) / "best_model.zip"
    best = PPOAgent.load(
        best_path, device=a.device
    )  # the one safe loader (serverfarm_gym.agents.common.artefacts)
    final_kw = {
        "config": config,
        "window": a.final_eval_epochs,
        "seeds": replication_seeds(2_000_000 + a.seed * 1000, max(2, a.eval_replications)),
        "action_mode": a.action_mode,
        "method": "auto" if a.eval_exact else "env",
    }
    est_best = measure_policy(best.predictor(), **final_kw)
    est_final = measure_policy(model_predictor(run.model), **final_kw)
    pas, opt = refs.pas.efficiency, refs.optimum

    def report(est: Estimate) -> dict[str, Any]:
        return est.as_dict() | gaps(est.efficiency, pas, opt, refs.upper_bound)

    return {
        "trainer": "sb3",
        "scenario": config.name,
        "scenario_spec": a.scenario,
        "action_mode": a.action_mode,
        "seed": a.seed,
        "config": dataclasses.asdict(a),
        "versions": versions(),
        "timesteps": int(run.model.num_timesteps),
        "learn_wall_s": learn[0],
        "learn_cpu_s": learn[1],  # this process's CPU time: the wall time on an idle core
        "resumed_from": run.start_steps if run.loaded else None,
        "references": refs.as_dict(),
        "best": {
            "timesteps": best.meta.get("timesteps"),
            "path": str(best_path),
            **report(est_best),
        },
        "final": {"path": str(final_path), **report(est_final)},
        "best_eval_efficiency": evaluator.best_efficiency,
        "n_evaluations": len(evaluator.history),
        "gap_convention": "gap_to_pas_pct = 100 (ppo - pas) / pas (positive: PPO better); "
        "gap_to_optimum_pct / gap_to_bound_pct = 100 (X - ppo) / X (shortfall)",
        "paths": paths,
    }
