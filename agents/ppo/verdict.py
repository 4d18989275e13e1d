"""The verdict of a PPO run (``serverfarm_gym.agents.ppo.run``): the references of its report
(:func:`run_references`), the final window's evaluator (:func:`final_window`), the kept model
confirmed against the run's start on seeds of its own (:func:`confirm_against_start`), and the
provenance of the kept model (:func:`provenance`)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from serverfarm_gym.agents.ppo.agent import PPOAgent, sidecar_path
from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.evaluation.efficiency import Estimate, References
from serverfarm_gym.evaluation.paired import PairedEvaluator, compare
from serverfarm_gym.evaluation.references import reference_values

if TYPE_CHECKING:  # the resolved arguments of train.py (serverfarm_gym.agents.common.run_args)
    from serverfarm_gym.agents.common.run_args import PPOArgs

__all__ = ["START_MODEL", "confirm_against_start", "final_window", "plain_estimate", "provenance",
           "run_references"]  # fmt: skip

START_MODEL = "start_model.zip"  # the clone (or random start) before PPO, kept for the confirmation


def final_window(
    a: PPOArgs, config: FarmConfig, exact: bool, warm: int, seed: int
) -> PairedEvaluator:
    """The final measurement's evaluator (the final window, twice the in-training replications,
    PAS paired) on the replication seeds from ``seed``: the verdict's and the confirmation's
    differ only in their seeds."""
    return PairedEvaluator(
        config, a.action_mode, exact, n_epochs=a.final_eval_epochs,
        replications=max(2, 2 * a.eval_replications), seed=seed,
        warmup_epochs=a.warmup_epochs, policy_warmup=warm, objective=a.objective,
    )  # fmt: skip


def confirm_against_start(
    a: PPOArgs,
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
    conf = final_window(a, config, False, warm, seed=3_000_000 + a.seed * 1000)
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


def plain_estimate(est: Estimate) -> Estimate:
    """``est`` without its per-replication values (what the summary and the references keep)."""
    return Estimate(est.efficiency, est.ci95, est.method, est.epochs, est.replications)


def provenance(
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


def run_references(config: FarmConfig, pas: Estimate, objective: str) -> References:
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
