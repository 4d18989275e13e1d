"""Day-long evaluation of geo routing policies on the ``geo-us-eu`` preset (issue 5, docs/pdr.md).

    python experiments/geo_day.py                          # full run (~30-40 min on 2 cores)
    python experiments/geo_day.py --quick --out /tmp/geo   # CI-sized run (seconds)
    python experiments/geo_day.py --frontier docs/figures/pdr_frontier.png --frontier-only

Policies (names of ``baselines.registry``, plus ``ppo``):

* ``pas``: PAS over every server an ingress point may use (latency blind, price blind);
* ``pas-price``: price-aware PAS that follows the interval (``mu / ((eps - eps0) price)`` with the
  current interval's prices; ``PriceAwarePASPolicy(interval=None)``, rolled out through the env);
* ``pdr-pas``: the per-interval PDR plan (``baselines.pdr.solve_interval`` with its default
  weights, all 1) routes each arrival to a cluster at random with probability x_ij / r_i, PAS
  inside the cluster (``baselines.pdr_pas``);
* ``ppo``: a MaskablePPO agent (group action mode). ``--ppo PATH`` evaluates a saved model
  (``agents.ppo.PPOAgent.load``: a ``train.py`` run or the model this script saved earlier).
  Without it, one is trained here with sb3-contrib's MaskablePPO, ``objective="cost"``
  (reward: work minus eta x energy *cost*), a small budget (``--ppo-steps``) and a compressed
  day (``--ppo-interval-length`` time units per interval, so that training visits every interval
  many times; the observation is the same, the interval one-hot tells the agent the hour).

One replication simulates one day: the 24 intervals of ``interval_length`` time units, from an
empty farm at t = 0 (00 UTC; the transient from empty lasts a few mean service times, a few
time units out of 1440). Every policy is rolled out through :class:`envs.server_farm.ServerFarmEnv`
with ``predict(obs, action_masks=...)``; replication r uses the same seed for every policy
(common random numbers). We do not use ``evaluation.harness`` here because its window is counted
in decision epochs and it does not record where jobs were routed; both are needed (a window of
exactly one day, per-(ingress, cluster) counts for the latency).

Metrics per replication (mean and 95 % Student-t half-width over replications):

* ``energy_cost``: money over the day, the farm's price x PUE x IT energy (= the PDR energy cost);
* ``energy``: IT energy over the day (power unit x time unit; PUE not included);
* ``throughput``: work served per time unit; ``blocking``: lost arrivals / arrivals;
* ``network_cost``: sum over accepted jobs of network_cost_ij;
* ``network_latency``: mean delta_ij over accepted jobs (ms, exact from the routing counts);
* ``latency`` (**the mean latency**, ms): mean over accepted jobs of
  ``delta_ij + pi_j(xhat_j(t))``, where ``xhat_j(t)`` is the *realised* rate of jobs accepted by
  cluster j in interval t and pi_j the scenario's processing-delay model (M/M/1 in the cluster's
  utilisation, ``envs.geo.DelayModel``). This is the optimiser's L_ave evaluated at the routing the
  policy actually produced, so it compares directly with D_max. It is a *model*: the simulator's
  farm has no millisecond clock (its time unit is an abstract unit, a minute with
  ``interval_length`` 60). When a cluster's realised load reaches its raw service rate the model
  delay is infinite; such (interval, cluster) pairs are counted in ``saturated`` and the latency
  is then reported as null (JSON) / "inf".
* ``dmax_violations``: intervals whose latency exceeds D_max;
* ``sojourn``: the *simulated* mean sojourn time of accepted jobs (farm time units), by Little's
  law: the time integral of the number of jobs in the farm over the accepted jobs. The integral is
  measured exactly by a shadow simulator with the same seed and the same decisions, whose power
  of a server with n jobs is n (so its "energy" is the integral); the two are checked to stay in
  lock step at every decision.
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # runnable as a script from anywhere
    sys.path.insert(0, str(ROOT))

from baselines.pas import PASPolicy  # noqa: E402
from envs.config import FarmConfig, farm_from_dict  # noqa: E402
from envs.geo import GeoConfig, load_geo_scenario  # noqa: E402
from envs.scenarios import load_scenario  # noqa: E402
from envs.server_farm import ServerFarmEnv  # noqa: E402
from envs.simulator import FarmSimulator  # noqa: E402
from evaluation.stats import summarize  # noqa: E402

SCENARIO = "geo-us-eu"
DEFAULT_POLICIES = ("pas", "pas-price", "pdr-pas", "ppo")
#: action mode each policy is rolled out in (PPO learns the size-independent group encoding)
MODES = {"pas": "server", "pas-price": "server", "pdr-pas": "server", "ppo": "group"}
METRICS = (
    "energy_cost", "energy", "throughput", "blocking", "network_cost", "network_latency",
    "latency", "dmax_violations", "saturated", "sojourn", "cost_efficiency",
)  # fmt: skip
PER_INTERVAL = ("energy_cost", "throughput", "blocking", "network_latency", "latency")


# ---------------------------------------------------------------------------------------------
# scenarios
# ---------------------------------------------------------------------------------------------
def day_config(interval_length: float | None = None, scenario: str = SCENARIO) -> FarmConfig:
    """The farm of the geo scenario (``farm.geo`` set), optionally with shorter intervals."""
    geo = load_geo_scenario(scenario)
    if interval_length is not None:
        d = geo.to_dict()
        d["interval_length"] = float(interval_length)
        return load_scenario(d)
    return load_scenario(scenario)


def occupancy_config(config: FarmConfig) -> FarmConfig:
    """The same farm with power n at level n and idle power 0: its energy integral is the
    integral of the number of jobs in the farm. Service rates, buffers and arrivals are
    unchanged, so with the same seed and decisions it follows the same sample path."""
    d = config.to_dict()
    for g in d["groups"]:
        g["busy_power"] = [float(n) for n in range(1, g["buffer"] + 1)]
        g["idle_power"] = 0.0
        g["price"] = 1.0
    d["name"] = f"{config.name}-occupancy"
    return farm_from_dict(d)


# ---------------------------------------------------------------------------------------------
# policies
# ---------------------------------------------------------------------------------------------
def build_policy(name: str, config: FarmConfig, ppo_path: str | None = None) -> Any:
    """The policy ``name`` for ``config`` (``ppo`` loads ``ppo_path``)."""
    if name == "ppo":
        if not ppo_path:
            raise ValueError("ppo: no model path (pass --ppo PATH or let the script train one)")
        from agents.ppo import PPOAgent

        return PPOAgent.load(ppo_path)
    from baselines.registry import make_policy

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


def train_ppo(
    steps: int, interval_length: float, seed: int, path: Path, quick: bool = False
) -> Path:
    """Train MaskablePPO (group mode, objective "cost") on a compressed day; save model+sidecar."""
    import torch
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    from agents.ppo import write_sidecar

    torch.set_num_threads(1)  # small MLP: one thread is fastest, and the machine is shared
    train_cfg = day_config(interval_length)

    def make() -> Any:
        # the env's own reward (a guard here used to try an "ExpectedRewardWrapper" that never
        # existed; agents.wrappers.TrainingWrapper(reward="expected") is the one that does)
        return ServerFarmEnv(train_cfg, action_mode="group", objective="cost")

    venv = DummyVecEnv([make])
    n_steps = 256 if quick else 2048
    model = MaskablePPO(
        "MlpPolicy",
        venv,
        n_steps=n_steps,
        batch_size=64 if quick else 256,
        n_epochs=10,
        learning_rate=3e-4,
        gamma=0.99,
        gae_lambda=0.95,
        policy_kwargs={"net_arch": [64, 64]},
        seed=seed,
        device="cpu",
        verbose=0,
    )
    t0 = time.perf_counter()
    model.learn(total_timesteps=int(steps))
    path.parent.mkdir(parents=True, exist_ok=True)
    model.save(path)
    # the sidecar holds the *evaluation* farm (same spaces as the compressed training farm)
    write_sidecar(
        path,
        day_config(),
        "group",
        trained_by="experiments/geo_day.py",
        objective="cost",
        total_timesteps=int(steps),
        train_interval_length=float(interval_length),
        train_seconds=time.perf_counter() - t0,
    )
    return path


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
    snaps: list[tuple[Any, float]] = [(sim.stats(), shadow.energy)]
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
            snaps.append((sim.stats(), shadow.energy))
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
    snaps.append((sim.stats(), shadow.energy))
    if snap_t != list(range(T)):
        raise RuntimeError(f"interval bookkeeping: saw intervals {snap_t}, expected 0..{T - 1}")
    if not np.array_equal(shadow.occ, sim.occ):
        raise RuntimeError("the occupancy shadow left the sample path (occupancy differs)")
    per = [b[0] - a[0] for a, b in itertools.pairwise(snaps)]
    area = np.diff([s[1] for s in snaps])
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
    with np.errstate(invalid="ignore", divide="ignore"):
        lat_t = (net_t + proc_t) / jobs_t
        netlat_t = net_t / jobs_t
    jobs = jobs_t.sum()
    d_max = geo.d_max if geo.d_max is not None else math.inf
    out = {
        "energy_cost": float(raw["cost"].sum()),
        "energy": float(raw["energy"].sum()),
        "throughput": float(raw["work"].sum() / raw["time"].sum()),
        "blocking": float(raw["blocked"].sum() / max(raw["arrivals"].sum(), 1)),
        "network_cost": float((counts * geo.network_cost[None]).sum()),
        "network_latency": float(net_t.sum() / jobs),
        "latency": float((net_t.sum() + proc_t.sum()) / jobs),
        "dmax_violations": int((lat_t > d_max).sum()),
        "saturated": saturated,
        "sojourn": float(raw["area"].sum() / raw["accepted"].sum()),
        "cost_efficiency": float(raw["work"].sum() / raw["cost"].sum()),
        "invalid_actions": int(raw["invalid_actions"]),
        "seed": raw["seed"],
    }
    series = {
        "energy_cost": raw["cost"],
        "throughput": raw["work"] / raw["time"],
        "blocking": raw["blocked"] / np.maximum(raw["arrivals"], 1),
        "network_latency": netlat_t,
        "latency": lat_t,
    }
    share = counts.sum(axis=(0, 1)) / jobs
    return out, {k: np.asarray(v, dtype=float) for k, v in series.items()}, share


#: per-process cache: a policy (24 LPs for PDR+PAS, a torch model for PPO) is built once and
#: re-seeded by run_day for every replication
_CACHE: dict[tuple[Any, ...], tuple[FarmConfig, Any]] = {}


def cached_policy(
    name: str, ppo_path: str | None, interval_length: float | None
) -> tuple[FarmConfig, Any]:
    key = (name, ppo_path, interval_length)
    if key not in _CACHE:
        config = day_config(interval_length)
        _CACHE[key] = (config, build_policy(name, config, ppo_path))
    return _CACHE[key]


def _unit(args: tuple[str, int, int, str | None, float | None]) -> dict[str, Any]:
    """One (policy, replication): a pure function of its arguments (process-pool friendly)."""
    name, rep, seed, ppo_path, interval_length = args
    config, policy = cached_policy(name, ppo_path, interval_length)
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
# reporting
# ---------------------------------------------------------------------------------------------
def _finite_or_none(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def summarise(results: Sequence[dict[str, Any]], policies: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in policies:
        runs = sorted((r for r in results if r["policy"] == name), key=lambda r: r["replication"])
        entry: dict[str, Any] = {"mode": runs[0]["mode"]}
        for key in METRICS:
            vals = np.array([r["metrics"][key] for r in runs], dtype=float)
            if np.all(np.isfinite(vals)):
                entry[key] = summarize(vals)
            else:  # an infinite model latency in some replication: no interval to report
                entry[key] = {"mean": None, "ci95": None, "std": None, "n": len(vals)}
        entry["invalid_actions"] = int(sum(r["metrics"]["invalid_actions"] for r in runs))
        entry["per_interval"] = {
            k: [
                _finite_or_none(float(np.mean([r["series"][k][t] for r in runs])))
                for t in range(len(runs[0]["series"][k]))
            ]
            for k in PER_INTERVAL
        }
        entry["cluster_share"] = np.mean([r["cluster_share"] for r in runs], axis=0).tolist()
        entry["replications"] = [
            {**{k: _json_num(v) for k, v in r["metrics"].items()}, "wall_s": r["wall_s"]}
            for r in runs
        ]
        out[name] = entry
    return out


def _json_num(v: Any) -> Any:
    if isinstance(v, float):
        return _finite_or_none(v)
    return v


def pdr_plan(geo: GeoConfig, solutions: Sequence[Any] | None = None) -> dict[str, Any]:
    """The optimiser's own numbers for each interval (LP model: planned, not simulated)."""
    from baselines.pdr import solve_interval

    sols = list(solutions or [solve_interval(geo, t) for t in range(geo.n_intervals)])
    return {
        "weights": list(sols[0].weights),
        "latency": [s.latency for s in sols],
        "energy_cost": [s.energy_cost for s in sols],
        "network_cost": [s.network_cost for s in sols],
        "energy_cost_day": float(sum(s.energy_cost for s in sols)),
        "network_cost_day": float(sum(s.network_cost for s in sols)),
        "latency_day": float(
            sum(s.latency * geo.rates[s.interval].sum() for s in sols)
            / sum(geo.rates[s.interval].sum() for s in sols)
        ),
    }


def _fmt(e: dict[str, Any], digits: int = 4, scale: float = 1.0) -> str:
    if e["mean"] is None:
        return "inf"
    mean = e["mean"] * scale
    ci = e["ci95"]
    if ci is None:
        return f"{mean:.{digits}g}"
    return f"{mean:.{digits}g} ± {ci * scale:.2g}"


def markdown_table(report: dict[str, Any]) -> str:
    cols = [
        ("energy cost", "energy_cost", 5, 1.0),
        ("IT energy", "energy", 5, 1.0),
        ("throughput", "throughput", 5, 1.0),
        ("blocking %", "blocking", 3, 100.0),
        ("network cost", "network_cost", 4, 1.0),
        ("network lat. ms", "network_latency", 4, 1.0),
        ("mean latency ms", "latency", 4, 1.0),
        ("h > D_max", "dmax_violations", 3, 1.0),
        ("saturated", "saturated", 3, 1.0),
        ("sojourn", "sojourn", 4, 1.0),
        ("jobs / money", "cost_efficiency", 4, 1.0),
    ]
    head = "| policy | " + " | ".join(c[0] for c in cols) + " |"
    sep = "|---|" + "---:|" * len(cols)
    lines = [head, sep]
    for name, e in report["policies"].items():
        cells = [_fmt(e[key], d, s) for _, key, d, s in cols]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    s = report["settings"]
    lines.append("")
    lines.append(
        f"{s['scenario']}, one day = {s['n_intervals']} intervals x {s['interval_length']:g} "
        f"time units, {s['replications']} replications (mean ± 95 % CI half-width), "
        f"seed {s['seed']}. Energy cost and IT energy per day; throughput in jobs per time unit; "
        "mean latency = network delta_ij + modelled processing delay at the realised cluster "
        "load (ms), inf when a cluster's realised load reached its raw service rate in some "
        "interval (saturated = such cluster-intervals per day); h > D_max = intervals whose "
        "mean latency exceeds D_max; sojourn = simulated mean time in the farm (time units); "
        "jobs / money = work per unit of energy cost."
    )
    plan = report.get("pdr_plan")
    if plan:
        lines.append(
            f"PDR plan (LP model, not simulated): energy cost {plan['energy_cost_day']:.5g}, "
            f"network cost {plan['network_cost_day']:.4g}, demand-weighted L_ave "
            f"{plan['latency_day']:.4g} ms."
        )
    return "\n".join(lines) + "\n"


def plot_day(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for name, e in report["policies"].items():
        pi = e["per_interval"]
        hours = np.arange(len(pi["energy_cost"]))
        axes[0].plot(hours, pi["energy_cost"], marker=".", label=name)
        lat = np.array([np.nan if v is None else v for v in pi["latency"]], dtype=float)
        axes[1].plot(hours, lat, marker=".", label=name)
    d_max = report["settings"].get("d_max_ms")
    if d_max is not None:
        axes[1].axhline(d_max, ls="--", color="tab:red", lw=1, label=f"D_max = {d_max:g} ms")
    axes[0].set_xlabel("interval (UTC hour)")
    axes[0].set_ylabel("energy cost per interval")
    axes[1].set_xlabel("interval (UTC hour)")
    axes[1].set_ylabel("mean latency (ms, model)")
    axes[1].set_yscale("log")
    axes[0].legend(fontsize=8)
    axes[1].legend(fontsize=8)
    fig.suptitle(f"{report['settings']['scenario']}: one day, mean of replications", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_frontier_figure(path: Path, interval: int = 18, scenario: str = SCENARIO) -> Path:
    """Pareto frontier of one interval with the routing PDR+PAS uses (default weights) marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from baselines.pdr import pareto_frontier, solve_interval

    geo = load_geo_scenario(scenario)
    pts = pareto_frontier(geo, interval, n_points=15)
    chosen = solve_interval(geo, interval)
    lat = np.array([p.latency for p in pts])
    en = np.array([p.energy_cost for p in pts])
    net = np.array([p.network_cost for p in pts])
    fig, ax = plt.subplots(figsize=(6.0, 4.0))
    sc = ax.scatter(lat, en, c=net, cmap="viridis", s=22, edgecolors="k", linewidths=0.3, zorder=2)
    fig.colorbar(sc, ax=ax, label="network cost per interval")
    ax.scatter(
        [chosen.latency], [chosen.energy_cost], marker="*", s=160, color="tab:orange",
        edgecolors="k", zorder=3, label="PDR+PAS plan (weights 1, 1, 1)",
    )  # fmt: skip
    ax.axvline(geo.d_min, ls="--", color="tab:green", lw=1, label=f"D_min = {geo.d_min:g} ms")
    if geo.d_max is not None:
        ax.axvline(geo.d_max, ls="--", color="tab:red", lw=1, label=f"D_max = {geo.d_max:g} ms")
    ax.set_xlabel("average latency L_ave (ms, exact delay curve)")
    ax.set_ylabel("energy cost per interval")
    ax.set_title(f"PDR Pareto frontier, {geo.name}, interval {interval} (UTC hour)", fontsize=10)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="Day-long evaluation of PAS, price-aware PAS, PDR+PAS and PPO on geo-us-eu.",
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
    p.add_argument("--workers", type=int, default=1, help="processes for the replications")
    p.add_argument(
        "--frontier", default=None, help="also write the one-interval Pareto figure here"
    )
    p.add_argument("--frontier-interval", type=int, default=18)
    p.add_argument("--frontier-only", action="store_true", help="only write --frontier")
    return p  # fmt: skip


def main(argv: Sequence[str] | None = None) -> dict[str, Any] | None:
    a = build_parser().parse_args(argv)
    if a.frontier:
        print(f"frontier: {plot_frontier_figure(Path(a.frontier), a.frontier_interval)}")
        if a.frontier_only:
            return None
    elif a.frontier_only:
        raise SystemExit("--frontier-only needs --frontier PATH")
    reps = a.replications if a.replications is not None else (2 if a.quick else 5)
    if reps < 2:
        raise SystemExit("--replications: need at least 2 for a confidence interval")
    ivl = a.interval_length if a.interval_length is not None else (1.0 if a.quick else None)
    policies = [s.strip() for s in a.policies.split(",") if s.strip()]
    unknown = sorted(set(policies) - set(MODES))
    if unknown:
        raise SystemExit(f"--policies: unknown {unknown}; choose from {sorted(MODES)}")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    config = day_config(ivl)
    geo = config.geo

    ppo_path = a.ppo
    ppo_info: dict[str, Any] | None = None
    if "ppo" in policies:
        if ppo_path is None:
            steps = a.ppo_steps if a.ppo_steps is not None else (1024 if a.quick else 300_000)
            t1 = time.perf_counter()
            ppo_path = str(
                train_ppo(steps, a.ppo_interval_length, a.seed, out / "ppo_model.zip", a.quick)
            )
            ppo_info = {
                "trained_here": True, "path": ppo_path, "total_timesteps": steps,
                "train_interval_length": a.ppo_interval_length, "objective": "cost",
                "action_mode": "group", "train_seconds": time.perf_counter() - t1,
            }  # fmt: skip
            print(f"ppo: trained {steps} steps in {ppo_info['train_seconds']:.0f} s -> {ppo_path}")
        else:
            ppo_info = {"trained_here": False, "path": ppo_path}

    seeds = replication_seeds(a.seed, reps)
    units = [(name, r, s, ppo_path, ivl) for name in policies for r, s in enumerate(seeds)]
    if a.workers > 1:
        import multiprocessing as mp

        with ProcessPoolExecutor(a.workers, mp_context=mp.get_context("spawn")) as ex:
            results = list(ex.map(_unit, units))
    else:
        results = [_unit(u) for u in units]
    plan_solutions = None
    if "pdr-pas" in policies and a.workers <= 1:  # reuse the LPs the policy already solved
        plan_solutions = list(cached_policy("pdr-pas", ppo_path, ivl)[1].solutions.values())
    report = {
        "settings": {
            "scenario": geo.name,
            "n_intervals": geo.n_intervals,
            "interval_length": float(config.interval_length),
            "replications": reps,
            "seed": a.seed,
            "seeds": seeds,
            "quick": bool(a.quick),
            "d_min_ms": geo.d_min,
            "d_max_ms": geo.d_max,
            "confidence": 0.95,
            "interval": "Student-t over replications",
            "common_random_numbers": True,
            "clusters": list(geo.cluster_names),
        },
        "definitions": {
            "latency": "mean over accepted jobs of delta_ij + pi_j(realised accepted rate of "
            "cluster j in the interval), ms; pi_j = the scenario's processing-delay model",
            "sojourn": "simulated mean time in the farm of accepted jobs (farm time units), "
            "Little's law with the exact integral of the number of jobs",
            "energy_cost": "price x PUE x IT energy over the day (the PDR energy cost)",
            "energy": "IT energy over the day (no PUE)",
            "dmax_violations": "intervals whose latency exceeds D_max",
            "saturated": "(interval, cluster) pairs whose realised load reached the raw "
            "service rate (model delay infinite)",
        },
        "ppo": ppo_info,
        "pdr_plan": pdr_plan(geo, plan_solutions),
        "policies": summarise(results, policies),
        "wall_time_s": time.perf_counter() - t0,
    }
    from evaluation.report import to_json

    (out / "geo_day.json").write_text(to_json(report))
    table = markdown_table(report)
    (out / "geo_day.md").write_text(table)
    plot_day(report, out / "geo_day.png")
    print(table)
    print(f"wrote {out / 'geo_day.json'}, {out / 'geo_day.md'}, {out / 'geo_day.png'}")
    return report


if __name__ == "__main__":
    main()
