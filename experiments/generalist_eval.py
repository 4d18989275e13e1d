"""The generalist zero-shot (issue 13): held-out small farms exactly, presets by simulation.

    nice python experiments/generalist_eval.py --figure-dir docs/figures      # 100 farms + presets
    python experiments/generalist_eval.py --quick --out /tmp/g                # CI-sized
    python experiments/generalist_eval.py --model runs/gen/generalist.pt      # another model

**Small farms** (``random``): experiment 1's family, ``envs.scenarios.random_farm(seed)`` for
seeds ``0..n-1`` (2-4 groups of 1-3 servers, buffers 1-3; the generalist is trained on
``envs.farm_sampler`` draws, never on these). Per farm, exactly (no sampling error): the
generalist's stationary efficiency (per-server CTMC of its deterministic decisions in server
mode, ``evaluation.measure.exact_efficiency``), PAS's, and the optimum (``baselines.optimum``).
Both act in server mode: the generalist as users run it (``make_policy("generalist", config)``),
PAS as the paper defines it (smallest-index vacancy).
Summary: mean / worst gap to the optimum for both, and the share of farms where the generalist is
at least PAS (within 1e-9).

**Presets** (``presets``): each preset's efficiency for the generalist and PAS, exactly where the
chain is small, else in the native vector env (``evaluation.vector_eval``, server mode) with
common random numbers (the same replication seeds for both) and the paired 95% interval of the difference.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # runnable as a script from anywhere
    sys.path.insert(0, str(ROOT))

from agents.generalist import SHIPPED_MODEL, GeneralistPolicy  # noqa: E402
from baselines.pas import PASPolicy  # noqa: E402
from envs.config import FarmConfig  # noqa: E402
from envs.scenarios import load_scenario, random_farm  # noqa: E402
from evaluation.exact import exact_solvable  # noqa: E402
from evaluation.measure import exact_efficiency  # noqa: E402
from evaluation.references import optimum_solution  # noqa: E402
from evaluation.stats import mean_ci, shortfall_pct  # noqa: E402
from evaluation.vector_eval import vector_efficiency  # noqa: E402
from experiments.common import (  # noqa: E402
    base_parser,
    metadata,
    parallel_map,
    resolve_workers,
    save_figure,
    write_outputs,
)

NAME = "generalist_eval"
PRESETS = ("tiny", "small-1", "pas-gap", "speed-scaling", "paper-100", "large-10k")
FULL = {"n_farms": 100, "presets": PRESETS, "epochs": 20_000, "replications": 16}
QUICK = {"n_farms": 4, "presets": ("tiny",), "epochs": 2_000, "replications": 4}


def small_farm_task(task: tuple[int, str]) -> dict[str, Any]:
    seed, model = task
    config = random_farm(seed)
    row: dict[str, Any] = {"kind": "random", "farm": config.name, "n_servers": config.n_servers}
    sol, why = optimum_solution(config)
    if sol is None or not exact_solvable(config):
        return row | {"skipped": why or "per-server chain too large"}
    gen = exact_efficiency(GeneralistPolicy(config, "server", model=model), config, "server")
    pas = exact_efficiency(PASPolicy(config), config, "server")
    opt = float(sol.value)
    return row | {
        "optimum": opt, "pas": pas.efficiency, "generalist": gen.efficiency,
        "pas_gap_pct": shortfall_pct(pas.efficiency, opt),
        "generalist_gap_pct": shortfall_pct(gen.efficiency, opt),
        "at_least_pas": gen.efficiency >= pas.efficiency - 1e-9,
    }  # fmt: skip


def preset_task(task: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    name, model, st = task
    config: FarmConfig = load_scenario(name)
    row: dict[str, Any] = {"kind": "preset", "farm": name, "n_servers": config.n_servers}
    gen_policy = GeneralistPolicy(config, "server", model=model)
    if exact_solvable(config):
        gen = exact_efficiency(gen_policy, config, "server")
        pas = exact_efficiency(PASPolicy(config), config, "server")
        diff, half = gen.efficiency - pas.efficiency, 0.0
        method = "exact"
    else:
        kw = {"n_epochs": st["epochs"], "replications": st["replications"], "seed": 10_000}
        gen = vector_efficiency(gen_policy, config, "server", **kw)
        pas = vector_efficiency(PASPolicy(config, "server"), config, "server", **kw)
        d = gen.per_replication - pas.per_replication  # same seeds: paired
        diff, half = mean_ci(d, 0.95)
        method = "simulation (paired)"
    return row | {
        "method": method, "pas": pas.efficiency, "generalist": gen.efficiency,
        "vs_pas_pct": 100.0 * diff / pas.efficiency,
        "vs_pas_ci95_pct": None if half is None else 100.0 * half / pas.efficiency,
    }  # fmt: skip


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    small = [r for r in rows if r["kind"] == "random" and "skipped" not in r]
    out: dict[str, Any] = {"random_farms": len(small)}
    if small:
        for who in ("pas", "generalist"):
            g = np.array([r[f"{who}_gap_pct"] for r in small])
            out[who] = {"mean_gap_pct": float(g.mean()), "worst_gap_pct": float(g.max())}
        out["share_at_least_pas"] = float(np.mean([r["at_least_pas"] for r in small]))
    out["presets"] = {
        r["farm"]: {"vs_pas_pct": r["vs_pas_pct"], "ci95_pct": r["vs_pas_ci95_pct"]}
        for r in rows
        if r["kind"] == "preset"
    }
    return out


def plot(rows: Sequence[dict[str, Any]], path: str | Path) -> None:
    from matplotlib.figure import Figure

    small = [r for r in rows if r["kind"] == "random" and "skipped" not in r]
    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    for who in ("pas", "generalist"):
        g = np.sort([r[f"{who}_gap_pct"] for r in small])
        ax.step(g, np.arange(1, len(g) + 1) / max(len(g), 1), where="post", label=who)
    ax.set_xlabel("gap to the exact optimum (%)")
    ax.set_ylabel("share of held-out farms")
    ax.set_title("zero-shot on experiment 1's farms")
    ax.legend()
    save_figure(fig, path)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = base_parser(NAME, "The generalist zero-shot against PAS and the optimum (issue 13)")
    p.add_argument("--model", default=str(SHIPPED_MODEL), help="generalist .pt file")
    p.add_argument("--n-farms", type=int, default=None, help="held-out small farms (100; quick 4)")
    p.add_argument("--presets", default=None, help="comma-separated presets (quick: tiny)")
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    d = QUICK if a.quick else FULL
    presets = tuple(a.presets.split(",")) if a.presets else d["presets"]
    st = {"model": a.model, "n_farms": a.n_farms or d["n_farms"], "presets": list(presets),
          "epochs": d["epochs"], "replications": d["replications"], "quick": bool(a.quick),
          "workers": resolve_workers(a.workers, a.quick)}  # fmt: skip
    GeneralistPolicy.load_net(a.model)  # fail now, with the file named, not in a worker
    rows = parallel_map(
        small_farm_task, [(s, a.model) for s in range(st["n_farms"])], st["workers"]
    )
    rows += [preset_task((name, a.model, st)) for name in presets]  # large ones: one at a time
    report = {
        "experiment": NAME,
        "summary": summarize(rows),
        "rows": rows,
        **metadata(argv, st, t0),
    }
    write_outputs(a.out, NAME, report, rows, lambda path: plot(rows, path), a.figure_dir)
    s = report["summary"]
    for who in ("pas", "generalist"):
        if who in s:
            print(
                f"{who:10s} mean gap {s[who]['mean_gap_pct']:.3f}%  worst {s[who]['worst_gap_pct']:.2f}%"
            )
    if "share_at_least_pas" in s:
        print(
            f"generalist >= PAS on {100 * s['share_at_least_pas']:.0f}% of {s['random_farms']} farms"
        )
    for name, v in s["presets"].items():
        ci = "" if v["ci95_pct"] is None else f" +- {v['ci95_pct']:.3f}"
        print(f"{name:14s} generalist vs PAS {v['vs_pas_pct']:+.3f}%{ci}")
    return report


if __name__ == "__main__":
    main()
