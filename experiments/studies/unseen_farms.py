"""``train.py --scenario FILE --init random`` on small farms no preset, test or study contains.

The farms are ``serverfarm_gym.envs.scenarios.random_farms.random_farm(seed)`` for the given
seeds (the paper-style generator, none of whose seeds from 1,000 on any preset or test uses),
kept when they are exactly solvable and PAS is at least ``--min-pas-gap`` % below the optimum
(where PAS is already optimal there is nothing to learn). Each kept farm is written as a scenario
file and trained by the user's command, verbatim, in a subprocess: ``python train.py --scenario
FILE --init random`` with no other setting than the run directory, so the budget and every
setting are what ``train.py`` derives from the farm (``--train-args`` adds options, to compare a
setting on the same farms; give such a run its own ``--out``). The table reads each run's
``summary.json``: the share of the exact optimum of the kept and the final model, the first
evaluated steps at 99% and 99.9% of it, PAS's share, and the training CPU seconds. A run whose
``summary.json`` exists is not repeated.

    python -m experiments.studies.unseen_farms --seeds 1000:1012 --out results/unseen_farms
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


def train(farm: Any, out: Path, extra: list[str]) -> dict[str, Any]:
    """The run of ``python train.py --scenario FILE --init random`` (plus the options
    ``extra``) on ``farm`` (its ``summary.json``), trained now unless it is already there."""
    import yaml

    from serverfarm_gym.evaluation.outputs import atomic_write

    path = out / "farms" / f"{farm.name}.yaml"
    run = out / "runs" / farm.name
    summary = run / "summary.json"
    if not summary.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, yaml.safe_dump(farm.to_dict(), sort_keys=False))
        cmd = [sys.executable, "train.py", "--scenario", str(path), "--init", "random",
               "--output-dir", str(run), "--no-progress-bar", *extra]  # fmt: skip
        subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return dict(json.loads(summary.read_text()))


def row(farm: Any, pas_gap: float, s: dict[str, Any]) -> str:
    learning = s["learning"]

    def steps(th: str) -> str:
        v = learning["steps_to"].get(th)
        return f"{v:,}" if v is not None else f"not in {learning['evaluated_to']:,}"

    cells = [farm.name, str(farm.n_servers), str(farm.n_job_types), f"{100 - pas_gap:.2f}%",
             steps("0.99"), steps("0.999"), f"{100 * learning['kept_share']:.3f}%",
             f"{100 * learning['final_share']:.3f}%", f"{float(s['learn_cpu_s']):.0f}"]  # fmt: skip
    return "| " + " | ".join(cells) + " |"


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="1000:1012", help="random_farm seeds, LO:HI (HI excluded)")
    ap.add_argument(
        "--min-pas-gap", type=float, default=0.3, help="keep farms where PAS is this %% below"
    )
    ap.add_argument("--out", default="results/unseen_farms")
    ap.add_argument(
        "--train-args", default="", help="further train.py options, e.g. '--advantage afterstate'"
    )
    a = ap.parse_args(argv)
    lo, hi = (int(x) for x in a.seeds.split(":"))
    out = Path(a.out).resolve()
    lines = [
        "| farm | servers | job types | PAS, share of the optimum | steps to 99% | steps to 99.9% "
        "| kept model, share | final model, share | training CPU-s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for farm, gap in unseen_farms(range(lo, hi), a.min_pas_gap):
        lines.append(row(farm, gap, train(farm, out, shlex.split(a.train_args))))
        print(lines[-1], flush=True)
    table = "\n".join(lines)
    print(table)
    return table


if __name__ == "__main__":
    main()
