"""PPO from scratch (random initialisation, no clone) on the exactly solvable farms of the
``core`` suite, measured against the exact optimum: how many env steps and CPU seconds each
trainer needs to reach 99% and 99.9% of the optimum, and the gap it ends at.

Two trainers, each from a random start:

* ``lean``: train.py's default trainer (``agents.ppo.algorithm.LeanPPO``) with the farm-derived
  settings train.py uses (``agents.ppo.algorithm.recommended``: 16 envs x 128 steps, minibatches of
  128, 10 epochs, a discount horizon of one mean job duration);
* ``sb3``: sb3-contrib ``MaskablePPO`` with its defaults (one env, 2,048 steps per rollout,
  minibatches of 64, 10 epochs, gamma 0.99) on ``TrainingWrapper(ServerFarmEnv)``.

Both act in group actions and see 2,048 env steps between updates, and the deterministic
policy is evaluated *exactly* (the CTMC of ``evaluation.exact``) at step 0 and after every
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

    nice -n 10 python -m experiments.from_scratch --seeds 10 --steps 24576 --figure-dir docs/figures
    python -m experiments.from_scratch --report --figure-dir docs/figures
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from evaluation.report import atomic_write, to_json

#: the core suite's farms with an exact optimum (scenarios/suites/core.yaml)
SCENARIOS = ("tiny", "small-1", "pas-gap", "speed-scaling")
TRAINERS = ("lean", "sb3")
THRESHOLDS = (0.99, 0.999)
#: env steps between exact evaluations: one update of either trainer
EVAL_EVERY = 2048
ACTION_MODE = "group"
#: the suite whose scenarios these are, and the schema tag of the rows file the leaderboard reads
SUITE = "core"
ROWS_SCHEMA = "serverfarm-gym/learned-rows/1"
ROWS_FILE = "leaderboard_rows.json"


def _warmup(config: Any) -> int:
    from evaluation.harness import epochs_per_duration

    return max(1_000, math.ceil(50 * epochs_per_duration(config)))  # as train.py


class _Curve:
    """The exact efficiency of the deterministic policy at each evaluation, with the env steps
    and the training CPU seconds (evaluations excluded) so far."""

    def __init__(self, config: Any, predictor: Callable[[], Any]):
        self.config, self.predictor = config, predictor
        self.points: list[tuple[int, float, float]] = []
        self._eval_cpu = 0.0
        self._c0 = time.process_time()

    def evaluate(self, steps: int) -> None:
        from evaluation.measure import measure

        t0 = time.process_time()
        est = measure(self.predictor(), self.config, action_mode=ACTION_MODE, method="exact")
        t1 = time.process_time()
        if est is None:
            raise ValueError(f"scenario {self.config.name}: not exactly solvable")
        train_cpu = t0 - self._c0 - self._eval_cpu
        self._eval_cpu += t1 - t0
        self.points.append((int(steps), round(train_cpu, 4), float(est.efficiency)))


def run_lean(config: Any, seed: int, steps: int) -> list[tuple[int, float, float]]:
    """A random-start lean PPO run of ``steps`` env steps; its exact learning curve."""
    from agents.ppo.algorithm import LeanPPO, recommended

    trainer = LeanPPO(config, action_mode=ACTION_MODE, seed=seed, **recommended(config))
    per = trainer.cfg.n_envs * trainer.cfg.n_steps
    if per != EVAL_EVERY:  # both trainers are evaluated on the same step grid
        raise ValueError(f"lean rollout of {per} steps, expected {EVAL_EVERY}")
    curve = _Curve(config, lambda: trainer.predict_batch)
    curve.evaluate(0)
    trainer.learn(steps, callback=lambda t: curve.evaluate(t.num_timesteps))
    return curve.points


def run_sb3(config: Any, seed: int, steps: int) -> list[tuple[int, float, float]]:
    """A random-start sb3-contrib MaskablePPO run (its defaults) of ``steps`` env steps."""
    import torch
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.vec_env import DummyVecEnv

    from agents.ppo import model_predictor
    from agents.ppo_sb3.wrappers import TrainingWrapper
    from envs.server_farm import ServerFarmEnv

    torch.set_num_threads(1)

    def make() -> Any:
        env = ServerFarmEnv(config, action_mode=ACTION_MODE, warmup_epochs=_warmup(config))
        return TrainingWrapper(env)

    model = MaskablePPO("MlpPolicy", DummyVecEnv([make]), seed=seed, device="cpu")
    if model.n_steps * model.n_envs != EVAL_EVERY:
        raise ValueError(f"sb3 rollout of {model.n_steps} steps, expected {EVAL_EVERY}")
    curve = _Curve(config, lambda: model_predictor(model))

    class Evaluate(BaseCallback):  # after every update (and at step 0): before each rollout
        def _on_rollout_start(self) -> None:
            curve.evaluate(self.model.num_timesteps)

        def _on_step(self) -> bool:
            return True

        def _on_training_end(self) -> None:
            curve.evaluate(self.model.num_timesteps)

    model.learn(steps, callback=Evaluate())
    return curve.points


RUNNERS = {"lean": run_lean, "sb3": run_sb3}


def cell_path(out: Path, scenario: str, trainer: str, seed: int) -> Path:
    return out / "cells" / f"{scenario}-{trainer}-s{seed}.json"


def run_cell(out: Path, scenario: str, trainer: str, seed: int, steps: int) -> dict[str, Any]:
    """Train one (scenario, trainer, seed) cell and write it atomically."""
    import torch

    from envs.scenarios import load_scenario

    torch.set_num_threads(1)
    config = load_scenario(scenario)
    c0 = time.process_time()
    points = RUNNERS[trainer](config, seed, steps)
    cell = {
        "scenario": scenario, "trainer": trainer, "seed": seed, "steps": steps,
        "action_mode": ACTION_MODE, "curve": points, "cpu_s": time.process_time() - c0,
    }  # fmt: skip
    path = cell_path(out, scenario, trainer, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, to_json(cell))
    return cell


# ---------------------------------------------------------------------------------------------
# aggregation
# ---------------------------------------------------------------------------------------------
def _references(scenarios: list[str]) -> dict[str, dict[str, float]]:
    from envs.scenarios import load_scenario
    from evaluation.measure import pas_efficiency
    from evaluation.references import optimum_solution

    refs = {}
    for s in scenarios:
        config = load_scenario(s)
        sol, _ = optimum_solution(config)
        refs[s] = {"optimum": float(sol.value), "pas": pas_efficiency(config).efficiency}
    return refs


def milestones(cell: dict[str, Any], optimum: float) -> dict[str, Any]:
    """Steps and training CPU seconds at which the run first reached each threshold of the
    optimum (None: not within its budget), and its final gap to the optimum, %."""
    curve = np.asarray(cell["curve"], dtype=float)
    share = curve[:, 2] / optimum
    m: dict[str, Any] = {"final_share": float(share[-1]), "best_share": float(share.max()),
                         "final_gap_pct": 100.0 * (1.0 - float(share[-1]))}  # fmt: skip
    for th in THRESHOLDS:
        hit = np.flatnonzero(share >= th)
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


def _iqm_ci(values: np.ndarray, seed: int = 0) -> tuple[float, float, float]:
    """IQM (``rliable.metrics.aggregate_iqm``) of runs x tasks ``values`` and its 95%
    percentile interval over stratified-bootstrap resamples."""
    from rliable import metrics

    boots = stratified_bootstrap(values, metrics.aggregate_iqm, seed=seed)
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return float(metrics.aggregate_iqm(values)), float(lo), float(hi)


def _fmt_ci(v: tuple[float, float, float], digits: int, scale: float = 1.0) -> str:
    p, lo, hi = (scale * x for x in v)
    return f"{p:,.{digits}f} [{lo:,.{digits}f}, {hi:,.{digits}f}]"


def aggregate(cells: list[dict[str, Any]], refs: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Per (scenario, trainer) row: seeds, IQMs with intervals, reached counts. A run that did
    not reach a threshold counts at its budget (the IQM is then a lower bound, marked ">=")."""
    rows = []
    keys = sorted({(c["scenario"], c["trainer"]) for c in cells},
                  key=lambda k: (SCENARIOS.index(k[0]) if k[0] in SCENARIOS else 99, k[1]))  # fmt: skip
    for scen, tr in keys:
        mine = sorted((c for c in cells if (c["scenario"], c["trainer"]) == (scen, tr)),
                      key=lambda c: c["seed"])  # fmt: skip
        ms = [milestones(c, refs[scen]["optimum"]) for c in mine]
        budget = min(c["steps"] for c in mine)
        row: dict[str, Any] = {
            "scenario": scen, "trainer": tr, "seeds": [c["seed"] for c in mine],
            "n": len(mine), "budget_steps": budget,
            "cpu_s_per_run": float(np.mean([c["curve"][-1][1] for c in mine])),
            "final_gap_pct": _iqm_ci(np.array([[m["final_gap_pct"]] for m in ms])),
            # the best evaluated policy's: what train.py's exact best-model selection keeps
            "best_gap_pct": _iqm_ci(np.array([[100.0 * (1.0 - m["best_share"])] for m in ms])),
            # the final policy's exact efficiency: what the leaderboard's learned rows report
            "final_efficiency": _iqm_ci(np.array([[c["curve"][-1][2]] for c in mine])),
        }  # fmt: skip
        for th in THRESHOLDS:
            key = f"{100 * th:g}"
            cpu_budget = [c["curve"][-1][1] for c in mine]
            steps = [m[f"steps_{key}"] if m[f"steps_{key}"] is not None else budget for m in ms]
            cpu = [m[f"cpu_{key}"] if m[f"cpu_{key}"] is not None else b
                   for m, b in zip(ms, cpu_budget, strict=True)]  # fmt: skip
            row[f"reached_{key}"] = sum(m[f"steps_{key}"] is not None for m in ms)
            row[f"steps_{key}"] = _iqm_ci(np.array(steps, dtype=float)[:, None])
            row[f"cpu_{key}"] = _iqm_ci(np.array(cpu, dtype=float)[:, None])
        row["runs"] = [{"seed": c["seed"], **m} for c, m in zip(mine, ms, strict=True)]
        rows.append(row)
    return {"rows": rows, "references": refs}


def learned_rows(agg: dict[str, Any], suite: str = SUITE) -> dict[str, Any]:
    """The rows of ``agg`` in the schema ``evaluate.py --suite core --learned PATH`` reads: per
    (scenario, trainer) the IQM over seeds of the final policy's exact efficiency and its 95%
    stratified-bootstrap interval, labelled by what produced it. The normalised score needs the
    random dispatcher of the suite run, so the leaderboard computes it (``score`` is null here);
    only scenarios whose farm is the suite scenario's farm are written."""
    from envs.scenarios import load_scenario
    from evaluation.suite import load_suite

    definition = load_suite(suite)
    farms = {sc.name: sc.farm for sc in definition.scenarios}
    rows = []
    for r in agg["rows"]:
        if farms.get(r["scenario"]) != load_scenario(r["scenario"]):
            continue  # not this suite's farm: its efficiency is not comparable there
        steps = int(r["budget_steps"])
        iqm, lo, hi = r["final_efficiency"]
        rows.append({
            "label": f"ppo-{r['trainer']} (from scratch, {r['n']} seeds, {steps:,} steps)",
            "scenario": r["scenario"], "trainer": r["trainer"], "seeds": list(r["seeds"]),
            "steps": steps, "action_mode": ACTION_MODE,
            "efficiency": {"iqm": iqm, "ci95_low": lo, "ci95_high": hi},
            "reference": {"kind": "optimum", "efficiency": agg["references"][r["scenario"]]["optimum"]},
            "score": None,
        })  # fmt: skip
    return {
        "schema": ROWS_SCHEMA, "suite": definition.name, "suite_version": definition.version,
        "produced_by": "experiments/from_scratch.py",
        "statistic": "IQM over seeds of the final policy's exact efficiency (evaluation.exact)",
        "interval": "95% percentile interval, 5,000 stratified-bootstrap resamples of the seeds",
        "rows": rows,
    }  # fmt: skip


def markdown_table(agg: dict[str, Any]) -> str:
    lines = [
        "| farm | trainer | seeds | reached 99% | steps to 99% (IQM [95% CI]) | CPU-s to 99% "
        "| reached 99.9% | steps to 99.9% | CPU-s to 99.9% | final gap to optimum, % | "
        "best policy's gap, % | CPU-s per run |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in agg["rows"]:
        cols = [r["scenario"], r["trainer"], str(r["n"])]
        for th in ("99", "99.9"):
            n_hit = r[f"reached_{th}"]
            low = ">= " if n_hit < r["n"] else ""  # censored runs count at their budget
            cols += [f"{n_hit}/{r['n']}", low + _fmt_ci(r[f"steps_{th}"], 0),
                     low + _fmt_ci(r[f"cpu_{th}"], 1)]  # fmt: skip
        cols += [_fmt_ci(r["final_gap_pct"], 3), _fmt_ci(r["best_gap_pct"], 3),
                 f"{r['cpu_s_per_run']:.1f}"]  # fmt: skip
        lines.append("| " + " | ".join(cols) + " |")
    return "\n".join(lines)


def _load_cells(out: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((out / "cells").glob("*.json"))]


def plot_curves(cells: list[dict[str, Any]], refs: dict[str, Any], fig_dir: Path) -> list[Path]:
    """One PNG per farm: the share of the optimum against env steps, every seed thin and the
    per-step IQM over seeds thick, per trainer; PAS and the thresholds as horizontal lines."""
    from matplotlib.figure import Figure
    from scipy.stats import trim_mean

    from experiments.common import save_figure

    paths = []
    for scen in [s for s in SCENARIOS if any(c["scenario"] == s for c in cells)]:
        fig = Figure(figsize=(6.0, 3.8))
        ax = fig.add_subplot()
        opt = refs[scen]["optimum"]
        for tr, color in zip(TRAINERS, ("#4c72b0", "#dd8452"), strict=True):
            curves = [
                np.asarray(c["curve"]) for c in cells if (c["scenario"], c["trainer"]) == (scen, tr)
            ]
            if not curves:
                continue
            n = min(len(c) for c in curves)
            ys = np.stack([c[:n, 2] / opt for c in curves])
            xs = curves[0][:n, 0]
            for y in ys:
                ax.plot(xs, y, color=color, lw=0.5, alpha=0.35)
            ax.plot(xs, trim_mean(ys, 0.25, axis=0), color=color, lw=2,
                    label=f"{tr} (IQM of {len(curves)} seeds)")  # fmt: skip
        ax.axhline(refs[scen]["pas"] / opt, color="k", ls="--", lw=1, label="PAS")
        for th, ls in zip(THRESHOLDS, (":", "-."), strict=True):
            ax.axhline(th, color="#c44e52", ls=ls, lw=1, label=f"{100 * th:g}% of optimum")
        ax.set_ylim(max(0.9, ax.get_ylim()[0]), 1.002)
        ax.set_xlabel("env steps (decisions)")
        ax.set_ylabel("exact efficiency / optimum")
        ax.set_title(f"{scen}: PPO from a random start ({ACTION_MODE} actions)", fontsize=10)
        ax.legend(fontsize=7, loc="lower right")
        ax.grid(alpha=0.3)
        path = fig_dir / f"from_scratch_{scen}.png"
        save_figure(fig, path)
        paths.append(path)
    return paths


def plot_profiles(cells: list[dict[str, Any]], refs: dict[str, Any], fig_dir: Path) -> Path | None:
    """rliable performance profiles of the final share of the optimum: the fraction of runs
    (over all farms, stratified) at or above each tau, with 95% bootstrap bands."""
    from matplotlib.figure import Figure
    from rliable import plot_utils

    from experiments.common import save_figure

    scens = [s for s in SCENARIOS if all(
        any((c["scenario"], c["trainer"]) == (s, t) for c in cells) for t in TRAINERS)]  # fmt: skip
    if not scens:
        return None
    scores = {}
    for tr in TRAINERS:
        per = [[c["curve"][-1][2] / refs[s]["optimum"] for c in cells
                if (c["scenario"], c["trainer"]) == (s, tr)] for s in scens]  # fmt: skip
        n = min(len(p) for p in per)
        scores[tr] = np.array([p[:n] for p in per]).T  # runs x tasks
    taus = np.linspace(0.95, 1.0, 101)

    def profile(x: np.ndarray) -> np.ndarray:  # rliable's score distribution: runs >= tau
        return (x[..., None] >= taus).mean(axis=(0, 1))

    profiles = {tr: profile(x) for tr, x in scores.items()}
    cis = {tr: np.percentile(stratified_bootstrap(x, profile, reps=2_000), [2.5, 97.5], axis=0)
           for tr, x in scores.items()}  # fmt: skip
    fig = Figure(figsize=(6.0, 3.8))
    ax = fig.add_subplot()
    plot_utils.plot_performance_profiles(
        profiles, taus, performance_profile_cis=cis, colors=dict(zip(TRAINERS, ("#4c72b0", "#dd8452"), strict=True)),
        xlabel="final exact efficiency / optimum (tau)", ax=ax, labelsize="medium",
        ticklabelsize="small",
    )  # fmt: skip
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=c, lw=2, label=f"{tr} ({len(scores[tr])} runs per farm)")
               for tr, c in zip(TRAINERS, ("#4c72b0", "#dd8452"), strict=True)]  # fmt: skip
    ax.legend(handles=handles, fontsize=8, loc="lower left")
    ax.set_title(f"fraction of runs >= tau ({', '.join(scens)})", fontsize=10)
    path = fig_dir / "from_scratch_profile.png"
    save_figure(fig, path)
    return path


def report(out: Path, fig_dir: Path | None, min_seeds: int = 10) -> dict[str, Any]:
    """Aggregate the cells of rows with at least ``min_seeds`` seeds (the others are listed as
    incomplete, never reported with fewer seeds)."""
    cells = _load_cells(out)
    rows = {(c["scenario"], c["trainer"]) for c in cells}
    count = {k: sum((c["scenario"], c["trainer"]) == k for c in cells) for k in rows}
    short = sorted(f"{s}/{t} ({count[(s, t)]} seeds)" for s, t in rows if count[(s, t)] < min_seeds)
    cells = [c for c in cells if count[(c["scenario"], c["trainer"])] >= min_seeds]
    if not cells:
        raise SystemExit(f"from_scratch: no row with {min_seeds} seeds in {out / 'cells'} yet")
    refs = _references(sorted({c["scenario"] for c in cells}))
    agg = aggregate(cells, refs)
    if fig_dir is not None:
        fig_dir.mkdir(parents=True, exist_ok=True)
        agg["figures"] = [str(p) for p in plot_curves(cells, refs, fig_dir)]
        prof = plot_profiles(cells, refs, fig_dir)
        if prof is not None:
            agg["figures"].append(str(prof))
    agg["cpu_s_total"] = float(sum(c["cpu_s"] for c in cells))
    out.mkdir(parents=True, exist_ok=True)
    agg["incomplete_rows"] = short
    atomic_write(out / "from_scratch.json", to_json(agg))
    atomic_write(out / ROWS_FILE, to_json(learned_rows(agg)))
    print(markdown_table(agg))
    if short:
        print(f"not reported (fewer than {min_seeds} seeds): {', '.join(short)}")
    return agg


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(
        prog="experiments/from_scratch.py", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--scenarios", default=",".join(SCENARIOS))
    p.add_argument("--trainers", default=",".join(TRAINERS))
    p.add_argument("--seeds", type=int, default=10, help="seeds 0..N-1 (>= 10 for the tables)")
    p.add_argument("--seed0", type=int, default=0)
    p.add_argument("--steps", type=int, default=24_576, help="env steps per run")
    p.add_argument("--out", type=Path, default=Path("results/from_scratch"))
    p.add_argument("--figure-dir", type=Path, default=None, help="also write the PNGs there")
    p.add_argument("--report", action="store_true", help="only aggregate the cells present")
    p.add_argument("--min-seeds", type=int, default=10, help="rows with fewer are not reported")
    ns = p.parse_args(argv)
    scens, trainers = ns.scenarios.split(","), ns.trainers.split(",")
    for name, got, allowed in (
        ("--scenarios", scens, SCENARIOS),
        ("--trainers", trainers, TRAINERS),
    ):
        bad = [x for x in got if x not in allowed]
        if bad:
            p.error(f"{name}: unknown {bad}; choose from {', '.join(allowed)}")
    if ns.steps < EVAL_EVERY or ns.seeds < 1:
        p.error(f"--steps must be >= {EVAL_EVERY} and --seeds >= 1")
    if not ns.report:
        for scen in scens:  # a whole farm first: a partial study still has complete rows
            for seed in range(ns.seed0, ns.seed0 + ns.seeds):
                for tr in trainers:
                    if cell_path(ns.out, scen, tr, seed).exists():
                        continue
                    cell = run_cell(ns.out, scen, tr, seed, ns.steps)
                    print(f"{scen} {tr} seed {seed}: final {cell['curve'][-1][2]:.6f} "
                          f"({cell['cpu_s']:.1f} CPU-s)", flush=True)  # fmt: skip
    return report(ns.out, ns.figure_dir, ns.min_seeds)


if __name__ == "__main__":
    main()
