"""Priority-table policies, heuristics and the registry: shapes, masks, tie rules, hand-made states."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from serverfarm_gym.baselines.heuristics import RandomPolicy
from serverfarm_gym.baselines.pas import PASPolicy, PriceAwarePASPolicy, pas_table
from serverfarm_gym.baselines.priority import PriorityPolicy
from serverfarm_gym.baselines.registry import POLICIES, make_policy
from serverfarm_gym.envs.config import FarmConfig, farm_from_dict
from serverfarm_gym.envs.observation import (
    decode_group_action,
    n_actions,
)
from tests.helpers.env import group_obs, server_obs, valid_group_mask, valid_server_mask
from tests.helpers.farms import random_dyadic_farm, random_occupancy


def reference_server_choice(
    table: np.ndarray, config: FarmConfig, occ: np.ndarray, mask: np.ndarray
) -> int:
    """Loop form of the simulator's rule: max table[k(s), n_s] over the mask, ties smallest s."""
    best, best_v = -1, -np.inf
    for s in np.flatnonzero(mask):
        v = table[config.server_group[s], occ[s]]
        if best < 0 or v > best_v:
            best, best_v = int(s), v
    return best


def reference_group_choice(table: np.ndarray, config: FarmConfig, mask: np.ndarray) -> int:
    """Documented group-mode rule: max table[k, b] over the mask; ties smallest k, then highest b."""
    best, best_key = -1, None
    for a in np.flatnonzero(mask):
        k, b = decode_group_action(config, int(a))
        key = (-table[k, b], k, -b)
        if best_key is None or key < best_key:
            best, best_key = int(a), key
    return best


# optimal solves an MDP and pdr-pas needs a geo scenario: both have their own tests; ppo (named
# with its model file) and the shipped generalist are learned policies (tests/agents); the SLO
# policies need a scenario with an slo: block (tests/baselines/test_slo_*.py)
NAMES = [
    n
    for n in POLICIES
    if n not in ("optimal", "pdr-pas", "ppo", "generalist", "generalist-checked")
    and not n.startswith("slo-")
]


# best-priority searches tables against the farm: a small budget keeps these rule tests fast
# (its search has its own tests in test_best_priority.py)
_KW = {
    "whittle": {"eta": 0.5},
    "best-priority": {"budget": 6, "n_epochs": 2_000, "horizon_durations": 5.0},
}


def build(name: str, config: FarmConfig, mode: str = "server", seed: int | None = 0):
    kw = _KW.get(name, {})
    return make_policy(name, config, action_mode=mode, seed=seed, **kw)


# ---------------------------------------------------------------------------------------------
# shapes and masks
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["server", "group"])
@pytest.mark.parametrize("name", NAMES)
def test_predict_shapes(name: str, mode: str) -> None:
    rng = np.random.default_rng(1)
    cfg = random_dyadic_farm(rng, state_dependent=0.5)
    pol = build(name, cfg, mode)
    make_obs = server_obs if mode == "server" else group_obs
    obs = [
        make_obs(cfg, random_occupancy(rng, cfg), int(rng.integers(cfg.n_job_types)))
        for _ in range(5)
    ]
    a, state = pol.predict(obs[0])
    assert state is None
    assert np.asarray(a).shape == ()
    assert 0 <= int(a) < n_actions(cfg, mode)
    acts, _ = pol.predict(np.stack(obs))
    assert acts.shape == (5,)
    assert acts.dtype == np.int64


@pytest.mark.parametrize("mode", ["server", "group"])
@pytest.mark.parametrize("name", NAMES)
def test_masks_always_respected(name: str, mode: str) -> None:
    rng = np.random.default_rng(2)
    for _ in range(4):
        cfg = random_dyadic_farm(rng, state_dependent=0.3)
        pol = build(name, cfg, mode)
        A = n_actions(cfg, mode)
        for _ in range(40):
            occ = random_occupancy(rng, cfg)
            j = int(rng.integers(cfg.n_job_types))
            obs = server_obs(cfg, occ, j) if mode == "server" else group_obs(cfg, occ, j)
            valid = (
                valid_server_mask(cfg, occ, j)
                if mode == "server"
                else valid_group_mask(cfg, occ, j)
            )
            # a random sub-mask of the valid actions, or an arbitrary non-empty mask
            mask = valid & (rng.random(A) < 0.5) if rng.random() < 0.5 else rng.random(A) < 0.3
            if not mask.any():
                mask[rng.integers(A)] = True
            a, _ = pol.predict(obs, action_masks=mask)
            assert mask[int(a)], (name, mode, mask, a)
            if (mask & valid).any():
                assert valid[int(a)]


@pytest.mark.parametrize("name", [n for n in NAMES if n != "random"])
def test_server_mode_matches_reference_rule(name: str) -> None:
    """Vectorised decisions == loop over servers with the built-in dispatcher's rule."""
    rng = np.random.default_rng(3)
    for _ in range(6):
        cfg = random_dyadic_farm(rng, state_dependent=0.4, max_count=6)
        pol = build(name, cfg)
        assert isinstance(pol, PriorityPolicy)
        obs, masks, expect = [], [], []
        for _ in range(60):
            occ = random_occupancy(rng, cfg)
            j = int(rng.integers(cfg.n_job_types))
            valid = valid_server_mask(cfg, occ, j)
            if not valid.any():
                continue
            mask = valid if rng.random() < 0.5 else valid & (rng.random(cfg.n_servers) < 0.7)
            if not mask.any():
                mask = valid
            obs.append(server_obs(cfg, occ, j))
            masks.append(mask)
            expect.append(reference_server_choice(pol.priority_table(), cfg, occ, mask))
        got, _ = pol.predict(np.stack(obs), action_masks=np.stack(masks))
        np.testing.assert_array_equal(got, expect)
        # without a mask the policy restricts itself to available non-full servers
        got_nomask = [int(pol.predict(o)[0]) for o in obs[:10]]
        for o, a in zip(obs[:10], got_nomask, strict=True):
            occ = np.rint(o[: cfg.n_servers] * cfg.buffers[cfg.server_group]).astype(int)
            j = int(np.argmax(o[cfg.n_servers :]))
            assert a == reference_server_choice(pol.table, cfg, occ, valid_server_mask(cfg, occ, j))


@pytest.mark.parametrize("name", [n for n in NAMES if n != "random"])
def test_group_mode_matches_documented_rule(name: str) -> None:
    rng = np.random.default_rng(4)
    for _ in range(6):
        cfg = random_dyadic_farm(rng, state_dependent=0.4, max_count=5)
        pol = build(name, cfg, "group")
        for _ in range(40):
            occ = random_occupancy(rng, cfg)
            j = int(rng.integers(cfg.n_job_types))
            valid = valid_group_mask(cfg, occ, j)
            if not valid.any():
                continue
            a, _ = pol.predict(group_obs(cfg, occ, j), action_masks=valid)
            assert int(a) == reference_group_choice(pol.priority_table(), cfg, valid)


# ---------------------------------------------------------------------------------------------
# ties and hand-made states
# ---------------------------------------------------------------------------------------------


def two_group_farm(g0: dict, g1: dict, buffer: int = 2, count: int = 2) -> FarmConfig:
    groups = [
        {"name": "a", "count": count, "buffer": buffer, **g0},
        {"name": "b", "count": count, "buffer": buffer, **g1},
    ]
    return farm_from_dict(
        {
            "name": "hand",
            "groups": groups,
            "job_types": [{"name": "x", "arrival_rate": 1.0, "groups": ["a", "b"]}],
        }
    )


def test_pas_ties_go_to_smallest_index_and_are_deterministic() -> None:
    # equal efficiency 1 in both groups (different parameters): every non-full server ties
    cfg = two_group_farm(
        {"service_rate": 1.0, "busy_power": 2.0, "idle_power": 1.0},
        {"service_rate": 2.0, "busy_power": 2.5, "idle_power": 0.5},
    )
    pol = PASPolicy(cfg)
    assert pol.table[0, 0] == pol.table[1, 0]
    occ = np.array([2, 1, 0, 1])
    obs = server_obs(cfg, occ, 0)
    acts = {int(pol.predict(obs)[0]) for _ in range(5)}
    assert acts == {1}
    mask = np.array([False, False, True, True])
    assert int(pol.predict(obs, action_masks=mask)[0]) == 2
    # group mode: both groups tie, smallest k first, then the highest level (pack)
    gpol = PASPolicy(cfg, "group")
    assert decode_group_action(cfg, int(gpol.predict(group_obs(cfg, occ, 0))[0])) == (0, 1)


def test_pas_prefers_efficient_group_and_table_values() -> None:
    cfg = two_group_farm(
        {"service_rate": 1.0, "busy_power": 2.0, "idle_power": 1.0},  # eff 1
        {"service_rate": 2.0, "busy_power": 3.0, "idle_power": 1.0},  # eff 1
    )
    np.testing.assert_array_equal(pas_table(cfg), [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    cfg = two_group_farm(
        {"service_rate": 1.0, "busy_power": 3.0, "idle_power": 1.0},  # eff 0.5
        {"service_rate": 4.0, "busy_power": 3.0, "idle_power": 1.0},  # eff 2
    )
    pol = PASPolicy(cfg)
    np.testing.assert_array_equal(pol.table, [[0.5] * 3, [2.0] * 3])
    assert int(pol.predict(server_obs(cfg, np.array([0, 0, 1, 0]), 0))[0]) == 2  # packs server 2
    assert int(pol.predict(server_obs(cfg, np.array([0, 0, 2, 2]), 0))[0]) == 0
    assert not pol.table.flags.writeable


def test_jsq_picks_fewest_jobs() -> None:
    cfg = two_group_farm(
        {"service_rate": 1.0, "busy_power": 2.0, "idle_power": 1.0},
        {"service_rate": 4.0, "busy_power": 3.0, "idle_power": 1.0},
        buffer=3,
    )
    pol = make_policy("jsq", cfg)
    assert int(pol.predict(server_obs(cfg, np.array([2, 1, 3, 1]), 0))[0]) == 1
    assert int(pol.predict(server_obs(cfg, np.array([2, 3, 0, 0]), 0))[0]) == 2
    g = make_policy("jsq", cfg, action_mode="group")
    assert decode_group_action(
        cfg, int(g.predict(group_obs(cfg, np.array([2, 1, 3, 1]), 0))[0])
    ) == (0, 1)


def test_meesf_uses_busy_power_only() -> None:
    # a: mu/eps = 0.5 (PAS eff 0.5); b: mu/eps = 1/3 (PAS eff 2, large idle power)
    cfg = two_group_farm(
        {"service_rate": 1.0, "busy_power": 2.0, "idle_power": 0.0},
        {"service_rate": 1.0, "busy_power": 3.0, "idle_power": 2.5},
    )
    obs = server_obs(cfg, np.array([0, 0, 0, 0]), 0)
    assert int(make_policy("meesf", cfg).predict(obs)[0]) == 0
    assert int(make_policy("pas", cfg).predict(obs)[0]) == 2


def test_meesf_state_dependent_uses_level_after_acceptance() -> None:
    cfg = two_group_farm(
        {"service_rate": [1.0, 3.0], "busy_power": [2.0, 4.0], "idle_power": 0.0},  # 0.5, 0.75
        {"service_rate": 2.0, "busy_power": 3.0, "idle_power": 0.0},  # 0.667
    )
    pol = make_policy("meesf", cfg)
    np.testing.assert_allclose(pol.table[0], [0.5, 0.75, 0.75])
    assert int(pol.predict(server_obs(cfg, np.array([0, 0, 0, 0]), 0))[0]) == 2
    assert int(pol.predict(server_obs(cfg, np.array([0, 1, 0, 0]), 0))[0]) == 1


def test_slowest_first() -> None:
    cfg = two_group_farm(
        {"service_rate": 4.0, "busy_power": 5.0, "idle_power": 1.0},
        {"service_rate": [0.5, 2.0], "busy_power": [2.0, 3.0], "idle_power": 1.0},  # peak 2 < 4
    )
    pol = make_policy("slowest", cfg)
    assert int(pol.predict(server_obs(cfg, np.array([0, 0, 1, 0]), 0))[0]) == 2
    assert int(pol.predict(server_obs(cfg, np.array([0, 0, 2, 2]), 0))[0]) == 0


def test_first_fit() -> None:
    cfg = two_group_farm(
        {"service_rate": 1.0, "busy_power": 2.0, "idle_power": 1.0},
        {"service_rate": 4.0, "busy_power": 3.0, "idle_power": 1.0},
    )
    pol = make_policy("first-fit", cfg)
    assert int(pol.predict(server_obs(cfg, np.array([2, 2, 0, 1]), 0))[0]) == 2
    assert int(pol.predict(server_obs(cfg, np.array([1, 0, 0, 0]), 0))[0]) == 0


def test_availability_restricts_choice() -> None:
    cfg = farm_from_dict(
        {
            "name": "avail",
            "groups": [
                {
                    "name": "a",
                    "count": 2,
                    "service_rate": 4.0,
                    "busy_power": 2.0,
                    "idle_power": 1.0,
                    "buffer": 1,
                },
                {
                    "name": "b",
                    "count": 2,
                    "service_rate": 1.0,
                    "busy_power": 2.0,
                    "idle_power": 1.0,
                    "buffer": 1,
                },
            ],
            "job_types": [
                {"name": "x", "arrival_rate": 1.0, "groups": ["a", "b"]},
                {"name": "y", "arrival_rate": 1.0, "groups": ["b"]},
            ],
        }
    )
    pol = PASPolicy(cfg)
    occ = np.zeros(4, dtype=np.int64)
    assert int(pol.predict(server_obs(cfg, occ, 0))[0]) == 0
    assert int(pol.predict(server_obs(cfg, occ, 1))[0]) == 2


def test_price_aware_pas() -> None:
    cfg = farm_from_dict(
        {
            "name": "prices",
            "groups": [
                {"name": "a", "count": 1, "service_rate": 2.0, "busy_power": 2.0, "idle_power": 1.0,
                 "buffer": 1, "price": [1.0, 4.0]},  # eff 2: 2 then 0.5 per money
                {"name": "b", "count": 1, "service_rate": 1.0, "busy_power": 2.0, "idle_power": 1.0,
                 "buffer": 1, "price": [1.0, 1.0]},  # eff 1
            ],
            "job_types": [{"name": "x", "arrival_rate": [1.0, 1.0], "groups": ["a", "b"]}],
        }
    )  # fmt: skip
    obs = server_obs(cfg, np.zeros(2, dtype=np.int64), 0)
    assert int(PriceAwarePASPolicy(cfg).predict(obs)[0]) == 0
    p1 = make_policy("pas-price", cfg, interval=1)
    np.testing.assert_array_equal(p1.table[:, 0], [0.5, 1.0])
    assert int(p1.predict(obs)[0]) == 1
    with pytest.raises(ValueError, match="interval"):
        PriceAwarePASPolicy(cfg, interval=2)


def test_random_is_uniform_over_valid_servers() -> None:
    cfg = two_group_farm(
        {"service_rate": 1.0, "busy_power": 2.0, "idle_power": 1.0},
        {"service_rate": 4.0, "busy_power": 3.0, "idle_power": 1.0},
        count=3,
    )
    occ = np.array([2, 0, 1, 2, 1, 0])  # servers 0 and 3 full
    pol = RandomPolicy(cfg, seed=0)
    n = 8000
    acts = pol.predict(np.repeat(server_obs(cfg, occ, 0)[None], n, axis=0))[0]
    counts = np.bincount(acts, minlength=6)
    assert counts[0] == counts[3] == 0
    # binomial(n, 1/4) per valid server: 5 sigma
    p = 0.25
    assert np.all(np.abs(counts[[1, 2, 4, 5]] - n * p) < 5 * np.sqrt(n * p * (1 - p)))
    # group mode: (k, b) drawn with probability m_{k,b} / #valid servers
    gpol = RandomPolicy(cfg, "group", seed=1)
    gacts = gpol.predict(np.repeat(group_obs(cfg, occ, 0)[None], n, axis=0))[0]
    pairs = [decode_group_action(cfg, int(a)) for a in gacts]
    freq = {pq: pairs.count(pq) for pq in set(pairs)}
    expect = {(0, 0): 0.25, (0, 1): 0.25, (1, 0): 0.25, (1, 1): 0.25}
    assert set(freq) == set(expect)
    for pq, pr in expect.items():
        assert abs(freq[pq] - n * pr) < 5 * np.sqrt(n * pr * (1 - pr))
    # reproducible with a seed
    a1 = RandomPolicy(cfg, seed=7).predict(np.repeat(server_obs(cfg, occ, 0)[None], 50, axis=0))[0]
    a2 = RandomPolicy(cfg, seed=7).predict(np.repeat(server_obs(cfg, occ, 0)[None], 50, axis=0))[0]
    np.testing.assert_array_equal(a1, a2)


# ---------------------------------------------------------------------------------------------
# registry and validation
# ---------------------------------------------------------------------------------------------


def test_registry_names_and_errors() -> None:
    expected = {
        "pas",
        "pas-price",
        "whittle",
        "random",
        "jsq",
        "meesf",
        "slowest",
        "first-fit",
        "optimal",
    }
    assert expected <= set(POLICIES)
    cfg = random_dyadic_farm(np.random.default_rng(5))
    with pytest.raises(ValueError, match=r"unknown policy 'nope'.*first-fit.*pas"):
        make_policy("nope", cfg)
    for name in NAMES:
        pol = build(name, cfg)
        assert pol.name == name
        assert pol.builtin == ("random" if name == "random" else "priority")
    with pytest.raises(ValueError, match="action_mode"):
        make_policy("pas", cfg, action_mode="bogus")


def test_make_policy_accepts_a_dict() -> None:
    cfg = random_dyadic_farm(np.random.default_rng(6))
    pol = make_policy("pas", cfg.to_dict())
    np.testing.assert_array_equal(pol.table, pas_table(cfg))


def test_priority_table_validation() -> None:
    cfg = random_dyadic_farm(np.random.default_rng(7))
    with pytest.raises(ValueError, match="shape"):
        PriorityPolicy(cfg, table=np.zeros((cfg.n_groups, cfg.max_buffer)))
    bad = np.zeros((cfg.n_groups, cfg.max_buffer + 1))
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="finite"):
        PriorityPolicy(cfg, table=bad)
    with pytest.raises(ValueError, match="table"):
        PriorityPolicy(cfg)


@pytest.mark.skipif(
    importlib.util.find_spec("serverfarm_gym.envs.simulator") is None,
    reason="needs serverfarm_gym.envs.simulator",
)
@pytest.mark.parametrize("name", [n for n in NAMES if n != "random"])
def test_server_mode_equals_simulator_builtin(name: str) -> None:
    """Stepping the simulator with predict() reproduces its built-in priority run epoch by epoch."""
    from serverfarm_gym.envs.simulator import FarmSimulator

    rng = np.random.default_rng(20)
    for _ in range(3):
        cfg = random_dyadic_farm(rng, state_dependent=0.4)
        pol = build(name, cfg)
        builtin, stepped = FarmSimulator(cfg, seed=11), FarmSimulator(cfg, seed=11)
        for _ in range(200):
            builtin.run(1, policy="priority", table=pol.priority_table())
            j = stepped.next_epoch()
            obs = server_obs(cfg, stepped.occ, j)
            stepped.assign(int(pol.predict(obs, action_masks=stepped.server_mask(j))[0]))
            np.testing.assert_array_equal(stepped.occ, builtin.occ)
        assert stepped.stats().work == builtin.stats().work


def test_level_constant_fast_path_equals_the_general_rule() -> None:
    """Server mode with a table constant in the level (PAS on constant-rate farms) skips the
    per-server occupancies; on any masks, valid or not (masks that allow full or unavailable
    servers, rows with no valid server: the fallback), it decides as the general rule does."""
    rng = np.random.default_rng(11)
    for _ in range(8):
        cfg = random_dyadic_farm(rng, state_dependent=0.0, max_count=6)
        fast = PASPolicy(cfg)
        assert fast._server_scores() is not None
        slow = PASPolicy(cfg)
        slow._score_cache = (slow._flat, None)  # force the general rule
        occ = np.stack([random_occupancy(rng, cfg) for _ in range(50)])
        js = rng.integers(cfg.n_job_types, size=50)
        obs = np.stack([server_obs(cfg, o, int(j)) for o, j in zip(occ, js, strict=True)])
        masks = rng.random((50, cfg.n_servers)) < 0.5
        masks[::7] = False
        np.testing.assert_array_equal(
            fast.predict(obs, action_masks=masks)[0], slow.predict(obs, action_masks=masks)[0]
        )
