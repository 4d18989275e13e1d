"""The report of a sweep: many (scenario, farm size, seed) evaluations in one pool of work units
(``sweep.py`` is its command line).

Each evaluation is planned and summarised exactly as :func:`serverfarm_gym.evaluation.policy_report.evaluate` does, so
a sweep's rows equal the single evaluations of the same settings.
"""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.scenarios import load_scenario
from serverfarm_gym.evaluation.outputs import (
    check_output_paths,
    format_sweep_table,
    write_sweep_outputs,
)
from serverfarm_gym.evaluation.parallel import run_units
from serverfarm_gym.evaluation.policy_report import (
    REFERENCE_POLICY,
    EvaluationPlan,
    backend_info,
    label_of,
    plan_evaluation,
    plan_timing,
    summarize_plan,
)
from serverfarm_gym.evaluation.provenance import versions
from serverfarm_gym.evaluation.references import reference_values
from serverfarm_gym.evaluation.rollout import check_run_settings

__all__ = ["MAX_WORK_UNITS", "check_sweep_size", "sweep", "sweep_and_write"]

#: the most work units (policy x replication x scenario x scale x seed) of one sweep: each keeps
#: its record in memory and in the report (about 1 kB), and a sweep plans them all first
MAX_WORK_UNITS = 100_000


def check_sweep_size(
    scenarios: Sequence[Any],
    policies: Sequence[str],
    seeds: Sequence[int],
    scales: Sequence[int],
    replications: int,
) -> None:
    """Non-empty lists and at most MAX_WORK_UNITS units in all, before any plan is built."""
    for name, values in (
        ("scenarios", scenarios),
        ("policies", policies),
        ("seeds", seeds),
        ("scales", scales),
    ):
        if isinstance(values, str) or len(values) == 0:
            raise ValueError(f"{name}: give at least one (a list), got {values!r}")
    for s in seeds:
        check_run_settings(replications, s)
    n_pol = len({label_of(p) for p in policies} | {REFERENCE_POLICY})
    units = len(scenarios) * len(scales) * len(seeds) * n_pol * int(replications)
    if units > MAX_WORK_UNITS:
        raise ValueError(
            f"sweep: {len(scenarios)} scenarios x {len(scales)} scales x {len(seeds)} seeds x "
            f"{n_pol} policies x {replications} replications = {units:,} work units; at most "
            f"{MAX_WORK_UNITS:,} (MAX_WORK_UNITS): split the sweep"
        )  # fmt: skip


def sweep_and_write(
    scenarios: Sequence[FarmConfig | str | Path | Mapping[str, Any]],
    *,
    json_path: str | Path | None = None,
    csv_path: str | Path | None = None,
    plot_path: str | Path | None = None,
    quiet: bool = False,
    **kwargs: Any,
) -> dict[str, Any]:
    """:func:`sweep`, then print and write (``sweep.py``)."""
    check_output_paths(json_path, csv_path, plot_path)
    result = sweep(scenarios, **kwargs)
    write_sweep_outputs(result, json_path, csv_path, plot_path)
    if not quiet:
        print(format_sweep_table(result))
    return result


def _plans(
    scenarios: Sequence[FarmConfig | str | Path | Mapping[str, Any]],
    policies: Sequence[str],
    seeds: Sequence[int],
    scales: Sequence[int],
    replications: int,
    horizon: int,
    warmup: int | None,
    scale_horizon: bool,
    action_mode: str,
) -> list[EvaluationPlan]:
    """One plan per (scenario, scale, seed), in that order."""
    plans: list[EvaluationPlan] = []
    for sc in scenarios:
        for f in scales:
            if int(f) != f or f < 1:
                raise ValueError(f"scales: factors must be positive integers, got {f!r}")
            h = int(horizon) * (int(f) if scale_horizon else 1)
            w = None if warmup is None else int(warmup) * (int(f) if scale_horizon else 1)
            for s in seeds:
                plans.append(
                    plan_evaluation(
                        sc, policies, replications, h, w, int(s), action_mode, True, int(f)
                    )
                )
    return plans


def _rows(rep: Mapping[str, Any], p: EvaluationPlan) -> list[dict[str, Any]]:
    """The flat rows (one per policy) of one run's report."""
    rows = []
    for name, e in rep["policies"].items():
        rows.append(
            {
                "scenario": rep["scenario"],
                "base_scenario": p.scenario_source,
                "scale": int(p.scale),
                "n_servers": rep["n_servers"],
                "seed": p.seed,
                "policy": name,
                "replications": p.replications,
                "horizon": p.horizon,
                "efficiency_mean": e["efficiency"]["mean"],
                "efficiency_ci95": e["efficiency"]["ci95"],
                "throughput_mean": e["throughput"]["mean"],
                "power_mean": e["power"]["mean"],
                "blocking_mean": e["blocking"]["mean"],
                "gap_to_pas_pct": e["gap_to_pas_pct"],
                "gap_to_optimum_pct": e["gap_to_optimum_pct"],
                "gap_to_bound_pct": e["gap_to_bound_pct"],
                "optimum": rep["optimum"]["efficiency"] if rep["optimum"] else None,
                "upper_bound": rep["upper_bound"]["efficiency"] if rep["upper_bound"] else None,
            }
        )
    return rows


def sweep(
    scenarios: Sequence[FarmConfig | str | Path | Mapping[str, Any]],
    policies: Sequence[str] = ("pas", "whittle", "jsq", "random"),
    seeds: Sequence[int] = (0,),
    scales: Sequence[int] = (1,),
    replications: int = 5,
    horizon: int = 100_000,
    warmup: int | None = None,
    scale_horizon: bool = False,
    workers: int | None = None,
    use_ray: bool = False,
    ray_address: str | None = None,
    action_mode: str = "server",
    compute_optimum: bool = True,
    progress: bool | None = None,
    optimum_max_variables: int | None = None,
) -> dict[str, Any]:
    """Evaluate every (scenario, scale, seed) combination; all work units share one pool.

    ``scale_horizon`` multiplies horizon and warm-up by the scale factor, so that every farm size
    is simulated over the same amount of model time (a farm scaled by f has f times the arrivals
    per unit time). Returns ``{"runs": [report, ...], "rows": [flat row per run x policy], ...}``.
    """
    t0 = time.perf_counter()
    check_sweep_size(scenarios, policies, seeds, scales, replications)
    plans = _plans(scenarios, policies, seeds, scales, replications, horizon, warmup,
                   scale_horizon, action_mode)  # fmt: skip
    units = [u for p in plans for u in p.units]
    results = run_units(units, workers, ray_address, use_ray, progress)
    runs, rows = [], []
    i = 0
    ref_cache: dict[FarmConfig, dict[str, Any]] = {}
    for p in plans:
        res = results[i : i + len(p.units)]
        i += len(p.units)
        if p.config not in ref_cache:
            ref_cache[p.config] = reference_values(p.config, compute_optimum, optimum_max_variables)
        rep = summarize_plan(p, res, ref_cache[p.config])
        rep["timing"] = plan_timing(p, res)
        runs.append(rep)
        rows.extend(_rows(rep, p))
    return {
        "kind": "sweep",
        "settings": {
            "scenarios": [
                str(s) if isinstance(s, (str, Path)) else load_scenario(s).name for s in scenarios
            ],
            "scales": [int(f) for f in scales],
            "seeds": [int(s) for s in seeds],
            "policies": list(policies),
            "replications": int(replications),
            "horizon": int(horizon),
            "warmup": warmup,
            "scale_horizon": bool(scale_horizon),
        },
        "runs": runs,
        "rows": rows,
        "backend": backend_info(workers, use_ray, ray_address, len(units)),
        "versions": versions(),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "wall_time_s": time.perf_counter() - t0,
    }
