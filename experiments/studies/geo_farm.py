"""The geo day's farms (``experiments/studies/geo_day.py``): the preset as a farm (optionally with shorter
intervals), the occupancy shadow that measures the jobs' sojourns, the ms-per-time-unit
conversion of the simulated latency, and the small PPO agent the script trains on a compressed day.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from serverfarm_gym.envs.config import FarmConfig, farm_from_dict
from serverfarm_gym.envs.geo import GeoConfig
from serverfarm_gym.envs.scenarios import load_geo_scenario, load_scenario
from serverfarm_gym.envs.server_farm import ServerFarmEnv

SCENARIO = "geo-us-eu"


def day_config(interval_length: float | None = None, scenario: str = SCENARIO) -> FarmConfig:
    """The farm of the geo scenario (``farm.geo`` set), optionally with shorter intervals."""
    geo = load_geo_scenario(scenario)
    if interval_length is not None:
        d = geo.to_dict()
        d["interval_length"] = float(interval_length)
        return load_scenario(d)
    return load_scenario(scenario)


def ms_per_time_unit(geo: GeoConfig) -> np.ndarray:
    """float64[n]: ms per farm time unit at each cluster, ``base_ms_j x mu_max,j`` (*assumed*: a
    job alone on the cluster's fastest server, 1 / mu_max,j time units, takes the planning
    model's unloaded delay ``base_ms_j``)."""
    mu_max = np.array([max(g.service_rate[0] for g in c.groups) for c in geo.clusters])
    return np.asarray(geo.base_delays, dtype=np.float64) * mu_max


def occupancy_config(config: FarmConfig) -> FarmConfig:
    """The same farm with power n at level n, idle power 0 and, as price, the cluster's ms per
    time unit: its energy integral is the integral of the number of jobs in the farm, its cost
    integral the same weighted by ms per time unit (the sum of the jobs' sojourns in ms, by
    Little's law). Service rates, buffers and arrivals are unchanged, so with the same seed and
    decisions it follows the same sample path."""
    geo: GeoConfig = config.geo
    scale = ms_per_time_unit(geo)[geo.cluster_of_farm_group()]
    d = config.to_dict()
    for g, ms in zip(d["groups"], scale, strict=True):
        g["busy_power"] = [float(n) for n in range(1, g["buffer"] + 1)]
        g["idle_power"] = 0.0
        g["price"] = float(ms)
    d["name"] = f"{config.name}-occupancy"
    return farm_from_dict(d)


def train_ppo(
    steps: int, interval_length: float, seed: int, path: Path, quick: bool = False
) -> Path:
    """Train MaskablePPO (group mode, objective "cost") on a compressed day; save model+sidecar."""
    import torch
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    from serverfarm_gym.agents.ppo import write_sidecar

    torch.set_num_threads(1)  # small MLP: one thread is fastest, and the machine is shared
    train_cfg = day_config(interval_length)

    def make() -> Any:
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
        trained_by="experiments/studies/geo_day.py",
        objective="cost",
        total_timesteps=int(steps),
        train_interval_length=float(interval_length),
        train_seconds=time.perf_counter() - t0,
    )
    return path
