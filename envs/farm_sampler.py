"""A wide distribution over farms, for training and testing policies that must work on any farm.

``serverfarm_gym.envs.random_farm`` draws the random_farm family (2-4 groups of 1-3 servers, buffers 1-3; kept
fixed so that its results stay comparable). :func:`sample_farm` draws from a much wider family,
described by a :class:`FarmDistribution` (every range is a field, validated once):

* 2-8 groups, 1-4 job types, 2 to 10,000 servers in all (log-uniform: small and huge farms are
  equally likely per decade), split over the groups with Dirichlet(1) weights (each >= 1);
* buffers 1-8, service rates, idle powers and extra busy powers as ``random_farm``'s;
* a share of the groups with **state-dependent** rate and power (speed scaling): a server holding
  n jobs serves at ``mu (n / B)^a`` (a in [0.3, 1]: more jobs, more speed, diminishing) and
  draws ``eps0 + extra (n / B)^(a p)`` (p in [1, 3]: power convex in speed);
* available sets of three structures, drawn per farm: ``random`` (each group in each set with
  probability 1/2, every group covered), ``nested`` (K_1 within K_2 within ... within the whole
  farm: specialised and general jobs), ``overlapping`` (windows of neighbouring groups in a random
  ring order: geography);
* loads 0.3-1.2: each type's rate is proportional to a Dirichlet(1) weight times the capacity of
  its own groups, scaled so that the farm's normalised load rho is the drawn load (so no type
  floods a small set of groups);
* a share of the farms with **general job sizes** (deterministic, Erlang, hyperexponential,
  lognormal, Pareto; mean 1);
* optionally (``sleep_share`` > 0; 0 by default) **dynamic right-sizing**: each group sleeps with
  probability ``sleep_share``: off at a fraction of its idle power, exponential setup at a rate
  in ``setup_rate`` drawing idle power plus a fraction of its extra busy power, switching off
  when idle at once (probability ``instant_off_share``) or at a log-uniform rate in
  ``idle_timeout_rate``. These draws come from a second stream of the seed, so the rest of the
  farm is the one drawn without them; a farm with a sleeping group has exponential job sizes.

Seeds: a farm is a deterministic function of ``(seed, distribution)``. Training draws seeds below
:data:`HELD_OUT_SEEDS`\\ ``.start``; evaluations of generalisation use seeds in
:data:`HELD_OUT_SEEDS`, which no training run may use.

    >>> from serverfarm_gym.envs.farm_sampler import HELD_OUT_SEEDS, sample_farm
    >>> farm = sample_farm(HELD_OUT_SEEDS.start)
    >>> 2 <= farm.n_groups <= 8 and 2 <= farm.n_servers <= 10_000
    True
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from serverfarm_gym.envs.config import FarmConfig, farm_from_dict
from serverfarm_gym.envs.validation import ConfigError

__all__ = ["HELD_OUT_SEEDS", "SET_STRUCTURES", "SMALL_FARMS", "FarmDistribution", "sample_farm"]

#: seeds reserved for measuring generalisation (never drawn by training)
HELD_OUT_SEEDS = range(1_000_000_000, 2_000_000_000)
SET_STRUCTURES = ("random", "nested", "overlapping")
GENERAL_SIZES = ("deterministic", "erlang", "hyperexponential", "lognormal", "pareto")


@dataclass(frozen=True)
class FarmDistribution:
    """The ranges :func:`sample_farm` draws from (inclusive; integers uniform unless said)."""

    n_groups: tuple[int, int] = (2, 8)
    n_job_types: tuple[int, int] = (1, 4)
    n_servers: tuple[int, int] = (2, 10_000)  # total, log-uniform
    buffer: tuple[int, int] = (1, 8)
    load: tuple[float, float] = (0.3, 1.2)
    service_rate: tuple[float, float] = (0.5, 2.5)
    idle_power: tuple[float, float] = (0.1, 1.5)
    extra_power: tuple[float, float] = (0.5, 4.0)
    state_dependent_share: float = 0.3  # probability that a group (with B >= 2) speed-scales
    general_size_share: float = 0.2  # probability that a farm has general job sizes
    set_structures: tuple[str, ...] = SET_STRUCTURES
    sleep_share: float = 0.0  # probability that a group has right-sizing (sleep)
    instant_off_share: float = 0.3  # probability that a sleeping group switches off at once
    sleep_power: tuple[float, float] = (0.01, 0.5)  # off power, fraction of idle power
    setup_rate: tuple[float, float] = (0.2, 2.0)
    setup_power: tuple[float, float] = (0.2, 1.2)  # idle + this fraction of the extra busy power
    idle_timeout_rate: tuple[float, float] = (0.1, 10.0)  # log-uniform

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "set_structures":
                bad = [s for s in v if s not in SET_STRUCTURES] if v else ["(none)"]
                if bad:
                    raise ConfigError(
                        f"set_structures: unknown {bad}; choose a non-empty subset of "
                        f"{list(SET_STRUCTURES)}"
                    )
            elif f.name.endswith("_share"):
                if not 0.0 <= float(v) <= 1.0:
                    raise ConfigError(f"{f.name}: a probability in [0, 1], got {v!r}")
            elif len(v) != 2 or not 0 < v[0] <= v[1]:
                raise ConfigError(f"{f.name}: expected (low, high) with 0 < low <= high, got {v!r}")
        if self.n_servers[1] < self.n_groups[0]:
            raise ConfigError(
                f"n_servers: at most {self.n_servers[1]} servers cannot fill "
                f"{self.n_groups[0]} groups (each needs one); raise n_servers or lower n_groups"
            )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FarmDistribution:
        """From a mapping of field names (YAML/JSON); unknown keys are refused."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"farm distribution: unknown keys {unknown}; known: {sorted(known)}")
        # the values are checked by __post_init__, not here (mypy cannot match them to fields)
        kwargs: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


#: the small-farm stream: the family with at most 24 servers and exponential sizes, where the
#: per-server chain is often small enough to solve exactly (rare in the log-uniform default draw)
SMALL_FARMS = FarmDistribution(n_servers=(2, 24), general_size_share=0.0)


def _split(rng: np.random.Generator, total: int, parts: int) -> list[int]:
    """``total`` into ``parts`` positive integers with Dirichlet(1) weights."""
    extra = rng.multinomial(total - parts, rng.dirichlet(np.ones(parts)))
    return [int(x) + 1 for x in extra]


def _sets(rng: np.random.Generator, structure: str, K: int, J: int) -> list[list[int]]:
    """Available sets (sorted group indices) of the J types, covering every group."""
    if structure == "nested":
        order = rng.permutation(K)
        sizes = np.sort(rng.choice(np.arange(1, K + 1), size=J, replace=True))
        sizes[-1] = K  # the most general type may use every group
        return [sorted(order[:n].tolist()) for n in sizes]
    if structure == "overlapping":
        order = rng.permutation(K)
        width = max(1, math.ceil(K / J)) + 1  # neighbouring windows share a group
        starts = np.linspace(0, K, J, endpoint=False).astype(int)
        sets = [sorted({int(order[(s + i) % K]) for i in range(min(width, K))}) for s in starts]
    else:
        sets = [np.flatnonzero(rng.random(K) < 0.5).tolist() for _ in range(J)]
        for j in range(J):
            if not sets[j]:
                sets[j] = [int(rng.integers(K))]
    covered = set().union(*map(set, sets))
    for k in range(K):
        if k not in covered:
            j = int(rng.integers(J))
            sets[j] = sorted({*sets[j], k})
    return [sorted(s) for s in sets]


def _job_size(rng: np.random.Generator) -> dict[str, Any]:
    dist = GENERAL_SIZES[int(rng.integers(len(GENERAL_SIZES)))]
    if dist == "erlang":
        return {"distribution": dist, "k": int(rng.integers(2, 5))}
    if dist == "hyperexponential":
        return {"distribution": dist, "scv": round(float(rng.uniform(2.0, 10.0)), 2)}
    if dist == "lognormal":
        return {"distribution": dist, "scv": round(float(rng.uniform(0.5, 4.0)), 2)}
    if dist == "pareto":
        return {"distribution": dist, "alpha": round(float(rng.uniform(1.5, 3.0)), 2)}
    return {"distribution": dist}


def sample_farm(
    seed: int, distribution: FarmDistribution | None = None, name: str | None = None
) -> FarmConfig:
    """A farm drawn from ``distribution`` (default :class:`FarmDistribution`), reproducibly."""
    d = distribution or FarmDistribution()
    rng = np.random.default_rng(seed)

    def draw_int(r: tuple[int, int]) -> int:
        return int(rng.integers(r[0], r[1] + 1))

    def draw(r: tuple[float, float]) -> float:
        return float(rng.uniform(r[0], r[1]))

    lo, hi = max(d.n_servers[0], d.n_groups[0]), d.n_servers[1]
    S = round(math.exp(rng.uniform(math.log(lo), math.log(hi))))
    K = min(draw_int(d.n_groups), S)
    J = draw_int(d.n_job_types)
    groups = []
    for k, count in enumerate(_split(rng, S, K)):
        eps0 = round(draw(d.idle_power), 3)
        mu, extra, B = round(draw(d.service_rate), 3), draw(d.extra_power), draw_int(d.buffer)
        g: dict[str, Any] = {"name": f"g{k}", "count": count, "idle_power": eps0, "buffer": B}
        if B >= 2 and rng.random() < d.state_dependent_share:
            a, p = draw((0.3, 1.0)), draw((1.0, 3.0))
            share = (np.arange(1, B + 1) / B) ** a
            g["service_rate"] = [round(float(mu * x), 4) for x in share]
            # power convex in speed; at least 1e-3 above idle so every level stays valid
            g["busy_power"] = [round(eps0 + max(extra * float(x**p), 1e-3), 4) for x in share]
        else:
            g["service_rate"] = mu
            g["busy_power"] = round(eps0 + extra, 3)
        groups.append(g)
    structure = d.set_structures[int(rng.integers(len(d.set_structures)))]
    sets = _sets(rng, structure, K, J)
    cap = np.array(
        [
            g["count"]
            * (g["service_rate"][-1] if isinstance(g["service_rate"], list) else g["service_rate"])
            for g in groups
        ]
    )
    own = np.array([cap[s].sum() for s in sets])
    weights = rng.dirichlet(np.ones(J)) * own
    rates = draw(d.load) * cap.sum() * weights / weights.sum()
    jobs = [
        {"name": f"j{j}", "arrival_rate": round(max(float(rates[j]), 1e-3), 4),
         "groups": [f"g{k}" for k in sets[j]]}
        for j in range(J)
    ]  # fmt: skip
    spec: dict[str, Any] = {
        "name": name or f"sampled-{seed}",
        "description": f"sample_farm({seed}): {structure} available sets",
        "groups": groups,
        "job_types": jobs,
    }
    if rng.random() < d.general_size_share:
        spec["job_size"] = _job_size(rng)
    if d.sleep_share > 0 and _add_sleep(np.random.default_rng([seed, 1]), d, groups):
        spec.pop("job_size", None)
    return farm_from_dict(spec)


def _add_sleep(rng: np.random.Generator, d: FarmDistribution, groups: list[dict[str, Any]]) -> bool:
    """Give each group a ``sleep`` mapping with probability ``d.sleep_share``; True if any."""
    any_sleep = False
    for g in groups:
        if rng.random() >= d.sleep_share:
            continue
        busy = g["busy_power"][-1] if isinstance(g["busy_power"], list) else g["busy_power"]
        eps0 = g["idle_power"]
        lo, hi = d.idle_timeout_rate
        alpha = round(math.exp(rng.uniform(math.log(lo), math.log(hi))), 4)
        g["sleep"] = {
            "power": round(eps0 * float(rng.uniform(*d.sleep_power)), 4),
            "setup_rate": round(float(rng.uniform(*d.setup_rate)), 4),
            "setup_power": round(eps0 + (busy - eps0) * float(rng.uniform(*d.setup_power)), 4),
            "idle_timeout_rate": "inf" if rng.random() < d.instant_off_share else alpha,
        }
        any_sleep = True
    return any_sleep
