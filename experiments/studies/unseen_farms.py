"""``train.py --scenario FILE --init random`` on small farms no preset, test or study contains.

The farms are ``serverfarm_gym.envs.scenarios.random_farms.random_farm(seed)`` for the given
seeds (the paper-style generator, none of whose seeds from 1,000 on any preset or test uses),
kept when they are exactly solvable and PAS is at least ``--min-pas-gap`` % below the optimum
(where PAS is already optimal there is nothing to learn). Each kept farm is written as a scenario
file and trained by the user's command, verbatim, in a subprocess: ``python train.py --scenario
FILE --init random`` with no other setting than the seed and the run directory, so the budget
and every setting are what ``train.py`` derives from the farm (``--train-args`` adds options, to
compare a setting on the same farms; give such a run its own ``--out``). The table reads each
run's ``summary.json``: per farm how many runs (``--train-seeds``) reached 99.9% of the exact
optimum and at which evaluated step, the worst share of the optimum of the kept and of the
final models, PAS's share and the training CPU seconds per run; below it, all runs at 99.9%
with a 95% Clopper-Pearson interval. A run whose ``summary.json`` exists is not repeated.

    python -m experiments.studies.unseen_farms --seeds 1000:1012 --train-seeds 0:5 --out results/unseen_farms
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

ROOT = Path(__file__).resolve().parents[2]


def unseen_farms(seeds: range, min_pas_gap: float) -> list[tuple[Any, float]]:
    """(farm, PAS's gap to the optimum in %) of the seeds' random farms that are exactly
    solvable and where PAS is at least ``min_pas_gap`` % below the optimum."""
    from serverfarm_gym.envs.scenarios.random_farms import random_farm
    from serverfarm_gym.evaluation.efficiency import pas_efficiency
    from serverfarm_gym.evaluation.exact import exact_unsupported_reason
    from serverfarm_gym.evaluation.references import optimum_solution

    kept = []
    for seed in seeds:
        farm = random_farm(seed, name=f"random-{seed}")
        if exact_unsupported_reason(farm):
            continue
        sol = optimum_solution(farm)[0]
        if sol is None:  # the LP too large to solve here
            continue
        gap = 100.0 * (1.0 - pas_efficiency(farm).efficiency / float(sol.value))
        if gap >= min_pas_gap:
            kept.append((farm, gap))
    return kept


def train(farm: Any, out: Path, seed: int, extra: list[str]) -> dict[str, Any]:
    """The run of ``python train.py --scenario FILE --init random --seed SEED`` (plus the
    options ``extra``) on ``farm`` (its ``summary.json``), trained now unless it is there."""
    import yaml

    from serverfarm_gym.evaluation.outputs import atomic_write

    path = out / "farms" / f"{farm.name}.yaml"
    run = out / "runs" / f"{farm.name}-s{seed}"
    summary = run / "summary.json"
    if not summary.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, yaml.safe_dump(farm.to_dict(), sort_keys=False))
        cmd = [sys.executable, "train.py", "--scenario", str(path), "--init", "random",
               "--seed", str(seed), "--output-dir", str(run), "--no-progress-bar", *extra]  # fmt: skip
        subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return dict(json.loads(summary.read_text()))


HEADER = (
    "| farm | servers | job types | PAS, share of the optimum | runs at 99.9% | steps to 99.9%, "
    "per seed | kept model, worst share | final model, worst share | training CPU-s per run |\n"
    "|---|---|---|---|---|---|---|---|---|"
)


def row(farm: Any, pas_gap: float, runs: list[dict[str, Any]]) -> tuple[str, int]:
    """The table row of ``farm``'s runs (their ``summary.json``, in seed order) and how many
    of them reached 99.9% of the optimum (``-``: a run that did not, within its budget)."""
    learning = [r["learning"] for r in runs]
    steps = [lr["steps_to"].get("0.999") for lr in learning]
    hit = sum(v is not None for v in steps)
    cpu = sum(float(r["learn_cpu_s"]) for r in runs) / len(runs)
    cells = [farm.name, str(farm.n_servers), str(farm.n_job_types), f"{100 - pas_gap:.2f}%",
             f"{hit}/{len(runs)}", ", ".join("-" if v is None else f"{v:,}" for v in steps),
             f"{100 * min(lr['kept_share'] for lr in learning):.3f}%",
             f"{100 * min(lr['final_share'] for lr in learning):.3f}%", f"{cpu:.0f}"]  # fmt: skip
    return "| " + " | ".join(cells) + " |", hit


def main(argv: list[str] | None = None) -> str:
    from scipy.stats import binomtest

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="1000:1012", help="random_farm seeds, LO:HI (HI excluded)")
    ap.add_argument("--train-seeds", default="0:5", help="train.py --seed of each run, LO:HI")
    ap.add_argument(
        "--min-pas-gap", type=float, default=0.3, help="keep farms where PAS is this %% below"
    )
    ap.add_argument("--out", default="results/unseen_farms")
    ap.add_argument(
        "--train-args", default="", help="further train.py options, e.g. '--advantage afterstate'"
    )
    a = ap.parse_args(argv)
    lo, hi = (int(x) for x in a.seeds.split(":"))
    tlo, thi = (int(x) for x in a.train_seeds.split(":"))
    out = Path(a.out).resolve()
    extra = shlex.split(a.train_args)
    lines, hits, n = [HEADER], 0, 0
    for farm, gap in unseen_farms(range(lo, hi), a.min_pas_gap):
        line, hit = row(farm, gap, [train(farm, out, s, extra) for s in range(tlo, thi)])
        lines.append(line)
        hits, n = hits + hit, n + thi - tlo
        print(line, flush=True)
    if n:
        ci = binomtest(hits, n).proportion_ci(confidence_level=0.95)  # Clopper-Pearson
        lines.append(f"\nRuns at 99.9% of the optimum: {hits} of {n} "
                     f"({100 * hits / n:.0f}%, 95% CI [{100 * ci.low:.0f}%, {100 * ci.high:.0f}%])")  # fmt: skip
    table = "\n".join(lines)
    print(table)
    return table


if __name__ == "__main__":
    main()
