"""PPO from scratch (random initialisation, no clone) on the exactly solvable farms of the
``core`` suite, measured against the exact optimum: how many env steps and CPU seconds each
trainer needs to reach 99% and 99.9% of the optimum, and the gap it ends at.

Two trainers, each from a random start:

* ``ppo``: train.py's default trainer (``serverfarm_gym.agents.ppo.ppo.PPO``) with the farm-derived
  settings train.py uses on these farms (``serverfarm_gym.agents.ppo.config.recommended``, the same as
  ``serverfarm_gym.agents.common.farm_settings`` derives for an exact farm: 16 envs x 128 steps, minibatches of
  128, 10 epochs, the average-reward advantage without a discount);
* ``sb3``: sb3-contrib ``MaskablePPO`` with its defaults (one env, 2,048 steps per rollout,
  minibatches of 64, 10 epochs, gamma 0.99) on ``TrainingWrapper(ServerFarmEnv)``.

Both act in group actions and see 2,048 env steps between updates, and the deterministic
policy is evaluated *exactly* (the CTMC of ``serverfarm_gym.evaluation.exact``) at step 0 and after every
update: no evaluation noise, so "first reached" is a property of the run, not of a sample.
CPU seconds count the training process's CPU time, evaluations excluded.

Every (scenario, trainer, seed) cell is written atomically to its own JSON file under
``--out/cells``; a rerun skips the cells already there (run the rest later, or split the grid
over processes with ``--trainers``/``--seeds``). ``--report`` (also after every run) aggregates
the cells present: per row the interquartile mean (IQM) with a 95% stratified-bootstrap interval
(``rliable``), the share of seeds that reached each threshold, performance profiles and learning
curves (PNG), ``--out/from_scratch.json`` and the markdown table printed, and
``--out/leaderboard_rows.json``: the rows the suite leaderboard takes
(``python evaluate.py --suite core --learned results/from_scratch/leaderboard_rows.json``; schema in
:func:`learned_rows` and docs/evaluation.md, "Learned rows").

    nice -n 10 python -m experiments.studies.from_scratch --seeds 10 --steps 24576 --figure-dir docs/figures
    python -m experiments.studies.from_scratch --report --figure-dir docs/figures
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np

from serverfarm_gym.evaluation.outputs import atomic_write, to_json

#: the core suite's farms with an exact optimum (scenarios/suites/core.yaml)
SCENARIOS = ("tiny", "small-1", "pas-gap", "speed-scaling")
#: the other exact presets, run when named (``--scenarios small-2,small-3``; not suite rows)
EXTRA_SCENARIOS = ("small-2", "small-3")
ALL_SCENARIOS = SCENARIOS + EXTRA_SCENARIOS
TRAINERS = ("ppo", "sb3")
THRESHOLDS = (0.99, 0.999)
#: env steps between exact evaluations: one update of either trainer
EVAL_EVERY = 2048
ACTION_MODE = "group"
#: the suite whose scenarios these are, and the schema tag of the rows file the leaderboard reads
SUITE = "core"
ROWS_SCHEMA = "serverfarm-gym/learned-rows/1"
ROWS_FILE = "leaderboard_rows.json"


def _warmup(config: Any) -> int:
    from serverfarm_gym.evaluation.policy_report import epochs_per_duration

    return max(1_000, math.ceil(50 * epochs_per_duration(config)))  # as train.py


class Curve:
    """What ``measure()`` returns (a tuple of numbers: the exact efficiency of the policy, ...)
    at each evaluation, after the env steps and the training CPU seconds (evaluations
    excluded) so far: points ``(steps, train CPU-s, *measure())``."""

    def __init__(self, measure: Callable[[], tuple[float, ...]]):
        self.measure = measure
        self.points: list[tuple[Any, ...]] = []
        self._eval_cpu = 0.0
        self._c0 = time.process_time()

    def evaluate(self, steps: int) -> None:
        t0 = time.process_time()
        values = self.measure()
        t1 = time.process_time()
        train_cpu = t0 - self._c0 - self._eval_cpu
        self._eval_cpu += t1 - t0
        self.points.append((int(steps), round(train_cpu, 4), *(float(v) for v in values)))


def exact_efficiency(config: Any, predictor: Callable[[], Any]) -> Callable[[], tuple[float]]:
    """The exact efficiency (``serverfarm_gym.evaluation.exact``) of the deterministic policy ``predictor()``."""

    def measure_now() -> tuple[float]:
        from serverfarm_gym.evaluation.efficiency import measure

        est = measure(predictor(), config, action_mode=ACTION_MODE, method="exact")
        if est is None:
            raise ValueError(f"scenario {config.name}: not exactly solvable")
        return (float(est.efficiency),)

    return measure_now


def ppo_trainer(config: Any, seed: int, **overrides: Any) -> Any:
    """A random-start ``PPO`` with ``recommended(config)`` (``overrides`` replace its
    entries), checked to update every ``EVAL_EVERY`` steps."""
    from serverfarm_gym.agents.ppo.config import recommended
    from serverfarm_gym.agents.ppo.ppo import PPO

    kw = recommended(config) | overrides
    trainer = PPO(config, action_mode=ACTION_MODE, seed=seed, **kw)
    per = trainer.cfg.n_envs * trainer.cfg.n_steps
    if per != EVAL_EVERY:  # both trainers are evaluated on the same step grid
        raise ValueError(f"PPO rollout of {per} steps, expected {EVAL_EVERY}")
    return trainer


def run_ppo(config: Any, seed: int, steps: int, **overrides: Any) -> list[tuple[Any, ...]]:
    """A random-start PPO run of ``steps`` env steps (``overrides``: ``PPOConfig``
    fields replacing the derived ones); its exact learning curve."""
    trainer = ppo_trainer(config, seed, **overrides)
    curve = Curve(exact_efficiency(config, lambda: trainer.predict_batch))
    curve.evaluate(0)
    trainer.learn(steps, callback=lambda t: curve.evaluate(t.num_timesteps))
    return curve.points


def sb3_model(config: Any, seed: int) -> tuple[Any, Any]:
    """sb3-contrib ``MaskablePPO`` with its defaults on ``TrainingWrapper(ServerFarmEnv)`` (one
    env) and that env itself (unwrapped: its ``slo_multiplier`` and ``job_area``)."""
    import torch
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    from serverfarm_gym.agents.ppo_sb3.wrappers import TrainingWrapper
    from serverfarm_gym.envs.server_farm import ServerFarmEnv

    torch.set_num_threads(1)
    made: list[Any] = []

    def make() -> Any:
        env = ServerFarmEnv(config, action_mode=ACTION_MODE, warmup_epochs=_warmup(config))
        made.append(env)
        return TrainingWrapper(env)

    model = MaskablePPO("MlpPolicy", DummyVecEnv([make]), seed=seed, device="cpu")
    if model.n_steps * model.n_envs != EVAL_EVERY:
        raise ValueError(f"sb3 rollout of {model.n_steps} steps, expected {EVAL_EVERY}")
    return model, made[0]


def sb3_callback(
    curve: Curve,
    on_step: Callable[[dict[str, Any]], None] | None = None,
    on_rollout_end: Callable[[int], None] | None = None,
) -> Any:
    """The SB3 callback that evaluates ``curve`` at step 0 and after every update (before each
    rollout, and at the end), with optional hooks on each step's ``locals`` and at the end of
    each rollout (before its update)."""
    from stable_baselines3.common.callbacks import BaseCallback

    class Evaluate(BaseCallback):
        def _on_rollout_start(self) -> None:
            curve.evaluate(self.model.num_timesteps)

        def _on_step(self) -> bool:
            if on_step is not None:
                on_step(self.locals)
            return True

        def _on_rollout_end(self) -> None:
            if on_rollout_end is not None:
                on_rollout_end(self.model.num_timesteps)

        def _on_training_end(self) -> None:
            curve.evaluate(self.model.num_timesteps)

    return Evaluate()


def run_sb3(config: Any, seed: int, steps: int) -> list[tuple[Any, ...]]:
    """A random-start sb3-contrib MaskablePPO run (its defaults) of ``steps`` env steps."""
    from serverfarm_gym.agents.ppo import model_predictor

    model, _ = sb3_model(config, seed)
    curve = Curve(exact_efficiency(config, lambda: model_predictor(model)))
    model.learn(steps, callback=sb3_callback(curve))
    return curve.points


RUNNERS = {"ppo": run_ppo, "sb3": run_sb3}
#: the leaderboard label of each trainer's rows
LABELS = {"ppo": "ppo", "sb3": "ppo-sb3"}


def cell_path(out: Path, scenario: str, trainer: str, seed: int) -> Path:
    return out / "cells" / f"{scenario}-{trainer}-s{seed}.json"


def run_cell(
    out: Path,
    scenario: str,
    trainer: str,
    seed: int,
    steps: int,
    config: Any = None,
    runners: dict[str, Callable[..., list[tuple[Any, ...]]]] = RUNNERS,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Train one (scenario, trainer, seed) cell with ``runners[trainer]`` on ``config`` (default:
    the preset ``scenario``) and write it atomically, with the ``extra`` fields."""
    import torch

    from serverfarm_gym.envs.scenarios import load_scenario

    torch.set_num_threads(1)
    config = load_scenario(scenario) if config is None else config
    c0 = time.process_time()
    points = runners[trainer](config, seed, steps)
    cell = {
        "scenario": scenario, "trainer": trainer, "seed": seed, "steps": steps,
        "action_mode": ACTION_MODE, **(extra or {}), "curve": points,
        "cpu_s": time.process_time() - c0,
    }  # fmt: skip
    write_cell(out, cell)
    return cell


def write_cell(out: Path, cell: dict[str, Any]) -> Path:
    """Write ``cell`` atomically to its file under ``out/cells``."""
    path = cell_path(out, cell["scenario"], cell["trainer"], cell["seed"])
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, to_json(cell))
    return path


# ---------------------------------------------------------------------------------------------
# aggregation
# ---------------------------------------------------------------------------------------------
def _references(scenarios: list[str]) -> dict[str, dict[str, float]]:
    from serverfarm_gym.envs.scenarios import load_scenario
    from serverfarm_gym.evaluation.efficiency import pas_efficiency
    from serverfarm_gym.evaluation.references import optimum_solution

    refs = {}
    for s in scenarios:
        config = load_scenario(s)
        sol, _ = optimum_solution(config)
        refs[s] = {"optimum": float(sol.value), "pas": pas_efficiency(config).efficiency}
    return refs


def milestones(
    cell: dict[str, Any],
    optimum: float,
    thresholds: tuple[float, ...] = THRESHOLDS,
    ok: np.ndarray | None = None,
) -> dict[str, Any]:
    """Steps and training CPU seconds at which the run first reached each threshold of the
    optimum (None: not within its budget), and its final gap to the optimum, %. ``ok`` (one
    bool per evaluation; default all) restricts the evaluations that count for the thresholds
    and the best share (0.0 when none does), e.g. to the policies that meet an SLO."""
    curve = np.asarray(cell["curve"], dtype=float)
    share = curve[:, 2] / optimum
    ok = np.ones(len(share), dtype=bool) if ok is None else np.asarray(ok, dtype=bool)
    best = float(share[ok].max()) if ok.any() else 0.0
    m: dict[str, Any] = {"final_share": float(share[-1]), "best_share": best,
                         "final_gap_pct": 100.0 * (1.0 - float(share[-1]))}  # fmt: skip
    for th in thresholds:
        hit = np.flatnonzero(ok & (share >= th))
        key = f"{100 * th:g}"
        m[f"steps_{key}"] = None if hit.size == 0 else int(curve[hit[0], 0])
        m[f"cpu_{key}"] = None if hit.size == 0 else float(curve[hit[0], 1])
    return m


def stratified_bootstrap(
    scores: np.ndarray, func: Callable[[np.ndarray], Any], reps: int = 5_000, seed: int = 0
) -> np.ndarray:
    """``func`` of ``reps`` stratified-bootstrap resamples of a runs x tasks matrix: the runs of
    each task (column) are resampled with replacement independently (rliable's
    ``StratifiedBootstrap``, Agarwal et al. 2021). Why not ``rliable.library``: it imports
    ``arch<8``, which does not import with pandas 3, and arch 8 dropped the ``random_state``
    argument rliable passes; ``rliable.metrics`` and ``rliable.plot_utils`` are used as is."""
    rng = np.random.default_rng(seed)
    n, k = scores.shape
    out = []
    for _ in range(reps):
        idx = rng.integers(0, n, size=(n, k))
        out.append(func(np.take_along_axis(scores, idx, axis=0)))
    return np.asarray(out)


def iqm_ci(values: np.ndarray, seed: int = 0) -> tuple[float, float, float]:
    """IQM (``rliable.metrics.aggregate_iqm``) of runs x tasks ``values`` and its 95%
    percentile interval over stratified-bootstrap resamples."""
    from rliable import metrics

    boots = stratified_bootstrap(values, metrics.aggregate_iqm, seed=seed)
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return float(metrics.aggregate_iqm(values)), float(lo), float(hi)


def fmt_ci(v: tuple[float, float, float], digits: int, scale: float = 1.0) -> str:
    p, lo, hi = (scale * x for x in v)
    return f"{p:,.{digits}f} [{lo:,.{digits}f}, {hi:,.{digits}f}]"


def aggregate(
    cells: list[dict[str, Any]],
    refs: dict[str, dict[str, Any]],
    scenarios: tuple[str, ...] = ALL_SCENARIOS,
    thresholds: tuple[float, ...] = THRESHOLDS,
    milestone: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Per (scenario, trainer) row, in the order of ``scenarios``: seeds, IQMs with intervals,
    reached counts, and ``runs`` (each seed's milestones: ``milestone(cell, refs[scenario])``,
    by default :func:`milestones` against ``refs[scenario]["optimum"]``). A run that did not
    reach a threshold counts at its budget (the IQM is then a lower bound, marked ">=")."""
    if milestone is None:

        def milestone(c: dict[str, Any], ref: dict[str, Any]) -> dict[str, Any]:
            return milestones(c, ref["optimum"], thresholds)

    rows = []
    keys = sorted({(c["scenario"], c["trainer"]) for c in cells},
                  key=lambda k: (scenarios.index(k[0]) if k[0] in scenarios else 99, k[1]))  # fmt: skip
    for scen, tr in keys:
        mine = sorted((c for c in cells if (c["scenario"], c["trainer"]) == (scen, tr)),
                      key=lambda c: c["seed"])  # fmt: skip
        ms = [milestone(c, refs[scen]) for c in mine]
        budget = min(c["steps"] for c in mine)
        row: dict[str, Any] = {
            "scenario": scen, "trainer": tr, "seeds": [c["seed"] for c in mine],
            "n": len(mine), "budget_steps": budget,
            "cpu_s_per_run": float(np.mean([c["curve"][-1][1] for c in mine])),
            "final_gap_pct": iqm_ci(np.array([[m["final_gap_pct"]] for m in ms])),
            # the best evaluated policy's (that counts): what train.py's selection keeps
            "best_gap_pct": iqm_ci(np.array([[100.0 * (1.0 - m["best_share"])] for m in ms])),
            # the final policy's exact efficiency: what the leaderboard's learned rows report
            "final_efficiency": iqm_ci(np.array([[c["curve"][-1][2]] for c in mine])),
        }  # fmt: skip
        for th in thresholds:
            key = f"{100 * th:g}"
            cpu_budget = [c["curve"][-1][1] for c in mine]
            steps = [m[f"steps_{key}"] if m[f"steps_{key}"] is not None else budget for m in ms]
            cpu = [m[f"cpu_{key}"] if m[f"cpu_{key}"] is not None else b
                   for m, b in zip(ms, cpu_budget, strict=True)]  # fmt: skip
            row[f"reached_{key}"] = sum(m[f"steps_{key}"] is not None for m in ms)
            row[f"steps_{key}"] = iqm_ci(np.array(steps, dtype=float)[:, None])
            row[f"cpu_{key}"] = iqm_ci(np.array(cpu, dtype=float)[:, None])
        row["runs"] = [{"seed": c["seed"], **m} for c, m in zip(mine, ms, strict=True)]
        rows.append(row)
    return {"rows": rows, "references": refs}


def learned_rows(
    agg: dict[str, Any],
    suite: str = SUITE,
    farm_of: Callable[[str], Any] | None = None,
    extra: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    produced_by: str = "experiments/studies/from_scratch.py",
    reference_kind: str = "optimum",
) -> dict[str, Any]:
    """The rows of ``agg`` in the schema ``evaluate.py --suite core --learned PATH`` reads: per
    (scenario, trainer) the IQM over seeds of the final policy's exact efficiency and its 95%
    stratified-bootstrap interval, labelled by what produced it. The normalised score needs the
    random dispatcher of the suite run, so the leaderboard computes it (``score`` is null here);
    only scenarios whose farm (``farm_of(name)``, default the preset) is the suite scenario's
    farm are written. ``extra(row)`` adds fields to each row."""
    from serverfarm_gym.envs.scenarios import load_scenario
    from serverfarm_gym.evaluation.suite import load_suite

    farm_of = load_scenario if farm_of is None else farm_of

    definition = load_suite(suite)
    farms = {sc.name: sc.farm for sc in definition.scenarios}
    rows = []
    for r in agg["rows"]:
        if farms.get(r["scenario"]) != farm_of(r["scenario"]):
            continue  # not this suite's farm: its efficiency is not comparable there
        steps = int(r["budget_steps"])
        iqm, lo, hi = r["final_efficiency"]
        rows.append({
            "label": f"{LABELS[r['trainer']]} (from scratch, {r['n']} seeds, {steps:,} steps)",
            "scenario": r["scenario"], "trainer": r["trainer"], "seeds": list(r["seeds"]),
            "steps": steps, "action_mode": ACTION_MODE,
            "efficiency": {"iqm": iqm, "ci95_low": lo, "ci95_high": hi},
            "reference": {"kind": reference_kind,
                          "efficiency": agg["references"][r["scenario"]]["optimum"]},
            "score": None,
        } | ({} if extra is None else extra(r)))  # fmt: skip
    return {
        "schema": ROWS_SCHEMA, "suite": definition.name, "suite_version": definition.version,
        "produced_by": produced_by,
        "statistic": "IQM over seeds of the final policy's exact efficiency (serverfarm_gym.evaluation.exact)",
        "interval": "95% percentile interval, 5,000 stratified-bootstrap resamples of the seeds",
        "rows": rows,
    }  # fmt: skip


def threshold_columns(r: dict[str, Any], thresholds: tuple[float, ...] = THRESHOLDS) -> list[str]:
    """A row's table cells per threshold: reached k/n, steps and CPU-s to it (IQM [95% CI])."""
    cols = []
    for th in (f"{100 * t:g}" for t in thresholds):
        n_hit = r[f"reached_{th}"]
        low = ">= " if n_hit < r["n"] else ""  # censored runs count at their budget
        cols += [f"{n_hit}/{r['n']}", low + fmt_ci(r[f"steps_{th}"], 0),
                 low + fmt_ci(r[f"cpu_{th}"], 1)]  # fmt: skip
    return cols


def markdown_table(agg: dict[str, Any]) -> str:
    lines = [
        "| farm | trainer | seeds | reached 99% | steps to 99% (IQM [95% CI]) | CPU-s to 99% "
        "| reached 99.9% | steps to 99.9% | CPU-s to 99.9% | final gap to optimum, % | "
        "best policy's gap, % | CPU-s per run |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in agg["rows"]:
        cols = [r["scenario"], r["trainer"], str(r["n"]), *threshold_columns(r)]
        cols += [fmt_ci(r["final_gap_pct"], 3), fmt_ci(r["best_gap_pct"], 3),
                 f"{r['cpu_s_per_run']:.1f}"]  # fmt: skip
        lines.append("| " + " | ".join(cols) + " |")
    return "\n".join(lines)


def load_cells(out: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((out / "cells").glob("*.json"))]


COLORS = dict(zip(TRAINERS, ("#4c72b0", "#dd8452"), strict=True))


def plot_runs(
    ax: Any, cells: list[dict[str, Any]], scen: str, y: Callable[[np.ndarray], Any]
) -> None:
    """On ``ax``, per trainer, ``y(curve)`` of every seed of ``scen`` against env steps, thin,
    and its per-step IQM over seeds, thick (``curve``: the cell's points as an array)."""
    from scipy.stats import trim_mean

    for tr, color in COLORS.items():
        curves = [
            np.asarray(c["curve"]) for c in cells if (c["scenario"], c["trainer"]) == (scen, tr)
        ]
        if not curves:
            continue
        n = min(len(c) for c in curves)
        ys = np.stack([y(c[:n]) for c in curves])
        xs = curves[0][:n, 0]
        for row in ys:
            ax.plot(xs, row, color=color, lw=0.5, alpha=0.35)
        ax.plot(xs, trim_mean(ys, 0.25, axis=0), color=color, lw=2,
                label=f"{tr} (IQM of {len(curves)} seeds)")  # fmt: skip


def plot_curves(cells: list[dict[str, Any]], refs: dict[str, Any], fig_dir: Path) -> list[Path]:
    """One PNG per farm: the share of the optimum against env steps, every seed thin and the
    per-step IQM over seeds thick, per trainer; PAS and the thresholds as horizontal lines."""
    from matplotlib.figure import Figure

    paths = []
    for scen in [s for s in ALL_SCENARIOS if any(c["scenario"] == s for c in cells)]:
        fig = Figure(figsize=(6.0, 3.8))
        ax = fig.add_subplot()
        opt = refs[scen]["optimum"]
        plot_runs(ax, cells, scen, lambda c, opt=opt: c[:, 2] / opt)
        ax.axhline(refs[scen]["pas"] / opt, color="k", ls="--", lw=1, label="PAS")
        for th, ls in zip(THRESHOLDS, (":", "-."), strict=True):
            ax.axhline(th, color="#c44e52", ls=ls, lw=1, label=f"{100 * th:g}% of optimum")
        ax.set_ylim(max(0.9, ax.get_ylim()[0]), 1.002)
        ax.set_xlabel("env steps (decisions)")
        ax.set_ylabel("exact efficiency / optimum")
        ax.set_title(f"{scen}: PPO from a random start ({ACTION_MODE} actions)", fontsize=10)
        paths.append(save_panels(fig, [ax], fig_dir / f"from_scratch_{scen}.png", "lower right"))
    return paths


def save_panels(fig: Any, axes: list[Any], path: Path, legend_loc: str = "best") -> Path:
    """Legends and grids on ``axes``, then ``fig`` saved to ``path`` (atomically)."""
    from experiments.common import save_figure

    for ax in axes:
        ax.legend(fontsize=7, loc=legend_loc)
        ax.grid(alpha=0.3)
    save_figure(fig, path)
    return path


def _final_share(cell: dict[str, Any], ref: dict[str, Any]) -> float:
    return float(cell["curve"][-1][2] / ref["optimum"])


def plot_profiles(
    cells: list[dict[str, Any]],
    refs: dict[str, Any],
    fig_dir: Path,
    scenarios: tuple[str, ...] = ALL_SCENARIOS,
    score: Callable[[dict[str, Any], dict[str, Any]], float] = _final_share,
    xlabel: str = "final exact efficiency / optimum (tau)",
    name: str = "from_scratch_profile.png",
    tau_min: float = 0.95,
) -> Path | None:
    """rliable performance profiles of ``score(cell, refs[scenario])`` (default: the final share
    of the optimum): the fraction of runs (over all farms, stratified) at or above each tau,
    with 95% bootstrap bands."""
    from matplotlib.figure import Figure
    from rliable import plot_utils

    from experiments.common import save_figure

    scens = [s for s in scenarios if all(
        any((c["scenario"], c["trainer"]) == (s, t) for c in cells) for t in TRAINERS)]  # fmt: skip
    if not scens:
        return None
    scores = {}
    for tr in TRAINERS:
        per = [[score(c, refs[s]) for c in cells
                if (c["scenario"], c["trainer"]) == (s, tr)] for s in scens]  # fmt: skip
        n = min(len(p) for p in per)
        scores[tr] = np.array([p[:n] for p in per]).T  # runs x tasks
    taus = np.linspace(tau_min, 1.0, 101)

    def profile(x: np.ndarray) -> np.ndarray:  # rliable's score distribution: runs >= tau
        return (x[..., None] >= taus).mean(axis=(0, 1))

    profiles = {tr: profile(x) for tr, x in scores.items()}
    cis = {tr: np.percentile(stratified_bootstrap(x, profile, reps=2_000), [2.5, 97.5], axis=0)
           for tr, x in scores.items()}  # fmt: skip
    fig = Figure(figsize=(6.0, 3.8))
    ax = fig.add_subplot()
    plot_utils.plot_performance_profiles(
        profiles, taus, performance_profile_cis=cis, colors=COLORS, xlabel=xlabel, ax=ax, labelsize="medium",
        ticklabelsize="small",
    )  # fmt: skip
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=c, lw=2, label=f"{tr} ({len(scores[tr])} runs per farm)")
               for tr, c in COLORS.items()]  # fmt: skip
    ax.legend(handles=handles, fontsize=8, loc="lower left")
    ax.set_title(f"fraction of runs >= tau ({', '.join(scens)})", fontsize=10)
    path = fig_dir / name
    save_figure(fig, path)
    return path


def complete_cells(out: Path, min_seeds: int) -> tuple[list[dict[str, Any]], list[str]]:
    """The cells under ``out`` of the rows with at least ``min_seeds`` seeds, and the other
    rows, named with their seed counts; exits when no row is complete."""
    cells = load_cells(out)
    rows = {(c["scenario"], c["trainer"]) for c in cells}
    count = {k: sum((c["scenario"], c["trainer"]) == k for c in cells) for k in rows}
    short = sorted(f"{s}/{t} ({count[(s, t)]} seeds)" for s, t in rows if count[(s, t)] < min_seeds)
    cells = [c for c in cells if count[(c["scenario"], c["trainer"])] >= min_seeds]
    if not cells:
        raise SystemExit(f"no row with {min_seeds} seeds in {out / 'cells'} yet")
    return cells, short


def report(out: Path, fig_dir: Path | None, min_seeds: int = 10) -> dict[str, Any]:
    """Aggregate the cells of rows with at least ``min_seeds`` seeds (the others are listed as
    incomplete, never reported with fewer seeds)."""
    cells, short = complete_cells(out, min_seeds)
    refs = _references(sorted({c["scenario"] for c in cells}))
    agg = aggregate(cells, refs)
    if fig_dir is not None:
        fig_dir.mkdir(parents=True, exist_ok=True)
        agg["figures"] = [str(p) for p in plot_curves(cells, refs, fig_dir)]
        prof = plot_profiles(cells, refs, fig_dir)
        if prof is not None:
            agg["figures"].append(str(prof))
    return write_report(out, "from_scratch", agg, cells, short, learned_rows(agg), markdown_table,
                        min_seeds)  # fmt: skip


def write_report(
    out: Path,
    name: str,
    agg: dict[str, Any],
    cells: list[dict[str, Any]],
    short: list[str],
    rows: dict[str, Any],
    table: Callable[[dict[str, Any]], str],
    min_seeds: int,
) -> dict[str, Any]:
    """Write ``agg`` (with the total CPU and the incomplete rows) to ``out/NAME.json`` and the
    learned ``rows`` to ``out/leaderboard_rows.json``, atomically; print ``table(agg)``."""
    agg["cpu_s_total"] = float(sum(c["cpu_s"] for c in cells))
    agg["incomplete_rows"] = short
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / f"{name}.json", to_json(agg))
    atomic_write(out / ROWS_FILE, to_json(rows))
    print(table(agg))
    if short:
        print(f"not reported (fewer than {min_seeds} seeds): {', '.join(short)}")
    return agg


def config_overrides(p: argparse.ArgumentParser, text: str) -> dict[str, Any]:
    """``--set``'s JSON object of PPOConfig fields; a bad one exits 2 naming the option."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        p.error(f"--set: not JSON ({err})")
    if not isinstance(value, dict):
        p.error("--set: give a JSON object of PPOConfig fields")
    return value


def parse_args(
    argv: list[str] | None, prog: str, description: str, scenarios: tuple[str, ...], out: Path,
    extra: tuple[str, ...] = (),
) -> argparse.Namespace:  # fmt: skip
    """The study's options (``scenarios`` the default farms, with ``extra`` the allowed ones,
    ``out`` the default results directory), checked: a bad one exits 2 naming it.
    ``scenarios`` and ``trainers`` come back as lists."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--scenarios", default=",".join(scenarios))
    p.add_argument("--trainers", default=",".join(TRAINERS))
    p.add_argument("--seeds", type=int, default=10, help="seeds 0..N-1 (>= 10 for the tables)")
    p.add_argument("--seed0", type=int, default=0)
    p.add_argument("--steps", type=int, default=24_576, help="env steps per run")
    p.add_argument("--out", type=Path, default=out)
    p.add_argument("--figure-dir", type=Path, default=None, help="also write the PNGs there")
    p.add_argument("--report", action="store_true", help="only aggregate the cells present")
    p.add_argument("--min-seeds", type=int, default=10, help="rows with fewer are not reported")
    p.add_argument("--set", default="{}", help="JSON of PPOConfig fields for the PPO runs "
                   "(a variant of the derived settings: give it its own --out)")  # fmt: skip
    ns = p.parse_args(argv)
    ns.set = config_overrides(p, ns.set)
    ns.scenarios, ns.trainers = ns.scenarios.split(","), ns.trainers.split(",")
    for name, got, allowed in (
        ("--scenarios", ns.scenarios, scenarios + extra),
        ("--trainers", ns.trainers, TRAINERS),
    ):
        bad = [x for x in got if x not in allowed]
        if bad:
            p.error(f"{name}: unknown {bad}; choose from {', '.join(allowed)}")
    if ns.steps < EVAL_EVERY:
        p.error(f"--steps must be >= {EVAL_EVERY} (one update), got {ns.steps}")
    for name, value in (("--seeds", ns.seeds), ("--min-seeds", ns.min_seeds)):
        if value < 1:
            p.error(f"{name} must be >= 1, got {value}")
    if ns.seed0 < 0:
        p.error(f"--seed0 must be >= 0, got {ns.seed0}")
    return ns


def run_grid(ns: argparse.Namespace, run: Callable[..., dict[str, Any]]) -> None:
    """Run ``run(out, scenario, trainer, seed, steps)`` for every cell of the grid not yet
    written, a whole farm first (a partial study still has complete rows)."""
    for scen in ns.scenarios:
        for seed in range(ns.seed0, ns.seed0 + ns.seeds):
            for tr in ns.trainers:
                if cell_path(ns.out, scen, tr, seed).exists():
                    continue
                cell = run(ns.out, scen, tr, seed, ns.steps)
                print(f"{scen} {tr} seed {seed}: final {cell['curve'][-1][2]:.6f} "
                      f"({cell['cpu_s']:.1f} CPU-s)", flush=True)  # fmt: skip


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ns = parse_args(argv, "experiments/studies/from_scratch.py", __doc__.split("\n\n")[0], SCENARIOS,
                    Path("results/from_scratch"), EXTRA_SCENARIOS)  # fmt: skip
    if not ns.report:
        runners = dict(RUNNERS)
        if ns.set:
            runners["ppo"] = functools.partial(run_ppo, **ns.set)
        run_grid(ns, functools.partial(run_cell, runners=runners))
    return report(ns.out, ns.figure_dir, ns.min_seeds)


if __name__ == "__main__":
    main()
