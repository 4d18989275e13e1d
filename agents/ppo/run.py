"""train.py's default route: one run (:func:`train_ppo`) of the masked PPO of
``serverfarm_gym.agents.ppo.ppo``, with the run directory, evaluations, best-model selection,
checkpoints, resume and Ctrl-C of ``train.py``. Three steps sharing a :class:`PPORun`:

1. :func:`_build`: the trainer, resumed from the newest checkpoint that loads (``_resume``,
   ``serverfarm_gym.agents.ppo.resume``) or new and fitted to its ``--init`` teacher
   (``_warm_start``, ``serverfarm_gym.agents.ppo.start``: the clone, checkpointed at step 0);
2. :func:`_learn`: rollouts and updates; the policy is evaluated at step 0, every ``eval_freq``
   steps and at the end, exactly where the per-server chain is small, else in the vector env
   with fixed seeds, paired with PAS (``serverfarm_gym.evaluation.paired``); ``best_model.zip`` is
   replaced only by a better model (exact, or the paired 95% interval above 0); Ctrl-C saves
   the snapshot of the latest update;
3. :func:`_verdict`: the best and the final model measured once more, on fresh seeds, next to
   PAS on the same seeds (``serverfarm_gym.agents.ppo.verdict``); the summary says whether PPO
   beats PAS significantly, is not significantly different, or is below.

A farm with an SLO trains to it (``serverfarm_gym.agents.ppo.slo``): Lagrangian reward with dual ascent, a
start that meets the SLO, and the kept model the most efficient one that meets it.
The run directory has the layout of the SB3 trainer's (docs/training.md).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import torch

from serverfarm_gym.agents.common.artefacts import read_json_object, read_model_sidecar
from serverfarm_gym.agents.common.checkpoints import TrainingDiverged, read_evaluations
from serverfarm_gym.agents.common.farm_settings import policy_warmup
from serverfarm_gym.agents.common.run_dir import write_run_args
from serverfarm_gym.agents.ppo import slo as slo_training
from serverfarm_gym.agents.ppo.agent import (
    PPOAgent,
    atomic_write_json,
    numpy_predictor,
    sidecar_path,
)
from serverfarm_gym.agents.ppo.config import network_mode, ppo_config
from serverfarm_gym.agents.ppo.ppo import PPO
from serverfarm_gym.agents.ppo.resume import (
    Snapshot,
    checkpoint_path,
    load_newest,
    prune_checkpoints,
)
from serverfarm_gym.agents.ppo.start import clone_start
from serverfarm_gym.agents.ppo.verdict import (
    START_MODEL,
    confirm_against_start,
    final_window,
    plain_estimate,
    provenance,
    run_references,
)
from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.symmetry import GroupView
from serverfarm_gym.evaluation.efficiency import Estimate, References
from serverfarm_gym.evaluation.exact import exact_solvable
from serverfarm_gym.evaluation.paired import (
    BestModelSelector,
    PairedComparison,
    PairedEvaluator,
    compare,
    estimate_as_dict,
    estimate_from_dict,
)
from serverfarm_gym.evaluation.provenance import versions
from serverfarm_gym.evaluation.stats import gaps

if TYPE_CHECKING:  # the resolved arguments of train.py (serverfarm_gym.agents.common.run_args)
    from serverfarm_gym.agents.common.run_args import PPOArgs

__all__ = ["PPORun", "ProgressBar", "train_ppo"]


@dataclass
class PPORun:
    """The state of one PPO run, shared by its steps (:func:`train_ppo`): what the build sets
    up once and what learning changes (the history, the last evaluation and checkpoint)."""

    a: PPOArgs  # train.py's resolved arguments
    config: FarmConfig
    out: Path
    side: dict[str, Any]  # every saved model's sidecar entries
    view: GroupView | None  # a tied network's server view (None: the network acts itself)
    exact: bool
    warm: int  # unmeasured policy epochs of each simulated replication
    evaluator: PairedEvaluator
    end: int  # the run's last step (whole rollouts)
    trainer: PPO | None = None
    start: int = 0  # the step the run (or this resume) starts at
    resumed: bool = False
    started_from: str | None = "random"
    refs: References | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    selector: BestModelSelector | None = None
    writer: Any = None  # the TensorBoard writer (None: off)
    last_eval: int = -1
    last_ckpt: int = 0
    learn_s: float = 0.0
    learn_cpu_s: float = 0.0
    slo: slo_training.SLORun | None = None  # training to the farm's SLO (agents/ppo/slo.py)

    @property
    def ckpt_dir(self) -> Path:
        return self.out / "checkpoints"

    @property
    def best_path(self) -> Path:
        return self.out / "best_model.zip"

    @property
    def eval_log(self) -> Path:
        return self.out / "evaluations.jsonl"

    @property
    def model(self) -> PPO:
        if self.trainer is None:  # the build always sets one
            raise RuntimeError("the run has no trainer yet")
        return self.trainer


def train_ppo(
    a: PPOArgs, config: FarmConfig, derived: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Run (or resume, ``a.resume``) one PPO training job described by train.py's resolved
    arguments ``a`` (build, learn with evaluation, verdict: the module doc); returns the summary
    written to ``summary.json``, which stores ``derived`` (the derived settings, their reasons).

    Raises:
        ValueError: a resume to fewer timesteps than its checkpoint, or no loadable checkpoint.
        SystemExit(130): after Ctrl-C inside training (a checkpoint is saved first).
    """
    run = _build(a, config)
    _learn(run)
    return _verdict(run, derived)


def _build(a: PPOArgs, config: FarmConfig) -> PPORun:
    """The run's directories, evaluator and trainer (the newest checkpoint on ``--resume``,
    else a new one and its warm start), its references and its evaluation log so far."""
    torch.set_num_threads(max(1, a.torch_threads))
    out = Path(a.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "checkpoints").mkdir(exist_ok=True)
    # every saved model serves train.py's action mode (a tied network acts on servers)
    # ... and the farm itself, also when training on its scaled-down twin (a.train_scale)
    side = {"train_args": dataclasses.asdict(a), "action_mode": a.action_mode, "config": config}
    net_mode = network_mode(a)
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
    per = a.n_steps * a.n_envs
    # training runs whole rollouts: a run ends at the total rounded up to them, and a
    # checkpoint at that step (a run interrupted in its final evaluation) finishes the run
    end = max(1, math.ceil(a.total_timesteps / per)) * per if a.total_timesteps > 0 else 0
    run = PPORun(a, config, out, side, GroupView(config) if net_mode != a.action_mode else None,
                 exact, warm, evaluator, end)  # fmt: skip
    if config.slo is not None and a.objective == "energy":
        run.slo = slo_training.SLORun(slo_training.exact_space(config, net_mode))
    if not (a.resume and _resume(run)):
        _warm_start(run)
    if run.slo is not None:  # beta from the exact LP's dual price where the chain is solved
        beta0 = None if run.slo.space is None else slo_training.lp_multiplier(run.slo.space)
        step = getattr(a, "slo_step", -1)
        run.slo.dual = slo_training.DualAscent(run.model.venv, config, step, beta0)
    run.model.schedule_total = end
    write_run_args(out, a, config)
    _open_log(run)
    return run


def _resume(run: PPORun) -> bool:
    """Load the newest checkpoint that loads into ``run``; False when there is none."""
    a, ckpt_dir = run.a, run.ckpt_dir
    loaded = load_newest(ckpt_dir, a)
    if loaded is None:
        print(f"--resume: no checkpoint in {ckpt_dir}; starting a new run", file=sys.stderr)
        return False
    run.trainer, ckpt, run.start = loaded
    if run.start > run.end:
        raise ValueError(
            f"--resume: --total-timesteps {a.total_timesteps:,} is below the {run.start:,} "
            f"timesteps of the run's checkpoint {ckpt} (even rounded up to whole rollouts "
            f"of {a.n_steps * a.n_envs:,} steps: {run.end:,}); a run cannot be shortened (its "
            "result is in summary.json): give a larger total to train on"
        )
    print(f"resuming {run.out} from {ckpt.name} ({run.start} timesteps)")
    # the first run's start, which its checkpoints' sidecars keep
    run.started_from = json.loads(sidecar_path(ckpt).read_text()).get("started_from")
    run.side["started_from"] = run.started_from
    run.resumed = True
    return True


def _warm_start(run: PPORun) -> None:
    """A new trainer, fitted to ``--init``'s teacher (the clone, its logits softened) unless
    ``--init random``; saved as the checkpoint at step 0 and as the start model."""
    a, config = run.a, run.config
    twin = config.scaled_down(a.train_scale) if a.train_scale > 1 else config
    trainer = run.trainer = PPO(twin, ppo_config(a))
    if a.init != "random":
        run.started_from = clone_start(trainer, a, config, run.slo, run.exact, run.evaluator)
    run.side["started_from"] = run.started_from  # every model's sidecar names its start
    trainer.save(checkpoint_path(run.ckpt_dir, 0), **run.side)
    trainer.save(run.out / START_MODEL, **run.side)  # the start, for the confirmation (below)


def _open_log(run: PPORun) -> None:
    """The references (computed once per run directory), the evaluation log up to the start
    (later entries, from past a resumed checkpoint, move to ``evaluations_superseded.jsonl``),
    the best model so far and the TensorBoard writer."""
    a, out = run.a, run.out
    ref_file = out / "references.json"
    if ref_file.exists():
        run.refs = References.from_dict(read_json_object(ref_file, "a references file"))
    else:
        run.refs = run_references(run.config, plain_estimate(run.evaluator.pas), a.objective)
        atomic_write_json(ref_file, run.refs.as_dict())
    history = read_evaluations(run.eval_log) if run.resumed else []
    superseded = [h for h in history if h["timesteps"] > run.start]
    run.history = [h for h in history if h["timesteps"] <= run.start]
    if superseded:
        with open(out / "evaluations_superseded.jsonl", "a") as f:
            f.write("".join(json.dumps(h) + "\n" for h in superseded))
    _rewrite(run.eval_log, run.history)
    best = None
    if run.resumed and run.best_path.exists():
        saved = read_model_sidecar(run.best_path).get("eval_estimate")
        best = estimate_from_dict(saved) if saved else None
    run.selector = BestModelSelector(run.evaluator, best)
    if run.slo is not None:  # the kept model's SLO measure and beta, from the log
        run.slo.resume(run.history)
    if a.tensorboard:
        from torch.utils.tensorboard import SummaryWriter

        run.writer = SummaryWriter(str(out / "tb" / "ppo_1"))
    run.last_eval = run.history[-1]["timesteps"] if run.history else -1
    run.last_ckpt = run.start


def _evaluate(run: PPORun) -> None:
    """Measure the policy, offer it to the selector (``best_model.zip`` when it wins) and log
    the evaluation (``evaluations.jsonl``, TensorBoard, ``--verbose``)."""
    t0 = time.perf_counter()
    trainer, refs, selector = run.model, run.refs, run.selector
    assert refs is not None and selector is not None  # set by the build
    est = run.evaluator.measure(numpy_predictor(trainer.policy))
    replaced, vs_pas, vs_best = selector.consider(est)
    slo_est = None
    if run.slo is not None:  # kept: the most efficient sampling policy that meets the SLO
        slo_est = slo_training.measure_slo(trainer, run.evaluator, run.slo.space)
        replaced = run.slo.selector.consider(slo_est) or not run.best_path.exists()
    steps = int(run.model.num_timesteps)
    entry = {
        "timesteps": steps, "efficiency": est.efficiency, "ci95": est.ci95,
        "method": est.method, **gaps(est.efficiency, refs.pas.efficiency, refs.optimum,
                                     refs.upper_bound),
        "vs_pas": vs_pas.as_dict(), "vs_best": None if vs_best is None else vs_best.as_dict(),
        "replaced_best": replaced, "wall_s": time.perf_counter() - t0,
    } | ({} if run.slo is None else {"slo": run.slo.entry(slo_est)})  # fmt: skip
    if replaced:
        trainer.save(run.best_path, eval_efficiency=est.efficiency,
                     eval_estimate=estimate_as_dict(est), **run.side)  # fmt: skip
    run.history.append(entry)
    with open(run.eval_log, "a") as f:
        f.write(json.dumps(entry) + "\n")
    run.last_eval = steps
    if run.writer is not None:
        run.writer.add_scalar("eval/efficiency", est.efficiency, steps)
        run.writer.add_scalar("eval/paired_gap_to_pas_pct", vs_pas.gap_pct, steps)
        for key in ("gap_to_optimum_pct", "gap_to_bound_pct"):
            if entry[key] is not None:
                run.writer.add_scalar(f"eval/{key}", entry[key], steps)
    if run.a.verbose:
        print(f"eval @ {steps:,}: {est.efficiency:.6f}, vs PAS {vs_pas.describe()}"
              + (" (new best)" if replaced else ""))  # fmt: skip


def _checkpoint(run: PPORun) -> None:
    run.model.save(checkpoint_path(run.ckpt_dir, int(run.model.num_timesteps)), **run.side)
    prune_checkpoints(run.ckpt_dir)
    run.last_ckpt = int(run.model.num_timesteps)


def _learn(run: PPORun) -> None:
    """Rollouts and updates to the run's end, evaluating every ``eval_freq`` steps (and at step
    0 and the end) and checkpointing every ``checkpoint_freq``; a diverged update or Ctrl-C
    saves the latest finite snapshot first. Ends with the final model saved."""
    a, trainer = run.a, run.model
    if run.last_eval < 0:
        _evaluate(run)
    snap = Snapshot(trainer)
    bar = ProgressBar(run.start, run.end) if a.progress_bar else None

    def callback(t: PPO) -> None:
        steps = int(t.num_timesteps)
        if run.writer is not None and t.history:
            h = t.history[-1]
            run.writer.add_scalar("rollout/efficiency", h["efficiency"], steps)
            for k in ("policy", "value", "entropy", "approx_kl", "clip_fraction", "lr", "rho"):
                run.writer.add_scalar(f"train/{k}", h[k], steps)
        if run.slo is not None and run.slo.dual is not None and t.history:  # the next rollout's
            run.slo.dual.after_rollout(steps, t.history[-1]["mean_response_time"])
        if a.eval_freq > 0 and steps - run.last_eval >= a.eval_freq:
            _evaluate(run)
        if a.checkpoint_freq > 0 and steps - run.last_ckpt >= a.checkpoint_freq:
            _checkpoint(run)
        snap.take(t)
        if bar is not None:
            bar.update(steps)

    t_learn, cpu_learn = time.perf_counter(), time.process_time()
    if run.end > run.start:
        try:
            trainer.learn(run.end - run.start, callback)
        except (KeyboardInterrupt, TrainingDiverged) as err:
            if bar is not None:
                bar.close()
            _stop(run, snap, err)
    if bar is not None:
        bar.close()
    run.learn_s, run.learn_cpu_s = time.perf_counter() - t_learn, time.process_time() - cpu_learn
    if run.last_eval != trainer.num_timesteps:
        _evaluate(run)
    if run.last_ckpt != trainer.num_timesteps:
        _checkpoint(run)
    trainer.save(run.out / "final_model.zip", **run.side)
    if run.writer is not None:
        run.writer.close()


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


def _stop(run: PPORun, snap: Snapshot, err: BaseException) -> NoReturn:
    """After Ctrl-C or a diverged update: save the snapshot of the latest update (finite: a
    diverged update raises first) unless it is the start, then re-raise (divergence) or exit
    with 130 (Ctrl-C)."""
    if snap.steps == run.start:
        what = f"nothing trained since the checkpoint at {run.start:,} timesteps"
    else:
        snap.restore(run.model)
        if run.last_ckpt != snap.steps:
            _checkpoint(run)
        path = checkpoint_path(run.ckpt_dir, snap.steps)
        what = f"saved checkpoint {path} ({snap.steps:,} timesteps)"
    if isinstance(err, TrainingDiverged):
        raise TrainingDiverged(f"{err}; {what}, the last finite one") from None
    again = f"continue with: python train.py --output-dir {run.out} --resume"
    print(f"train.py: interrupted; {what}; {again}", file=sys.stderr)
    raise SystemExit(130) from None


def _verdict(run: PPORun, derived: dict[str, Any] | None) -> dict[str, Any]:
    """The final verdict: exact, or best, final and PAS on fresh seeds (the selection's seeds
    favour the model picked on them), after the confirmation against the start; the summary."""
    a, config, out, exact, trainer = run.a, run.config, run.out, run.exact, run.model
    best_path = run.best_path
    best_agent = PPOAgent.load(best_path)
    best_steps = int(best_agent.meta.get("timesteps", 0))
    confirmation = None
    if not exact and run.slo is None and best_steps > 0 and (out / START_MODEL).exists():
        best_agent, best_steps, confirmation = confirm_against_start(
            a, config, out, best_path, best_agent, best_steps, run.warm
        )
    final_eval = final_window(a, config, exact, run.warm, seed=2_000_000 + a.seed * 1000)
    est_best = final_eval.measure(best_agent.predictor())
    final_pred = numpy_predictor(trainer.policy)
    est_final = final_eval.measure(final_pred if run.view is None else run.view.wrap(final_pred))
    pas_final = final_eval.pas
    refs = run.refs
    assert refs is not None and run.selector is not None  # set by the build
    if not exact:  # the report's PAS is the one measured on the final seeds, paired
        refs = dataclasses.replace(refs, pas=plain_estimate(pas_final))
    best_vs_pas, final_vs_pas = compare(est_best, pas_final), compare(est_final, pas_final)

    def report(est: Estimate, vs: PairedComparison) -> dict[str, Any]:
        g = gaps(est.efficiency, refs.pas.efficiency, refs.optimum, refs.upper_bound)
        if not exact:  # the paired gap is the one to read
            g["gap_to_pas_pct"] = vs.gap_pct
        return plain_estimate(est).as_dict() | g | {"vs_pas": vs.as_dict()}

    slo = None if run.slo is None else slo_training.slo_summary(run.slo, run.history, best_steps)
    return {
        **({} if slo is None else {"slo": slo}),
        "trainer": "ppo", "scenario": config.name, "scenario_spec": a.scenario,
        "action_mode": a.action_mode, "objective": a.objective,
        "started_from": run.started_from, "seed": a.seed, "config": dataclasses.asdict(a),
        "derived_settings": derived, "versions": versions(),
        "timesteps": int(trainer.num_timesteps),
        "learn_wall_s": run.learn_s, "learn_cpu_s": run.learn_cpu_s,
        "resumed_from": run.start if run.resumed else None,
        "references": refs.as_dict(),
        "best": {"timesteps": best_steps, "path": str(best_path), **report(est_best, best_vs_pas)},
        "confirmation": confirmation,
        **provenance(run.started_from, run.history, confirmation, best_steps, est_best),
        "final": {"path": str(out / "final_model.zip"), **report(est_final, final_vs_pas)},
        "verdict": best_vs_pas.describe(),
        "best_eval_efficiency": None if run.selector.best is None else run.selector.best.efficiency,
        "n_evaluations": len(run.history),
        "gap_convention": "gap_to_pas_pct = 100 (ppo - pas) / pas (positive: PPO better; "
        "paired on common random numbers when simulated); gap_to_optimum_pct / "
        "gap_to_bound_pct = 100 (X - ppo) / X (shortfall)",
        "paths": {
            "run_dir": str(out),
            "tensorboard": str(out / "tb") if a.tensorboard else None,
            "evaluations": str(run.eval_log),
        },
    }  # fmt: skip


def _rewrite(path: Path, entries: list[dict[str, Any]]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(json.dumps(h) + "\n" for h in entries))
    os.replace(tmp, path)
