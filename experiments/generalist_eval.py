"""The generalist zero-shot: held-out small farms exactly, presets by simulation.

    nice python experiments/generalist_eval.py --figure-dir docs/figures      # 100 farms + presets
    python experiments/generalist_eval.py --quick --out /tmp/g                # CI-sized
    python experiments/generalist_eval.py --model runs/gen/generalist.pt      # another model

**Small farms** (``random``): experiment 1's family, ``envs.scenarios.random_farm(seed)`` for
seeds ``0..n-1`` (2-4 groups of 1-3 servers, buffers 1-3; the generalist is trained on
``envs.farm_sampler`` draws, never on these). Per farm, exactly (no sampling error): the
generalist's stationary efficiency (per-server CTMC of its deterministic decisions in server
mode, ``evaluation.measure.measure``), PAS's, and the optimum (``baselines.solvers.optimum``).
Both act in server mode: the generalist with its check (``make_policy("generalist-checked", config)``),
PAS as the paper defines it (smallest-index vacancy).
Summary: mean / worst gap to the optimum for both, and the share of farms where the generalist is
at least PAS (within 1e-9).

**Presets** (``presets``): each preset's efficiency for the generalist and PAS, exactly where the
chain is small, else in the native vector env (``evaluation.measure``'s vector route, server mode) with
common random numbers (the same replication seeds for both) and the paired 95% interval of the difference.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # runnable as a script from anywhere
    sys.path.insert(0, str(ROOT))

from agents.generalist import SHIPPED_MODEL, GeneralistPolicy  # noqa: E402
from agents.generalist.guard import GuardedGeneralistPolicy  # noqa: E402
from baselines.pas import PASPolicy  # noqa: E402
from envs.config import FarmConfig  # noqa: E402
from envs.farm_sampler import HELD_OUT_SEEDS, sample_farm  # noqa: E402
from envs.scenarios import load_scenario, random_farm  # noqa: E402
from evaluation.exact import exact_solvable  # noqa: E402
from evaluation.measure import Window, consecutive_seeds, measure  # noqa: E402
from evaluation.references import optimum_solution  # noqa: E402
from evaluation.stats import mean_ci, shortfall_pct  # noqa: E402
from experiments.common import (  # noqa: E402
    base_parser,
    metadata,
    parallel_map,
    resolve_workers,
    save_figure,
    write_outputs,
)

NAME = "generalist_eval"
#: held-out sampler seeds of the unseen-shape farms (validation uses HELD_OUT_SEEDS.start + 0..)
UNSEEN_SEEDS = range(HELD_OUT_SEEDS.start + 20_000_000, HELD_OUT_SEEDS.start + 30_000_000)
PRESETS = ("tiny", "small-1", "pas-gap", "speed-scaling", "paper-100", "large-10k")
FULL = {"n_farms": 100, "presets": PRESETS, "epochs": 20_000, "replications": 16}
QUICK = {"n_farms": 4, "presets": ("tiny",), "epochs": 2_000, "replications": 4}


def _one_torch_thread() -> None:
    """Called first by each task (tasks may run in spawned workers): the batches are small
    (16 rows), and two processes with torch's default threads each on a 2-core machine ran 10x
    slower (16 ms a step instead of 1.3)."""
    torch.set_num_threads(1)


def small_farm_task(task: tuple[int, str]) -> dict[str, Any]:
    _one_torch_thread()
    seed, model = task
    config = random_farm(seed)
    row: dict[str, Any] = {"kind": "random", "farm": config.name, "n_servers": config.n_servers}
    sol, why = optimum_solution(config)
    if sol is None or not exact_solvable(config):
        return row | {"skipped": why or "per-server chain too large"}
    pas = measure(PASPolicy(config), config, action_mode="server", method="exact").efficiency
    opt = float(sol.value)
    row |= {"optimum": opt, "pas": pas, "pas_gap_pct": shortfall_pct(pas, opt)}
    guarded = GuardedGeneralistPolicy(config, "server", model=model)
    for who, policy in (("raw", GeneralistPolicy(config, "server", model=model)),
                        ("generalist", guarded)):  # fmt: skip
        eff = measure(policy, config, action_mode="server", method="exact").efficiency
        row |= {who: eff, f"{who}_gap_pct": shortfall_pct(eff, opt),
                f"{who}_at_least_pas": eff >= pas - 1e-9}  # fmt: skip
    row["guard"] = guarded.guard_report["chosen"]
    return row


def unseen_farms(n_eight: int, n_large: int) -> list[FarmConfig]:
    """Held-out sampler draws of shapes training never saw often: ``n_eight`` farms of 8 groups
    (<= 2,000 servers) and ``n_large`` of 5,000 servers or more, from :data:`UNSEEN_SEEDS`."""
    eight: list[FarmConfig] = []
    large: list[FarmConfig] = []
    for seed in UNSEEN_SEEDS:
        if len(eight) >= n_eight and len(large) >= n_large:
            break
        c = sample_farm(seed)
        if c.n_groups == 8 and c.n_servers <= 2_000 and len(eight) < n_eight:
            eight.append(c)
        elif c.n_servers >= 5_000 and len(large) < n_large:
            large.append(c)
    return eight + large


def preset_task(task: tuple[FarmConfig, str, dict[str, Any]]) -> dict[str, Any]:
    """Raw network and guarded generalist against PAS on one farm (server mode up to 1,000
    servers, group mode beyond: the 10,000-server observation costs 10 ms a step in server mode;
    both policies in the same mode)."""
    _one_torch_thread()
    config, model, st = task
    mode = "server" if config.n_servers <= 1_000 else "group"
    row: dict[str, Any] = {"kind": "preset", "farm": config.name, "n_servers": config.n_servers,
                           "n_groups": config.n_groups, "mode": mode}  # fmt: skip
    guarded = GuardedGeneralistPolicy(config, mode, model=model)
    row["guard"] = guarded.guard_report["chosen"]
    policies = {"raw": GeneralistPolicy(config, mode, model=model), "generalist": guarded}
    if exact_solvable(config):
        pas = measure(PASPolicy(config, mode), config, action_mode=mode, method="exact").efficiency
        row |= {"method": "exact", "pas": pas}
        for who, pol in policies.items():
            eff = measure(pol, config, action_mode=mode, method="exact").efficiency
            row |= {who: eff, f"{who}_vs_pas_pct": 100.0 * (eff - pas) / pas,
                    f"{who}_vs_pas_ci95_pct": 0.0}  # fmt: skip
        return row
    kw = {"window": Window.for_farm(config, st["epochs"], pas_warmup=True), "action_mode": mode,
          "seeds": consecutive_seeds(10_000, st["replications"]), "method": "vector"}  # fmt: skip
    pas = measure(PASPolicy(config, mode), config, **kw)
    row |= {"method": "simulation (paired)", "pas": pas.efficiency}
    for who, pol in policies.items():
        if who == "raw" and not st["raw_large"] and config.n_servers > 1_000:
            continue  # the raw network on 10,000 servers: minutes; only with --raw-large
        est = measure(pol, config, **kw)
        diff, half = mean_ci(est.per_replication - pas.per_replication, 0.95)  # paired
        row |= {who: est.efficiency, f"{who}_vs_pas_pct": 100.0 * diff / pas.efficiency,
                f"{who}_vs_pas_ci95_pct": 100.0 * half / pas.efficiency}  # fmt: skip
    return row


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    small = [r for r in rows if r["kind"] == "random" and "skipped" not in r]
    out: dict[str, Any] = {"random_farms": len(small)}
    if small:
        for who in ("pas", "raw", "generalist"):
            g = np.array([r[f"{who}_gap_pct"] for r in small])
            out[who] = {"mean_gap_pct": float(g.mean()), "worst_gap_pct": float(g.max())}
            if who != "pas":
                out[who]["share_at_least_pas"] = float(np.mean([r[f"{who}_at_least_pas"]
                                                                for r in small]))  # fmt: skip
        out["guard_chose_pas"] = float(np.mean([r["guard"] == "pas" for r in small]))
    keys = ("n_servers", "mode", "method", "guard", "raw_vs_pas_pct", "raw_vs_pas_ci95_pct",
            "generalist_vs_pas_pct", "generalist_vs_pas_ci95_pct")  # fmt: skip
    out["presets"] = {r["farm"]: {k: r.get(k) for k in keys} for r in rows if r["kind"] == "preset"}
    return out


def plot(rows: Sequence[dict[str, Any]], path: str | Path) -> None:
    from matplotlib.figure import Figure

    small = [r for r in rows if r["kind"] == "random" and "skipped" not in r]
    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    labels = {"pas": "PAS", "raw": "network alone", "generalist": "guarded generalist"}
    for who, label in labels.items():
        g = np.sort([r[f"{who}_gap_pct"] for r in small])
        ax.step(g, np.arange(1, len(g) + 1) / max(len(g), 1), where="post", label=label)
    ax.set_xlabel("gap to the exact optimum (%)")
    ax.set_ylabel("share of held-out farms")
    ax.set_title("zero-shot on experiment 1's farms")
    ax.legend()
    save_figure(fig, path)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = base_parser(NAME, "The generalist zero-shot against PAS and the optimum")
    p.add_argument("--model", default=str(SHIPPED_MODEL), help="generalist .pt file")
    p.add_argument("--n-farms", type=int, default=None, help="held-out small farms (100; quick 4)")
    p.add_argument("--presets", default=None, help="comma-separated presets (quick: tiny)")
    p.add_argument("--unseen", default=None, help="N8,NL: held-out draws with 8 groups, 5,000+ "
                   "servers (default 3,2; quick 0,0)")  # fmt: skip
    p.add_argument(
        "--raw-large",
        action="store_true",
        help="also simulate the raw network on farms over 1,000 servers (slow)",
    )
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    d = QUICK if a.quick else FULL
    presets = tuple(a.presets.split(",")) if a.presets else d["presets"]
    st = {"model": a.model, "n_farms": a.n_farms or d["n_farms"], "presets": list(presets),
          "epochs": d["epochs"], "replications": d["replications"], "quick": bool(a.quick),
          "workers": resolve_workers(a.workers, a.quick), "raw_large": bool(a.raw_large)}  # fmt: skip
    n8, nl = (int(x) for x in (a.unseen or ("0,0" if a.quick else "3,2")).split(","))
    GeneralistPolicy.load_net(a.model)  # fail now, with the file named, not in a worker
    rows = parallel_map(
        small_farm_task, [(s, a.model) for s in range(st["n_farms"])], st["workers"]
    )
    farms = [load_scenario(name) for name in presets] + unseen_farms(n8, nl)
    st["unseen"] = [f.name for f in farms[len(presets) :]]
    rows += [preset_task((f, a.model, st)) for f in farms]  # large ones: one at a time
    report = {
        "experiment": NAME,
        "summary": summarize(rows),
        "rows": rows,
        **metadata(argv, st, t0),
    }
    write_outputs(a.out, NAME, report, rows, lambda path: plot(rows, path), a.figure_dir)
    s = report["summary"]
    for who in ("pas", "raw", "generalist"):
        if who in s:
            at = s[who].get("share_at_least_pas")
            print(f"{who:10s} mean gap {s[who]['mean_gap_pct']:.3f}%  worst "
                  f"{s[who]['worst_gap_pct']:.2f}%" + ("" if at is None else f"  >= PAS on {100 * at:.0f}%"))  # fmt: skip
    for name, v in s["presets"].items():
        parts = []
        for who in ("raw", "generalist"):
            if v[f"{who}_vs_pas_pct"] is not None:
                parts.append(
                    f"{who} {v[f'{who}_vs_pas_pct']:+.3f}% +- {v[f'{who}_vs_pas_ci95_pct']:.3f}"
                )
        print(
            f"{name:20s} {v['n_servers']:6d} {v['mode']:6s} guard: {v['guard']:10s} "
            + ", ".join(parts)
        )
    return report


if __name__ == "__main__":
    main()
