"""Benchmark suites: a fixed, versioned list of scenarios, each with its own seed and window, and
normalised scores (``python evaluate.py --suite core``; see docs/evaluation.md, "Benchmark suite").

A suite file (``scenarios/suites/<name>.yaml``, or any YAML/JSON path) reads::

    suite: core
    suite_version: "1"
    defaults: {replications: 10}
    scenarios:
      - {name: tiny, farm: tiny, reference: optimum, seed: 1001, horizon: 20000, warmup: 2000}
      - {name: paper-100-lognormal, farm: paper-100, job_size: {distribution: lognormal, scv: 4},
         reference: bound, seed: 1005, horizon: 400000, warmup: 20000}

``farm`` is a preset name or an inline scenario mapping (the suite then stands alone);
``job_size`` replaces every job type's size distribution; ``slo`` (``{mean_response_time: D}``)
sets the farm's SLO; ``reference`` is ``optimum`` (the exact
optimum, ``serverfarm_gym.baselines.solvers.efficiency_optimum``: the run fails if the solver refuses), ``bound`` (the relaxation
upper bound, ``serverfarm_gym.baselines.solvers.bounds``), ``slo-optimum`` (the exact optimum under the farm's
``slo:``, ``serverfarm_gym.baselines.solvers.slo_optimum``; small farms with exponential sizes), ``sleep-optimum`` (the
exact optimum of a farm with right-sizing, ``serverfarm_gym.baselines.solvers.sleep_chain``; small farms) or
``best-known`` (the efficiency of the best known policy, given as ``reference_efficiency`` in the
entry: for farms that no exact solver or valid bound covers, such as large farms with
right-sizing). The base model's ``optimum`` and ``bound`` ignore ``sleep`` and are refused there.

Every policy entry also carries its mean response time (Little's law, simulated); on a farm with
an ``slo:`` the scenario records the bound ``slo`` and each entry ``slo_met``: its E[T] is not
significantly above D (mean minus the 95% half-width <= D; a policy on the bound, such as the
constrained optimum, would otherwise fail half the time).

Score of policy P on a scenario (like Atari's human-normalised score)::

    score = 100 (eff_P - eff_random) / (eff_reference - eff_random)

so the random dispatcher scores 0 and the reference 100. The random policy is always evaluated.
Its interval is the delta method on paired replications (see :func:`normalized_score`); the
suite-wide ``mean_score`` is the unweighted mean over scenarios with the intervals combined as
independent normals (see :func:`mean_of_scores`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from serverfarm_gym.baselines.solvers.sleep_chain import SleepSpace
from serverfarm_gym.baselines.solvers.sleep_chain import solve_optimum as solve_sleep_optimum
from serverfarm_gym.baselines.solvers.slo_optimum import solve_slo
from serverfarm_gym.envs.config import FarmConfig, farm_from_dict
from serverfarm_gym.envs.mapping_files import load_mapping_file
from serverfarm_gym.envs.scenarios import PRESETS, load_scenario
from serverfarm_gym.envs.scenarios.files import data_dir
from serverfarm_gym.evaluation.parallel import run_units
from serverfarm_gym.evaluation.policy_report import (
    EvaluationPlan,
    plan_evaluation,
    reference_values,
    summarize_plan,
)
from serverfarm_gym.evaluation.stats import t_quantile

__all__ = [
    "RANDOM_POLICY",
    "SuiteDefinition",
    "SuiteScenario",
    "available_suites",
    "load_suite",
    "mean_of_scores",
    "normalized_score",
    "ppo_applicability",
    "run_suite",
]

RANDOM_POLICY = "random"
REFERENCE_KINDS = ("optimum", "bound", "slo-optimum", "sleep-optimum", "best-known")
#: the key of each reference kind in the scenario's reference values
_REFERENCE_KEY = {
    "optimum": "optimum",
    "bound": "upper_bound",
    "slo-optimum": "slo_optimum",
    "sleep-optimum": "sleep_optimum",
    "best-known": "best_known",
}
_TOP_KEYS = {"suite", "suite_version", "description", "defaults", "scenarios"}
_WINDOW_KEYS = {"replications", "horizon", "warmup"}
_SCENARIO_KEYS = {"name", "farm", "job_size", "reference", "seed", "description"} | _WINDOW_KEYS
_SCENARIO_KEYS |= {
    "slo"
}  # the farm's mean-response-time SLO (serverfarm_gym.envs.config.SLOConfig)
_SCENARIO_KEYS |= {"reference_efficiency"}  # the value of reference: best-known


# ---------------------------------------------------------------------------------------------
# the suite definition
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SuiteScenario:
    """One scenario of a suite: the farm, its reference kind and its fixed measurement window."""

    name: str
    farm: FarmConfig
    reference: str
    seed: int
    replications: int
    horizon: int
    warmup: int
    description: str = ""
    #: the reference efficiency of a ``best-known`` reference (None for computed references)
    reference_efficiency: float | None = None


@dataclass(frozen=True)
class SuiteDefinition:
    """A validated suite file. ``version`` changes whenever a scenario, seed or window does."""

    name: str
    version: str
    scenarios: tuple[SuiteScenario, ...]
    description: str = ""
    source: str = ""

    def scenario_names(self) -> list[str]:
        return [s.name for s in self.scenarios]


def available_suites() -> list[str]:
    """Names of the suites shipped in ``scenarios/suites/``."""
    folder = data_dir().joinpath("suites")
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


def _int(v: Any, where: str, minimum: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < minimum:
        raise ValueError(f"{where}: must be an integer >= {minimum}, got {v!r}")
    return int(v)


def _check_keys(d: Any, allowed: set[str], where: str) -> None:
    if not isinstance(d, Mapping):
        raise ValueError(f"{where}: expected a mapping, got {type(d).__name__}")
    extra = sorted(set(d) - allowed)
    if extra:
        raise ValueError(f"{where}: unknown key(s) {extra}; allowed: {sorted(allowed)}")


def _scenario_farm(entry: Mapping[str, Any], name: str, where: str) -> FarmConfig:
    if "farm" not in entry:
        raise ValueError(f"{where}.farm: missing; give a preset name or a scenario mapping")
    spec = entry["farm"]
    if isinstance(spec, str):
        # presets only: a suite must not depend on files outside the package
        if spec not in PRESETS:
            raise ValueError(
                f"{where}.farm: {spec!r} is not a preset ({sorted(PRESETS)}); give a preset "
                "name or the scenario inline as a mapping"
            )
    elif not isinstance(spec, Mapping):
        raise ValueError(f"{where}.farm: expected a preset name or a mapping, got {spec!r}")
    try:
        farm = load_scenario(spec)
        if "job_size" in entry:
            farm = farm.with_job_size(entry["job_size"])
        if "slo" in entry:
            farm = farm_from_dict({**farm.to_dict(), "slo": entry["slo"]})
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from err
    return replace(farm, name=name) if farm.name != name else farm


def _check_reference(entry: Mapping[str, Any], ref: str, farm: FarmConfig, where: str) -> None:
    """Refuse a reference kind that does not apply to ``farm`` (named field, the fix)."""
    if ref in ("optimum", "slo-optimum", "sleep-optimum") and (
        not farm.all_exponential or farm.is_time_varying
    ):
        raise ValueError(
            f"{where}.reference: {ref!r} needs exponential job sizes and constant rates "
            "(the exact solver's model); use 'bound'"
        )
    if ref == "slo-optimum" and farm.slo is None:
        raise ValueError(
            f"{where}.reference: 'slo-optimum' needs a farm with an slo: block "
            "({mean_response_time: D})"
        )
    if farm.has_sleep and ref in ("optimum", "bound", "slo-optimum"):
        # the base model's solvers and bound ignore sleep modes: their value is no reference
        raise ValueError(
            f"{where}.reference: {ref!r} ignores right-sizing (the farm has sleep: groups); "
            "use 'sleep-optimum' (small farms) or 'best-known' with reference_efficiency"
        )
    if ref == "sleep-optimum" and (not farm.has_sleep or farm.slo is not None):
        raise ValueError(
            f"{where}.reference: 'sleep-optimum' needs a farm with sleep: groups and no slo: "
            "(the right-sizing chain's optimum is unconstrained); use 'optimum' or 'slo-optimum'"
        )
    val = entry.get("reference_efficiency")
    if ref == "best-known":
        if (
            isinstance(val, bool)
            or not isinstance(val, (int, float))
            or not math.isfinite(val)
            or val <= 0
        ):
            raise ValueError(
                f"{where}.reference_efficiency: 'best-known' needs the best known policy's "
                f"efficiency (a number > 0), got {val!r}"
            )
    elif val is not None:
        raise ValueError(
            f"{where}.reference_efficiency: only with reference: best-known (got {ref!r}); "
            "remove it"
        )


def parse_suite(data: Mapping[str, Any], source: str = "<suite>") -> SuiteDefinition:
    """Validate a suite mapping (see the module doc); errors name ``source`` and the field."""
    _check_keys(data, _TOP_KEYS, source)
    for key in ("suite", "suite_version", "scenarios"):
        if key not in data:
            raise ValueError(f"{source}: {key}: missing")
    name, version = data["suite"], data["suite_version"]
    if not isinstance(name, str) or not name:
        raise ValueError(f"{source}: suite: expected a non-empty name, got {name!r}")
    if isinstance(version, bool) or not isinstance(version, (str, int)) or str(version) == "":
        raise ValueError(f"{source}: suite_version: expected a string such as '1', got {version!r}")
    defaults = data.get("defaults", {})
    _check_keys(defaults, _WINDOW_KEYS, f"{source}: defaults")
    entries = data["scenarios"]
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"{source}: scenarios: expected a non-empty list")
    scenarios: list[SuiteScenario] = []
    for i, entry in enumerate(entries):
        where = f"{source}: scenarios[{i}]"
        _check_keys(entry, _SCENARIO_KEYS, where)
        sname = entry.get("name")
        if not isinstance(sname, str) or not sname or "," in sname:
            raise ValueError(f"{where}.name: expected a non-empty name without ',', got {sname!r}")
        if sname in {s.name for s in scenarios}:
            raise ValueError(f"{where}.name: {sname!r} is given twice; names must be unique")
        where = f"{source}: scenarios[{i}] ({sname})"
        ref = entry.get("reference")
        if ref not in REFERENCE_KINDS:
            raise ValueError(f"{where}.reference: expected one of {REFERENCE_KINDS}, got {ref!r}")
        farm = _scenario_farm(entry, sname, where)
        _check_reference(entry, str(ref), farm, where)
        win = {k: entry.get(k, defaults.get(k)) for k in _WINDOW_KEYS}
        for k in ("replications", "horizon", "warmup"):
            if win[k] is None:
                raise ValueError(f"{where}.{k}: missing (set it here or under defaults)")
        if "seed" not in entry:
            raise ValueError(f"{where}.seed: missing (each scenario has its own fixed seed)")
        scenarios.append(
            SuiteScenario(
                name=sname,
                farm=farm,
                reference=str(ref),
                seed=_int(entry["seed"], f"{where}.seed", 0),
                replications=_int(win["replications"], f"{where}.replications", 2),
                horizon=_int(win["horizon"], f"{where}.horizon", 1),
                warmup=_int(win["warmup"], f"{where}.warmup", 0),
                description=str(entry.get("description", "")),
                reference_efficiency=(
                    float(entry["reference_efficiency"]) if ref == "best-known" else None
                ),
            )
        )
    seeds = [s.seed for s in scenarios]
    if len(set(seeds)) != len(seeds):
        # distinct seeds keep the scenarios' estimates independent (mean_score's interval)
        raise ValueError(f"{source}: scenarios[].seed: seeds must differ, got {seeds}")
    return SuiteDefinition(
        name=name,
        version=str(version),
        scenarios=tuple(scenarios),
        description=str(data.get("description", "")),
        source=source,
    )


def load_suite(spec: str | Path | Mapping[str, Any]) -> SuiteDefinition:
    """A shipped suite by name (``"core"``), a YAML/JSON suite file, or a mapping."""
    if isinstance(spec, Mapping):
        return parse_suite(spec)
    path = Path(spec)
    if path.is_file():
        return parse_suite(load_mapping_file(path), str(path))
    names = available_suites()
    if str(spec) not in names:
        raise ValueError(
            f"suite: {str(spec)!r} is neither a shipped suite ({names}) nor an existing file"
        )
    path = data_dir() / "suites" / f"{spec}.yaml"
    return parse_suite(load_mapping_file(path), f"scenarios/suites/{spec}.yaml")


# ---------------------------------------------------------------------------------------------
# scores
# ---------------------------------------------------------------------------------------------
def normalized_score(
    values: Sequence[float] | np.ndarray,
    random_values: Sequence[float] | np.ndarray,
    reference: float,
    confidence: float = 0.95,
) -> dict[str, float | None]:
    """``{"mean", "ci95"}`` of ``100 (E[v] - E[r]) / (reference - E[r])`` from paired replications.

    ``values[i]`` and ``random_values[i]`` come from replication i (same seed: common random
    numbers). The estimate plugs in the sample means; its half-width is the delta method on the
    pairs ``(d_i, r_i) = (v_i - r_i, r_i)``: with ``g = (100/(ref - r̄), 100 d̄/(ref - r̄)^2)`` and
    ``S`` their sample covariance, ``half = t_{(1+c)/2, n-1} sqrt(g' S g / n)``. Pairing removes
    the part of the noise the two policies share; the reference is a computed constant. For the
    random policy itself every d_i is 0, so its score is exactly 0 ± 0.
    """
    v = np.asarray(values, dtype=np.float64)
    r = np.asarray(random_values, dtype=np.float64)
    if v.shape != r.shape or v.ndim != 1 or v.size == 0:
        raise ValueError(
            f"values/random_values: paired replications need equal 1-d shapes, got {v.shape}, {r.shape}"
        )
    d = v - r
    span = float(reference) - float(r.mean())
    if not span > 0:
        raise ValueError(
            f"reference: the reference efficiency {reference:.6g} is not above the random "
            f"policy's {r.mean():.6g}; the score is undefined"
        )
    mean = 100.0 * float(d.mean()) / span
    if v.size < 2:
        return {"mean": mean, "ci95": None}
    grad = np.array([100.0 / span, 100.0 * float(d.mean()) / span**2])
    cov = np.cov(np.vstack([d, r]), ddof=1)
    var = float(grad @ cov @ grad) / v.size
    half = t_quantile(confidence, v.size) * math.sqrt(max(var, 0.0))
    return {"mean": mean, "ci95": half}


def mean_of_scores(
    scores: Sequence[Mapping[str, float | None]], replications: Sequence[int]
) -> dict[str, float | None]:
    """Unweighted mean of per-scenario scores with its 95% half-width.

    Scenarios are simulated with different seeds, so their estimates are independent. Each
    half-width ``h_k`` is turned back into a standard error ``h_k / t_{0.975, n_k-1}``; the mean's
    standard error is ``sqrt(sum se_k^2) / K`` and its half-width ``1.96`` times that (normal:
    with K scenarios of n_k replications the combined degrees of freedom are many).
    """
    if not scores:
        raise ValueError("scores: need at least one scenario")
    means = [s["mean"] for s in scores]
    known = [m for m in means if m is not None]
    if len(known) < len(means):
        return {"mean": None, "ci95": None}
    mean = float(np.mean(known))
    halves = [s["ci95"] for s in scores]
    se2 = 0.0
    for h, n in zip(halves, replications, strict=True):
        if h is None:
            return {"mean": mean, "ci95": None}
        se2 += (float(h) / t_quantile(0.95, n)) ** 2
    z = 1.959963984540054
    return {"mean": mean, "ci95": z * math.sqrt(se2) / len(scores)}


# ---------------------------------------------------------------------------------------------
# which trained model applies where
# ---------------------------------------------------------------------------------------------
_MODEL_FILES = ("best_model.zip", "final_model.zip")


def _farm_key(config: FarmConfig) -> dict[str, Any]:
    d = config.to_dict()
    d.pop("name", None)
    d.pop("description", None)
    d.pop("slo", None)  # an SLO judges a dispatcher, it does not change the farm it dispatches in
    return d


def _model_in(folder: Path) -> Path | None:
    for f in _MODEL_FILES:
        if (folder / f).is_file():
            return folder / f
    return None


def _model_farm(model: Path) -> FarmConfig:
    """The farm a saved model was trained on, from its JSON sidecar (``serverfarm_gym.agents.ppo`` writes
    ``<model>.json`` with the scenario as a plain mapping); nothing in the zip is loaded."""
    side = model.with_suffix(".json")
    if not side.is_file():
        raise ValueError(
            f"policy 'ppo:{model}': no sidecar {side.name} next to the model, so its farm is "
            "unknown; the suite applies a model only to the farm it was trained on"
        )
    meta = load_mapping_file(side)
    if "scenario" not in meta:
        raise ValueError(f"{side}: scenario: missing (the farm the model was trained on)")
    return farm_from_dict(meta["scenario"])


def ppo_applicability(arg: str, suite: SuiteDefinition) -> dict[str, tuple[str | None, str | None]]:
    """For ``ppo:ARG``: scenario name -> (policy spec to evaluate, None) or (None, why n/a).

    Rule: a model applies only to the farm it was trained on (same groups, job types and job
    sizes; names and SLOs ignored), read from its sidecar. ``ARG`` is a model file, a run
    directory holding ``best_model.zip`` (else ``final_model.zip``), or a directory of run
    directories named after the suite's scenarios (``ARG/<scenario>/best_model.zip``). A model
    matching no scenario is an error (the run would report nothing for it).
    """
    path = Path(arg)
    if not path.exists():
        raise ValueError(f"policy 'ppo:{arg}': no such file or directory")
    single = path if path.is_file() else _model_in(path)
    out: dict[str, tuple[str | None, str | None]] = {}
    if single is not None:
        farm = _model_farm(single)
        for sc in suite.scenarios:
            if _farm_key(farm) == _farm_key(sc.farm):
                out[sc.name] = (f"ppo:{single}", None)
            else:
                out[sc.name] = (None, f"trained on another farm ({farm.name})")
        if not any(spec for spec, _ in out.values()):
            raise ValueError(
                f"policy 'ppo:{arg}': trained on farm {farm.name!r}, which is none of suite "
                f"{suite.name!r}'s scenarios {suite.scenario_names()}"
            )
        return out
    for sc in suite.scenarios:
        model = _model_in(path / sc.name)
        if model is None:
            out[sc.name] = (None, f"no model {path / sc.name}/{_MODEL_FILES[0]}")
        elif _farm_key(_model_farm(model)) != _farm_key(sc.farm):
            out[sc.name] = (None, f"{model} was trained on another farm")
        else:
            out[sc.name] = (f"ppo:{model}", None)
    if not any(spec for spec, _ in out.values()):
        raise ValueError(
            f"policy 'ppo:{arg}': no <scenario>/best_model.zip under {path} for any of "
            f"{suite.scenario_names()}, and no model in {path} itself"
        )
    return out


# ---------------------------------------------------------------------------------------------
# running a suite
# ---------------------------------------------------------------------------------------------
def _labels(policies: Sequence[str]) -> list[str]:
    if isinstance(policies, str):
        raise ValueError("policies: pass a list of names, e.g. ['pas', 'jsq'] (not one string)")
    out: list[str] = []
    for p in policies:
        if not isinstance(p, str) or not p.strip():
            raise ValueError(f"policies: expected policy names, got {p!r}")
        if p.strip() not in out:
            out.append(p.strip())
    for always in ("pas", RANDOM_POLICY):  # PAS: the harness's reference; random: the score's 0
        if always not in out:
            out.append(always)
    return out


@dataclass
class _SuitePlan:
    plans: list[EvaluationPlan]
    refs: list[dict[str, Any]]
    #: scenario -> user's policy label -> the spec evaluated for it (``ppo:DIR`` -> the model file)
    specs: dict[str, dict[str, str]]
    #: scenario -> user's policy label -> why it does not apply there
    na: dict[str, dict[str, str]]


def _plan(suite: SuiteDefinition, labels: list[str], action_mode: str) -> _SuitePlan:
    """One harness plan per scenario and its reference, built (and the exact references solved)
    before anything runs, so that a bad name or an unsolvable reference fails at once."""
    ppo = {
        lb: ppo_applicability(lb.partition(":")[2], suite) for lb in labels if lb.startswith("ppo:")
    }
    out = _SuitePlan([], [], {}, {})
    for sc in suite.scenarios:
        specs, na = {}, {}
        for lb in labels:
            spec, why = ppo[lb][sc.name] if lb in ppo else (lb, None)
            if spec is None:
                na[lb] = str(why)
            else:
                specs[lb] = spec
        plan = plan_evaluation(
            sc.farm, list(dict.fromkeys(specs.values())), sc.replications, sc.horizon,
            sc.warmup, sc.seed, action_mode,
        )  # fmt: skip
        for lb, spec in specs.items():
            if spec in plan.skipped:
                na[lb] = plan.skipped[spec]
        ref = reference_values(sc.farm, compute_optimum=sc.reference == "optimum")
        if sc.reference == "slo-optimum":
            ref.update(_slo_reference(sc.farm))
        elif sc.reference == "sleep-optimum":
            ref.update(_sleep_reference(sc.farm))
        elif sc.reference == "best-known":
            eff = {"efficiency": sc.reference_efficiency, "source": "suite reference_efficiency"}
            ref.update({"best_known": eff, "best_known_reason": None})
        key = _REFERENCE_KEY[sc.reference]
        if ref[key] is None:
            raise ValueError(
                f"suite {suite.name!r}, scenario {sc.name!r}: reference {sc.reference!r} is not "
                f"computable: {ref[key + '_reason']}"
            )
        out.plans.append(plan)
        out.refs.append(ref)
        out.specs[sc.name] = specs
        out.na[sc.name] = na
    return out


def _slo_reference(farm: FarmConfig) -> dict[str, Any]:
    """``{"slo_optimum": {...} or None, "slo_optimum_reason": ...}``: the exact SLO optimum."""
    try:
        sol = solve_slo(farm)
    except (ValueError, MemoryError) as err:
        return {"slo_optimum": None, "slo_optimum_reason": f"SLO solver refused: {err}"}
    return {
        "slo_optimum": {
            "efficiency": float(sol.value),
            "mean_response_time": float(sol.info["mean_response_time"]),
            "source": "serverfarm_gym.baselines.solvers.slo_optimum.solve_slo",
        },
        "slo_optimum_reason": None,
    }


def _sleep_reference(farm: FarmConfig) -> dict[str, Any]:
    """``{"sleep_optimum": {...} or None, "sleep_optimum_reason": ...}``: the exact optimum of a
    farm with right-sizing (the aggregated chain's LP)."""
    try:
        value, res = solve_sleep_optimum(SleepSpace(farm))
    except (ValueError, MemoryError, RuntimeError) as err:
        return {
            "sleep_optimum": None,
            "sleep_optimum_reason": f"right-sizing solver refused: {err}",
        }
    return {
        "sleep_optimum": {
            "efficiency": float(value),
            "mean_response_time": float(res.mean_response_time),
            "source": "serverfarm_gym.baselines.solvers.sleep_chain.solve_optimum",
        },
        "sleep_optimum_reason": None,
    }


def _latency_fields(entry: Mapping[str, Any], farm: FarmConfig) -> dict[str, Any]:
    """The entry's mean response time (and whether it meets the farm's SLO, if any)."""
    rt = entry.get("mean_response_time")
    out: dict[str, Any] = {
        "mean_response_time": None if rt is None else {"mean": rt["mean"], "ci95": rt["ci95"]}
    }
    if farm.slo is not None:
        # not significantly above D: the constrained optimum sits on D, its mean either side
        low = None if rt is None else rt["mean"] - (rt["ci95"] or 0.0)
        out["slo_met"] = None if low is None else bool(low <= farm.slo.mean_response_time)
    return out


def run_suite(
    suite: SuiteDefinition | str | Path | Mapping[str, Any],
    policies: Sequence[str],
    *,
    action_mode: str = "server",
    workers: int | None = None,
    use_ray: bool = False,
    ray_address: str | None = None,
    progress: bool | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Evaluate ``policies`` on every scenario of ``suite``: ``(leaderboard, details)``.

    ``leaderboard`` has exactly the documented shape (``{"suite", "suite_version", "scenarios",
    "mean_score"}``); a policy that does not apply to a scenario (``optimal`` beyond the exact
    solver, a PPO model trained on another farm) has ``null`` efficiency and score there and a
    ``null`` mean score. ``details`` holds what the tables and notes need: the n/a reasons, the
    harness report of each scenario, window warnings and the wall time. All work units of all
    scenarios run in one pool.
    """
    t0 = time.perf_counter()
    suite = suite if isinstance(suite, SuiteDefinition) else load_suite(suite)
    labels = _labels(policies)
    sp = _plan(suite, labels, action_mode)
    units = [u for p in sp.plans for u in p.units]
    results = run_units(units, workers, ray_address, use_ray, progress)
    scenarios: dict[str, Any] = {}
    reports: dict[str, Any] = {}
    per_policy: dict[str, list[dict[str, float | None]]] = {lb: [] for lb in labels}
    warnings: list[str] = []
    i = 0
    for sc, plan, ref in zip(suite.scenarios, sp.plans, sp.refs, strict=True):
        res = results[i : i + len(plan.units)]
        i += len(plan.units)
        rep = summarize_plan(plan, res, ref)
        reports[sc.name] = rep
        warnings += [f"{sc.name}: {w}" for w in rep["warnings"]]
        ref_eff = float(ref[_REFERENCE_KEY[sc.reference]]["efficiency"])
        runs = {
            name: [r["efficiency"] for r in e["replications"]]
            for name, e in rep["policies"].items()
        }
        pol: dict[str, Any] = {}
        for lb in labels:
            spec = sp.specs[sc.name].get(lb)
            if spec is None or lb in sp.na[sc.name]:
                pol[lb] = {"efficiency": None, "score": None, **_latency_fields({}, sc.farm)}
                per_policy[lb].append({"mean": None, "ci95": None})
                continue
            eff = rep["policies"][spec]["efficiency"]
            score = normalized_score(runs[spec], runs[RANDOM_POLICY], ref_eff)
            pol[lb] = {"efficiency": {"mean": eff["mean"], "ci95": eff["ci95"]}, "score": score}
            pol[lb].update(_latency_fields(rep["policies"][spec], sc.farm))
            per_policy[lb].append(score)
        scenarios[sc.name] = {
            "n_servers": int(sc.farm.n_servers),
            "reference": {"kind": sc.reference, "efficiency": ref_eff},
            "policies": pol,
        }
        if sc.farm.slo is not None:
            scenarios[sc.name]["slo"] = float(sc.farm.slo.mean_response_time)
    reps = [sc.replications for sc in suite.scenarios]
    board = {
        "suite": suite.name,
        "suite_version": suite.version,
        "scenarios": scenarios,
        "mean_score": {lb: mean_of_scores(per_policy[lb], reps) for lb in labels},
    }
    details = {
        "suite": suite,
        "not_applicable": sp.na,
        "reports": reports,
        "warnings": warnings,
        "wall_time_s": time.perf_counter() - t0,
    }
    return board, details
