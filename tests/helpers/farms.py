"""Seeded random farms and states for the tests: :func:`random_scenario_dict` builds random
*valid* scenario dicts that exercise what :func:`serverfarm_gym.envs.scenarios.random_farm` does not (per-level
rate/power lists, prices, time-varying arrival rates, per-type general job sizes);
:func:`random_dyadic_farm` (efficiencies that tie exactly across groups) with
:func:`random_occupancy`; :func:`random_env_configs` for the env tests; :func:`pas_table`, the PAS
table written from its definition."""

from __future__ import annotations

from typing import Any

import numpy as np

from serverfarm_gym.envs.config import FarmConfig, farm_from_dict
from serverfarm_gym.envs.scenarios import random_farm

#: interval lengths whose integer multiples divide back exactly in binary floating point; the
#: simulator's interval-boundary arithmetic hangs for others (see test_simulator_invariants.py,
#: test_interval_boundaries_do_not_hang), so generic tests stay on these until that is fixed
SAFE_INTERVALS = (0.25, 0.5, 1.0, 2.0)


JOB_SIZES: tuple[dict[str, Any], ...] = (
    {"distribution": "exponential"},
    {"distribution": "deterministic"},
    {"distribution": "erlang", "k": 3},
    {"distribution": "hyperexponential", "scv": 5.0},
    {"distribution": "lognormal", "scv": 2.0},
    {"distribution": "pareto", "alpha": 2.5},
)


def pas_table(config: FarmConfig) -> np.ndarray:
    """PAS priority table: mu_k / (eps_k - eps0_k), the same at every level."""
    return np.repeat(config.group_efficiency[:, None], config.max_buffer + 1, axis=1)


def random_scenario_dict(
    seed: int,
    *,
    time_varying: bool | None = None,
    general_sizes: bool | None = None,
    per_level: bool | None = None,
) -> dict[str, Any]:
    """A seeded random valid scenario dict (1-3 groups, 1-3 job types, counts 1-4, buffers 1-3).

    ``None`` for a flag means "decide at random". Per-level lists use increasing rates and powers
    (speed scaling); time-varying scenarios give every job type a 2-3 interval schedule (one
    interval may have rate 0) and some groups a price schedule.
    """
    rng = np.random.default_rng(seed)
    if time_varying is None:
        time_varying = bool(rng.random() < 0.4)
    if general_sizes is None:
        general_sizes = bool(rng.random() < 0.5)
    if per_level is None:
        per_level = bool(rng.random() < 0.5)
    n_int = int(rng.integers(2, 4)) if time_varying else 1
    K, J = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    groups = []
    for k in range(K):
        buf = int(rng.integers(1, 4))
        eps0 = round(float(rng.uniform(0.0, 1.5)), 3)
        if per_level and rng.random() < 0.7:
            mu: Any = np.round(np.cumsum(rng.uniform(0.2, 1.5, buf)), 3).tolist()
            eps: Any = np.round(eps0 + np.cumsum(rng.uniform(0.2, 2.0, buf)), 3).tolist()
        else:
            mu = round(float(rng.uniform(0.3, 3.0)), 3)
            eps = round(eps0 + float(rng.uniform(0.2, 3.0)), 3)
        g: dict[str, Any] = {
            "name": f"g{k}",
            "count": int(rng.integers(1, 5)),
            "service_rate": mu,
            "busy_power": eps,
            "idle_power": eps0,
            "buffer": buf,
        }
        if time_varying and rng.random() < 0.5:
            g["price"] = np.round(rng.uniform(0.2, 2.0, n_int), 3).tolist()
        elif rng.random() < 0.3:
            g["price"] = round(float(rng.uniform(0.2, 2.0)), 3)
        groups.append(g)
    jobs = []
    for j in range(J):
        sub = [f"g{k}" for k in range(K) if rng.random() < 0.6] or [f"g{int(rng.integers(K))}"]
        if time_varying:
            rate: Any = np.round(rng.uniform(0.2, 3.0, n_int), 3).tolist()
            if rng.random() < 0.3:
                rate[int(rng.integers(n_int))] = 0.0
        else:
            rate = round(float(rng.uniform(0.2, 3.0)), 3)
        jt: dict[str, Any] = {"name": f"j{j}", "arrival_rate": rate, "groups": sub}
        if general_sizes and rng.random() < 0.5:
            jt["job_size"] = dict(JOB_SIZES[int(rng.integers(len(JOB_SIZES)))])
        jobs.append(jt)
    d: dict[str, Any] = {"name": f"rand-{seed}", "groups": groups, "job_types": jobs}
    if general_sizes:
        d["job_size"] = dict(JOB_SIZES[int(rng.integers(1, len(JOB_SIZES)))])
    if time_varying:
        d["interval_length"] = float(SAFE_INTERVALS[int(rng.integers(len(SAFE_INTERVALS)))])
    return d


def random_dyadic_farm(
    rng: np.random.Generator,
    n_groups: int | None = None,
    max_count: int = 4,
    max_buffer: int = 4,
    state_dependent: float = 0.0,
    n_types: int | None = None,
) -> FarmConfig:
    """A random farm whose efficiencies tie exactly across groups now and then.

    Rates and power differences are drawn from small dyadic sets so that mu/(eps - eps0) takes few,
    exactly representable values. ``state_dependent`` is the probability that a group gets
    non-decreasing per-level rates and powers instead of the on/off model.
    """
    K = int(n_groups or rng.integers(2, 6))
    groups = []
    for k in range(K):
        buf = int(rng.integers(1, max_buffer + 1))
        idle = float(rng.choice([0.0, 0.5, 1.0]))
        if rng.random() < state_dependent and buf > 1:
            mu = np.cumsum(rng.choice([0.25, 0.5, 1.0], size=buf))
            eps = idle + np.cumsum(rng.choice([0.25, 0.5, 1.0, 2.0], size=buf))
            mu_v, eps_v = [float(x) for x in mu], [float(x) for x in eps]
        else:
            mu_v = float(rng.choice([1.0, 2.0, 4.0]))
            eps_v = idle + float(rng.choice([1.0, 2.0, 4.0]))
        groups.append(
            {
                "name": f"g{k}",
                "count": int(rng.integers(1, max_count + 1)),
                "service_rate": mu_v,
                "busy_power": eps_v,
                "idle_power": idle,
                "buffer": buf,
            }
        )
    J = int(n_types or rng.integers(1, 4))
    types = []
    for j in range(J):
        sub = [g["name"] for g in groups if rng.random() < 0.6] or [
            groups[int(rng.integers(K))]["name"]
        ]
        types.append({"name": f"j{j}", "arrival_rate": float(rng.uniform(0.5, 3.0)), "groups": sub})
    return farm_from_dict({"name": "random", "groups": groups, "job_types": types})


def random_occupancy(rng: np.random.Generator, config: FarmConfig) -> np.ndarray:
    """int64[S] occupancies, biased towards full and empty servers (where rules matter)."""
    B = config.buffers[config.server_group]
    occ = rng.integers(0, B + 1)
    u = rng.random(config.n_servers)
    occ = np.where(u < 0.25, B, np.where(u < 0.45, 0, occ))
    return occ.astype(np.int64)


def random_env_configs() -> list[FarmConfig]:
    """Random farms for the env tests; the last two are time-varying with general job sizes."""
    return [random_farm(s) for s in range(4)] + [
        farm_from_dict(random_scenario_dict(s, time_varying=True, general_sizes=True))
        for s in (11, 12)
    ]
