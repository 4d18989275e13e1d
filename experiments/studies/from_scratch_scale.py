"""PPO from scratch at scale: the default trainer from a random network on the large simulated
farms (``paper-100``, ``large-10k``) in group actions, against PAS, best-priority and the
relaxation bound.

A run trains ``serverfarm_gym.agents.ppo.ppo.PPO`` with the settings
``serverfarm_gym.agents.ppo.config.recommended`` derives for the farm, from a random network
and *without* the anchor to PAS's decisions (``pas_anchor=0``, ``critic_warmup=0``: nothing of
PAS enters training, so "from scratch" means what it says; ``--set`` overrides any
``PPOConfig`` field). Every ``--eval-every`` env steps the deterministic policy is measured
by simulation (``serverfarm_gym.evaluation.efficiency.measure``, the vector route) on the curve
seeds (``--curve-reps`` replications of ``--curve-durations`` mean job durations after PAS's
warm-up); PAS and best-priority are measured on the same seeds (common random numbers), so a
curve point's paired gap to PAS is a property of the policy, not of the seeds. At the end the
final policy is measured on *other* seeds (``--final-reps`` x ``--final-durations``) against PAS
and best-priority: the paired gap with its 95% t interval over replications, and the gap to the
bound. CPU seconds count training only (evaluations excluded).

Every (scenario, seed) run is written atomically to ``--out/cells/<scenario>-s<seed>.json``; a
rerun skips the cells present. ``--report`` aggregates them: the markdown table (per farm and
budget: seeds, the final efficiency's paired gap to PAS per seed and its IQM over seeds, how many
seeds are at PAS or above with the paired interval, the gap to the bound) and the curves
(``scale_curves.png``: efficiency against env steps and CPU-s, PAS, best-priority and the bound
drawn as lines).

    nice python -m experiments.studies.from_scratch_scale --scenarios paper-100 --seeds 5
    nice python -m experiments.studies.from_scratch_scale --scenarios large-10k --seeds 5 \\
        --curve-durations 10 --curve-reps 4 --final-durations 40 --final-reps 8
    python -m experiments.studies.from_scratch_scale --report --figure-dir docs/figures
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np

from experiments.studies.from_scratch import config_overrides
from serverfarm_gym.evaluation.outputs import atomic_write, to_json

SCENARIOS = ("paper-100", "large-10k")
ACTION_MODE = "group"
#: what "from scratch" removes from the derived settings: the imitation of PAS
FROM_SCRATCH = {"pas_anchor": 0.0, "critic_warmup": 0}
CURVE_SEED0, FINAL_SEED0 = 8_000_000, 7_000_000


def _window(config: Any, durations: float) -> Any:
    from serverfarm_gym.evaluation.efficiency import Window
    from serverfarm_gym.evaluation.policy_report import epochs_per_duration

    horizon = max(2_000, round(durations * epochs_per_duration(config)))
    return Window.for_farm(config, horizon, pas_warmup=True)


def _evaluator(config: Any, durations: float, reps: int, seed0: int) -> Any:
    from serverfarm_gym.evaluation.efficiency import consecutive_seeds, measure

    kw = {"window": _window(config, durations), "action_mode": ACTION_MODE,
          "seeds": consecutive_seeds(seed0, reps), "method": "vector"}  # fmt: skip

    def run(policy: Any) -> np.ndarray:
        return np.asarray(measure(policy, config, **kw).per_replication, dtype=float)

    return run


def decisions(predict: Any, config: Any, pas: Any, steps: int = 2_000, seed: int = 123) -> dict:
    """What the policy ``predict(obs, masks)`` does where PAS would act otherwise: on 8 envs
    driven by the policy for ``steps`` decisions (after the env's own warm-up), the share of
    decisions where it picks PAS's group, and the mean occupancy level (jobs already at the
    receiving server) that it and PAS choose."""
    from serverfarm_gym.envs.observation import level_offsets
    from serverfarm_gym.envs.vector import ServerFarmVectorEnv

    env = ServerFarmVectorEnv(num_envs=8, scenario=config, action_mode=ACTION_MODE)
    offsets = level_offsets(config)[:-1]  # group k's actions start at offsets[k]

    def group(a: np.ndarray) -> np.ndarray:
        return np.searchsorted(offsets, a, "right") - 1

    obs, _ = env.reset(seed=seed)
    same = total = 0
    levels: dict[str, list[np.ndarray]] = {"policy": [], "pas": []}
    for _ in range(steps):
        masks = env.action_masks()
        a = np.asarray(predict(obs, masks))
        b = np.asarray(pas.predict(obs, action_masks=masks, deterministic=True)[0])
        same += int((group(a) == group(b)).sum())
        total += len(a)
        levels["policy"].append(a - offsets[group(a)])
        levels["pas"].append(b - offsets[group(b)])
        obs, *_ = env.step(a)
    env.close()
    return {"same_group_share": same / total, "decisions": total,
            "mean_level": {k: float(np.concatenate(v).mean()) for k, v in levels.items()}}  # fmt: skip


class References:
    """What every run of one farm is measured against, measured once per farm (the seeds are
    fixed, so each seed's run would measure the same values again): PAS and best-priority on
    the curve and the final windows, and the relaxation bound."""

    def __init__(self, ns: argparse.Namespace, scenario: str):
        from serverfarm_gym.baselines.registry import make_policy
        from serverfarm_gym.baselines.solvers.bounds import relaxation_bound
        from serverfarm_gym.envs.scenarios import load_scenario

        self.config = config = load_scenario(scenario)
        self.curve_eval = _evaluator(config, ns.curve_durations, ns.curve_reps, CURVE_SEED0)
        self.final_eval = _evaluator(config, ns.final_durations, ns.final_reps, FINAL_SEED0)
        self.pas = make_policy("pas", config, ACTION_MODE)
        names = ("pas", "best-priority")
        policies = {
            "pas": self.pas,
            "best-priority": make_policy("best-priority", config, ACTION_MODE),
        }
        self.curve = {k: self.curve_eval(policies[k]) for k in names}
        self.final = {k: self.final_eval(policies[k]) for k in names}
        self.bound = float(relaxation_bound(config).efficiency)


def run_cell(
    ns: argparse.Namespace, scenario: str, seed: int, references: References | None = None
) -> dict[str, Any]:
    """One training run with its curve and its final measurement (see the module doc);
    ``references`` of the farm (measured here when not given)."""
    from serverfarm_gym.agents.ppo.agent import numpy_predictor
    from serverfarm_gym.agents.ppo.config import recommended
    from serverfarm_gym.agents.ppo.ppo import PPO

    refs = References(ns, scenario) if references is None else references
    config, curve_eval, final_eval = refs.config, refs.curve_eval, refs.final_eval
    curve_refs, final_refs, bound = refs.curve, refs.final, refs.bound
    settings = recommended(config) | FROM_SCRATCH | ns.set
    trainer = PPO(config, action_mode=ACTION_MODE, seed=seed, **settings)
    points: list[dict[str, Any]] = []

    def evaluate() -> None:
        cpu["train"] += time.process_time() - cpu["mark"]
        eff = curve_eval(numpy_predictor(trainer.policy))
        pas = curve_refs["pas"]
        points.append({"steps": trainer.num_timesteps, "train_cpu_s": cpu["train"],
                       "efficiency": float(eff.mean()),
                       "gap_to_pas_pct": float(np.mean(100 * (eff - pas) / pas))})  # fmt: skip
        print(f"  {scenario} s{seed} {trainer.num_timesteps:>10,d} steps "
              f"{cpu['train']:7.1f} CPU-s  {points[-1]['gap_to_pas_pct']:+.3f}% vs PAS",
              flush=True)  # fmt: skip
        cpu["mark"] = time.process_time()

    marks = sorted(int(m) for m in ns.marks.split(","))
    curve_at = [ns.eval_first * 2**k for k in range(64) if ns.eval_first * 2**k < marks[-1]]
    finals: list[dict[str, Any]] = []
    cpu = {"train": 0.0, "mark": time.process_time()}  # training only: the references are done

    def measure_final() -> None:
        from serverfarm_gym.evaluation.stats import paired_gap_pct

        cpu["train"] += time.process_time() - cpu["mark"]
        final = final_eval(numpy_predictor(trainer.policy))
        finals.append({"steps": trainer.num_timesteps, "train_cpu_s": cpu["train"],
                       "efficiency": float(final.mean()),
                       "paired_gap_to_pas_pct": paired_gap_pct(final, final_refs["pas"]),
                       "paired_gap_to_best_priority_pct": paired_gap_pct(
                           final, final_refs["best-priority"]),
                       "gap_to_bound_pct": 100 * (bound - float(final.mean())) / bound})  # fmt: skip
        cpu["mark"] = time.process_time()

    def callback(tr: Any) -> None:
        if curve_at and tr.num_timesteps >= curve_at[0]:
            while curve_at and tr.num_timesteps >= curve_at[0]:
                curve_at.pop(0)
            evaluate()
        if tr.num_timesteps >= marks[len(finals)]:
            if points[-1]["steps"] != tr.num_timesteps:
                evaluate()
            measure_final()

    evaluate()  # the random start
    trainer.learn(marks[-1], callback=callback)
    final_entropy = trainer.history[-1]["entropy"] if trainer.history else None
    return {
        "decisions": decisions(numpy_predictor(trainer.policy), config, refs.pas),
        "final_entropy": final_entropy,
        "scenario": scenario, "seed": seed, "settings": dict(settings), "bound": bound,
        "curve_refs": {k: float(v.mean()) for k, v in curve_refs.items()},
        "final_refs": {k: float(v.mean()) for k, v in final_refs.items()},
        "points": points, "finals": finals, "train_cpu_s": cpu["train"],
        "windows": {"curve": [ns.curve_durations, ns.curve_reps],
                    "final": [ns.final_durations, ns.final_reps]},
    }  # fmt: skip


def cell_path(out: Path, scenario: str, seed: int) -> Path:
    return out / "cells" / f"{scenario}-s{seed}.json"


def load_cells(out: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((out / "cells").glob("*.json"))]


def _iqm(x: Any) -> float:
    from scipy.stats import trim_mean

    return float(trim_mean(np.asarray(x, dtype=float), 0.25))


def _gap(g: dict[str, Any]) -> str:
    return f"{g['mean']:+.2f} +- {g['ci95']:.2f}"


def markdown_table(cells: list[dict[str, Any]]) -> str:
    """One row per (farm, budget): see the module doc."""
    rows = ["| farm | env steps | seeds | training CPU-s | gap to PAS, % (IQM; per seed: mean "
            "+- 95% half-width) | seeds at PAS or above (above) | gap to best-priority, % "
            "(IQM) | gap to the bound, % (IQM) | PAS's gap to the bound, % |",
            "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    groups: dict[tuple[str, int], list[tuple[int, dict[str, Any], dict[str, Any]]]] = {}
    for c in cells:
        for f in c["finals"]:
            groups.setdefault((c["scenario"], f["steps"]), []).append((c["seed"], f, c))
    for (scen, steps), fs in sorted(groups.items()):
        fs.sort(key=lambda t: t[0])
        pas = [f["paired_gap_to_pas_pct"] for _, f, _ in fs]
        at = sum(g["mean"] + g["ci95"] >= 0 for g in pas)
        above = sum(g["mean"] - g["ci95"] > 0 for g in pas)
        c0 = fs[0][2]
        pas_bound = 100 * (c0["bound"] - c0["final_refs"]["pas"]) / c0["bound"]
        rows.append(
            f"| {scen} | {steps:,d} | {len(fs)} | {_iqm([f['train_cpu_s'] for _, f, _ in fs]):,.0f}"
            f" | {_iqm([g['mean'] for g in pas]):+.2f} ({'; '.join(map(_gap, pas))}) | "
            f"{at}/{len(fs)} ({above}) | "
            f"{_iqm([f['paired_gap_to_best_priority_pct']['mean'] for _, f, _ in fs]):+.2f} | "
            f"{_iqm([f['gap_to_bound_pct'] for _, f, _ in fs]):.2f} | {pas_bound:.2f} |"
        )
    return "\n".join(rows)


def decisions_table(cells: list[dict[str, Any]]) -> str:
    """Per run with the diagnostic: what its final policy does where PAS would act otherwise."""
    rows = ["| farm | seed | env steps | decisions with PAS's group | mean level chosen: PPO / PAS "
            "| final policy entropy, nats |", "|---|---|---|---|---|---|"]  # fmt: skip
    for c in cells:
        d = c.get("decisions")
        if d:
            rows.append(
                f"| {c['scenario']} | {c['seed']} | {c['finals'][-1]['steps']:,d} | "
                f"{100 * d['same_group_share']:.1f}% | {d['mean_level']['policy']:.2f} / "
                f"{d['mean_level']['pas']:.2f} | {c['final_entropy']:.3f} |"
            )
    return "\n".join(rows) if len(rows) > 2 else ""


def plot(cells: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scens = sorted({c["scenario"] for c in cells})
    fig, axes = plt.subplots(len(scens), 2, figsize=(11, 3.6 * len(scens)), squeeze=False)
    for row, scen in zip(axes, scens, strict=True):
        cs = [c for c in cells if c["scenario"] == scen]
        for ax, x in zip(row, ("steps", "train_cpu_s"), strict=True):
            for c in cs:
                ax.plot([p[x] for p in c["points"]], [p["efficiency"] for p in c["points"]],
                        color="tab:blue", alpha=0.6, lw=1)  # fmt: skip
            ref = cs[0]
            for name, val, col in (("PAS", ref["curve_refs"]["pas"], "k"),
                                   ("best-priority", ref["curve_refs"]["best-priority"], "tab:green"),
                                   ("bound", ref["bound"], "tab:red")):  # fmt: skip
                ax.axhline(val, color=col, ls="--", lw=1, label=name)
            ax.set_xscale("symlog", linthresh=1e5 if x == "steps" else 10)
            ax.set_xlim(left=0)
            ax.set_xlabel("env steps" if x == "steps" else "training CPU-s")
            ax.set_ylabel("efficiency (curve seeds)")
            ax.set_title(f"{scen}: PPO from a random network ({len(cs)} seeds)")
            ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def report(out: Path, figure_dir: Path | None) -> str:
    cells = load_cells(out)
    table = markdown_table(cells)
    if decisions_table(cells):
        table += "\n\n" + decisions_table(cells)
    atomic_write(out / "from_scratch_scale.json", to_json({"cells": cells, "table": table}))
    for d in {out} | ({figure_dir} if figure_dir else set()):
        plot(cells, d / "scale_curves.png")
    print(table)
    return table


def main(argv: list[str] | None = None) -> str:
    p = argparse.ArgumentParser(
        prog="experiments/studies/from_scratch_scale.py", description=__doc__
    )
    p.add_argument("--scenarios", default=",".join(SCENARIOS))
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--seed0", type=int, default=0)
    p.add_argument(
        "--marks",
        default="2000000,10000000",
        help="env steps at which the final measurement is taken (the last ends the run)",
    )
    p.add_argument(
        "--eval-first",
        type=int,
        default=65_536,
        help="the first curve point after the start; then every doubling",
    )
    p.add_argument("--curve-durations", type=float, default=100.0)
    p.add_argument("--curve-reps", type=int, default=8)
    p.add_argument("--final-durations", type=float, default=400.0)
    p.add_argument("--final-reps", type=int, default=16)
    p.add_argument("--set", default="{}", help="JSON of PPOConfig fields (override)")
    p.add_argument("--out", type=Path, default=Path("results/from_scratch_scale"))
    p.add_argument("--figure-dir", type=Path, default=None)
    p.add_argument("--report", action="store_true", help="only aggregate the cells present")
    ns = p.parse_args(argv)
    ns.set = config_overrides(p, ns.set)
    if not ns.report:
        for scen in ns.scenarios.split(","):
            refs = None  # measured once per farm, when a cell of it runs
            for seed in range(ns.seed0, ns.seed0 + ns.seeds):
                path = cell_path(ns.out, scen, seed)
                if path.exists():
                    continue
                refs = refs or References(ns, scen)
                cell = run_cell(ns, scen, seed, refs)
                path.parent.mkdir(parents=True, exist_ok=True)
                atomic_write(path, to_json(cell))
                report(ns.out, ns.figure_dir)
    return report(ns.out, ns.figure_dir)


if __name__ == "__main__":
    main()
