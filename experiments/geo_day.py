"""Day-long evaluation of geo routing policies on the ``geo-us-eu`` preset (docs/pdr.md).

    python experiments/geo_day.py --workers 2              # full run (~40 min on 2 cores)
    python experiments/geo_day.py --quick --out /tmp/geo   # CI-sized run (seconds)
    python experiments/geo_day.py --frontier docs/figures/pdr_frontier.png --frontier-only

Policies (names of ``serverfarm_gym.baselines.registry``, plus ``pdr-pas-cost`` and ``ppo``):

* ``pas``: PAS over every server an ingress point may use (latency blind, price blind);
* ``pas-price``: price-aware PAS that follows the interval (``mu / ((eps - eps0) price)`` with the
  current interval's prices; ``PriceAwarePASPolicy(interval=None)``, rolled out through the env);
* ``pdr-pas``: the per-interval PDR plan (``serverfarm_gym.baselines.solvers.pdr.solve_interval`` with its default
  weights, all 1: latency-weighted) routes each arrival to a cluster at random with probability
  x_ij / r_i, PAS inside the cluster (``serverfarm_gym.baselines.pdr_pas``);
* ``pdr-pas-cost``: the same dispatcher with a cost-oriented plan: weights energy 1, network 1,
  performance 1e-3 (a tie-break, so that the plan is Pareto optimal), and the epsilon constraint
  L_ave <= D_max (1 - ``--cost-margin``): the cheapest plan that keeps a latency margin below
  D_max (the planning model's delay is not the farm's, the margin absorbs the difference);
* ``ppo``: a MaskablePPO agent (group action mode). ``--ppo PATH`` evaluates a saved model
  (``serverfarm_gym.agents.ppo.PPOAgent.load``: a ``train.py`` run or the model this script saved earlier).
  Without it, one is trained here with sb3-contrib's MaskablePPO, ``objective="cost"``
  (reward: work minus eta x energy *cost*), a small budget (``--ppo-steps``) and a compressed
  day (``--ppo-interval-length`` time units per interval, so that training visits every interval
  many times; the observation is the same, the interval one-hot tells the agent the hour).

One replication simulates one day: the 24 intervals of ``interval_length`` time units, from an
empty farm at t = 0 (00 UTC; the transient from empty lasts a few mean service times, a few
time units out of 1440). Every policy is rolled out through :class:`serverfarm_gym.envs.server_farm.ServerFarmEnv`
with ``predict(obs, action_masks=...)``; replication r uses the same seed for every policy
(common random numbers). We do not use ``serverfarm_gym.evaluation.policy_report`` here because its window is counted
in decision epochs and it does not record where jobs were routed; both are needed (a window of
exactly one day, per-(ingress, cluster) counts for the latency).

Metrics per replication (mean and 95 % Student-t half-width over replications):

* ``energy_cost``: money over the day, the farm's price x PUE x IT energy (= the PDR energy cost);
* ``energy``: IT energy over the day (power unit x time unit; PUE not included);
* ``network_cost``: sum over accepted jobs of network_cost_ij; ``total_cost`` = energy + network;
* ``jobs_per_money``: work served per unit of total money (energy + network cost);
  ``jobs_per_energy_money``: per unit of energy cost alone (the farm's ``objective="cost"``);
* ``throughput``: work served per time unit; ``blocking``: lost arrivals / arrivals;
* ``network_latency``: mean delta_ij over accepted jobs (ms, exact from the routing counts);
* ``latency`` (**the simulated mean latency**, ms): mean over accepted jobs of delta_ij (the link
  the job took) plus the job's *simulated* sojourn in cluster j in ms. The sojourn comes from
  Little's law per cluster and interval: the sum of the sojourns of the jobs a cluster accepted
  in an interval is the time integral of its number of jobs (exact up to the jobs that straddle
  an interval boundary, a few mean service times out of ``interval_length``). The integral is
  measured exactly by a shadow simulator with the same seed and the same decisions, whose power
  of a server with n jobs is n (so its "energy" is the integral of the number of jobs) and whose
  price is cluster j's ms per time unit (so its "cost" is the ms-weighted integral); the two are
  checked to stay in lock step at every decision. Per-job sojourns are not sampled (the simulator
  does not track individual jobs), so this is the per-interval *mean* of the per-job latency.
  **Unit conversion** (*assumed*): the farm's time unit is abstract, the scenario's delays are in
  ms. A job alone on cluster j's fastest server takes 1 / mu_max,j time units, which the planning
  model calls ``base_ms`` (its delay of an unloaded cluster); so one time unit at cluster j is
  ``base_ms_j x mu_max,j`` ms (:func:`ms_per_time_unit`). Queueing and processor sharing in
  the farm then stretch the sojourn as the simulation says, not as the M/M/1 curve says;
* ``over_dmax``: intervals whose simulated mean latency exceeds D_max;
* ``latency_model``: the planning model's latency at the realised loads, delta_ij +
  pi_j(xhat_j(t)), xhat_j(t) the realised rate of jobs accepted by cluster j in interval t (the
  optimiser's L_ave evaluated at the routing the policy produced); infinite when a realised load
  reaches the raw service rate (the M/M/1 pole; counted in ``saturated``, reported as null /
  "inf"); ``over_dmax_model``: intervals where it exceeds D_max;
* ``sojourn``: the simulated mean sojourn time of accepted jobs (farm time units, Little's law).
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # runnable as a script from anywhere
    sys.path.insert(0, str(ROOT))

from experiments.geo_farm import (  # noqa: E402
    SCENARIO,
    day_config,
    ms_per_time_unit,
    occupancy_config,
    train_ppo,
)
from experiments.geo_report import (  # noqa: E402
    PER_INTERVAL,
    markdown_table,
    pdr_plan,
    plot_day,
    plot_frontier_figure,
    summarise,
)
from serverfarm_gym.baselines.pas import PASPolicy  # noqa: E402
from serverfarm_gym.envs.config import FarmConfig  # noqa: E402
from serverfarm_gym.envs.geo import GeoConfig  # noqa: E402
from serverfarm_gym.envs.scenarios import load_geo_scenario  # noqa: E402
from serverfarm_gym.envs.server_farm import ServerFarmEnv  # noqa: E402
from serverfarm_gym.envs.simulator import FarmSimulator  # noqa: E402

PROG = "experiments/geo_day.py"
DEFAULT_POLICIES = ("pas", "pas-price", "pdr-pas", "pdr-pas-cost", "ppo")
#: action mode each policy is rolled out in (PPO learns the size-independent group encoding)
MODES = {
    "pas": "server", "pas-price": "server", "pdr-pas": "server", "pdr-pas-cost": "server",
    "ppo": "group",
}  # fmt: skip
#: weights of the cost-oriented PDR plan (performance: a tie-break only)
COST_WEIGHTS = {"energy": 1.0, "network": 1.0, "performance": 1e-3}
DEFAULT_COST_MARGIN = 0.1


# ---------------------------------------------------------------------------------------------
# policies
# ---------------------------------------------------------------------------------------------
def cost_constraints(geo: GeoConfig, margin: float) -> dict[str, float]:
    """Epsilon constraint of the cost-oriented plan: L_ave <= D_max (1 - margin)."""
    if geo.d_max is None:
        return {}
    return {"latency": float(geo.d_max) * (1.0 - float(margin))}


def build_policy(
    name: str,
    config: FarmConfig,
    ppo_path: str | None = None,
    cost_margin: float = DEFAULT_COST_MARGIN,
) -> Any:
    """The policy ``name`` for ``config`` (``ppo`` loads ``ppo_path``)."""
    if name == "ppo":
        if not ppo_path:
            raise ValueError("ppo: no model path (pass --ppo PATH or let the script train one)")
        from serverfarm_gym.agents.ppo import PPOAgent

        # the registry's loader: refuses a model whose spaces do not fit this farm, naming both
        return PPOAgent.from_spec(ppo_path, config, "group")
    from serverfarm_gym.baselines.registry import make_policy

    if name == "pdr-pas-cost":
        return make_policy(
            "pdr-pas",
            config,
            action_mode=MODES[name],
            weights=COST_WEIGHTS,
            eps_constraints=cost_constraints(config.geo, cost_margin),
        )
    return make_policy(name, config, action_mode=MODES[name])


def policy_seed(seed: int) -> int:
    """Seed of a randomised policy's own generator in a replication (independent of the farm's)."""
    return int(np.random.SeedSequence(int(seed), spawn_key=(1,)).generate_state(1)[0])


def replication_seeds(seed: int, replications: int) -> list[int]:
    """Common random numbers: replication r has the same seed for every policy."""
    return [
        int(np.random.SeedSequence(int(seed), spawn_key=(r,)).generate_state(1, np.uint64)[0] >> 1)
        for r in range(replications)
    ]


# ---------------------------------------------------------------------------------------------
# one day
# ---------------------------------------------------------------------------------------------
def run_day(policy: Any, config: FarmConfig, seed: int, mode: str) -> dict[str, Any]:
    """Roll ``policy`` out over one day; raw per-interval measurements of the replication."""
    geo: GeoConfig = config.geo
    T, m, n = geo.n_intervals, geo.n_ingress, geo.n_clusters
    L = float(config.interval_length)
    day_end = T * L
    cluster_of_group = geo.cluster_of_farm_group()
    cluster_of_server = cluster_of_group[config.server_group]
    env = ServerFarmEnv(config, action_mode=mode, reward_eta=0.0, objective="cost")
    shadow = FarmSimulator(occupancy_config(config), seed=int(seed))
    if callable(getattr(policy, "reset", None)) and hasattr(policy, "rng"):
        policy.reset(seed=policy_seed(seed))
    fallback = PASPolicy(config, mode)
    obs, _ = env.reset(seed=int(seed))
    sim = env.sim
    shadow.next_epoch()
    counts = np.zeros((T, m, n), dtype=np.int64)
    snaps: list[tuple[Any, float, float]] = [(sim.stats(), shadow.energy, shadow.cost)]
    snap_t = [0]
    invalid = 0
    act_rows = np.repeat(np.arange(config.n_groups), config.buffers)
    act_cols = np.concatenate([np.arange(g.buffer) for g in config.groups])
    cur = 0
    while True:
        t_now = sim.time
        if t_now >= day_end:
            break
        iv = sim.interval
        if iv != cur:  # first decision of a new interval: close the previous one
            snaps.append((sim.stats(), shadow.energy, shadow.cost))
            snap_t.append(iv)
            cur = iv
        if shadow.time != t_now:
            raise RuntimeError("the occupancy shadow left the sample path (time differs)")
        mask = env.action_masks()
        a = int(np.asarray(policy.predict(obs, action_masks=mask, deterministic=True)[0]))
        if not (0 <= a < len(mask) and mask[a]):
            invalid += 1  # executed where PAS would send it (as the env's fallback does)
            a = int(fallback.predict(obs, action_masks=mask)[0])
        # the server the env will use: group-mode action (k, b) = smallest-index server of
        # group k at level b (ServerFarmEnv.step)
        k_b = (int(act_rows[a]), int(act_cols[a])) if mode == "group" else None
        server = a if k_b is None else sim.server_at_level(*k_b)
        i = sim.pending_job_type
        counts[iv, i, cluster_of_server[server]] += 1
        shadow.assign(server)
        obs, _, _, _, _ = env.step(a)
        shadow.next_epoch()
    snaps.append((sim.stats(), shadow.energy, shadow.cost))
    if snap_t != list(range(T)):
        raise RuntimeError(f"interval bookkeeping: saw intervals {snap_t}, expected 0..{T - 1}")
    if not np.array_equal(shadow.occ, sim.occ):
        raise RuntimeError("the occupancy shadow left the sample path (occupancy differs)")
    per = [b[0] - a[0] for a, b in itertools.pairwise(snaps)]
    area = np.diff([s[1] for s in snaps])
    area_ms = np.diff([s[2] for s in snaps])
    return {
        "seed": int(seed),
        "counts": counts,
        "time": np.array([p.time for p in per]),
        "work": np.array([p.work for p in per]),
        "energy": np.array([p.energy for p in per]),
        "cost": np.array([p.cost for p in per]),
        "arrivals": np.array([int(p.arrivals.sum()) for p in per]),
        "blocked": np.array([int(p.blocked.sum()) for p in per]),
        "accepted": np.array([int(p.accepted.sum()) for p in per]),
        "area": area,
        "area_ms": area_ms,
        "invalid_actions": invalid,
    }


def day_metrics(
    raw: dict[str, Any], geo: GeoConfig
) -> tuple[dict[str, Any], dict[str, np.ndarray], np.ndarray]:
    """(scalar metrics, per-interval series, share of accepted jobs per cluster) of a
    replication (definitions in the module doc)."""
    counts = raw["counts"].astype(np.float64)  # [T, m, n]
    acc_tn = counts.sum(axis=1)  # [T, n] jobs accepted per cluster
    xhat = acc_tn / raw["time"][:, None]  # realised accepted rate per cluster
    rho = xhat / geo.raw_capacities[None, :]
    # the scenario's delay model at the realised load; infinite once the load reaches the raw
    # service rate (the M/M/1 curve's pole)
    pi = np.array(
        [
            [
                float(c.processing_delay.delay(xhat[t, j], c.raw_capacity))
                if rho[t, j] < 1.0
                else math.inf
                for j, c in enumerate(geo.clusters)
            ]
            for t in range(xhat.shape[0])
        ]
    )
    used = acc_tn > 0
    saturated = int((~np.isfinite(pi) & used).sum())
    jobs_t = counts.sum(axis=(1, 2))
    net_t = (counts * geo.latency[None]).sum(axis=(1, 2))
    proc_t = np.where(used, acc_tn * np.where(np.isfinite(pi), pi, 0.0), 0.0).sum(axis=1)
    proc_t = np.where((~np.isfinite(pi) & used).any(axis=1), np.inf, proc_t)
    # simulated: the sum of the jobs' sojourns in ms is the ms-weighted occupancy integral
    sim_t = raw["area_ms"]
    with np.errstate(invalid="ignore", divide="ignore"):
        model_t = (net_t + proc_t) / jobs_t
        lat_t = (net_t + sim_t) / jobs_t
        netlat_t = net_t / jobs_t
    jobs = jobs_t.sum()
    d_max = geo.d_max if geo.d_max is not None else math.inf
    network_t = (counts * geo.network_cost[None]).sum(axis=(1, 2))
    energy_cost, network_cost = float(raw["cost"].sum()), float(network_t.sum())
    work = float(raw["work"].sum())
    out = {
        "energy_cost": energy_cost,
        "energy": float(raw["energy"].sum()),
        "network_cost": network_cost,
        "total_cost": energy_cost + network_cost,
        "throughput": work / float(raw["time"].sum()),
        "blocking": float(raw["blocked"].sum() / max(raw["arrivals"].sum(), 1)),
        "network_latency": float(net_t.sum() / jobs),
        "latency": float((net_t.sum() + sim_t.sum()) / jobs),
        "over_dmax": int((lat_t > d_max).sum()),
        "latency_model": float((net_t.sum() + proc_t.sum()) / jobs),
        "over_dmax_model": int((model_t > d_max).sum()),
        "saturated": saturated,
        "sojourn": float(raw["area"].sum() / raw["accepted"].sum()),
        "jobs_per_money": work / (energy_cost + network_cost),
        "jobs_per_energy_money": work / energy_cost,
        "invalid_actions": int(raw["invalid_actions"]),
        "seed": raw["seed"],
    }
    series = {
        "energy_cost": raw["cost"],
        "network_cost": network_t,
        "throughput": raw["work"] / raw["time"],
        "blocking": raw["blocked"] / np.maximum(raw["arrivals"], 1),
        "network_latency": netlat_t,
        "latency": lat_t,
        "latency_model": model_t,
    }
    assert set(series) == set(PER_INTERVAL)
    share = counts.sum(axis=(0, 1)) / jobs
    return out, {k: np.asarray(v, dtype=float) for k, v in series.items()}, share


#: per-process cache: a policy (24 LPs for PDR+PAS, a torch model for PPO) is built once and
#: re-seeded by run_day for every replication
_CACHE: dict[tuple[Any, ...], tuple[FarmConfig, Any]] = {}


def cached_policy(
    name: str, ppo_path: str | None, interval_length: float | None, cost_margin: float
) -> tuple[FarmConfig, Any]:
    key = (name, ppo_path, interval_length, cost_margin)
    if key not in _CACHE:
        config = day_config(interval_length)
        _CACHE[key] = (config, build_policy(name, config, ppo_path, cost_margin))
    return _CACHE[key]


def _unit(args: tuple[str, int, int, str | None, float | None, float]) -> dict[str, Any]:
    """One (policy, replication): a pure function of its arguments (process-pool friendly)."""
    name, rep, seed, ppo_path, interval_length, cost_margin = args
    config, policy = cached_policy(name, ppo_path, interval_length, cost_margin)
    mode = getattr(policy, "action_mode", MODES.get(name, "server"))
    t0 = time.perf_counter()
    raw = run_day(policy, config, seed, mode)
    metrics, series, share = day_metrics(raw, config.geo)
    return {
        "policy": name,
        "mode": mode,
        "replication": rep,
        "metrics": metrics,
        "series": {k: v.tolist() for k, v in series.items()},
        "cluster_share": share.tolist(),
        "wall_s": time.perf_counter() - t0,
    }


# ---------------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------------
class UsageError(Exception):
    """Bad command-line input: ``main`` prints ``PROG: error: <message>`` and exits 2."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Day-long evaluation of PAS, price-aware PAS, PDR+PAS (latency-weighted and "
        "cost-oriented) and PPO on geo-us-eu.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--out", default="results/geo_day", help="output directory")
    p.add_argument(
        "--quick", action="store_true", help="CI-sized run: 1-unit intervals, 2 reps, tiny PPO"
    )
    p.add_argument("--replications", type=int, default=None, help="default 5 (quick: 2)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--policies", default=",".join(DEFAULT_POLICIES), help="comma-separated")
    p.add_argument(
        "--ppo", default=None, help="saved MaskablePPO model to evaluate (else train one)"
    )
    p.add_argument(
        "--ppo-steps", type=int, default=None, help="training steps (default 300000; quick 1024)"
    )
    p.add_argument(
        "--ppo-interval-length",
        type=float,
        default=6.0,
        help="time units per interval when training",
    )
    p.add_argument("--interval-length", type=float, default=None, help="override (quick: 1.0)")
    p.add_argument(
        "--cost-margin",
        type=float,
        default=DEFAULT_COST_MARGIN,
        help="pdr-pas-cost plans with L_ave <= D_max (1 - margin)",
    )
    p.add_argument("--workers", type=int, default=1, help="processes for the replications")
    p.add_argument(
        "--frontier", default=None, help="also write the one-interval Pareto figure here"
    )
    p.add_argument("--frontier-interval", type=int, default=18)
    p.add_argument("--frontier-only", action="store_true", help="only write --frontier")
    return p  # fmt: skip


def _check_writable_dir(option: str, directory: Path) -> None:
    """Create ``directory`` and write a probe file in it, before any long computation."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".probe-", dir=directory)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise UsageError(f"{option}: cannot write to {directory} ({e.strerror or e})") from None


def _check_ppo_model(path: str, config: FarmConfig) -> None:
    """Load the model (and its sidecar) now: it must exist and fit the day's farm."""
    if not Path(path).exists() and not Path(path).with_suffix(".zip").exists():
        raise UsageError(f"--ppo: no model at {path}")
    try:
        build_policy("ppo", config, path)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UsageError(f"--ppo: cannot load {path}: {e}") from None


def _validated(a: argparse.Namespace) -> dict[str, Any]:
    """Every option checked before any work; returns the derived settings."""
    if a.quick and a.interval_length is None:
        a.interval_length = 1.0
    for opt, v in (("--interval-length", a.interval_length),
                   ("--ppo-interval-length", a.ppo_interval_length)):  # fmt: skip
        if v is not None and not (math.isfinite(v) and v > 0):
            raise UsageError(f"{opt}: must be a positive number of time units, got {v:g}")
    reps = a.replications if a.replications is not None else (2 if a.quick else 5)
    if reps < 2:
        raise UsageError(f"--replications: need at least 2 for a confidence interval, got {reps}")
    if a.workers < 1:
        raise UsageError(f"--workers: must be >= 1, got {a.workers}")
    if a.ppo_steps is not None and a.ppo_steps < 1:
        raise UsageError(f"--ppo-steps: must be >= 1, got {a.ppo_steps}")
    if not (math.isfinite(a.cost_margin) and 0.0 <= a.cost_margin < 1.0):
        raise UsageError(f"--cost-margin: must be in [0, 1), got {a.cost_margin:g}")
    policies = [s.strip() for s in a.policies.split(",") if s.strip()]
    unknown = sorted(set(policies) - set(MODES))
    if unknown or not policies:
        raise UsageError(f"--policies: unknown {unknown}; choose from {sorted(MODES)}")
    if a.frontier_only and not a.frontier:
        raise UsageError("--frontier-only: needs --frontier PATH")
    geo = load_geo_scenario(SCENARIO)
    if not 0 <= a.frontier_interval < geo.n_intervals:
        raise UsageError(
            f"--frontier-interval: {SCENARIO} has intervals 0..{geo.n_intervals - 1}, "
            f"got {a.frontier_interval}"
        )
    if a.frontier:
        _check_writable_dir("--frontier", Path(a.frontier).parent)
    config = day_config(a.interval_length)
    if not a.frontier_only:
        _check_writable_dir("--out", Path(a.out))
        if "ppo" in policies and a.ppo is not None:
            _check_ppo_model(a.ppo, config)
        if "pdr-pas-cost" in policies:
            from serverfarm_gym.baselines.solvers.pdr import PDRInfeasibleError

            try:
                cached_policy("pdr-pas-cost", None, a.interval_length, a.cost_margin)
            except PDRInfeasibleError as e:
                raise UsageError(f"--cost-margin: {a.cost_margin:g} is infeasible: {e}") from None
    return {"reps": reps, "policies": policies, "config": config}


def main(argv: Sequence[str] | None = None) -> dict[str, Any] | None:
    a = build_parser().parse_args(argv)
    try:
        checked = _validated(a)
    except UsageError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    if a.frontier:
        geo0 = load_geo_scenario(SCENARIO)
        marks = frontier_marks(geo0, a.frontier_interval, a.cost_margin)
        path = plot_frontier_figure(Path(a.frontier), a.frontier_interval, SCENARIO, marks)
        print(f"frontier: {path}")
        if a.frontier_only:
            return None
    return run(a, checked["reps"], checked["policies"], checked["config"])


def frontier_marks(geo: GeoConfig, interval: int, cost_margin: float) -> list[tuple[str, Any]]:
    """The routings of pdr-pas and pdr-pas-cost in ``interval`` (labels for the figure)."""
    from serverfarm_gym.baselines.solvers.pdr import solve_interval

    cons = cost_constraints(geo, cost_margin)
    bound = f", L_ave <= {cons['latency']:g} ms" if cons else ""
    return [
        ("pdr-pas plan (weights 1, 1, 1)", solve_interval(geo, interval)),
        (
            f"pdr-pas-cost plan (weights 1, 1, 0.001{bound})",
            solve_interval(geo, interval, weights=COST_WEIGHTS, eps_constraints=cons),
        ),
    ]


#: what each reported metric means (copied into every report, next to the numbers)
DEFINITIONS = {
    "latency": "simulated: mean over accepted jobs of delta_ij + the job's sojourn in "
    "cluster j (Little's law per cluster and interval, exact occupancy integral) x "
    "ms_per_time_unit[j], ms",
    "latency_model": "mean over accepted jobs of delta_ij + pi_j(realised accepted rate "
    "of cluster j in the interval), ms; pi_j = the scenario's processing-delay model",
    "ms_per_time_unit": "base_ms_j x fastest single-job service rate of cluster j "
    "(assumed: an unloaded job takes base_ms)",
    "sojourn": "simulated mean time in the farm of accepted jobs (farm time units), "
    "Little's law with the exact integral of the number of jobs",
    "energy_cost": "price x PUE x IT energy over the day (the PDR energy cost)",
    "energy": "IT energy over the day (no PUE)",
    "total_cost": "energy_cost + network_cost",
    "jobs_per_money": "work / (energy_cost + network_cost)",
    "jobs_per_energy_money": "work / energy_cost",
    "over_dmax": "intervals whose simulated mean latency exceeds D_max",
    "over_dmax_model": "intervals whose model latency exceeds D_max",
    "saturated": "(interval, cluster) pairs whose realised load reached the raw "
    "service rate (model delay infinite)",
}


def ppo_model(
    a: argparse.Namespace, policies: list[str], out: Path
) -> tuple[str | None, dict[str, Any] | None]:
    """(path of the PPO model to evaluate, what the report says about it); trains one if needed."""
    if "ppo" not in policies:
        return a.ppo, None
    if a.ppo is not None:
        return a.ppo, {"trained_here": False, "path": a.ppo}
    steps = a.ppo_steps if a.ppo_steps is not None else (1024 if a.quick else 300_000)
    t1 = time.perf_counter()
    ppo_path = str(train_ppo(steps, a.ppo_interval_length, a.seed, out / "ppo_model.zip", a.quick))
    ppo_info = {
        "trained_here": True, "path": ppo_path, "total_timesteps": steps,
        "train_interval_length": a.ppo_interval_length, "objective": "cost",
        "action_mode": "group", "train_seconds": time.perf_counter() - t1,
    }  # fmt: skip
    print(f"ppo: trained {steps} steps in {ppo_info['train_seconds']:.0f} s -> {ppo_path}")
    return ppo_path, ppo_info


def run_day_units(units: list[tuple], workers: int) -> list[dict[str, Any]]:
    """Every (policy, replication) day, in a process pool when ``workers > 1``."""
    if workers > 1:
        import multiprocessing as mp

        with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as ex:
            return list(ex.map(_unit, units))
    return [_unit(u) for u in units]


def run_settings(
    a: argparse.Namespace, reps: int, seeds: list[int], config: FarmConfig
) -> dict[str, Any]:
    """The report's ``settings`` block: what the run used."""
    geo = config.geo
    return {
        "scenario": geo.name,
        "n_intervals": geo.n_intervals,
        "interval_length": float(config.interval_length),
        "replications": reps,
        "seed": a.seed,
        "seeds": seeds,
        "quick": bool(a.quick),
        "d_min_ms": geo.d_min,
        "d_max_ms": geo.d_max,
        "cost_margin": a.cost_margin,
        "cost_weights": COST_WEIGHTS,
        "ms_per_time_unit": ms_per_time_unit(geo).tolist(),
        "confidence": 0.95,
        "interval": "Student-t over replications",
        "common_random_numbers": True,
        "clusters": list(geo.cluster_names),
    }


def write_day_report(report: dict[str, Any], out: Path) -> None:
    """geo_day.json, geo_day.md (the table, also printed) and geo_day.png under ``out``."""
    from serverfarm_gym.evaluation.outputs import atomic_write, to_json

    atomic_write(out / "geo_day.json", to_json(report))
    table = markdown_table(report)
    atomic_write(out / "geo_day.md", table)
    plot_day(report, out / "geo_day.png")
    print(table)
    print(f"wrote {out / 'geo_day.json'}, {out / 'geo_day.md'}, {out / 'geo_day.png'}")


def run(
    a: argparse.Namespace, reps: int, policies: list[str], config: FarmConfig
) -> dict[str, Any]:
    """The day-long evaluation of ``policies`` (options already validated)."""
    ivl = a.interval_length
    out = Path(a.out)
    t0 = time.perf_counter()
    geo = config.geo
    ppo_path, ppo_info = ppo_model(a, policies, out)
    seeds = replication_seeds(a.seed, reps)
    units = [
        (name, r, s, ppo_path, ivl, a.cost_margin) for name in policies for r, s in enumerate(seeds)
    ]
    results = run_day_units(units, a.workers)
    plans = {
        name: pdr_plan(
            geo, list(cached_policy(name, None, ivl, a.cost_margin)[1].solutions.values())
        )
        for name in ("pdr-pas", "pdr-pas-cost")
        if name in policies
    }
    report = {
        "settings": run_settings(a, reps, seeds, config),
        "definitions": DEFINITIONS,
        "ppo": ppo_info,
        "pdr_plans": plans,
        "policies": summarise(results, policies),
        "wall_time_s": time.perf_counter() - t0,
    }
    write_day_report(report, out)
    return report


if __name__ == "__main__":
    main()
