"""Farms for the exact solvers: the :data:`REFERENCE` farms with exact optima computed by an
independent solver (:func:`reference_farm`), seeded random farms small enough to solve
(:func:`random_small_farm`), and wide farms of many groups and job types for the solvers' size
limits (:func:`wide_farm_dict`)."""

from __future__ import annotations

import numpy as np

from serverfarm_gym.envs.config import FarmConfig, farm_from_dict

# exact optimal efficiencies of the reference farms (independent solver, copied from the shared
# reference data; never read at run time)
REFERENCE = {
    "tiny": (
        [("slow", 2, 1.0, 2.0, 1.0, 3), ("fast", 2, 2.0, 5.0, 1.0, 3)],
        [("web", 1.5, ["slow", "fast"]), ("gpu", 1.0, ["fast"])],
        0.3289309341181227,
    ),
    "public-1": (
        [("g0", 2, 1.457, 4.805, 0.94, 1), ("g1", 1, 1.343, 3.192, 0.896, 2),
         ("g2", 2, 1.577, 1.095, 0.181, 2)],
        [("j0", 6.7136, ["g1", "g2"]), ("j1", 0.2403, ["g0", "g2"]), ("j2", 0.3085, ["g1"])],
        0.593175867673168,
    ),
    "public-2": (
        [("g0", 1, 0.758, 2.031, 1.257, 1), ("g1", 1, 0.925, 4.382, 1.349, 2),
         ("g2", 2, 0.686, 1.193, 0.285, 2)],
        [("j0", 1.3252, ["g0", "g1", "g2"])],
        0.26601006909497354,
    ),
    "public-3": (
        [("g0", 1, 0.888, 2.307, 1.163, 2), ("g1", 1, 2.228, 4.512, 1.073, 3)],
        [("j0", 0.7294, ["g0"]), ("j1", 0.0248, ["g0", "g1"]), ("j2", 1.1796, ["g1"])],
        0.35437184448997305,
    ),
    "speed-scaling": (
        [("dvfs", 2, [1.0, 1.6, 2.0], [2.0, 3.5, 5.5], 1.0, 3), ("fixed", 2, 1.5, 3.0, 1.2, 2)],
        [("a", 2.0, ["dvfs", "fixed"]), ("b", 0.8, ["dvfs"])],
        0.3624534239921697,
    ),
}  # fmt: skip


def reference_farm(name: str) -> FarmConfig:
    groups, jobs, _ = REFERENCE[name]
    return farm_from_dict(
        {
            "name": name,
            "groups": [
                {
                    "name": n,
                    "count": c,
                    "service_rate": mu,
                    "busy_power": e,
                    "idle_power": e0,
                    "buffer": b,
                }
                for n, c, mu, e, e0, b in groups
            ],
            "job_types": [{"name": n, "arrival_rate": r, "groups": g} for n, r, g in jobs],
        }
    )


def random_small_farm(seed: int, max_count: int = 3, max_buffer: int = 3) -> FarmConfig:
    """A seeded random farm: 1-3 groups (some with per-level speed scaling), 1-3 job types."""
    rng = np.random.default_rng(seed)
    K = int(rng.integers(1, 4))
    groups = []
    for k in range(K):
        B = int(rng.integers(1, max_buffer + 1))
        e0 = float(rng.uniform(0.0, 1.5))
        if rng.random() < 0.3:  # speed scaling: increasing rate and power per level
            mu = np.cumsum(rng.uniform(0.3, 1.5, B)).tolist()
            eps = (e0 + np.cumsum(rng.uniform(0.3, 2.0, B))).tolist()
        else:
            mu, eps = float(rng.uniform(0.5, 2.5)), e0 + float(rng.uniform(0.5, 4.0))
        groups.append(
            {"name": f"g{k}", "count": int(rng.integers(1, max_count + 1)), "service_rate": mu,
             "busy_power": eps, "idle_power": e0, "buffer": B}
        )  # fmt: skip
    J = int(rng.integers(1, 4))
    cap = sum(g["count"] * np.max(g["service_rate"]) for g in groups)
    w = rng.dirichlet(np.ones(J)) * rng.uniform(0.3, 1.3) * cap
    jobs = []
    for j in range(J):
        avail = [g["name"] for g in groups if rng.random() < 0.6] or [groups[j % K]["name"]]
        jobs.append({"name": f"j{j}", "arrival_rate": float(w[j]), "groups": avail})
    return farm_from_dict({"name": f"random-{seed}", "groups": groups, "job_types": jobs})


def wide_farm_dict(n_groups: int, n_types: int, groups_per_type: int) -> dict:
    """``n_groups`` single servers and ``n_types`` job types, type j on the groups j, j+1, ...
    (so at most ``n_groups`` distinct sets), at load 0.5."""
    groups = [
        {"name": f"g{k}", "count": 1, "service_rate": 1.0, "busy_power": 2.0 + 0.01 * (k % 5),
         "idle_power": 1.0, "buffer": 1}
        for k in range(n_groups)
    ]  # fmt: skip
    jobs = [
        {"name": f"j{j}", "arrival_rate": 0.5 * n_groups / n_types,
         "groups": [f"g{(j + i) % n_groups}" for i in range(groups_per_type)]}
        for j in range(n_types)
    ]  # fmt: skip
    return {"name": f"wide-{n_groups}x{n_types}", "groups": groups, "job_types": jobs}
