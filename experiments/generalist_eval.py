"""The generalist (the network alone) against the optimum, PAS and best-priority.

    nice python experiments/generalist_eval.py --workers 1 --figure-dir docs/figures
    python experiments/generalist_eval.py --quick --out /tmp/g                # CI-sized
    python experiments/generalist_eval.py --model runs/t/generalist_table.npz  # another model

``make_policy("generalist", config)``: the table network's priority table for the farm, nothing
measured or searched on it. Five parts:

**Held-out sampled farms, exact** (``sampled``): the first ``--n-farms`` draws of
``serverfarm_gym.envs.farm_sampler.sample_farm`` from :data:`EVAL_SEEDS` (inside ``HELD_OUT_SEEDS``: never drawn
by training, apart from the validation seeds) with exponential sizes and a per-server chain of at
most 5,000 states. Per farm, exactly (stationary efficiency of the per-server CTMC, server mode):
the generalist, PAS, best-priority (its exact search, default settings) and the optimum
(``serverfarm_gym.baselines.solvers.efficiency_optimum``). The same on the random_farm test farms (``random_farm(seed)``, seeds
``0..n-1``; training never draws that family).

**Held-out mid-size farms, paired simulation** (``mid``): the first ``--n-mid`` draws of
:data:`MID_SEEDS` (inside ``HELD_OUT_SEEDS``, apart from the exact evaluation's and the
validation's) with 50-1,000 servers; the generalist's and PAS's tables in the compiled
simulator on the same replication seeds (Student-t 95% interval of the per-replication
difference). "Below PAS" counts the farms whose interval lies below 0. ``--mid-seeds
validation`` draws them from :data:`MID_VALIDATION_SEEDS` instead, a disjoint held-out range
on which variants of the main network can be compared and chosen without the evaluation's farms.
``--exact-seeds validation`` does the same for the exact part: sampled farms from
:data:`EXACT_VALIDATION_SEEDS` (the held-out seeds before :data:`EVAL_SEEDS`, where the training
commands' validation farms lie) and the random_farm family from :data:`RANDOM_VALIDATION_SEEDS`.
``--exact-seeds training`` draws both from the training seeds instead, in the order
``exact_tune --sampled-farms N --random-farms N`` reads them (the sampler's seeds 0.. and
``RANDOM_FARM_TRAIN_SEEDS``): for an expert tuned that way, its fit on the farms it was tuned
on, against which its held-out figures are read. (The distilled experts' farms are another
stream, ``labels.SMALL``: for them these are unseen farms of the two families.)
``--polish STEPS`` adds, on each exact farm, the generalist's table polished on the farm by
``STEPS`` steps of exact gradient ascent of its soft table (``polished``, with its CPU time): a
per-farm search like best-priority's, not the generalist. ``--against MODEL`` adds another
model's network alone on each exact farm and the paired difference of the two gaps
(``generalist_minus_against``: mean, 95% Student-t half-width, farms better / worse): with
``--exact-seeds validation``, how a candidate model is compared with the shipped one.

**Large presets, paired simulation**: paper-100, overlap-100, large-10k and the x100 farms
(``FarmConfig.scaled(100)``) of overlap-100 and paper-100; the generalist's, PAS's and
best-priority's tables each run in the compiled simulator (``serverfarm_gym.evaluation.efficiency``,
its built-in route) on the same replication seeds, so the differences are paired (Student-t
95% intervals of the per-replication differences). best-priority's table is searched on the
100-server preset (default settings) and used as is on its x100 farm (its scaled-down twin).

**Throughput**: decisions per CPU-second of the evaluation of the generalist on paper-100 with
group actions (the vector env, 16 replications in lockstep, one table lookup per decision) and
with server actions (the compiled simulator's priority dispatcher).

**Time to a policy**: in a fresh interpreter, ``make_policy("generalist", large-10k, "group")``
(imports, weights, features, forward pass) and its first decision on the env's observation.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # runnable as a script from anywhere
    sys.path.insert(0, str(ROOT))

from experiments.common import (  # noqa: E402
    base_parser,
    metadata,
    parallel_map,
    resolve_workers,
    save_figure,
    write_outputs,
)
from serverfarm_gym.agents.generalist.exact_tune import polished_table  # noqa: E402
from serverfarm_gym.agents.generalist.oracle import RANDOM_FARM_TRAIN_SEEDS  # noqa: E402
from serverfarm_gym.agents.generalist.policy import SHIPPED_MODEL, GeneralistPolicy  # noqa: E402
from serverfarm_gym.agents.generalist.table_net import load_weights  # noqa: E402
from serverfarm_gym.baselines.best_priority import BestPriorityPolicy  # noqa: E402
from serverfarm_gym.baselines.pas import PASPolicy, pas_table  # noqa: E402
from serverfarm_gym.baselines.priority import PriorityPolicy  # noqa: E402
from serverfarm_gym.envs.config import FarmConfig  # noqa: E402
from serverfarm_gym.envs.farm_sampler import HELD_OUT_SEEDS, sample_farm  # noqa: E402
from serverfarm_gym.envs.scenarios import load_scenario, random_farm  # noqa: E402
from serverfarm_gym.evaluation.efficiency import Window, consecutive_seeds, measure  # noqa: E402
from serverfarm_gym.evaluation.exact import exact_table_solvable  # noqa: E402
from serverfarm_gym.evaluation.references import optimum_solution  # noqa: E402
from serverfarm_gym.evaluation.stats import mean_ci, shortfall_pct  # noqa: E402

NAME = "generalist_eval"
#: held-out sampler seeds of the exact evaluation (validation uses HELD_OUT_SEEDS.start + 0..)
EVAL_SEEDS = range(HELD_OUT_SEEDS.start + 10_000_000, HELD_OUT_SEEDS.start + 20_000_000)
#: held-out sampler seeds of exact validation farms (choosing among variants of the small-farm
#: expert; never reported as the evaluation's): the validation farms of the training commands
EXACT_VALIDATION_SEEDS = range(HELD_OUT_SEEDS.start, EVAL_SEEDS.start)
#: seeds of ``random_farm`` for validation: the test farms' are 0.., training's
#: ``RANDOM_FARM_TRAIN_SEEDS`` (1,000,000..)
RANDOM_VALIDATION_SEEDS = range(2_000_000, 3_000_000)
#: held-out sampler seeds of the mid-size farms (paired simulation against PAS)
MID_SEEDS = range(HELD_OUT_SEEDS.start + 20_000_000, HELD_OUT_SEEDS.start + 30_000_000)
#: held-out sampler seeds of mid-size validation farms (choosing among variants; never reported
#: as the evaluation's)
MID_VALIDATION_SEEDS = range(HELD_OUT_SEEDS.start + 30_000_000, HELD_OUT_SEEDS.start + 40_000_000)
#: the mid-size farms' servers: above what the exact measure takes, below the twin's reach
MID_SERVERS = (50, 1_000)
MAX_STATES = 5_000
#: (sampled seeds, random_farm seeds) of the exact farms: the evaluation's (``test``), the
#: validation's and the training's (the ranges ``exact_tune`` reads, in its order, so
#: ``training`` scores a tuned expert on the farms it was tuned on: its fit, not its reach);
#: the random_farm test seeds are those below the training ones
EXACT_SEED_RANGES = {
    "test": (EVAL_SEEDS, range(RANDOM_FARM_TRAIN_SEEDS.start)),
    "validation": (EXACT_VALIDATION_SEEDS, RANDOM_VALIDATION_SEEDS),
    "training": (range(HELD_OUT_SEEDS.start), RANDOM_FARM_TRAIN_SEEDS),
}
PRESETS = ("paper-100", "overlap-100", "large-10k", "overlap-100@100", "paper-100@100")
FULL = {"n_farms": 100, "presets": PRESETS, "epochs": (400_000, 1_000_000), "replications": 10,
        "n_mid": 150, "mid_epochs": 100_000, "mid_replications": 4}  # fmt: skip
QUICK = {"n_farms": 3, "presets": ("paper-100",), "epochs": (20_000, 20_000), "replications": 3,
         "n_mid": 2, "mid_epochs": 20_000, "mid_replications": 3}  # fmt: skip
POLICIES = ("pas", "generalist", "best-priority")


def exact_farms(n: int, family: str, seeds: str = "test") -> list[FarmConfig]:
    """The first ``n`` farms of ``family`` that the exact measure and the optimum can handle.
    ``sampled``: draws of the sampler from :data:`EVAL_SEEDS` (``seeds="test"``),
    :data:`EXACT_VALIDATION_SEEDS` (``"validation"``) or its training seeds 0..
    (``"training"``); ``random``: ``random_farm`` from the random_farm test seeds 0.., from
    :data:`RANDOM_VALIDATION_SEEDS` or from ``RANDOM_FARM_TRAIN_SEEDS``."""
    if seeds not in EXACT_SEED_RANGES:
        raise ValueError(f"seeds: must be one of {sorted(EXACT_SEED_RANGES)}, got {seeds!r}")
    out: list[FarmConfig] = []
    it = iter(EXACT_SEED_RANGES[seeds][0 if family == "sampled" else 1])
    while len(out) < n:
        s = next(it)
        c = sample_farm(s) if family == "sampled" else random_farm(s)
        if exact_table_solvable(c, MAX_STATES):
            out.append(c)
    return out


def mid_farms(n: int, seed_range: range = MID_SEEDS) -> list[FarmConfig]:
    """The first ``n`` draws of ``seed_range`` (:data:`MID_SEEDS` or
    :data:`MID_VALIDATION_SEEDS`) with :data:`MID_SERVERS` servers."""
    out: list[FarmConfig] = []
    seeds = iter(seed_range)
    while len(out) < n:
        c = sample_farm(next(seeds))
        if MID_SERVERS[0] <= c.n_servers <= MID_SERVERS[1]:
            out.append(c)
    return out


def paired(
    config: FarmConfig, tables: dict[str, np.ndarray], window: Window, seeds: Sequence[int]
) -> dict[str, Any]:
    """Each table in the compiled simulator on the same replication seeds (its estimate)."""
    return {who: measure(PriorityPolicy(config, table=t), config, window, seeds, method="builtin")
            for who, t in tables.items()}  # fmt: skip


def gain_pct(est: dict[str, Any], who: str, ref: str) -> tuple[float, float]:
    """(mean, 95% half-width) of ``who``'s per-replication efficiency minus ``ref``'s, as % of
    ``ref``'s efficiency."""
    d, half = mean_ci(est[who].per_replication - est[ref].per_replication, 0.95)
    return 100.0 * d / est[ref].efficiency, 100.0 * half / est[ref].efficiency


def mid_task(task: tuple[FarmConfig, str, dict[str, Any]]) -> dict[str, Any]:
    """The generalist's table against PAS's on one mid-size farm, paired (the same replication
    seeds), in the compiled simulator: no optimum or search is affordable for all of them."""
    config, model, st = task
    window = Window.for_farm(config, st["mid_epochs"], pas_warmup=True)
    seeds = consecutive_seeds(20_000 + st["seed"], st["mid_replications"])
    tables = {"pas": pas_table(config),
              "generalist": GeneralistPolicy(config, model=model).priority_table()}  # fmt: skip
    est = paired(config, tables, window, seeds)
    vs, half = gain_pct(est, "generalist", "pas")
    return {"kind": "mid", "farm": config.name, "n_servers": config.n_servers,
            "n_groups": config.n_groups, "pas": est["pas"].efficiency,
            "generalist": est["generalist"].efficiency, "vs_pas_pct": vs,
            "vs_pas_ci95_pct": half}  # fmt: skip


def exact_task(task: tuple[FarmConfig, str, str, int, str | None]) -> dict[str, Any]:
    """Exact efficiencies of the policies and the optimum on one small farm (server mode);
    with ``polish`` > 0 also the generalist's table polished on the farm (``polished``); with
    ``against`` (another model file) that model's network alone too (``against``)."""
    config, family, model, steps, against = task
    row: dict[str, Any] = {"kind": family, "farm": config.name, "n_servers": config.n_servers,
                           "n_groups": config.n_groups}  # fmt: skip
    try:
        sol, why = optimum_solution(config)
    except RuntimeError as e:  # the LP solver's numerical failure on this farm: say so, go on
        sol, why = None, str(e)
    if sol is None:
        return row | {"skipped": why}
    opt = float(sol.value)
    pols = {"pas": PASPolicy(config), "generalist": GeneralistPolicy(config, model=model),
            "best-priority": BestPriorityPolicy(config)}  # fmt: skip
    if against is not None:
        pols["against"] = GeneralistPolicy(config, model=against)
    row["optimum"] = opt
    for who, pol in pols.items():
        eff = measure(pol, config, action_mode="server", method="exact").efficiency
        row |= {who: eff, f"{who}_gap_pct": shortfall_pct(eff, opt)}
    if steps:
        c0 = time.process_time()
        table = polished_table(config, pols["generalist"].priority_table(), steps)
        eff = measure(PriorityPolicy(config, table=table), config, action_mode="server",
                      method="exact").efficiency  # fmt: skip
        row |= {"polished": eff, "polished_gap_pct": shortfall_pct(eff, opt),
                "polish_cpu_s": time.process_time() - c0}  # fmt: skip
    row["generalist_vs_pas_pct"] = 100.0 * (row["generalist"] - row["pas"]) / row["pas"]
    for who in [w for w in ("generalist", "against") if w in pols]:
        row[f"{who}_at_least_pas"] = bool(row[who] >= row["pas"] * (1 - 1e-9))
    return row


def preset_farm(spec: str) -> tuple[FarmConfig, FarmConfig]:
    """(the farm, the farm best-priority searches): ``name@F`` is the preset scaled by F."""
    name, _, factor = spec.partition("@")
    base = load_scenario(name)
    return (base.scaled(int(factor)) if factor else base), base


def preset_task(spec: str, model: str, st: dict[str, Any]) -> dict[str, Any]:
    """The three tables on one preset, paired (the same replication seeds)."""
    config, search_on = preset_farm(spec)
    big = config.n_servers > 1_000
    n_epochs = st["epochs"][int(big)]
    window = Window.for_farm(config, n_epochs, pas_warmup=True)
    seeds = consecutive_seeds(10_000 + st["seed"], st["replications"])
    tables = {"pas": pas_table(config),
              "generalist": GeneralistPolicy(config, model=model).priority_table(),
              "best-priority": BestPriorityPolicy(search_on).priority_table()}  # fmt: skip
    est = paired(config, tables, window, seeds)
    row: dict[str, Any] = {"kind": "preset", "farm": spec, "n_servers": config.n_servers,
                           "epochs": n_epochs, "replications": st["replications"]}  # fmt: skip
    for who, e in est.items():
        row[who] = e.efficiency
    for ref, key in (("pas", "pas"), ("best-priority", "best")):
        row[f"vs_{key}_pct"], row[f"vs_{key}_ci95_pct"] = gain_pct(est, "generalist", ref)
    return row


def throughput(model: str, epochs: int) -> dict[str, Any]:
    """Decisions per CPU-second evaluating the generalist on paper-100, in both action modes."""
    config = load_scenario("paper-100")
    out: dict[str, Any] = {}
    reps, warm, pw = 16, 2_000, 500
    for mode in ("group", "server"):
        policy = GeneralistPolicy(config, mode, model=model)

        def run(n: int, mode: str = mode, policy: GeneralistPolicy = policy) -> None:
            window, seeds = Window(n, pw, warm), consecutive_seeds(0, reps)
            if mode == "group":
                measure(policy, config, window, seeds, action_mode=mode, method="vector")
            else:
                table = PriorityPolicy(config, table=policy.priority_table())
                measure(table, config, window, seeds, method="builtin")

        run(10)  # compiles the kernels first: a one-off cost, not the evaluation's
        t0 = time.process_time()
        run(epochs)
        cpu = time.process_time() - t0
        # the warm-up epochs are decisions too (PAS's in the env, the table's in the simulator)
        out[f"{mode}_decisions_per_cpu_s"] = reps * (epochs + warm + pw) / cpu
    return out


_TIMING = """
import json, time
t0, c0 = time.perf_counter(), time.process_time()
from serverfarm_gym.baselines.registry import make_policy
from serverfarm_gym.envs.scenarios import load_scenario
from serverfarm_gym.envs.server_farm import ServerFarmEnv
config = load_scenario("large-10k")
env = ServerFarmEnv(config, action_mode="group")
obs, _ = env.reset(seed=0)
mask = env.action_masks()
t1, c1 = time.perf_counter(), time.process_time()
policy = make_policy("generalist", config, "group", model=MODEL)
action, _ = policy.predict(obs, action_masks=mask, deterministic=True)
t2, c2 = time.perf_counter(), time.process_time()
print(json.dumps({"farm_and_env_s": t1 - t0, "policy_load_and_first_decision_s": t2 - t1,
                  "policy_load_and_first_decision_cpu_s": c2 - c1, "action": int(action)}))
"""


def time_to_policy(model: str) -> dict[str, Any]:
    """Load + first decision at 10,000 servers, in a fresh interpreter (imports included)."""
    code = _TIMING.replace("MODEL", repr(model))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=ROOT)  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def paired_gaps(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The model's gap minus ``--against``'s, farm by farm (percentage points): mean, 95%
    Student-t half-width, farms better / worse (by more than 1e-6 points). A difference of two
    models is resolved only where its interval excludes 0: their means alone move by a few
    thousandths of a point from one set of a few hundred farms to the next."""
    d = np.array([r["generalist_gap_pct"] - r["against_gap_pct"] for r in rows])
    half = float(mean_ci(d, 0.95)[1]) if len(d) > 1 else float("nan")
    return {"mean_pct_points": float(d.mean()), "ci95_pct_points": half,
            "better": int(np.sum(d < -1e-6)), "worse": int(np.sum(d > 1e-6))}  # fmt: skip


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for fam in ("sampled", "random"):
        small = [r for r in rows if r["kind"] == fam and "skipped" not in r]
        if not small:
            continue
        skipped = sum(r["kind"] == fam and "skipped" in r for r in rows)
        s: dict[str, Any] = {"farms": len(small), "skipped (no optimum)": skipped}
        for who in (*POLICIES, "polished", "against"):
            if f"{who}_gap_pct" not in small[0]:
                continue
            g = np.array([r[f"{who}_gap_pct"] for r in small])
            s[who] = {"mean_gap_pct": float(g.mean()), "worst_gap_pct": float(g.max())}
        if "polish_cpu_s" in small[0]:
            s["polished"]["cpu_s"] = float(sum(r["polish_cpu_s"] for r in small))
        v = np.array([r["generalist_vs_pas_pct"] for r in small])
        s["generalist"] |= {"share_at_least_pas": float(np.mean([r["generalist_at_least_pas"]
                                                                  for r in small])),
                            "mean_vs_pas_pct": float(v.mean()), "worst_vs_pas_pct": float(v.min())}  # fmt: skip
        if "against_gap_pct" in small[0]:
            s["against"]["share_at_least_pas"] = float(
                np.mean([r["against_at_least_pas"] for r in small])
            )
            s["generalist_minus_against"] = paired_gaps(small)
        out[fam] = s
    mid = [r for r in rows if r["kind"] == "mid"]
    if mid:
        v = np.array([r["vs_pas_pct"] for r in mid])
        hi = v + np.array([r["vs_pas_ci95_pct"] for r in mid])
        worst = mid[int(np.argmin(v))]
        out["mid"] = {"farms": len(mid), "mean_vs_pas_pct": float(v.mean()),
                      "mean_vs_pas_ci95_pct": float(mean_ci(v, 0.95)[1]) if len(v) > 1 else None,
                      "worst_vs_pas_pct": float(v.min()), "worst_farm": worst["farm"],
                      "below_pas": int(np.sum(hi < 0)), "share_not_below_pas": float(np.mean(hi >= 0))}  # fmt: skip
    out["presets"] = {r["farm"]: {k: v for k, v in r.items() if k not in ("kind", "farm")}
                      for r in rows if r["kind"] == "preset"}  # fmt: skip
    return out


def plot(rows: Sequence[dict[str, Any]], path: str | Path) -> None:
    from matplotlib.figure import Figure

    small = [r for r in rows if r["kind"] == "sampled" and "skipped" not in r]
    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    for who, label in (("pas", "PAS"), ("generalist", "generalist (network alone)"),
                       ("best-priority", "best-priority (search)")):  # fmt: skip
        g = np.sort([max(r[f"{who}_gap_pct"], 1e-4) for r in small])
        ax.step(g, np.arange(1, len(g) + 1) / max(len(g), 1), where="post", label=label)
    ax.set_xscale("log")
    ax.set_xlabel("gap to the exact optimum (%, 1e-4 = at the optimum)")
    ax.set_ylabel("share of held-out sampled farms")
    ax.legend()
    save_figure(fig, path)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = base_parser(NAME, "The generalist (network alone) against the optimum, PAS, best-priority")
    p.add_argument("--model", default=str(SHIPPED_MODEL), help="table network .npz file")
    p.add_argument(
        "--against",
        default=None,
        metavar="MODEL",
        help="also another model on the exact farms, paired per farm (--model's gap minus its)",
    )
    p.add_argument(
        "--n-farms",
        type=int,
        default=None,
        help="exact farms per family (100; 0: none)",
    )
    p.add_argument(
        "--n-mid",
        type=int,
        default=None,
        help="held-out mid-size farms against PAS, paired simulation (150; 0: none)",
    )
    p.add_argument(
        "--mid-seeds",
        choices=("test", "validation"),
        default="test",
        help="the mid-size farms' held-out range: MID_SEEDS (test) or MID_VALIDATION_SEEDS",
    )
    p.add_argument(
        "--exact-seeds",
        choices=tuple(EXACT_SEED_RANGES),
        default="test",
        help="the exact farms: EVAL_SEEDS and the random_farm test seeds 0.. (test), "
        "EXACT_VALIDATION_SEEDS and RANDOM_VALIDATION_SEEDS (validation), or the training "
        "seeds exact_tune reads, in its order (training: a tuned expert's fit)",
    )
    p.add_argument(
        "--polish",
        type=int,
        default=0,
        help="also the generalist's table polished on each exact farm by this many steps of "
        "exact gradient ascent (a per-farm search; 0: off)",
    )
    p.add_argument(
        "--presets", default=None, help="comma-separated, name@F = scaled by F; none: no presets"
    )
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    d = QUICK if a.quick else FULL
    presets = tuple(a.presets.split(",")) if a.presets else d["presets"]
    presets = () if presets == ("none",) else presets
    n = d["n_farms"] if a.n_farms is None else a.n_farms  # 0: no exact farms
    n_mid = d["n_mid"] if a.n_mid is None else a.n_mid
    if min(n, n_mid, a.polish) < 0:
        p.error("--n-farms/--n-mid/--polish: must be >= 0")
    for path in (a.model, a.against):  # fail now, with the file named, not in a worker
        if path is not None:
            load_weights(path)
    st = {"model": a.model, "n_farms": n, "presets": list(presets), "epochs": d["epochs"],
          "replications": d["replications"], "seed": a.seed, "quick": bool(a.quick),
          "n_mid": n_mid, "mid_seeds": a.mid_seeds, "exact_seeds": a.exact_seeds, "polish": a.polish, "against": a.against, "mid_epochs": d["mid_epochs"], "mid_replications": d["mid_replications"],
          "workers": resolve_workers(a.workers, a.quick)}  # fmt: skip
    tasks = [(c, fam, a.model, a.polish, a.against) for fam in ("sampled", "random")
             for c in exact_farms(n, fam, a.exact_seeds)]  # fmt: skip
    c0 = time.process_time()
    rows = parallel_map(exact_task, tasks, st["workers"])
    mids = mid_farms(n_mid, MID_VALIDATION_SEEDS if a.mid_seeds == "validation" else MID_SEEDS)
    rows += parallel_map(mid_task, [(c, a.model, st) for c in mids], st["workers"])
    rows += [preset_task(spec, a.model, st) for spec in presets]
    report = {"experiment": NAME, "summary": summarize(rows), "rows": rows,
              "throughput": throughput(a.model, 2_000 if a.quick else 20_000),
              "time_to_policy_10k": time_to_policy(a.model),
              "main_process_cpu_s": time.process_time() - c0, **metadata(argv, st, t0)}  # fmt: skip
    write_outputs(a.out, NAME, report, rows, lambda path: plot(rows, path), a.figure_dir)
    print(json.dumps({k: report[k] for k in ("summary", "throughput", "time_to_policy_10k")},
                     indent=1, default=float))  # fmt: skip
    return report


if __name__ == "__main__":
    main()
