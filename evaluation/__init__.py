"""Evaluation: one measurement API (:func:`measure`: one policy's efficiency with its interval),
paired comparisons on common random numbers (:mod:`serverfarm_gym.evaluation.paired`), and the harness that
reports many policies (replications, Student-t intervals, gaps to PAS / the exact optimum / the
relaxation bound, local process pools and Ray). See docs/evaluation.md.

Quick use::

    from serverfarm_gym.evaluation import Window, measure, evaluate, format_table
    est = measure(policy, config, Window.for_farm(config, 20_000))
    report = evaluate("tiny", ["pas", "jsq", "random"], replications=10, horizon=100_000)
    print(format_table(report))
"""

from serverfarm_gym.evaluation.efficiency import (
    Estimate,
    References,
    Window,
    as_predictor,
    consecutive_seeds,
    measure,
    pas_efficiency,
    reference_efficiencies,
)
from serverfarm_gym.evaluation.outputs import (
    atomic_open,
    atomic_write,
    check_output_paths,
    format_sweep_table,
    format_table,
    plot_efficiency,
    plot_sweep,
    to_json,
    write_outputs,
    write_sweep_outputs,
)
from serverfarm_gym.evaluation.paired import (
    BestModelSelector,
    PairedComparison,
    PairedEvaluator,
    compare,
)
from serverfarm_gym.evaluation.parallel import default_workers, run_units
from serverfarm_gym.evaluation.policy_report import (
    DEFAULT_POLICIES,
    EvaluationPlan,
    evaluate,
    evaluate_and_write,
    evaluate_exact,
    plan_evaluation,
    reference_values,
    summarize_plan,
)
from serverfarm_gym.evaluation.rollout import (
    RolloutResult,
    WorkUnit,
    register_policy_resolver,
    replication_seeds,
    resolve_policy,
    rollout,
    run_unit,
    simulate_builtin,
    valid_policy_names,
)
from serverfarm_gym.evaluation.stats import (
    gap_pct,
    mean_ci,
    paired_gap_pct,
    shortfall_pct,
    summarize,
)
from serverfarm_gym.evaluation.sweep_report import sweep, sweep_and_write

__all__ = [
    "DEFAULT_POLICIES",
    "BestModelSelector",
    "Estimate",
    "EvaluationPlan",
    "PairedComparison",
    "PairedEvaluator",
    "References",
    "RolloutResult",
    "Window",
    "WorkUnit",
    "as_predictor",
    "atomic_open",
    "atomic_write",
    "check_output_paths",
    "compare",
    "consecutive_seeds",
    "default_workers",
    "evaluate",
    "evaluate_and_write",
    "evaluate_exact",
    "format_sweep_table",
    "format_table",
    "gap_pct",
    "mean_ci",
    "measure",
    "paired_gap_pct",
    "pas_efficiency",
    "plan_evaluation",
    "plot_efficiency",
    "plot_sweep",
    "reference_efficiencies",
    "reference_values",
    "register_policy_resolver",
    "replication_seeds",
    "resolve_policy",
    "rollout",
    "run_unit",
    "run_units",
    "shortfall_pct",
    "simulate_builtin",
    "summarize",
    "summarize_plan",
    "sweep",
    "sweep_and_write",
    "to_json",
    "valid_policy_names",
    "write_outputs",
    "write_sweep_outputs",
]
