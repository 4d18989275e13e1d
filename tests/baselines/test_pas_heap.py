"""PASHeapDispatcher (per-type heaps + indication vector) makes exactly PASPolicy's decisions."""

from __future__ import annotations

import time

import numpy as np
import pytest

from serverfarm_gym.baselines.pas import PASHeapDispatcher, PASPolicy, PriceAwarePASPolicy
from serverfarm_gym.baselines.priority import PriorityPolicy
from serverfarm_gym.envs.config import FarmConfig, farm_from_dict
from tests.helpers.env import server_obs, valid_server_mask
from tests.helpers.farms import random_dyadic_farm


def drive(
    cfg: FarmConfig,
    disp: PASHeapDispatcher,
    pol: PriorityPolicy,
    rng: np.random.Generator,
    n_events: int,
    check_every: int = 1,
) -> tuple[int, int]:
    """Random arrivals/departures; compare choose(j) with the policy at arrivals. Returns counts."""
    S = cfg.n_servers
    B = cfg.buffers[cfg.server_group]
    occ = np.zeros(S, dtype=np.int64)
    checked = blocked = 0
    for ev in range(n_events):
        busy = np.flatnonzero(occ)
        # arrivals a bit more likely than departures so that servers fill up and block
        if busy.size == 0 or rng.random() < 0.55:
            j = int(rng.integers(cfg.n_job_types))
            s = disp.choose(j)
            valid = valid_server_mask(cfg, occ, j)
            if not valid.any():
                assert s == -1
                blocked += 1
                continue
            if ev % check_every == 0:
                expect = int(pol.predict(server_obs(cfg, occ, j), action_masks=valid)[0])
                assert s == expect, (ev, j, s, expect)
                checked += 1
            assert valid[s]
            occ[s] += 1
            if occ[s] == B[s]:
                disp.on_full(s)
        else:
            s = int(rng.choice(busy))
            occ[s] -= 1
            if occ[s] == B[s] - 1:
                disp.on_vacancy(s)
    return checked, blocked


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_heap_dispatcher_equals_pas_policy(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    # a few hundred servers, few distinct efficiencies (many exact ties), several job types
    cfg = random_dyadic_farm(
        rng, n_groups=int(rng.integers(3, 7)), max_count=90, max_buffer=3, n_types=4
    )
    assert cfg.n_servers >= 50
    disp = PASHeapDispatcher(cfg)
    checked, _blocked = drive(cfg, disp, PASPolicy(cfg), rng, n_events=3000)
    assert checked > 1000


def test_heap_dispatcher_blocks_and_recovers() -> None:
    """Small farm driven into blocking repeatedly: upsilon is -1 exactly when all are full."""
    rng = np.random.default_rng(7)
    for _ in range(5):
        cfg = random_dyadic_farm(rng, n_groups=3, max_count=3, max_buffer=2, n_types=3)
        checked, blocked = drive(cfg, PASHeapDispatcher(cfg), PASPolicy(cfg), rng, n_events=1500)
        assert checked > 100 and blocked > 0


def test_price_aware_efficiency_argument() -> None:
    rng = np.random.default_rng(8)
    d = random_dyadic_farm(rng, n_groups=4, max_count=40, n_types=2).to_dict()
    for g in d["groups"]:
        g["price"] = [float(x) for x in rng.choice([0.5, 1.0, 2.0], size=2)]
    for j in d["job_types"]:
        j["arrival_rate"] = [j["arrival_rate"]] * 2
    cfg = farm_from_dict(d)
    for interval in (0, 1):
        eff = cfg.group_efficiency / cfg.prices[interval]
        pol = PriceAwarePASPolicy(cfg, interval=interval)
        drive(cfg, PASHeapDispatcher(cfg, efficiency=eff), pol, rng, n_events=1500)


def test_misuse_and_initial_full_state() -> None:
    cfg = random_dyadic_farm(np.random.default_rng(9), n_groups=2, max_count=3, n_types=1)
    disp = PASHeapDispatcher(cfg)
    s = disp.choose(0)
    with pytest.raises(ValueError, match="not full"):
        disp.on_vacancy(s)
    disp.on_full(s)
    with pytest.raises(ValueError, match="already full"):
        disp.on_full(s)
    full = np.ones(cfg.n_servers, dtype=bool)
    assert PASHeapDispatcher(cfg, full=full).choose(0) == -1
    with pytest.raises(ValueError, match="efficiency"):
        PASHeapDispatcher(cfg, efficiency=np.ones(cfg.n_groups + 1))


def test_scales_to_1e5_servers() -> None:
    """1e5 servers: build fast, events cheap, decisions still PAS's (spot-checked)."""
    rng = np.random.default_rng(10)
    groups = [
        {"name": f"g{k}", "count": 20_000, "service_rate": float(mu), "busy_power": float(e),
         "idle_power": 1.0, "buffer": 2}
        for k, (mu, e) in enumerate([(1, 2), (2, 3), (4, 9), (2, 5), (3, 4)])
    ]  # fmt: skip
    types = [
        {"name": "x", "arrival_rate": 1.0, "groups": ["g0", "g1", "g2"]},
        {"name": "y", "arrival_rate": 1.0, "groups": ["g1", "g3", "g4"]},
        {"name": "z", "arrival_rate": 1.0, "groups": ["g0", "g4"]},
    ]
    cfg = farm_from_dict({"name": "big", "groups": groups, "job_types": types})
    t0 = time.perf_counter()
    disp = PASHeapDispatcher(cfg)
    build_s = time.perf_counter() - t0
    S, B = cfg.n_servers, 2
    occ = np.zeros(S, dtype=np.int64)
    pol = PASPolicy(cfg)
    t0 = time.perf_counter()
    n_cross = 0
    jobs: list[int] = []  # one entry per job in the system: its server
    for ev in range(30_000):
        j = int(rng.integers(3))
        s = disp.choose(j)
        if ev % 3000 == 0:
            valid = valid_server_mask(cfg, occ, j)
            assert s == int(pol.predict(server_obs(cfg, occ, j), action_masks=valid)[0])
        occ[s] += 1
        jobs.append(s)
        if occ[s] == B:
            disp.on_full(s)
            n_cross += 1
        if ev % 3 == 2:  # a departure of a uniformly random job (swap-remove)
            i = int(rng.integers(len(jobs)))
            jobs[i], jobs[-1] = jobs[-1], jobs[i]
            d = jobs.pop()
            occ[d] -= 1
            if occ[d] == B - 1:
                disp.on_vacancy(d)
                n_cross += 1
    events_s = time.perf_counter() - t0
    assert n_cross > 5000
    # generous wall-clock bounds (2-core CI machine); the point is "not linear in S per event"
    assert build_s < 5.0
    assert events_s < 10.0
