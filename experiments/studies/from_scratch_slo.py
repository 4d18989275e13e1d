"""PPO from scratch under a mean-response-time SLO: the small farms of the ``latency`` suite
(``tiny-slo``, ``small-2-slo``, ``pas-gap-slo``, ``speed-scaling-slo``; ``slo: {mean_response_time:
D}``), measured against the exact SLO-constrained optimum (``serverfarm_gym.baselines.solvers.slo_optimum.
solve_slo``): how many env steps and CPU seconds each trainer needs until its policy meets the
SLO *and* reaches 99% / 99.9% of that optimum, the gap it ends at, whether it ends within the
SLO, and the gap of the best policy that met it.

Both trainers start from a random network and learn from the SLO's Lagrangian reward
``(W - eta P - beta N) dt`` (``serverfarm_gym.envs.slo``), beta starting at the exact LP's dual price
(``serverfarm_gym.agents.ppo.slo.lp_multiplier``) and moved after every rollout by projected dual ascent on the
rollout's own mean response time (``serverfarm_gym.agents.ppo.slo.DualAscent``, ``serverfarm_gym.envs.slo.update_multiplier``,
step 1/D), as ``train.py`` trains to an SLO (without its clone):

* ``ppo``: ``serverfarm_gym.agents.ppo.ppo.PPO`` with ``recommended(config)`` and the discounted
  advantage (train.py's on a farm with an SLO, ``serverfarm_gym.agents.common.farm_settings``;
  ``--set`` replaces it and any other derived setting, as in ``from_scratch.py``); the rollout's E[T] is
  the one ``PPO.collect`` measures (Little's law: the time integral of N over the jobs
  admitted), the dual step runs after each update, before the next rollout (``train.py``'s
  callback);
* ``sb3``: sb3-contrib ``MaskablePPO`` with its defaults on ``TrainingWrapper(ServerFarmEnv)``;
  a callback sums the env's ``job_area`` and the admitted arrivals over each rollout and takes
  the same dual step at its end (the rollout's update uses the beta it was collected with).

Both update every 2,048 env steps. At step 0 and after every update the network's *sampling*
policy (under a binding SLO the optimum randomises) is measured exactly on the aggregated chain
(``serverfarm_gym.agents.ppo.slo.exact_slo``, as ``measure_slo`` does): efficiency and E[T], no noise, with
beta at that time. A policy meets the SLO when its exact E[T] <= D (1e-9 relative,
``serverfarm_gym.agents.ppo.slo.EXACT_RTOL``). Cells, reruns, the IQM with stratified-bootstrap intervals, the
figures and the learned rows (``python evaluate.py --suite latency --learned
results/from_scratch_slo/leaderboard_rows.json``) work as in ``experiments/studies/from_scratch.py``.

    nice -n 10 python -m experiments.studies.from_scratch_slo --seeds 10 --steps 24576 --figure-dir docs/figures
    python -m experiments.studies.from_scratch_slo --report --figure-dir docs/figures
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np

from experiments.studies import from_scratch as fs

#: the latency suite's farms with an exact SLO-constrained optimum (scenarios/suites/latency.yaml)
SCENARIOS = ("tiny-slo", "small-2-slo", "pas-gap-slo", "speed-scaling-slo")
TRAINERS = fs.TRAINERS
THRESHOLDS = fs.THRESHOLDS
SUITE = "latency"
PREFIX = "from_scratch_slo"


def suite_farm(scenario: str) -> Any:
    """The ``latency`` suite scenario's farm, its ``slo:`` included."""
    from serverfarm_gym.evaluation.suite import load_suite

    farms = {sc.name: sc.farm for sc in load_suite(SUITE).scenarios}
    if scenario not in farms:
        raise ValueError(f"--scenarios: {scenario!r} is not a scenario of suite {SUITE!r}")
    return farms[scenario]


class _SLOMeasure:
    """(efficiency, E[T], beta) of a network's sampling policy, exact on the aggregated chain."""

    def __init__(self, config: Any, policy: Any, venv: Any):
        from serverfarm_gym.agents.ppo.slo import exact_space

        self.config, self.policy, self.venv = config, policy, venv
        self.space = exact_space(config, fs.ACTION_MODE)
        if self.space is None:
            raise ValueError(f"scenario {config.name}: its chain is not exactly solvable")

    def __call__(self) -> tuple[float, float, float]:
        from serverfarm_gym.agents.ppo.slo import exact_slo

        eff, et = exact_slo(self.policy(), self.config, self.space)
        return eff, et, float(self.venv.slo_multiplier)


def run_ppo(config: Any, seed: int, steps: int, **overrides: Any) -> list[tuple[Any, ...]]:
    """A random-start PPO run under the SLO's Lagrangian with dual ascent (``overrides``:
    ``PPOConfig`` fields replacing the derived ones, ``--set``)."""
    from serverfarm_gym.agents.ppo.slo import DualAscent, lp_multiplier

    # the discounted advantage: what train.py derives for a farm with an SLO (farm_settings)
    trainer = fs.ppo_trainer(config, seed, **({"advantage": "discounted"} | overrides))
    meas = _SLOMeasure(config, lambda: trainer.policy, trainer.venv)
    dual = DualAscent(trainer.venv, config, -1, lp_multiplier(meas.space))
    curve = fs.Curve(meas)
    curve.evaluate(0)

    def after_update(t: Any) -> None:  # train.py's order: the dual step, then the evaluation
        dual.after_rollout(t.num_timesteps, t.history[-1]["mean_response_time"])
        curve.evaluate(t.num_timesteps)

    trainer.learn(steps, callback=after_update)
    return curve.points


def run_sb3(config: Any, seed: int, steps: int) -> list[tuple[Any, ...]]:
    """A random-start MaskablePPO run (its defaults) under the SLO's Lagrangian with the same
    dual ascent, its E[T] measured over each rollout by a callback."""
    from serverfarm_gym.agents.ppo.slo import DualAscent, lp_multiplier

    model, env = fs.sb3_model(config, seed)
    meas = _SLOMeasure(config, lambda: model.policy, env)
    dual = DualAscent(env, config, -1, lp_multiplier(meas.space))
    curve = fs.Curve(meas)
    roll = {"area": 0.0, "accepted": 0}

    def on_step(loc: dict[str, Any]) -> None:  # the step's N dt; an arrival with room is admitted
        roll["area"] += env.job_area
        roll["accepted"] += int(np.asarray(loc["action_masks"]).any(-1).sum())

    def on_rollout_end(steps_now: int) -> None:
        n = roll["accepted"]
        dual.after_rollout(steps_now, roll["area"] / n if n > 0 else float("nan"))
        roll.update(area=0.0, accepted=0)

    model.learn(steps, callback=fs.sb3_callback(curve, on_step, on_rollout_end))
    return curve.points


RUNNERS = {"ppo": run_ppo, "sb3": run_sb3}


def run_cell(
    out: Path, scenario: str, trainer: str, seed: int, steps: int,
    runners: dict[str, Callable[..., list[tuple[Any, ...]]]] = RUNNERS,
) -> dict[str, Any]:  # fmt: skip
    """Train one (scenario, trainer, seed) cell with ``runners[trainer]`` and write it
    atomically: its curve of points ``(steps, train CPU-s, efficiency, E[T], beta)``."""
    config = suite_farm(scenario)
    extra = {"slo": float(config.slo.mean_response_time),
             "curve_columns": ["steps", "train_cpu_s", "efficiency", "mean_response_time", "beta"]}  # fmt: skip
    return fs.run_cell(out, scenario, trainer, seed, steps, config, runners, extra)


# ---------------------------------------------------------------------------------------------
# aggregation (experiments/studies/from_scratch.py's, with the SLO's milestones and columns)
# ---------------------------------------------------------------------------------------------
def references(scenarios: list[str]) -> dict[str, dict[str, float]]:
    """Per scenario: D, the exact SLO-constrained optimum (``optimum``) and its E[T], and the
    unconstrained optimum for scale."""
    from serverfarm_gym.baselines.solvers.efficiency_optimum import solve_lp
    from serverfarm_gym.baselines.solvers.slo_optimum import solve_slo

    refs = {}
    for s in scenarios:
        farm = suite_farm(s)
        opt = solve_slo(farm)
        refs[s] = {"slo": float(farm.slo.mean_response_time), "optimum": float(opt.value),
                   "optimum_mean_response_time": float(opt.info["mean_response_time"]),
                   "optimum_without_slo": float(solve_lp(farm).value)}  # fmt: skip
    return refs


def milestones(cell: dict[str, Any], ref: dict[str, Any]) -> dict[str, Any]:
    """The run's milestones against the SLO optimum: the first evaluation that meets the SLO
    (exact E[T] <= D, ``EXACT_RTOL`` relative) and, meeting it, reaches each threshold; the
    final policy's gap, E[T] / D and whether it meets the SLO; the best policy that meets it
    (``best_share``, 0.0 when none did: what train.py's constrained selection keeps)."""
    from serverfarm_gym.agents.ppo.slo import EXACT_RTOL

    curve = np.asarray(cell["curve"], dtype=float)
    met = curve[:, 3] <= ref["slo"] * (1.0 + EXACT_RTOL)
    m = fs.milestones(cell, ref["optimum"], THRESHOLDS, ok=met)
    hit = np.flatnonzero(met)
    return m | {
        "steps_slo": None if hit.size == 0 else int(curve[hit[0], 0]),
        "met_any": bool(hit.size), "final_slo_met": bool(met[-1]),
        "final_mean_response_time": float(curve[-1, 3]),
        "final_rt_ratio": float(curve[-1, 3] / ref["slo"]), "final_beta": float(curve[-1, 4]),
    }  # fmt: skip


def aggregate(cells: list[dict[str, Any]], refs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``from_scratch.aggregate`` with :func:`milestones`, and per row the SLO's columns: how
    many runs ever met the SLO and ended meeting it, the IQMs of the final E[T] and E[T] / D, and
    ``best_gap_pct`` over the runs that met the SLO only."""
    agg = fs.aggregate(cells, refs, SCENARIOS, THRESHOLDS, milestones)
    for r in agg["rows"]:
        runs = r["runs"]
        r["met_any"] = sum(m["met_any"] for m in runs)
        r["final_slo_met"] = sum(m["final_slo_met"] for m in runs)
        for key in ("final_mean_response_time", "final_rt_ratio"):
            r[key] = fs.iqm_ci(np.array([[m[key]] for m in runs]))
        # the kept policy exists only in the runs that met the SLO: the IQM over those (None:
        # no run met it), not a gap of 100% for the others
        kept = [100.0 * (1.0 - m["best_share"]) for m in runs if m["met_any"]]
        r["best_gap_pct"] = fs.iqm_ci(np.array(kept)[:, None]) if kept else None
    return agg


def markdown_table(agg: dict[str, Any]) -> str:
    """The results table: milestones meeting the SLO, the final policy, the best that met it."""
    lines = [
        "| farm | trainer | seeds | ever met the SLO | reached 99% (meeting the SLO) | steps to "
        "99% (IQM [95% CI]) | CPU-s to 99% | reached 99.9% | steps to 99.9% | CPU-s to 99.9% | "
        "final gap to SLO optimum, % | final E[T] / D | final meets the SLO | best policy "
        "meeting the SLO: gap, % (IQM over the runs that met it) | CPU-s per run |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in agg["rows"]:
        n = r["n"]
        cols = [
            r["scenario"],
            r["trainer"],
            str(n),
            f"{r['met_any']}/{n}",
            *fs.threshold_columns(r),
        ]
        best = "n/a" if r["best_gap_pct"] is None else fs.fmt_ci(r["best_gap_pct"], 3)
        cols += [fs.fmt_ci(r["final_gap_pct"], 3), fs.fmt_ci(r["final_rt_ratio"], 3),
                 f"{r['final_slo_met']}/{n}", f"{best} ({r['met_any']} of {n})",
                 f"{r['cpu_s_per_run']:.1f}"]  # fmt: skip
        lines.append("| " + " | ".join(cols) + " |")
    return "\n".join(lines)


def plot_curves(cells: list[dict[str, Any]], refs: dict[str, Any], fig_dir: Path) -> list[Path]:
    """One PNG per farm, two panels against env steps: the share of the SLO optimum and E[T] / D
    of the sampling policy (every seed thin, the per-step IQM thick, per trainer)."""
    from matplotlib.figure import Figure

    paths = []
    for scen in [s for s in SCENARIOS if any(c["scenario"] == s for c in cells)]:
        ref = refs[scen]
        fig = Figure(figsize=(6.0, 6.0))
        top, bottom = fig.subplots(2, 1, sharex=True)
        fs.plot_runs(top, cells, scen, lambda c, o=ref["optimum"]: c[:, 2] / o)
        fs.plot_runs(bottom, cells, scen, lambda c, d=ref["slo"]: c[:, 3] / d)
        for th, ls in zip(THRESHOLDS, (":", "-."), strict=True):
            top.axhline(th, color="#c44e52", ls=ls, lw=1, label=f"{100 * th:g}% of SLO optimum")
        free = ref["optimum_without_slo"] / ref["optimum"]
        top.axhline(free, color="k", ls="--", lw=1, label="optimum without the SLO")
        top.set_ylim(top.get_ylim()[0], max(1.002, free + 0.002))
        top.set_ylabel("exact efficiency / SLO optimum")
        bottom.axhline(1.0, color="#c44e52", lw=1, label="E[T] = D (above: SLO missed)")
        bottom.set_ylabel("exact E[T] / D")
        bottom.set_xlabel("env steps (decisions)")
        top.set_title(f"{scen} (D = {ref['slo']:g}): PPO from a random start, sampling policy",
                      fontsize=10)  # fmt: skip
        paths.append(fs.save_panels(fig, [top, bottom], fig_dir / f"{PREFIX}_{scen}.png"))
    return paths


def _kept_share(cell: dict[str, Any], ref: dict[str, Any]) -> float:
    return float(milestones(cell, ref)["best_share"])


def _row_extra(r: dict[str, Any]) -> dict[str, Any]:
    iqm, lo, hi = r["final_mean_response_time"]
    return {"mean_response_time": {"iqm": iqm, "ci95_low": lo, "ci95_high": hi},
            "slo_met_seeds": r["final_slo_met"]}  # fmt: skip


def report(out: Path, fig_dir: Path | None, min_seeds: int = 10) -> dict[str, Any]:
    """Aggregate the rows with at least ``min_seeds`` seeds; write ``from_scratch_slo.json``,
    the learned rows and (with ``fig_dir``) the figures; print the table."""
    cells, short = fs.complete_cells(out, min_seeds)
    refs = references(sorted({c["scenario"] for c in cells}))
    agg = aggregate(cells, refs)
    if fig_dir is not None:
        fig_dir.mkdir(parents=True, exist_ok=True)
        agg["figures"] = [str(p) for p in plot_curves(cells, refs, fig_dir)]
        prof = fs.plot_profiles(cells, refs, fig_dir, SCENARIOS, _kept_share,
                                "best policy meeting the SLO / SLO optimum (tau)",
                                f"{PREFIX}_profile.png", 0.9)  # fmt: skip
        if prof is not None:
            agg["figures"].append(str(prof))
    rows = fs.learned_rows(agg, SUITE, suite_farm, _row_extra, "experiments/studies/from_scratch_slo.py",
                           "slo-optimum")  # fmt: skip
    rows["statistic"] = (
        "IQM over seeds of the final sampling policy's exact efficiency (aggregated chain, "
        "serverfarm_gym.agents.ppo.slo.exact_slo); mean_response_time: the same policies' exact E[T]"
    )
    return fs.write_report(out, PREFIX, agg, cells, short, rows, markdown_table, min_seeds)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ns = fs.parse_args(argv, "experiments/studies/from_scratch_slo.py", __doc__.split("\n\n")[0],
                       SCENARIOS, Path("results/from_scratch_slo"))  # fmt: skip
    if not ns.report:
        runners = dict(RUNNERS)
        if ns.set:
            runners["ppo"] = functools.partial(run_ppo, **ns.set)
        fs.run_grid(ns, functools.partial(run_cell, runners=runners))
    return report(ns.out, ns.figure_dir, ns.min_seeds)


if __name__ == "__main__":
    main()
