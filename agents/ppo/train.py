"""train.py's default trainer: the lean masked PPO (``agents.ppo.algorithm``) with the run directory,
evaluations, best-model selection, checkpoints, resume and Ctrl-C of ``train.py``.

One job (:func:`train_lean`):

1. a new run builds the trainer and, with ``init="pas"``, fits the policy to PAS's decisions
   (``LeanPPO.clone_pas``) and checkpoints it at step 0; ``resume`` loads the newest checkpoint
   that loads (a damaged one is skipped with a warning);
2. the policy is evaluated at step 0, then every ``eval_freq`` steps and at the end, exactly
   where the per-server chain is small, else in the vector env with fixed seeds, paired with PAS
   on the same seeds (``evaluation.paired``); ``best_model.zip`` is replaced only by a model that
   is better than it (exact, or the paired 95% interval above 0);
3. the best and the final model are measured once more, on fresh seeds, next to PAS on the
   same seeds: the summary says whether PPO beats PAS significantly, is not significantly
   different, or is below.

The run directory has the layout of the SB3 trainer's (docs/training.md): ``args.json``,
``references.json``, ``evaluations.jsonl``, ``checkpoints/``, ``tb/``, ``best_model.zip``,
``final_model.zip`` (each with its sidecar for ``agents.ppo.PPOAgent.load``), ``summary.json``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import torch

from agents.common.artefacts import read_json_object, read_model_sidecar
from agents.common.checkpoints import (
    TrainingDiverged,
    read_evaluations,
)
from agents.common.farm_settings import policy_warmup
from agents.common.run_dir import write_run_args
from agents.ppo.agent import PPOAgent, atomic_write_json, sidecar_path
from agents.ppo.algorithm import numpy_predictor
from agents.ppo.trainer import (
    LeanTrainer,
    ProgressBar,
    Snapshot,
    checkpoint_path,
    lean_config,
    load_newest,
    network_mode,
    prune_checkpoints,
)
from baselines.best_priority import BestPriorityPolicy
from baselines.priority import PriorityPolicy
from baselines.registry import make_policy
from envs.config import FarmConfig
from envs.symmetry import GroupView
from evaluation.exact import exact_solvable
from evaluation.measure import Estimate, References
from evaluation.paired import (
    BestModelSelector,
    PairedComparison,
    PairedEvaluator,
    compare,
    estimate_as_dict,
    estimate_from_dict,
)
from evaluation.provenance import versions
from evaluation.references import reference_values
from evaluation.stats import gaps

__all__ = ["LeanTrainer", "lean_config", "network_mode", "train_lean"]

START_MODEL = "start_model.zip"  # the clone (or random start) before PPO, kept for the confirmation


def _strongest_start(
    a: Any, config: FarmConfig, trainer: LeanTrainer, evaluator: PairedEvaluator
) -> tuple[Any, str]:
    """(teacher, line): the policy to clone on a simulated farm with ``init="best-priority"``:
    the searched table, PAS, or (cost objective) price-aware PAS, whichever measures best on
    the evaluator's seeds, paired with PAS. Why: the search measures energy efficiency on its
    own sample path, so on another objective, or by chance, its table can start a run below
    PAS, and the kept model never falls below the start. The table searched on a twin is
    measured on the farm itself (the same groups and levels)."""
    names = ["best-priority", "pas"] + (["pas-price"] if a.objective == "cost" else [])
    # the table is searched on the objective the run measures (a table that is good in energy
    # can be worse than PAS in energy cost, when prices vary across groups and hours)
    searched = BestPriorityPolicy(
        trainer.config, trainer.cfg.action_mode, search_objective=a.objective
    )
    teachers = {n: trainer.teacher(searched if n == "best-priority" else n) for n in names}
    pas_est, scores = evaluator.pas, {}
    for n, t in teachers.items():
        if n == "pas":
            scores[n] = 0.0
            continue
        on_farm = t
        if trainer.config is not config:  # a twin's policy, measured on the farm itself
            # the twin's searched table; a fixed rule (price-aware PAS, which may follow the
            # interval and then has no single table) is built for the farm itself
            on_farm = (
                PriorityPolicy(config, evaluator.action_mode, table=t.priority_table())
                if n == "best-priority"
                else make_policy(n, config, evaluator.action_mode)
            )
        scores[n] = compare(evaluator.measure(on_farm), pas_est).gap_pct
    best = max(names, key=lambda n: (scores[n], n == "pas"))  # ties: PAS
    line = ", ".join(f"{n} {scores[n]:+.3f}%" for n in names if n != "pas")
    return teachers[best], (
        f"start: measured against PAS (paired, {evaluator.replications} replications): {line}; "
        f"cloning {best}"
    )


def _references(config: FarmConfig, pas: Estimate, objective: str) -> References:
    if objective != "energy":  # the optimum and the bound are of jobs per unit energy
        why = f"not computed for the {objective} objective (they are of jobs per unit energy)"
        return References(pas, None, why, None, why)
    refs = reference_values(config, compute_optimum=True)
    opt, bound = refs["optimum"], refs["upper_bound"]
    return References(
        pas,
        None if opt is None else float(opt["efficiency"]),
        f"not computable ({refs['optimum_reason']})" if opt is None else f"exact ({opt['source']})",
        None if bound is None else float(bound["efficiency"]),
        bound["source"] if bound is not None else f"not computable: {refs['upper_bound_reason']}",
    )


def _plain(est: Estimate) -> Estimate:
    return Estimate(est.efficiency, est.ci95, est.method, est.epochs, est.replications)


def train_lean(a: Any, config: FarmConfig, derived: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run (or resume, ``a.resume``) one lean training job described by train.py's resolved
    arguments ``a``; returns the summary written to ``summary.json``. ``derived`` (the derived
    settings and their reasons) is stored in the summary.

    Raises:
        ValueError: a resume to fewer timesteps than its checkpoint, or no loadable checkpoint.
        SystemExit(130): after Ctrl-C inside training (a checkpoint is saved first).
    """
    torch.set_num_threads(max(1, a.torch_threads))
    out = Path(a.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    ckpt_dir = out / "checkpoints"
    ckpt_dir.mkdir(exist_ok=True)
    # every saved model serves train.py's action mode (a tied network acts on servers)
    # ... and the farm itself, also when training on its scaled-down twin (a.train_scale)
    side = {"train_args": dataclasses.asdict(a), "action_mode": a.action_mode, "config": config}
    net_mode = network_mode(a)
    view = GroupView(config) if net_mode != a.action_mode else None
    # the exact solver measures energy efficiency: another objective is simulated
    exact = bool(a.eval_exact) and exact_solvable(config) and a.objective == "energy"
    warm = policy_warmup(config)
    # during training the network is measured in its own encoding (for a tied network the
    # group-mode env: the same trajectories, without the per-step view); the final verdict
    # measures the saved model in train.py's action mode
    evaluator = PairedEvaluator(
        config, net_mode, exact, n_epochs=a.eval_epochs, replications=a.eval_replications,
        seed=1_000_000 + a.seed * 1000, warmup_epochs=a.warmup_epochs, policy_warmup=warm,
        objective=a.objective,
    )  # fmt: skip
    loaded = load_newest(ckpt_dir, a) if a.resume else None
    if a.resume and loaded is None:
        print(f"--resume: no checkpoint in {ckpt_dir}; starting a new run", file=sys.stderr)
    per = a.n_steps * a.n_envs
    # training runs whole rollouts: a run ends at the total rounded up to them, and a
    # checkpoint at that step (a run interrupted in its final evaluation) finishes the run
    end = max(1, math.ceil(a.total_timesteps / per)) * per if a.total_timesteps > 0 else 0
    if loaded is not None:
        trainer, ckpt, start = loaded
        if start > end:
            raise ValueError(
                f"--resume: --total-timesteps {a.total_timesteps:,} is below the {start:,} "
                f"timesteps of the run's checkpoint {ckpt} (even rounded up to whole rollouts "
                f"of {per:,} steps: {end:,}); a run cannot be shortened (its result is in "
                "summary.json): give a larger total to train on"
            )
        print(f"resuming {out} from {ckpt.name} ({start} timesteps)")
        # the first run's start, which its checkpoints' sidecars keep
        started_from = json.loads(sidecar_path(ckpt).read_text()).get("started_from")
        side["started_from"] = started_from
    else:
        started_from = "random"
        twin = config.scaled_down(a.train_scale) if a.train_scale > 1 else config
        trainer, start = LeanTrainer(twin, lean_config(a)), 0
        if a.init != "random":
            t0 = time.process_time()
            if a.init == "best-priority" and not exact:  # the stronger of it and PAS
                teacher, line = _strongest_start(a, config, trainer, evaluator)
                print(line)
            else:  # PAS, or a searched / pretrained policy
                teacher = trainer.teacher(a.init)
            # a few thousand decisions per env cover the states the teacher visits; on a
            # time-varying farm, a whole cycle of the schedule (the loads and mixes of every
            # interval: a clone fitted on part of the cycle imitates the teacher only there)
            clone_steps = 16_384
            if trainer.config.is_time_varying:
                clone_steps = max(clone_steps, math.ceil(trainer.config.cycle_arrivals))
            clone = trainer.clone_pas(n_steps=max(64, math.ceil(clone_steps / a.n_envs)),
                                      teacher=teacher)  # fmt: skip
            scale = trainer.soften(a.pas_confidence, teacher=teacher)
            started_from = str(getattr(teacher, "name", a.init))
            print(f"init: {started_from} clone, accuracy {clone['accuracy']:.4f} on "
                  f"{clone['samples']:,} decisions; logits scaled by {scale:.3g}: its "
                  f"action sampled {a.pas_confidence:g} of the way from uniform to certain "
                  f"({time.process_time() - t0:.0f} CPU-s)")  # fmt: skip
        side["started_from"] = started_from  # every model's sidecar names its start
        trainer.save(checkpoint_path(ckpt_dir, 0), **side)
        trainer.save(out / START_MODEL, **side)  # the start, for the confirmation (below)
    trainer.schedule_total = end
    write_run_args(out, a, config)

    ref_file = out / "references.json"
    if ref_file.exists():
        refs = References.from_dict(read_json_object(ref_file, "a references file"))
    else:
        refs = _references(config, _plain(evaluator.pas), a.objective)
        atomic_write_json(ref_file, refs.as_dict())

    best_path, eval_log = out / "best_model.zip", out / "evaluations.jsonl"
    history = read_evaluations(eval_log) if loaded is not None else []
    superseded = [h for h in history if h["timesteps"] > start]
    history = [h for h in history if h["timesteps"] <= start]
    if superseded:
        with open(out / "evaluations_superseded.jsonl", "a") as f:
            f.write("".join(json.dumps(h) + "\n" for h in superseded))
    _rewrite(eval_log, history)
    best = None
    if loaded is not None and best_path.exists():
        saved = read_model_sidecar(best_path).get("eval_estimate")
        best = estimate_from_dict(saved) if saved else None
    selector = BestModelSelector(evaluator, best)

    writer = None
    if a.tensorboard:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(str(out / "tb" / "lean_1"))
    state = {"last_eval": history[-1]["timesteps"] if history else -1,
             "last_ckpt": start}  # fmt: skip

    def evaluate() -> None:
        t0 = time.perf_counter()
        est = evaluator.measure(numpy_predictor(trainer.policy))
        replaced, vs_pas, vs_best = selector.consider(est)
        steps = int(trainer.num_timesteps)
        entry = {
            "timesteps": steps, "efficiency": est.efficiency, "ci95": est.ci95,
            "method": est.method, **gaps(est.efficiency, refs.pas.efficiency, refs.optimum,
                                         refs.upper_bound),
            "vs_pas": vs_pas.as_dict(), "vs_best": None if vs_best is None else vs_best.as_dict(),
            "replaced_best": replaced, "wall_s": time.perf_counter() - t0,
        }  # fmt: skip
        if replaced:
            trainer.save(best_path, eval_efficiency=est.efficiency,
                         eval_estimate=estimate_as_dict(est), **side)  # fmt: skip
        history.append(entry)
        with open(eval_log, "a") as f:
            f.write(json.dumps(entry) + "\n")
        state["last_eval"] = steps
        if writer is not None:
            writer.add_scalar("eval/efficiency", est.efficiency, steps)
            writer.add_scalar("eval/paired_gap_to_pas_pct", vs_pas.gap_pct, steps)
            for key in ("gap_to_optimum_pct", "gap_to_bound_pct"):
                if entry[key] is not None:
                    writer.add_scalar(f"eval/{key}", entry[key], steps)
        if a.verbose:
            print(f"eval @ {steps:,}: {est.efficiency:.6f}, vs PAS {vs_pas.describe()}"
                  + (" (new best)" if replaced else ""))  # fmt: skip

    def checkpoint() -> None:
        steps = int(trainer.num_timesteps)
        trainer.save(checkpoint_path(ckpt_dir, steps), **side)
        prune_checkpoints(ckpt_dir)
        state["last_ckpt"] = steps

    if state["last_eval"] < 0:
        evaluate()
    snap = Snapshot(trainer)
    bar = ProgressBar(start, end) if a.progress_bar else None

    def callback(t: LeanTrainer) -> None:
        steps = int(t.num_timesteps)
        if writer is not None and t.history:
            h = t.history[-1]
            writer.add_scalar("rollout/efficiency", h["efficiency"], steps)
            for k in ("policy", "value", "entropy", "approx_kl", "clip_fraction", "lr", "rho"):
                writer.add_scalar(f"train/{k}", h[k], steps)
        if a.eval_freq > 0 and steps - state["last_eval"] >= a.eval_freq:
            evaluate()
        if a.checkpoint_freq > 0 and steps - state["last_ckpt"] >= a.checkpoint_freq:
            checkpoint()
        snap.take(t)
        if bar is not None:
            bar.update(steps)

    t_learn, cpu_learn = time.perf_counter(), time.process_time()
    remaining = end - start
    if remaining > 0:
        try:
            trainer.learn(remaining, callback)
        except (KeyboardInterrupt, TrainingDiverged) as err:
            if bar is not None:
                bar.close()
            # the snapshot of the latest update is finite (a diverged update raises first)
            if snap.steps == start:
                what = f"nothing trained since the checkpoint at {start:,} timesteps"
            else:
                snap.restore(trainer)
                if state["last_ckpt"] != snap.steps:
                    checkpoint()
                what = f"saved checkpoint {checkpoint_path(ckpt_dir, snap.steps)} ({snap.steps:,} timesteps)"
            if isinstance(err, TrainingDiverged):
                raise TrainingDiverged(f"{err}; {what}, the last finite one") from None
            again = f"continue with: python train.py --output-dir {out} --resume"
            print(f"train.py: interrupted; {what}; {again}", file=sys.stderr)
            raise SystemExit(130) from None
    if bar is not None:
        bar.close()
    learn_s, learn_cpu_s = time.perf_counter() - t_learn, time.process_time() - cpu_learn
    if state["last_eval"] != trainer.num_timesteps:
        evaluate()
    if state["last_ckpt"] != trainer.num_timesteps:
        checkpoint()
    final_path = trainer.save(out / "final_model.zip", **side)
    if writer is not None:
        writer.close()

    # the final verdict: exact, or best, final and PAS on fresh seeds (the selection's seeds
    # favour the model picked on them)
    best_agent = PPOAgent.load(best_path)
    best_steps = int(best_agent.meta.get("timesteps", 0))
    confirmation = None
    if not exact and best_steps > 0 and (out / START_MODEL).exists():
        best_agent, best_steps, confirmation = _confirm_against_start(
            a, config, out, best_path, best_agent, best_steps, warm
        )
    final_eval = _final_window(a, config, exact, warm, seed=2_000_000 + a.seed * 1000)
    est_best = final_eval.measure(best_agent.predictor())
    final_pred = numpy_predictor(trainer.policy)
    est_final = final_eval.measure(final_pred if view is None else view.wrap(final_pred))
    pas_final = final_eval.pas
    if not exact:  # the report's PAS is the one measured on the final seeds, paired
        refs = dataclasses.replace(refs, pas=_plain(pas_final))
    best_vs_pas, final_vs_pas = compare(est_best, pas_final), compare(est_final, pas_final)

    def report(est: Estimate, vs: PairedComparison) -> dict[str, Any]:
        g = gaps(est.efficiency, refs.pas.efficiency, refs.optimum, refs.upper_bound)
        if not exact:  # the paired gap is the one to read
            g["gap_to_pas_pct"] = vs.gap_pct
        return _plain(est).as_dict() | g | {"vs_pas": vs.as_dict()}

    summary = {
        "trainer": "lean",
        "scenario": config.name,
        "scenario_spec": a.scenario,
        "action_mode": a.action_mode,
        "objective": a.objective,
        "started_from": started_from,
        "seed": a.seed,
        "config": dataclasses.asdict(a),
        "derived_settings": derived,
        "versions": versions(),
        "timesteps": int(trainer.num_timesteps),
        "learn_wall_s": learn_s,
        "learn_cpu_s": learn_cpu_s,
        "resumed_from": start if loaded is not None else None,
        "references": refs.as_dict(),
        "best": {"timesteps": best_steps, "path": str(best_path), **report(est_best, best_vs_pas)},
        "confirmation": confirmation,
        **_provenance(started_from, history, confirmation, best_steps, est_best),
        "final": {"path": str(final_path), **report(est_final, final_vs_pas)},
        "verdict": best_vs_pas.describe(),
        "best_eval_efficiency": None if selector.best is None else selector.best.efficiency,
        "n_evaluations": len(history),
        "gap_convention": "gap_to_pas_pct = 100 (ppo - pas) / pas (positive: PPO better; "
        "paired on common random numbers when simulated); gap_to_optimum_pct / "
        "gap_to_bound_pct = 100 (X - ppo) / X (shortfall)",
        "paths": {
            "run_dir": str(out),
            "tensorboard": str(out / "tb") if a.tensorboard else None,
            "evaluations": str(eval_log),
        },
    }
    return summary


def _final_window(a: Any, config: FarmConfig, exact: bool, warm: int, seed: int) -> PairedEvaluator:
    """The final measurement's evaluator (the final window, twice the in-training replications,
    PAS paired) on the replication seeds from ``seed``: the verdict's and the confirmation's
    differ only in their seeds."""
    return PairedEvaluator(
        config, a.action_mode, exact, n_epochs=a.final_eval_epochs,
        replications=max(2, 2 * a.eval_replications), seed=seed,
        warmup_epochs=a.warmup_epochs, policy_warmup=warm, objective=a.objective,
    )  # fmt: skip


def _confirm_against_start(
    a: Any,
    config: FarmConfig,
    out: Path,
    best_path: Path,
    best_agent: PPOAgent,
    best_steps: int,
    warm: int,
) -> tuple[PPOAgent, int, dict[str, Any]]:
    """(agent, timesteps, record): the kept model or the start, whichever measures higher on
    the final window with confirmation seeds (neither the selection's nor the verdict's).

    Why: the in-training windows (10 mean job durations after 10 of policy warm-up) can prefer
    a policy whose deviations pay in the transient and cost later, so a model kept in training
    can measure below the start on the longer final window (docs/training.md, "Confirmation
    against the start"). The start then replaces the best model file (its sidecar says so)."""
    conf = _final_window(a, config, False, warm, seed=3_000_000 + a.seed * 1000)
    start_agent = PPOAgent.load(out / START_MODEL)
    est_kept = conf.measure(best_agent.predictor())
    est_start = conf.measure(start_agent.predictor())
    kept_vs_start = compare(est_kept, est_start)
    record = {
        "kept_timesteps": best_steps,
        "start": {
            "efficiency": est_start.efficiency,
            "ci95": est_start.ci95,
            "method": est_start.method,
        },
        "kept_vs_start": kept_vs_start.as_dict(),
        "kept": "best" if kept_vs_start.diff >= 0 else "start",
    }
    print(f"confirmation (final window, other seeds): the model of {best_steps:,} steps "
          f"{kept_vs_start.describe('the start')}; keeping the {record['kept']}")  # fmt: skip
    if kept_vs_start.diff >= 0:
        return best_agent, best_steps, record
    for src, dst in ((out / START_MODEL, best_path),
                     (sidecar_path(out / START_MODEL), sidecar_path(best_path))):  # fmt: skip
        tmp = dst.with_name(f".{dst.name}.tmp")
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    return PPOAgent.load(best_path), 0, record


def _provenance(
    started_from: str | None,
    history: list[dict[str, Any]],
    confirmation: dict[str, Any] | None,
    best_steps: int,
    est_best: Estimate,
) -> dict[str, Any]:
    """The summary's ``start`` (the policy PPO started from: its teacher and its value) and
    ``ppo_change`` (what PPO's updates changed: the kept model minus the start, exact, or
    paired on the confirmation seeds; None when the start itself is kept). Why: a kept step-0
    model is the teacher's clone, not a PPO result, and must not be reported as one."""
    start: dict[str, Any] = {"teacher": started_from, "timesteps": 0}
    if best_steps == 0:  # the start is the kept model: its value is the kept model's
        start |= {"efficiency": est_best.efficiency, "ci95": est_best.ci95,
                  "method": est_best.method,
                  "measured_on": "exact" if est_best.method == "exact" else "final window"}  # fmt: skip
        return {"start": start, "kept": "start", "ppo_change": None}
    step0 = next((h for h in history if h["timesteps"] == 0), None)
    if est_best.method == "exact" and step0 is not None:
        start |= {"efficiency": step0["efficiency"], "ci95": 0.0, "method": "exact",
                  "measured_on": "exact"}  # fmt: skip
        change = compare(est_best, Estimate(step0["efficiency"], 0.0, "exact")).as_dict()
    elif confirmation is not None:
        start |= confirmation["start"] | {"measured_on": "confirmation seeds"}
        change = confirmation["kept_vs_start"]
    else:  # a run without its start model (written before it was kept)
        change = {"method": "not measured"}
    return {"start": start, "kept": "ppo", "ppo_change": change}


def _rewrite(path: Path, entries: list[dict[str, Any]]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(json.dumps(h) + "\n" for h in entries))
    os.replace(tmp, path)
