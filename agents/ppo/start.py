"""The start of a lean run and its reference points: the teacher of ``--init best-priority`` on a
simulated farm (:func:`strongest_start`), the references of the report (:func:`run_references`),
the provenance of the kept model (:func:`provenance`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from serverfarm_gym.agents.ppo.trainer import LeanTrainer
from serverfarm_gym.baselines.best_priority import BestPriorityPolicy
from serverfarm_gym.baselines.priority import PriorityPolicy
from serverfarm_gym.baselines.registry import make_policy
from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.evaluation.efficiency import Estimate, References
from serverfarm_gym.evaluation.paired import PairedEvaluator, compare
from serverfarm_gym.evaluation.references import reference_values

if TYPE_CHECKING:  # the resolved arguments of train.py (serverfarm_gym.agents.common.run_args)
    from serverfarm_gym.agents.common.run_args import LeanArgs

__all__ = ["plain_estimate", "provenance", "run_references", "strongest_start"]


def strongest_start(
    a: LeanArgs, config: FarmConfig, trainer: LeanTrainer, evaluator: PairedEvaluator
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


def plain_estimate(est: Estimate) -> Estimate:
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
