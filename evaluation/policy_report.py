"""The report of many policies on one scenario: plan work units, run them, summarise into the
JSON report.

``evaluate`` is what ``evaluate.py`` calls (``serverfarm_gym.evaluation.sweep_report.sweep`` runs many of its plans
in one pool for ``sweep.py``). Both are importable so that training scripts and
experiments use exactly the same definitions (window, seeds, intervals, gaps).

Report contract (``docs/evaluation.md``; fields may be added, these stay)::

    {"scenario": str, "optimum": {"efficiency": float} | null, "upper_bound": {"efficiency": float} | null,
     "policies": {"<name>": {"efficiency": {"mean": float, "ci95": float}, "throughput": {...},
                             "power": {...}, "blocking": {...}, "blocking_per_type": {"<type>": {...}},
                             "gap_to_pas_pct": float, "gap_to_optimum_pct": float | null,
                             "gap_to_bound_pct": float | null, "replications": [...]}}}

Everything under ``"policies"``, ``"optimum"`` and ``"upper_bound"`` is a deterministic function of
(scenario, policies, replications, horizon, warmup, seed); wall-clock times live elsewhere
(``"wall_time_s"``, ``"timing"``) so that reports of the same run on different backends compare
equal on those keys.
"""

from __future__ import annotations

import datetime as _dt
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.scenarios import load_scenario
from serverfarm_gym.evaluation.efficiency import Window
from serverfarm_gym.evaluation.exact import (
    EXACT_MAX_STATES,
    cost_efficiency,
    exact_evaluation,
    exact_unsupported_reason,
    overall_blocking,
    randomised_exact,
)
from serverfarm_gym.evaluation.outputs import (
    check_output_paths,
    format_table,
    write_outputs,
)
from serverfarm_gym.evaluation.parallel import default_workers, run_units
from serverfarm_gym.evaluation.provenance import versions
from serverfarm_gym.evaluation.references import optimum_solution, reference_values
from serverfarm_gym.evaluation.rollout import (
    WorkUnit,
    cache_policy,
    check_policy_names,
    check_run_settings,
    check_window,
    is_baseline,
    policy_route,
    replication_seeds,
    resolve_policy,
)
from serverfarm_gym.evaluation.stats import gap_pct, paired_gap_pct, shortfall_pct, summarize

__all__ = [
    "DEFAULT_POLICIES",
    "EvaluationPlan",
    "backend_info",
    "build_policies",
    "epochs_per_duration",
    "evaluate",
    "evaluate_and_write",
    "evaluate_exact",
    "label_of",
    "plan_evaluation",
    "plan_timing",
    "reference_values",
    "summarize_plan",
    "window_warnings",
]

DEFAULT_POLICIES: tuple[str, ...] = ("pas", "whittle", "random", "jsq", "optimal")
REFERENCE_POLICY = "pas"
#: per-replication metrics summarised as {"mean", "ci95", ...}
METRICS = ("efficiency", "throughput", "power", "blocking", "cost_efficiency")
#: reported when every replication carries it (the simulator's Little's-law response time)
OPTIONAL_METRICS = ("mean_response_time",)


# ---------------------------------------------------------------------------------------------
# planning
# ---------------------------------------------------------------------------------------------
@dataclass
class EvaluationPlan:
    """Everything needed to run and summarise one evaluation (a scenario and its policies)."""

    config: FarmConfig
    scenario_source: str
    policies: list[str]
    routes: dict[str, str]
    skipped: dict[str, str]
    seeds: list[int]
    replications: int
    horizon: int
    warmup: int
    seed: int
    action_mode: str
    scale: int = 1
    units: list[WorkUnit] = field(default_factory=list)


def label_of(spec: Any) -> str:
    if isinstance(spec, str):
        return spec
    return str(getattr(spec, "name", None) or type(spec).__name__)


def _with_reference(policies: Sequence[str | Any]) -> list[Any]:
    """The policies with PAS first if missing (so that ``gap_to_pas_pct`` is defined)."""
    if isinstance(policies, str):
        raise ValueError("policies: pass a list of names, e.g. ['pas', 'jsq'] (not one string)")
    specs: list[Any] = list(policies)
    if not specs:
        raise ValueError("policies: give at least one policy (PAS is added as the reference)")
    if REFERENCE_POLICY not in [s for s in specs if isinstance(s, str)]:
        specs.insert(0, REFERENCE_POLICY)
    return specs


def build_policies(
    config: FarmConfig,
    specs: Sequence[str | Any],
    action_mode: str = "server",
    optimum_max_variables: int | None = None,
) -> tuple[list[tuple[Any, str, Any]], dict[str, str]]:
    """``([(spec, label, policy), ...], skipped)``: each distinct policy built for ``config``.

    Unknown names raise ``ValueError`` listing the valid ones (before anything is built). A
    baseline that cannot be built for this farm (the exact optimum beyond its size limit) is
    skipped with the reason, not fatal -- except PAS, the reference.
    """
    check_policy_names(specs)  # fail fast, before building anything expensive
    built: list[tuple[Any, str, Any]] = []
    skipped: dict[str, str] = {}
    seen: set[str] = set()
    for spec in specs:
        label = label_of(spec)
        if label in seen:
            continue
        seen.add(label)
        try:
            if spec == "optimal":
                # one LP solve for the reference value and the policy; a refusal skips it
                sol, why = optimum_solution(config, optimum_max_variables)
                if sol is None:
                    skipped[label] = str(why)
                    continue
                policy = resolve_policy(spec, config, action_mode, solution=sol)
            else:
                policy = resolve_policy(spec, config, action_mode)
        except (ValueError, MemoryError, NotImplementedError) as err:
            # only registry baselines can be inapplicable to a farm (the exact optimum beyond
            # its size limit); a bad PPO path or a broken PAS is the user's error
            if not (isinstance(spec, str) and is_baseline(spec)) or label == REFERENCE_POLICY:
                raise
            skipped[label] = f"{type(err).__name__}: {err}"
            continue
        built.append((spec, label, policy))
    return built, skipped


def plan_evaluation(
    scenario: FarmConfig | str | Path | Mapping[str, Any],
    policies: Sequence[str | Any] = DEFAULT_POLICIES,
    replications: int = 10,
    horizon: int = 100_000,
    warmup: int | None = None,
    seed: int = 0,
    action_mode: str = "server",
    use_builtin: bool = True,
    scale: int = 1,
    optimum_max_variables: int | None = None,
) -> EvaluationPlan:
    """Resolve the scenario and policies and list the work units (one per policy x replication).

    PAS is always added (first) so that ``gap_to_pas_pct`` is defined. Unknown policy names raise
    ``ValueError`` listing the valid ones. A known policy that cannot be built for this farm (the
    exact optimum beyond its size limit, a missing optional module) is *skipped* with the reason
    recorded, not fatal -- except PAS, the reference.
    """
    check_run_settings(replications, seed)
    specs = _with_reference(policies)
    # the window before the policies are built (the horizon first: the default warm-up, the
    # one rule of serverfarm_gym.evaluation.efficiency.Window.for_farm, is computed from it and the farm)
    check_window(horizon, 0 if warmup is None else warmup)
    config = load_scenario(scenario)
    if scale != 1:
        config = config.scaled(scale)
    warmup = Window.for_farm(config, horizon, warmup).warmup
    seeds = replication_seeds(seed, int(replications))
    plan = EvaluationPlan(
        config=config,
        scenario_source=str(scenario) if isinstance(scenario, (str, Path)) else config.name,
        policies=[],
        routes={},
        skipped={},
        seeds=seeds,
        replications=int(replications),
        horizon=int(horizon),
        warmup=int(warmup),
        seed=int(seed),
        action_mode=action_mode,
        scale=int(scale),
    )
    built, plan.skipped = build_policies(config, specs, action_mode, optimum_max_variables)
    for spec, label, policy in built:
        builtin, table = policy_route(policy, use_builtin)
        if isinstance(spec, str) and builtin is None:
            # in-process runs reuse the policy built here instead of building it again
            cache_policy(config, spec, action_mode, policy)
        plan.policies.append(label)
        plan.routes[label] = f"builtin:{builtin}" if builtin else "env"
        for r, s in enumerate(seeds):
            plan.units.append(
                WorkUnit(
                    config=config,
                    label=label,
                    spec=spec if isinstance(spec, str) else policy,
                    replication=r,
                    seed=s,
                    horizon=int(horizon),
                    warmup=int(warmup),
                    action_mode=action_mode,
                    builtin=builtin,
                    table=table,
                )
            )
    return plan


def epochs_per_duration(config: FarmConfig) -> float:
    """Decision epochs per mean job duration at the slowest group (``FarmConfig.epochs_per_duration``,
    the unit warm-ups and windows are sized in)."""
    return config.epochs_per_duration


def window_warnings(config: FarmConfig, horizon: int, warmup: int) -> list[str]:
    """Rule-of-thumb checks of the window's *model time*. Epochs are arrivals, so a farm with many
    servers covers little model time per epoch, and the farm starts empty. Flagged: a warm-up
    shorter than 50 mean job durations at the slowest group, a horizon shorter than 100.

    Calibration (large-10k, PAS, 10 replications, horizon 6e5 epochs = 50 durations): warm-up of
    5 durations -> efficiency 0.28% low (5 half-widths); 50 and 170 durations -> within the
    interval of a 1e7-epoch run. Transient bias is *not* covered by the intervals.
    """
    if config.total_arrival_rate <= 0 or min(max(g.service_rate) for g in config.groups) <= 0:
        return []
    per_duration = epochs_per_duration(config)

    out = []
    if warmup < 50 * per_duration:
        out.append(
            f"warm-up of {warmup} epochs is only {warmup / per_duration:.3g} mean job durations "
            f"of model time (the farm starts empty): estimates may be biased by the transient; "
            f"use --warmup >= {math.ceil(50 * per_duration)}"
        )
    if horizon < 100 * per_duration:
        out.append(
            f"horizon of {horizon} epochs is only {horizon / per_duration:.3g} mean job "
            f"durations; use --horizon >= {math.ceil(100 * per_duration)}"
        )
    return out


# ---------------------------------------------------------------------------------------------
# summarising
# ---------------------------------------------------------------------------------------------
_RUN_KEYS = (
    "replication", "seed", "efficiency", "throughput", "power", "cost_efficiency", "blocking",
    "blocking_per_type", "time", "epochs", "arrivals", "invalid_actions",
)  # fmt: skip


def summarize_plan(
    plan: EvaluationPlan, results: Sequence[Mapping[str, Any]], refs: Mapping[str, Any]
) -> dict[str, Any]:
    """The report dict (see module doc) from the units' results, in the plan's order."""
    config = plan.config
    by_policy: dict[str, list[Mapping[str, Any]]] = {p: [] for p in plan.policies}
    for res in results:
        by_policy[res["policy"]].append(res)
    opt = refs["optimum"]["efficiency"] if refs.get("optimum") else None
    bound = refs["upper_bound"]["efficiency"] if refs.get("upper_bound") else None
    pas_runs = sorted(by_policy[REFERENCE_POLICY], key=lambda r: r["replication"])
    pas_eff = np.array([r["efficiency"] for r in pas_runs])
    out_pol: dict[str, Any] = {}
    for name in plan.policies:
        runs = sorted(by_policy[name], key=lambda r: r["replication"])
        entry: dict[str, Any] = {"route": plan.routes[name]}
        for m in METRICS:
            entry[m] = summarize([r[m] for r in runs])
        for m in OPTIONAL_METRICS:
            if runs and all(r.get(m) is not None for r in runs):
                entry[m] = summarize([r[m] for r in runs])
        bpt = np.array([r["blocking_per_type"] for r in runs], dtype=np.float64)
        entry["blocking_per_type"] = {
            jt.name: summarize(bpt[:, j]) for j, jt in enumerate(config.job_types)
        }
        eff = entry["efficiency"]["mean"]
        entry["gap_to_pas_pct"] = gap_pct(eff, float(pas_eff.mean()))
        entry["gap_to_pas_paired"] = paired_gap_pct([r["efficiency"] for r in runs], pas_eff)
        entry["gap_to_optimum_pct"] = shortfall_pct(eff, opt)
        entry["gap_to_bound_pct"] = shortfall_pct(eff, bound)
        entry["invalid_actions"] = int(sum(r["invalid_actions"] for r in runs))
        checks = [r["check_cpu_s"] for r in runs if "check_cpu_s" in r]
        if checks:  # each worker builds (and checks) its own copy: the most any build took
            entry["check_cpu_s"] = float(max(checks))
        entry["replications"] = [
            {k: r[k] for k in (*_RUN_KEYS, *OPTIONAL_METRICS) if k in r} for r in runs
        ]
        out_pol[name] = entry
    return {
        "scenario": config.name,
        "scenario_source": plan.scenario_source,
        "warnings": window_warnings(config, plan.horizon, plan.warmup),
        "n_servers": config.n_servers,
        "n_groups": config.n_groups,
        "n_job_types": config.n_job_types,
        "load": config.load,
        "settings": {
            "replications": plan.replications,
            "horizon": plan.horizon,
            "warmup": plan.warmup,
            "seed": plan.seed,
            "action_mode": plan.action_mode,
            "confidence": 0.95,
            "interval": "Student-t over replications (scipy.stats.t)",
            "common_random_numbers": True,
        },
        "seeds": list(plan.seeds),
        "optimum": refs.get("optimum"),
        "optimum_reason": refs.get("optimum_reason"),
        "upper_bound": refs.get("upper_bound"),
        "upper_bound_reason": refs.get("upper_bound_reason"),
        "policies": out_pol,
        "skipped": dict(plan.skipped),
        "scale": plan.scale,
        "config": config.to_dict(),
    }


def plan_timing(plan: EvaluationPlan, results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    per: dict[str, float] = {p: 0.0 for p in plan.policies}
    for r in results:
        per[r["policy"]] += float(r["wall_s"])
    return {"cpu_s_per_policy": per, "cpu_s_total": float(sum(per.values()))}


def backend_info(
    workers: int | None, use_ray: bool, ray_address: str | None, n_units: int
) -> dict[str, Any]:
    if use_ray or ray_address:
        return {"kind": "ray", "address": ray_address or "local", "workers": workers}
    n = default_workers(n_units) if workers is None else min(workers, max(n_units, 1))
    return {"kind": "in-process" if n == 1 else "process-pool", "workers": n}


# ---------------------------------------------------------------------------------------------
# entry points
# ---------------------------------------------------------------------------------------------
def evaluate(
    scenario: FarmConfig | str | Path | Mapping[str, Any],
    policies: Sequence[str | Any] = DEFAULT_POLICIES,
    replications: int = 10,
    horizon: int = 100_000,
    warmup: int | None = None,
    seed: int = 0,
    workers: int | None = None,
    use_ray: bool = False,
    ray_address: str | None = None,
    action_mode: str = "server",
    use_builtin: bool = True,
    compute_optimum: bool = True,
    scale: int = 1,
    progress: bool | None = None,
    optimum_max_variables: int | None = None,
) -> dict[str, Any]:
    """Evaluate ``policies`` on ``scenario``; returns the report dict (see module doc).

    Args:
        scenario: preset name, YAML/JSON path, dict or FarmConfig.
        policies: names (``serverfarm_gym.baselines.registry`` names, ``ppo:PATH``) or objects with ``predict``.
        replications: independent replications; replication r uses the same seed for every
            policy (common random numbers).
        horizon: decision epochs measured per replication, after ``warmup`` (default:
            ``serverfarm_gym.evaluation.efficiency.Window.for_farm``'s rule).
        seed: base seed; the replication seeds are recorded in the report.
        workers: local processes (None: min(cpu_count, units); 1: in-process).
        use_ray, ray_address: run the units on Ray (local instance when no address).
        action_mode: encoding for policies rolled out through the env.
        use_builtin: simulate built-in-capable policies at compiled speed (False: roll every
            policy out through the env, e.g. to cross-check the two routes).
        compute_optimum: try the exact solver (False skips it).
        optimum_max_variables: size limit handed to the LP solver (None: its default); larger
            instances get ``"optimum": null`` with the reason, and ``optimal`` is skipped.
        scale: evaluate ``FarmConfig.scaled(scale)`` (every R_k and lambda_j times ``scale``).
        progress: tqdm bar (None: only on a terminal).
    """
    t0 = time.perf_counter()
    plan = plan_evaluation(
        scenario, policies, replications, horizon, warmup, seed, action_mode, use_builtin, scale,
        optimum_max_variables,
    )  # fmt: skip
    results = run_units(plan.units, workers, ray_address, use_ray, progress)
    refs = reference_values(plan.config, compute_optimum, optimum_max_variables)
    report = summarize_plan(plan, results, refs)
    report["backend"] = backend_info(workers, use_ray, ray_address, len(plan.units))
    report["versions"] = versions()
    report["timing"] = plan_timing(plan, results)
    report["created"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    report["wall_time_s"] = time.perf_counter() - t0
    return report


def evaluate_exact(
    scenario: FarmConfig | str | Path | Mapping[str, Any],
    policies: Sequence[str | Any] = DEFAULT_POLICIES,
    action_mode: str = "server",
    compute_optimum: bool = True,
    optimum_max_variables: int | None = None,
    scale: int = 1,
    max_states: int = EXACT_MAX_STATES,
    **ignored: Any,
) -> dict[str, Any]:
    """Each policy's *exact* long-run performance (``serverfarm_gym.evaluation.exact``: the stationary
    distribution of its per-server CTMC), in the report shape of :func:`evaluate` with ``ci95``
    0 (no sampling error) and ``route`` ``"exact"``.

    Simulation settings (replications, horizon, workers, ...) are accepted and ignored.

    Raises:
        ValueError: the chain cannot be solved exactly (the message says why: the state count
            and the limit, non-exponential sizes, time-varying rates), or a policy's decisions
            are randomised, or it chose a masked action.
    """
    t0 = time.perf_counter()
    config = load_scenario(scenario)
    if scale != 1:
        config = config.scaled(scale)
    why = exact_unsupported_reason(config, max_states)
    if why is not None:
        raise ValueError(f"--exact: scenario {config.name!r}: {why}")
    built, skipped = build_policies(
        config, _with_reference(policies), action_mode, optimum_max_variables
    )
    refs = reference_values(config, compute_optimum, optimum_max_variables)
    opt = refs["optimum"]["efficiency"] if refs.get("optimum") else None
    bound = refs["upper_bound"]["efficiency"] if refs.get("upper_bound") else None

    out_pol = _exact_entries(config, built, skipped, action_mode, max_states)
    pas = out_pol[REFERENCE_POLICY]["efficiency"]["mean"]
    for e in out_pol.values():
        eff = e["efficiency"]["mean"]
        e["gap_to_pas_pct"] = gap_pct(eff, pas)
        e["gap_to_pas_paired"] = _exact(gap_pct(eff, pas) or 0.0)
        e["gap_to_optimum_pct"] = shortfall_pct(eff, opt)
        e["gap_to_bound_pct"] = shortfall_pct(eff, bound)
    return {
        "scenario": config.name,
        "scenario_source": str(scenario) if isinstance(scenario, (str, Path)) else config.name,
        "warnings": [],
        "n_servers": config.n_servers,
        "n_groups": config.n_groups,
        "n_job_types": config.n_job_types,
        "load": config.load,
        "settings": {
            "method": "exact",
            "action_mode": action_mode,
            "max_states": int(max_states),
            "interval": "none: exact stationary values of the per-server CTMC (serverfarm_gym.evaluation.exact)",
        },
        "optimum": refs.get("optimum"),
        "optimum_reason": refs.get("optimum_reason"),
        "upper_bound": refs.get("upper_bound"),
        "upper_bound_reason": refs.get("upper_bound_reason"),
        "policies": out_pol,
        "skipped": skipped,
        "scale": int(scale),
        "config": config.to_dict(),
        "backend": {"kind": "exact", "workers": 1},
        "versions": versions(),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "wall_time_s": time.perf_counter() - t0,
    }


def _exact(x: float) -> dict[str, Any]:
    """A metric summary without sampling error."""
    return {"mean": float(x), "ci95": 0.0, "std": 0.0, "n": 1}


def _exact_entries(
    config: FarmConfig,
    built: Sequence[tuple[Any, str, Any]],
    skipped: dict[str, str],
    action_mode: str,
    max_states: int,
) -> dict[str, Any]:
    """Each built policy's exact report entry (gaps not yet filled in); a policy that cannot be
    solved exactly (randomised decisions, masked actions) goes to ``skipped``, except PAS."""
    out_pol: dict[str, Any] = {}
    for _, label, policy in built:
        rnd = randomised_exact(policy, config)
        if rnd is not None:  # a randomised symmetric policy: exact on the aggregated chain
            out_pol[label] = _randomised_entry(config, rnd)
            continue
        try:
            res = exact_evaluation(policy, config, action_mode, max_states)
        except ValueError as err:  # this policy only (randomised decisions, masked actions)
            if label == REFERENCE_POLICY:
                raise
            skipped[label] = str(err)
            continue
        out_pol[label] = {
            "route": "exact",
            "efficiency": _exact(res.efficiency),
            "throughput": _exact(res.throughput),
            "power": _exact(res.power),
            "blocking": _exact(overall_blocking(config, res)),
            "cost_efficiency": _exact(cost_efficiency(config, res)),
            "mean_response_time": _exact(res.mean_response_time),
            "blocking_per_type": {
                jt.name: _exact(res.blocking[j]) for j, jt in enumerate(config.job_types)
            },
            "n_states": res.n_states,
            "invalid_actions": 0,
            "replications": [],
        }
        if hasattr(policy, "check_cpu_seconds"):
            out_pol[label]["check_cpu_s"] = float(policy.check_cpu_seconds)
    return out_pol


def _randomised_entry(config: FarmConfig, rnd: Mapping[str, Any]) -> dict[str, Any]:
    lam = config.arrival_rates[0]
    blocking = float(lam @ rnd["blocking"] / lam.sum()) if lam.sum() > 0 else 0.0
    return {
        "route": "exact (aggregated chain)",
        **{m: _exact(rnd[m]) for m in (*METRICS[:3], "cost_efficiency", "mean_response_time")},
        "blocking": _exact(blocking),
        "blocking_per_type": {
            jt.name: _exact(rnd["blocking"][j]) for j, jt in enumerate(config.job_types)
        },
        "n_states": rnd["n_states"],
        "invalid_actions": 0,
        "replications": [],
    }


def evaluate_and_write(
    scenario: FarmConfig | str | Path | Mapping[str, Any],
    policies: Sequence[str | Any] = DEFAULT_POLICIES,
    *,
    json_path: str | Path | None = None,
    csv_path: str | Path | None = None,
    plot_path: str | Path | None = None,
    quiet: bool = False,
    exact: bool = False,
    **kwargs: Any,
) -> dict[str, Any]:
    """:func:`evaluate` (or :func:`evaluate_exact` with ``exact=True``), then print the table
    (unless ``quiet``) and write the requested files atomically. Output directories are checked
    *before* the run. This is ``evaluate.py``."""
    check_output_paths(json_path, csv_path, plot_path)
    report = (evaluate_exact if exact else evaluate)(scenario, policies, **kwargs)
    write_outputs(report, json_path, csv_path, plot_path)
    if not quiet:
        print(format_table(report))
    return report
