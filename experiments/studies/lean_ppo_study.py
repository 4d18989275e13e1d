"""Masked PPO (``serverfarm_gym.agents.ppo.ppo``): which criterion learns better per step, what PAS
initialisation buys, and what the fast defaults reach on paper-100.

``criteria``: on small farms with an exact evaluation (tiny in server actions, pas-gap in group
actions), the discounted criterion with the farm-derived discount (``gamma="auto"``: a horizon
of 4 mean job durations) against the average-reward (differential, no discount) advantage,
several seeds each, the deterministic policy's exact efficiency (CTMC) after every update. Also
the starting efficiency of a random policy and of one cloned from PAS.

``grid``: every point of a JSON grid of ``PPOConfig`` fields (over ``SMALL_BASE``) on
exactly solved farms (presets, or ``rand-SEED`` for ``serverfarm_gym.envs.random_farm(SEED)``), random start or
PAS clone, the exact efficiency after every update (share of PAS's gap to the optimum closed).

``large``: a simulated farm (paper-100, large-10k): the best policy is selected during training
on its own seeds, then the final and the best policy are measured against PAS on other seeds with
common random numbers (the paired gap's interval), and the share of PAS's gap to the relaxation
bound closed. ``--set`` overrides any ``PPOConfig`` field.

    python -m experiments.studies.lean_ppo_study criteria
    python -m experiments.studies.lean_ppo_study grid --scenarios pas-gap:group --init pas \
        --grid '{"n_epochs":10,"batch_size":128,"horizon_durations":[1,2,8]}' --steps 81920
    python -m experiments.studies.lean_ppo_study large --scenario paper-100 --steps 1500000 \
        --set '{"horizon_durations":1,"learning_rate":1e-4,"pas_anchor":1.0,"critic_warmup":5}'

The BENCHMARKS.md tables ("Learned efficiency", "Criteria and PAS initialisation") list the exact
commands.
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


def _exact(trainer: Any) -> float:
    from serverfarm_gym.evaluation.efficiency import measure

    est = measure(
        trainer.predict_batch, trainer.config, action_mode=trainer.cfg.action_mode, method="exact"
    )
    if est is None:
        raise ValueError("scenario: not exactly solvable; use the 'large' study")
    return est.efficiency


def criteria(ns: argparse.Namespace) -> dict[str, Any]:
    from serverfarm_gym.agents.ppo.ppo import PPO
    from serverfarm_gym.envs.scenarios import load_scenario
    from serverfarm_gym.evaluation.efficiency import pas_efficiency
    from serverfarm_gym.evaluation.references import optimum_solution

    out: dict[str, Any] = {}
    for spec in ns.scenarios.split(","):
        scen, mode = spec.split(":")
        config = load_scenario(scen)
        pas = pas_efficiency(config).efficiency
        sol, _ = optimum_solution(config)
        opt = None if sol is None else float(sol.value)
        res: dict[str, Any] = {"pas": pas, "optimum": opt, "runs": []}
        for adv in ("discounted", "average"):
            for init in ("random", "pas"):
                for seed in range(ns.seeds):
                    kw = {"n_envs": 16, "n_steps": 128, "batch_size": 512, "n_epochs": 4,
                          # the settings of its BENCHMARKS.md table (defaults before 2026-12-02)
                          "horizon_durations": 4.0, "clone_smoothing": 0.0}  # fmt: skip
                    t = PPO(config, action_mode=mode, advantage=adv, seed=seed, **kw)
                    start = {"random": _exact(t)}
                    if init == "pas":
                        t.clone_pas(n_steps=256)
                        start["pas"] = _exact(t)
                    curve: list[tuple[int, float]] = []
                    c0 = time.process_time()
                    t.learn(ns.steps, callback=lambda tr, c=curve: c.append(
                        (tr.num_timesteps, _exact(tr))))  # fmt: skip
                    effs = np.array([e for _, e in curve])
                    run = {
                        "advantage": adv, "init": init, "seed": seed, "gamma": t.gamma,
                        "start": start, "final": effs[-1], "best": effs.max(),
                        "mean_last_quarter": effs[-max(1, len(effs) // 4):].mean(),
                        "curve": curve, "cpu_s": time.process_time() - c0,
                    }  # fmt: skip
                    res["runs"].append(run)
                    print(f"{spec} {adv:10s} init={init:6s} seed={seed} start={start} "
                          f"final={run['final']:.5f} best={run['best']:.5f} pas={pas:.5f} "
                          f"opt={opt} ({run['cpu_s']:.0f} CPU-s)", flush=True)  # fmt: skip
        out[spec] = res
    return out


SMALL_BASE = {"n_envs": 16, "n_steps": 128, "batch_size": 512, "n_epochs": 4}


def _grid_points(grid: str) -> list[dict[str, Any]]:
    """The cartesian product of a JSON ``{"field": [values, ...]}`` (a scalar: one value)."""
    import itertools

    spec = json.loads(grid)
    keys = list(spec)
    vals = [v if isinstance(v, list) else [v] for v in spec.values()]
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*vals)]


def grid(ns: argparse.Namespace) -> dict[str, Any]:
    """Every point of ``--grid`` (PPOConfig fields over SMALL_BASE) on every exactly
    solvable ``scenario:mode``, ``--seeds`` seeds, ``--init`` random or a PAS clone; the exact
    efficiency of the deterministic policy after every update, and the share of PAS's gap to
    the optimum closed (final, best, mean of the last quarter)."""
    from serverfarm_gym.agents.ppo.ppo import PPO
    from serverfarm_gym.envs.scenarios import load_scenario, random_farm
    from serverfarm_gym.evaluation.efficiency import pas_efficiency
    from serverfarm_gym.evaluation.references import optimum_solution

    out: dict[str, Any] = {}
    for spec in ns.scenarios.split(","):
        scen, mode = spec.split(":")
        config = random_farm(int(scen[5:])) if scen.startswith("rand-") else load_scenario(scen)
        pas = pas_efficiency(config).efficiency
        sol, _ = optimum_solution(config)
        opt = float(sol.value)

        def closed(e: float, pas: float = pas, opt: float = opt) -> float:
            return (e - pas) / (opt - pas) if opt > pas else float("nan")

        res: dict[str, Any] = {"pas": pas, "optimum": opt, "runs": []}
        for point in _grid_points(ns.grid):
            for seed in range(ns.seed0, ns.seed0 + ns.seeds):
                kw = SMALL_BASE | point
                t = PPO(config, action_mode=mode, seed=seed, **kw)
                c0 = time.process_time()
                clone = t.clone_pas(n_steps=ns.clone_steps) if ns.init == "pas" else {}
                start = _exact(t)
                curve: list[tuple[int, float]] = []
                t.learn(ns.steps, callback=lambda tr, c=curve: c.append(
                    (tr.num_timesteps, _exact(tr))))  # fmt: skip
                effs = np.array([e for _, e in curve])
                q = effs[-max(1, len(effs) // 4) :]
                run = {
                    "point": point, "seed": seed, "init": ns.init, "clone": clone,
                    "start": start, "final": effs[-1], "best": effs.max(), "last_q": q.mean(),
                    "closed_final": closed(effs[-1]), "closed_best": closed(effs.max()),
                    "closed_last_q": closed(q.mean()), "gap_opt_final_pct":
                    100 * (opt - effs[-1]) / opt, "curve": curve,
                    "cpu_s": time.process_time() - c0,
                }  # fmt: skip
                res["runs"].append(run)
                print(
                    f"{spec} {json.dumps(point)} init={ns.init} seed={seed} "
                    f"start={closed(start):+.2f} final={run['closed_final']:+.2f} "
                    f"best={run['closed_best']:+.2f} lastq={run['closed_last_q']:+.2f} "
                    f"(gap to opt {run['gap_opt_final_pct']:.3f}%, {run['cpu_s']:.0f} CPU-s)",
                    flush=True,
                )
        out[spec] = res
    return out


def large(ns: argparse.Namespace) -> dict[str, Any]:
    """Train on a simulated farm; every ``--eval-every`` rollouts a selection evaluation
    (``--select-reps`` x ``--eval-epochs``, seeds 8,000,000+) keeps the best policy; the final
    and the best policy are then measured against PAS on *other* seeds (``--final-reps`` x
    ``--final-epochs``, 7,000,000+, common random numbers): no selection bias in the reported
    paired gap. Also the share of PAS's gap to the relaxation bound closed."""
    import copy

    from serverfarm_gym.agents.ppo.agent import numpy_predictor
    from serverfarm_gym.agents.ppo.ppo import PPO
    from serverfarm_gym.baselines.registry import make_policy
    from serverfarm_gym.baselines.solvers.bounds import relaxation_bound
    from serverfarm_gym.envs.scenarios import load_scenario
    from serverfarm_gym.evaluation.efficiency import Window, consecutive_seeds, measure
    from serverfarm_gym.evaluation.stats import paired_gap_pct

    config = load_scenario(ns.scenario)
    mode = "group"
    kw = {"n_envs": 64, "n_steps": 256, "batch_size": ns.batch_size, "n_epochs": ns.n_epochs}
    kw |= json.loads(ns.set)
    t = PPO(config, action_mode=mode, advantage=ns.advantage, seed=ns.seed, **kw)
    sel = {"window": Window.for_farm(config, ns.eval_epochs, pas_warmup=True), "action_mode": mode,
           "seeds": consecutive_seeds(8_000_000, ns.select_reps), "method": "vector"}  # fmt: skip
    fin_ev = {"window": Window.for_farm(config, ns.final_epochs, pas_warmup=True),
              "action_mode": mode, "seeds": consecutive_seeds(7_000_000, ns.final_reps),
              "method": "vector"}  # fmt: skip
    pas_pol = make_policy("pas", config, mode)
    pas = measure(pas_pol, config, **fin_ev)
    pas_sel = measure(pas_pol, config, **sel).efficiency
    bound = float(relaxation_bound(config).efficiency)
    report: dict[str, Any] = {"settings": kw, "pas": pas.as_dict(), "bound": bound}
    if ns.init == "pas":
        report["clone"] = t.clone_pas(n_steps=256)
    best = {"eff": -1.0, "state": None, "timesteps": 0}
    curve: list[tuple[int, float]] = []

    def select(tr: PPO) -> None:
        if len(tr.history) % ns.eval_every:
            return
        e = measure(numpy_predictor(tr.policy), config, **sel).efficiency
        curve.append((tr.num_timesteps, e))
        if e > best["eff"]:
            best.update(
                eff=e, state=copy.deepcopy(tr.policy.state_dict()), timesteps=tr.num_timesteps
            )

    c0, w0 = time.process_time(), time.perf_counter()
    select(t)  # the start (PAS clone or random) competes too
    t.learn(ns.steps, callback=select)
    report["train_cpu_s"], report["train_wall_s"] = (
        time.process_time() - c0,
        time.perf_counter() - w0,
    )
    report["selection_curve"] = curve
    report["selection_pas"] = pas_sel
    for name in ("final", "best"):
        if name == "best":
            t.policy.load_state_dict(best["state"])
        est = measure(numpy_predictor(t.policy), config, **fin_ev)
        gap = paired_gap_pct(est.per_replication, pas.per_replication)
        report[name] = est.as_dict() | {
            "paired_gap_to_pas_pct": gap,
            # from the paired gap (PAS's own estimate is noisier than the difference)
            "bound_gap_closed": float(gap["mean"])
            / (100 * (bound - pas.efficiency) / pas.efficiency),
        }
    report["best"]["timesteps"] = best["timesteps"]
    report["gamma"] = t.gamma
    report["steps"] = t.num_timesteps
    report["train_efficiency_last"] = [h["efficiency"] for h in t.history[-5:]]
    print(json.dumps({k: v for k, v in report.items() if k != "selection_curve"}, default=float))
    for k, e in curve:
        print(f"  {k:>9,d} {100 * (e - pas_sel) / pas_sel:+.3f}% vs PAS (selection seeds)")
    return report


def main(argv: list[str] | None = None) -> dict[str, Any]:
    import torch

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="study", required=True)
    c = sub.add_parser("criteria")
    c.add_argument("--scenarios", default="tiny:server,pas-gap:group")
    c.add_argument("--steps", type=int, default=40_960)
    c.add_argument("--seeds", type=int, default=2)
    g = sub.add_parser("large")
    g.add_argument("--scenario", default="paper-100")
    g.add_argument("--steps", type=int, default=1_500_000)
    g.add_argument("--advantage", default="discounted")
    g.add_argument("--init", default="pas", choices=("pas", "random"))
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--eval-epochs", type=int, default=5_000)
    g.add_argument("--select-reps", type=int, default=32)
    g.add_argument("--eval-every", type=int, default=10, help="rollouts between selections")
    g.add_argument("--final-epochs", type=int, default=20_000)
    g.add_argument("--final-reps", type=int, default=64)
    g.add_argument("--batch-size", type=int, default=4096)
    g.add_argument("--n-epochs", type=int, default=4)
    g.add_argument("--set", default="{}", help="JSON of PPOConfig fields (override)")
    r = sub.add_parser("grid")
    r.add_argument("--scenarios", default="pas-gap:group,tiny:server")
    r.add_argument("--grid", default="{}", help='JSON {"field": [values]} over SMALL_BASE')
    r.add_argument("--init", default="random", choices=("pas", "random"))
    r.add_argument("--steps", type=int, default=40_960)
    r.add_argument("--seeds", type=int, default=2)
    r.add_argument("--seed0", type=int, default=0)
    r.add_argument("--clone-steps", type=int, default=256)
    for q in (c, g, r):
        q.add_argument("--json", default=None)
    ns = p.parse_args(argv)
    torch.set_num_threads(1)
    rep = {"criteria": criteria, "large": large, "grid": grid}[ns.study](ns)
    if ns.json:
        Path(ns.json).write_text(json.dumps(rep, indent=1, default=float) + "\n")
    return rep


if __name__ == "__main__":
    main()
