"""Experiment 4: what does the no-blocking rule cost?

    nice python experiments/blocking_constraint.py --figure-dir docs/figures
    python experiments/blocking_constraint.py --quick --out /tmp/e4

A job may be blocked only when every available server is full (the paper's fairness rule). The
relaxation behind the asymptotic results may leave an inefficient server idle and block instead;
an admissible policy must use it once the efficient servers are full. On a two-group farm

* ``good``: 2 servers, mu = 2, idle power 1, busy power 3 (effective efficiency
  mu / (eps - eps0) = 1), buffer 2;
* ``bad``: 2 servers, mu = 1, idle power 1, busy power 1 + 1 / e_bad (effective efficiency
  ``e_bad``), buffer 2;
* one job type that may use both groups, Poisson rate rho x 6 (6 = total service capacity),

we compare, all **exact** (exponential sizes):

* ``opt_admissible``: the optimum over admissible policies (``serverfarm_gym.baselines.solvers.efficiency_optimum.solve_pi``);
* ``pas``: PAS (per-server CTMC, ``serverfarm_gym.baselines.solvers.ctmc``; simulated with the evaluation harness where
  that chain is too large);
* ``opt_free``: the optimum when blocking is allowed in every state (:func:`solve_free_blocking`:
  ratio policy iteration on the same aggregated chain with "block" added to every action set);
* ``never_bad``: the farm's efficiency when the bad group is never used (its servers stay idle
  and still draw idle power; the admissible optimum of the farm with the job type restricted to
  ``good``) -- one particular blocking policy, so ``never_bad <= opt_free``;
* ``bound``: the relaxation upper bound ``serverfarm_gym.baselines.solvers.bounds.relaxation_bound`` (via
  ``serverfarm_gym.evaluation.policy_report.reference_values``; recorded as null with the reason if unavailable).

``cost_of_no_blocking_pct = 100 (opt_free - opt_admissible) / opt_free`` is the price of the
fairness rule itself; ``100 (bound - opt_admissible) / bound`` is what the relaxation overstates.

Three sweeps: (a) the bad group's efficiency e_bad at rho = 0.8 (the good group alone has
capacity 4 < 4.8: it is overloaded); (b) the load rho at e_bad = 0.2; (c) the farm scaled by
f in 1, 2, 3, 4, 6, 8, 10, 15 (up to ``--max-scale``; R_k and lambda times f) at e_bad = 0.2 and rho = 0.8: does the cost
vanish with size like PAS's deviation from the relaxation is supposed to?
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

from experiments.common import (  # noqa: E402
    base_parser,
    durations_to_epochs,
    metadata,
    parallel_map,
    resolve_workers,
    save_figure,
    write_outputs,
)
from serverfarm_gym.baselines.solvers.ctmc import GeneratorSolver, evaluate_policy, n_full_states  # noqa: E402
from serverfarm_gym.baselines.solvers.efficiency_optimum import (  # noqa: E402
    AggregatedSpace,
    OptimumSolution,
    solve_pi,
)
from serverfarm_gym.envs.config import FarmConfig, farm_from_dict  # noqa: E402
from serverfarm_gym.evaluation import evaluate, reference_values  # noqa: E402
from serverfarm_gym.evaluation.stats import shortfall_pct  # noqa: E402

NAME = "blocking_constraint"
CAPACITY = 6.0  # 2 x 2 + 2 x 1
E_BAD_FIXED = 0.2
RHO_FIXED = 0.8

FULL = {"e_bad": [0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.85, 1.0],
        "rho": [0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.2, 1.4],
        "max_scale": 15, "replications": 10, "horizon": 500_000}  # fmt: skip
QUICK = {"e_bad": [0.1, 0.5, 1.0], "rho": [0.4, 0.8], "max_scale": 2,
         "replications": 3, "horizon": 20_000}  # fmt: skip
#: scale factors of sweep (c), up to --max-scale (f = 15: 60 servers, 246,016 aggregated states)
SCALES = (1, 2, 3, 4, 6, 8, 10, 15)
#: exact PAS on the per-server chain up to this many states (3^(4f): f <= 2), else simulated
CTMC_MAX = 10_000


def two_group_farm(e_bad: float, rho: float, scale: int = 1, use_bad: bool = True) -> FarmConfig:
    """The experiment's farm (see the module doc); ``use_bad=False`` restricts the job type to
    the good group (the bad servers stay, idle)."""
    if not e_bad > 0:
        raise ValueError(f"e_bad: the bad group's efficiency must be > 0, got {e_bad}")
    f = int(scale)
    d = {
        "name": f"blocking-e{e_bad:g}-rho{rho:g}" + (f"-x{f}" if f > 1 else ""),
        "groups": [
            {"name": "good", "count": 2 * f, "service_rate": 2.0, "busy_power": 3.0,
             "idle_power": 1.0, "buffer": 2},
            {"name": "bad", "count": 2 * f, "service_rate": 1.0, "busy_power": 1.0 + 1.0 / e_bad,
             "idle_power": 1.0, "buffer": 2},
        ],
        "job_types": [{"name": "job", "arrival_rate": rho * CAPACITY * f,
                       "groups": ["good", "bad"] if use_bad else ["good"]}],
    }  # fmt: skip
    return farm_from_dict(d)


# ---------------------------------------------------------------------------------------------
# optimum with free blocking
# ---------------------------------------------------------------------------------------------
def solve_free_blocking(
    config: FarmConfig | AggregatedSpace,
    *,
    start: OptimumSolution | None = None,
    max_states: int = 300_000,
    rtol: float = 1e-11,
    max_iter: int = 200,
) -> tuple[float, np.ndarray, int]:
    """Exact optimum when a job may be blocked in any state: (efficiency, int64[N, J] actions
    with -1 = block, iterations).

    Ratio policy iteration on the aggregated chain of :mod:`serverfarm_gym.baselines.solvers.efficiency_optimum` with "block" added
    to every (state, type) action set: evaluate (one sparse LU gives the stationary law and, with
    eta its efficiency, the relative values h of ``W - eta P``), then improve greedily -- taking
    action a moves the chain to ``next(m, a)``, blocking leaves it in m, so the best decision
    maximises ``h(next(m, a))`` against ``h(m)``. Starts from the admissible optimum (``start``,
    solved here if not given), so the value can only go up from it.
    """
    sol = start if start is not None else solve_pi(config, max_states=max_states)
    space = sol.space
    act = np.array(sol.actions, dtype=np.int64)
    N, A = space.n_states, space.n_actions
    rows = np.arange(N)
    for it in range(1, max_iter + 1):
        lu = GeneratorSolver(space.generator(act))
        pi = lu.stationary()
        eta = float(pi @ space.W) / float(pi @ space.P)
        h = lu.relative_values(space.W - eta * space.P)
        hn = np.where(space.next_state >= 0, h[np.maximum(space.next_state, 0)], -np.inf)
        tol = rtol * max(float(np.abs(h).max()), 1e-300)
        changed = 0
        for j in range(space.config.n_job_types):
            sc = np.concatenate([np.where(space.valid[:, j, :], hn, -np.inf), h[:, None]], axis=1)
            cur = np.where(act[:, j] >= 0, sc[rows, np.maximum(act[:, j], 0)], h)
            best = np.argmax(sc, axis=1)
            sw = np.nonzero(sc[rows, best] - cur > tol)[0]
            act[sw, j] = np.where(best[sw] == A, -1, best[sw])
            changed += int(sw.size)
        if changed == 0:
            return eta, act, it
    raise RuntimeError(f"free-blocking policy iteration did not converge in {max_iter} steps")


# ---------------------------------------------------------------------------------------------
# one point
# ---------------------------------------------------------------------------------------------
def point_task(task: tuple[str, float, float, int, dict[str, Any]]) -> dict[str, Any]:
    """All quantities for one (e_bad, rho, scale)."""
    sweep, e_bad, rho, scale, st = task
    t0 = time.perf_counter()
    c = two_group_farm(e_bad, rho, scale)
    adm = solve_pi(c)
    free, act, _ = solve_free_blocking(c, start=adm)
    never = solve_pi(two_group_farm(e_bad, rho, scale, use_bad=False)).value
    # share of (state-weighted) arrivals the free-blocking optimum blocks while a server is free
    space = adm.space
    pi = GeneratorSolver(space.generator(act)).stationary()
    vac = space.has_vacancy[:, 0]
    voluntary = float(pi[(act[:, 0] < 0) & vac].sum())
    row: dict[str, Any] = {
        "sweep": sweep, "e_bad": e_bad, "rho": rho, "scale": scale, "n_servers": c.n_servers,
        "agg_states": space.n_states, "opt_admissible": float(adm.value), "opt_free": free,
        "never_bad": float(never), "free_voluntary_blocking": voluntary,
    }  # fmt: skip
    if n_full_states(c) <= CTMC_MAX:
        res = evaluate_policy(c, "pas")
        row.update(pas=res.efficiency, pas_ci95=0.0, pas_method="ctmc")
    else:
        horizon = durations_to_epochs(c, 100, st["horizon"])
        rep = evaluate(c, ["pas"], replications=st["replications"], horizon=horizon,
                       warmup=durations_to_epochs(c, 50, horizon // 10), seed=st["seed"],
                       workers=1, compute_optimum=False, progress=False)  # fmt: skip
        e = rep["policies"]["pas"]["efficiency"]
        row.update(pas=e["mean"], pas_ci95=e["ci95"], pas_method="simulation")
    refs = reference_values(c, compute_optimum=False)
    row["bound"] = refs["upper_bound"]["efficiency"] if refs["upper_bound"] else None
    row["bound_reason"] = refs["upper_bound_reason"]
    row["cost_of_no_blocking_pct"] = shortfall_pct(row["opt_admissible"], free)
    row["pas_gap_to_opt_pct"] = shortfall_pct(row["pas"], row["opt_admissible"])
    row["pas_gap_to_free_pct"] = shortfall_pct(row["pas"], free)
    row["opt_gap_to_bound_pct"] = shortfall_pct(row["opt_admissible"], row["bound"])
    row["pas_gap_to_bound_pct"] = shortfall_pct(row["pas"], row["bound"])
    row["free_gap_to_bound_pct"] = shortfall_pct(free, row["bound"])
    row["seconds"] = time.perf_counter() - t0
    return row


# ---------------------------------------------------------------------------------------------
def plot(rows: Sequence[dict[str, Any]], path: str | Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(13, 3.8))
    specs = (("e_bad", "e_bad", f"efficiency of the bad group (rho = {RHO_FIXED})"),
             ("rho", "rho", f"load rho (e_bad = {E_BAD_FIXED})"),
             ("scale", "n_servers", f"servers (e_bad = {E_BAD_FIXED}, rho = {RHO_FIXED})"))  # fmt: skip
    for i, (sweep, x, label) in enumerate(specs):
        ax = fig.add_subplot(1, 3, i + 1)
        pts = sorted((r for r in rows if r["sweep"] == sweep), key=lambda r: r[x])
        if not pts:
            continue
        xs = [r[x] for r in pts]
        if any(r["bound"] is not None for r in pts):
            ax.plot(xs, [r["bound"] for r in pts], "k--", lw=1.2, label="relaxation bound")
        ax.plot(xs, [r["opt_free"] for r in pts], "-", marker="^", ms=4,
                label="optimum, blocking allowed")  # fmt: skip
        ax.plot(xs, [r["opt_admissible"] for r in pts], "-", marker="o", ms=4,
                label="optimum, no-blocking rule")  # fmt: skip
        ax.errorbar(xs, [r["pas"] for r in pts], yerr=[r["pas_ci95"] or 0.0 for r in pts],
                    fmt=":", marker="s", ms=3, capsize=2, label="PAS")  # fmt: skip
        ax.plot(xs, [r["never_bad"] for r in pts], color="0.6", lw=1, label="never use bad")
        ax.set_xlabel(label)
        ax.set_ylabel("efficiency")
        ax.grid(alpha=0.3)
        if i == 0:
            ax.legend(fontsize=7)
    save_figure(fig, path)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = base_parser(NAME, "Cost of the no-blocking rule vs the relaxation (experiment 4)")
    p.add_argument("--max-scale", type=int, default=None, help="sweep (c) up to f (15; quick 2)")
    p.add_argument("--replications", type=int, default=None, help="simulated PAS: 10 (quick 3)")
    p.add_argument("--horizon", type=int, default=None, help="simulated PAS: epochs (500000)")
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    d = QUICK if a.quick else FULL
    st = {
        "e_bad": d["e_bad"], "rho": d["rho"], "max_scale": a.max_scale or d["max_scale"],
        "replications": a.replications or d["replications"], "horizon": a.horizon or d["horizon"],
        "seed": a.seed, "quick": bool(a.quick), "workers": resolve_workers(a.workers, a.quick),
        "e_bad_fixed": E_BAD_FIXED, "rho_fixed": RHO_FIXED, "ctmc_max_states": CTMC_MAX,
    }  # fmt: skip
    tasks = [("e_bad", e, RHO_FIXED, 1, st) for e in st["e_bad"]]
    tasks += [("rho", E_BAD_FIXED, r, 1, st) for r in st["rho"]]
    scales = [f for f in SCALES if f <= st["max_scale"]]
    tasks += [("scale", E_BAD_FIXED, RHO_FIXED, f, st) for f in scales]
    rows = parallel_map(point_task, tasks[::-1], st["workers"])[::-1]  # large scales first
    report = {
        "experiment": NAME,
        "question": "How much efficiency does the rule 'block only when every available server "
        "is full' cost, compared with blocking freely and with the relaxation bound?",
        "farm": two_group_farm(E_BAD_FIXED, RHO_FIXED).to_dict(),
        "summary": summarize(rows),
        "points": rows,
        **metadata(argv, st, t0),
    }
    write_outputs(a.out, NAME, report, rows, lambda path: plot(rows, path), a.figure_dir)
    for r in rows:
        print(f"{r['sweep']:6s} e_bad={r['e_bad']:<5g} rho={r['rho']:<4g} S={r['n_servers']:<3d} "
              f"adm={r['opt_admissible']:.5f} free={r['opt_free']:.5f} pas={r['pas']:.5f} "
              f"bound={r['bound'] if r['bound'] is None else round(r['bound'], 5)} "
              f"cost={r['cost_of_no_blocking_pct']:.2f}%")  # fmt: skip
    return report


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Largest cost of the rule per sweep, and where it is zero (no voluntary blocking pays)."""
    out: dict[str, Any] = {}
    for sweep in ("e_bad", "rho", "scale"):
        pts = [r for r in rows if r["sweep"] == sweep]
        if not pts:
            continue
        worst = max(pts, key=lambda r: r["cost_of_no_blocking_pct"])
        out[sweep] = {
            "max_cost_of_no_blocking_pct": worst["cost_of_no_blocking_pct"],
            "at": {"e_bad": worst["e_bad"], "rho": worst["rho"], "scale": worst["scale"]},
            "points_with_cost_above_0.1pct": sum(
                1 for r in pts if r["cost_of_no_blocking_pct"] > 0.1
            ),
            "max_pas_gap_to_opt_pct": max(r["pas_gap_to_opt_pct"] for r in pts),
        }
    return out


if __name__ == "__main__":
    main()
