"""A seeded random-farm generator in the style of the paper's numerical section (the wide farm
distribution the generalist trains on is :mod:`serverfarm_gym.envs.farm_sampler`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from serverfarm_gym.envs.config import FarmConfig, farm_from_dict
from serverfarm_gym.envs.validation import ConfigError

__all__ = ["random_farm"]


def random_farm(
    seed: int,
    n_groups: int | tuple[int, int] = (2, 4),
    n_job_types: int | tuple[int, int] = (1, 3),
    servers_per_group: int | tuple[int, int] = (1, 3),
    buffer: int | tuple[int, int] = (1, 3),
    load: float | tuple[float, float] = (0.3, 1.2),
    service_rate: tuple[float, float] = (0.5, 2.5),
    idle_power: tuple[float, float] = (0.1, 1.5),
    extra_power: tuple[float, float] = (0.5, 4.0),
    job_size: dict[str, Any] | None = None,
    name: str | None = None,
) -> FarmConfig:
    """A seeded random heterogeneous farm in the paper's style.

    Integer ranges ``(lo, hi)`` are inclusive and drawn uniformly; float ranges uniformly.
    Group k: ``count`` from ``servers_per_group``, ``buffer``, ``service_rate`` mu_k,
    ``idle_power`` eps0_k and ``busy_power`` = eps0_k + ``extra_power`` draw. Each job type gets a
    random non-empty set of groups (every group is used by at least one type); arrival rates split
    ``load * sum_k R_k mu_k`` with Dirichlet(1) weights, so the normalised offered load rho equals
    the drawn ``load``. Values are rounded to 3-4 significant digits for readable files.
    """
    rng = np.random.default_rng(seed)

    def draw_int(r: int | tuple[int, int]) -> int:
        return int(r) if isinstance(r, int) else int(rng.integers(r[0], r[1] + 1))

    def draw(r: float | tuple[float, float]) -> float:
        return float(r) if isinstance(r, (int, float)) else float(rng.uniform(r[0], r[1]))

    K, J = draw_int(n_groups), draw_int(n_job_types)
    if K < 1 or J < 1:
        raise ConfigError("random_farm: n_groups and n_job_types must be >= 1")
    groups: list[dict[str, Any]] = []
    for k in range(K):
        eps0 = round(draw(idle_power), 3)
        groups.append(
            {
                "name": f"g{k}",
                "count": draw_int(servers_per_group),
                "service_rate": round(draw(service_rate), 3),
                "busy_power": round(eps0 + draw(extra_power), 3),
                "idle_power": eps0,
                "buffer": draw_int(buffer),
            }
        )
    # random available sets covering every group
    sets = [set(np.flatnonzero(rng.random(K) < 0.5).tolist()) for _ in range(J)]
    for k in range(K):
        if not any(k in s for s in sets):
            sets[int(rng.integers(J))].add(k)
    for s in sets:
        if not s:
            s.add(int(rng.integers(K)))
    capacity = sum(g["count"] * g["service_rate"] for g in groups)
    weights = rng.dirichlet(np.ones(J))
    rho = draw(load)
    jobs = [
        {
            "name": f"j{j}",
            "arrival_rate": round(max(float(rho * capacity * weights[j]), 1e-3), 4),
            "groups": [f"g{k}" for k in sorted(sets[j])],
        }
        for j in range(J)
    ]
    d: dict[str, Any] = {"name": name or f"random-{seed}", "groups": groups, "job_types": jobs}
    if job_size is not None:
        d["job_size"] = job_size
    return farm_from_dict(d)
