"""The Gymnasium environment with only the base dependencies: the Gymnasium API checker,
documented encodings, determinism, wrappers and Gymnasium vector envs, registration, invalid
actions, rendering (the SB3 checker and SB3 vector envs are in test_env_sb3.py)."""

from __future__ import annotations

import copy
import importlib
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import yaml
from gymnasium.utils.env_checker import check_env as gym_check_env

from serverfarm_gym import envs
from serverfarm_gym.envs.config import ConfigError, FarmConfig, farm_from_dict
from serverfarm_gym.envs.observation import (
    decode_group_obs,
    decode_server_obs,
    level_offsets,
)
from serverfarm_gym.envs.scenarios import PRESETS, load_preset, random_farm
from serverfarm_gym.envs.server_farm import InvalidActionWarning, ServerFarmEnv
from tests.helpers.env import (
    CHECKER_OPTIONS,
    ENV_IDS,
    expected_mask,
    expected_obs,
    make_env,
    masked_choice,
)
from tests.helpers.farms import random_env_configs
from tests.helpers.invariants import expected_server_mask

MODES = list(ENV_IDS)
IDS = ENV_IDS
RANDOM_CONFIGS = random_env_configs()
make = make_env


# ---------------------------------------------------------------------------------------------
# reference encodings (from the documentation, independent of the env's implementation)
# ---------------------------------------------------------------------------------------------
def pas_action(env: ServerFarmEnv) -> int:
    """Where PAS sends the pending job: the most efficient group, ties to the smallest index."""
    c, sim, j = env.config, env.sim, env.unwrapped._job
    ok = expected_server_mask(c, sim.occ, j)
    s = int(np.argmax(np.where(ok, c.group_efficiency[c.server_group], -np.inf)))
    if env.action_mode == "server":
        return s
    k = int(c.server_group[s])
    return int(level_offsets(c)[k] + sim.occ[s])


def assert_identical(a: Any, b: Any, path: str = "") -> None:
    """Exact equality of nested tuples/lists/dicts/arrays/floats."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            assert_identical(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_identical(x, y, f"{path}[{i}]")
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b), path
    else:
        assert type(a) is type(b) and a == b, (path, a, b)


def rollout(env: gym.Env, seed: int | None, n: int, action_seed: int = 0) -> list:
    obs, info = env.reset(seed=seed)
    rng = np.random.default_rng(action_seed)
    out: list = [(obs, info)]
    for _ in range(n):
        obs, r, term, trunc, info = env.step(masked_choice(rng, info["action_mask"]))
        out.append((obs, r, term, trunc, info))
    return out


# ---------------------------------------------------------------------------------------------
# API checkers
# ---------------------------------------------------------------------------------------------
CHECK_SCENARIOS = list(PRESETS) + RANDOM_CONFIGS


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("scenario", CHECK_SCENARIOS, ids=lambda s: getattr(s, "name", s))
def test_gymnasium_checker(scenario: str | FarmConfig, mode: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # the checkers send unmasked random actions: the fallback is meant to replace them
        warnings.simplefilter("ignore", InvalidActionWarning)
        gym_check_env(make(scenario, mode, render_mode="ansi").unwrapped)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "options",
    CHECKER_OPTIONS,
    ids=str,
)
def test_checkers_with_options(options: dict, mode: str) -> None:
    scenario = RANDOM_CONFIGS[4]  # time-varying prices and rates, general sizes
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # the checkers send unmasked random actions: the fallback is meant to replace them
        warnings.simplefilter("ignore", InvalidActionWarning)
        gym_check_env(make(scenario, mode, **options).unwrapped)


# ---------------------------------------------------------------------------------------------
# encodings, masks, rewards, info
# ---------------------------------------------------------------------------------------------
ENCODING_SCENARIOS = ["tiny", "speed-scaling", "paper-100", *RANDOM_CONFIGS[2:]]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("scenario", ENCODING_SCENARIOS, ids=lambda s: getattr(s, "name", s))
def test_observation_mask_and_info_follow_the_documentation(scenario: Any, mode: str) -> None:
    env = ServerFarmEnv(scenario, action_mode=mode, reward_eta=0.3, reward_scale=2.0)
    c = env.config
    obs, info = env.reset(seed=3)
    rng = np.random.default_rng(4)
    work0, energy0 = env.sim.work, env.sim.energy
    for _ in range(300):
        assert env.observation_space.contains(obs), obs
        np.testing.assert_allclose(obs, expected_obs(env), rtol=0, atol=1e-6)
        mask = info["action_mask"]
        assert mask.dtype == np.int8 and mask.shape == (env.action_space.n,)
        assert mask.any(), "empty mask at a decision epoch"
        np.testing.assert_array_equal(mask, expected_mask(env))
        np.testing.assert_array_equal(env.action_masks(), mask)
        assert info["job_type"] == env._job
        if mode == "server":
            occ, j = decode_server_obs(c, obs)
            np.testing.assert_array_equal(occ, env.sim.occ)
        else:
            counts, j = decode_group_obs(c, obs)
            np.testing.assert_array_equal(counts, env.sim.level_counts)
        assert j == info["job_type"]
        obs, reward, term, trunc, info = env.step(masked_choice(rng, mask))
        assert not term and not trunc
        assert not info["invalid_action"]
        # reward = (work - eta energy) / scale over the step, with the step's integrals
        assert info["work"] == pytest.approx(env.sim.work - work0, rel=1e-9, abs=1e-12)
        assert info["energy"] == pytest.approx(env.sim.energy - energy0, rel=1e-9, abs=1e-12)
        assert reward == pytest.approx(
            (info["work"] - 0.3 * info["energy"]) / 2.0, rel=1e-9, abs=1e-12
        )
        assert info["eta"] == 0.3
        work0, energy0 = env.sim.work, env.sim.energy
    # running statistics since reset (no warm-up here) are the simulator's
    st = env.sim.stats()
    assert info["time"] == pytest.approx(st.time)
    for key in ("throughput", "power", "efficiency", "blocking"):
        assert info[key] == pytest.approx(getattr(st, key), rel=1e-9, abs=1e-12), key
    np.testing.assert_allclose(info["blocking_per_type"], st.blocking_per_type, rtol=1e-9)


def test_mask_never_empty_and_obs_in_space_long_run() -> None:
    """Heavy load, small buffers: many blocked arrivals between epochs, never an empty mask."""
    c = random_farm(4, load=1.2, buffer=1)
    for mode in MODES:
        env = make(c, mode, max_episode_steps=10_000)
        obs, info = env.reset(seed=0)
        rng = np.random.default_rng(0)
        for _ in range(3_000):
            assert info["action_mask"].any()
            assert env.observation_space.contains(obs)
            obs, _, _, _, info = env.step(masked_choice(rng, info["action_mask"]))
        assert info["blocking"] > 0.01  # the regime this test is about


def test_group_mode_mask_is_exactly_the_occupied_levels() -> None:
    """Group mode: mask[level_offsets[k] + b] iff a server of an available group k holds b < B_k."""
    c = load_preset("paper-100")
    env = ServerFarmEnv(c, action_mode="group")
    _, info = env.reset(seed=1)
    rng = np.random.default_rng(1)
    seen_partial = False
    for _ in range(500):
        np.testing.assert_array_equal(info["action_mask"], expected_mask(env))
        seen_partial |= 0 < info["action_mask"].sum() < env.action_space.n
        _, _, _, _, info = env.step(masked_choice(rng, info["action_mask"]))
    assert seen_partial


def test_cost_objective_info() -> None:
    d = load_preset("tiny").to_dict()
    d["groups"][1]["price"] = [0.5, 2.0]
    d["interval_length"] = 0.5
    env = ServerFarmEnv(farm_from_dict(d), objective="cost", reward_eta=0.2)
    _, info = env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(50):
        e0, c0 = env.sim.energy, env.sim.cost
        _, r, _, _, info = env.step(masked_choice(rng, info["action_mask"]))
        assert info["cost"] == pytest.approx(env.sim.cost - c0, rel=1e-9)
        assert r == pytest.approx(info["work"] - 0.2 * info["cost"], rel=1e-9, abs=1e-12)
        # "energy" stays the energy of the step (documented: info carries work, energy and cost)
        assert info["energy"] == pytest.approx(env.sim.energy - e0, rel=1e-9)
    st = env.sim.stats()
    assert info["cost_efficiency"] == pytest.approx(st.cost_efficiency, rel=1e-9)


def test_warmup_statistics_start_after_warmup() -> None:
    for policy in ("pas", "random"):
        env = ServerFarmEnv("tiny", warmup_epochs=500, warmup_policy=policy)
        _, info = env.reset(seed=0)
        assert env.sim.stats().epochs == 501  # warm-up plus the pending decision
        assert env.sim.jobs_in_system > 0 or env.sim.time > 0
        assert 0 < info["time"] < env.sim.time


def test_running_eta_is_finite_and_moves() -> None:
    env = ServerFarmEnv("tiny")
    _, info = env.reset(seed=0)
    eta0 = info["eta"]
    assert 0.2 < eta0 < 0.5  # near PAS's exact efficiency 0.327 (its initial estimate)
    rng = np.random.default_rng(0)
    for _ in range(200):
        _, r, _, _, info = env.step(masked_choice(rng, info["action_mask"]))
        assert np.isfinite(r)
    assert info["eta"] != eta0


# ---------------------------------------------------------------------------------------------
# determinism
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "scenario", ["tiny", "speed-scaling", RANDOM_CONFIGS[4], RANDOM_CONFIGS[5]],
    ids=lambda s: getattr(s, "name", s),
)  # fmt: skip
def test_same_seed_same_sequence(scenario: Any, mode: str) -> None:
    a = rollout(make(scenario, mode), seed=123, n=200)
    b = rollout(make(scenario, mode), seed=123, n=200)
    assert_identical(a, b)
    # a reseeded env (with its history) replays the same sequence as a fresh one
    env = make(scenario, mode)
    rollout(env, seed=5, n=50)
    assert_identical(rollout(env, seed=123, n=200), a)
    c = rollout(make(scenario, mode), seed=124, n=200)
    assert not all(np.array_equal(x[0], y[0]) for x, y in zip(a, c, strict=True))


@pytest.mark.parametrize("mode", MODES)
def test_deepcopy_env_continues_identically(mode: str) -> None:
    """copy.deepcopy(env) is a snapshot that replays the original's future step for step."""
    env = ServerFarmEnv("tiny", action_mode=mode)
    _, info = env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(20):
        _, _, _, _, info = env.step(masked_choice(rng, info["action_mask"]))
    dup = copy.deepcopy(env)
    actions = [int(np.flatnonzero(info["action_mask"])[0])]
    first = env.step(actions[0])
    for _ in range(30):
        actions.append(int(np.flatnonzero(env.action_masks())[-1]))
        env.step(actions[-1])
    replay = dup.step(actions[0])
    assert_identical(first, replay)
    for a in actions[1:]:
        dup.step(a)
    np.testing.assert_array_equal(dup.sim.occ, env.sim.occ)
    assert dup.sim.time == env.sim.time


# ---------------------------------------------------------------------------------------------
# invalid actions
# ---------------------------------------------------------------------------------------------
def _state_with_masked_action(env: ServerFarmEnv, seed: int) -> tuple[dict, np.random.Generator]:
    """Step with masked random actions until some action is masked out."""
    _, info = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    while info["action_mask"].all():
        _, _, _, _, info = env.step(masked_choice(rng, info["action_mask"]))
    return info, rng


@pytest.mark.parametrize("mode", MODES)
def test_invalid_action_raise(mode: str) -> None:
    env = ServerFarmEnv("tiny", action_mode=mode, invalid_action="raise")
    twin = ServerFarmEnv("tiny", action_mode=mode, invalid_action="raise")
    info, _ = _state_with_masked_action(env, 0)
    _state_with_masked_action(twin, 0)
    bad = int(np.flatnonzero(info["action_mask"] == 0)[0])
    with pytest.raises(ValueError, match="masked"):
        env.step(bad)
    for a in (-1, env.action_space.n):  # not in the action space at all (both modes refuse)
        with pytest.raises(ValueError, match="not in the action space"):
            env.step(a)
    # a refused action changes nothing
    good = int(np.flatnonzero(info["action_mask"])[0])
    assert_identical(env.step(good), twin.step(good))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("scenario", ["tiny", "paper-100", "speed-scaling"])
def test_invalid_action_fallback_goes_where_pas_would(scenario: str, mode: str) -> None:
    env = ServerFarmEnv(scenario, action_mode=mode)
    twin = ServerFarmEnv(scenario, action_mode=mode)
    for trial in range(3):
        info, _ = _state_with_masked_action(env, trial)
        _state_with_masked_action(twin, trial)
        bad = int(np.flatnonzero(info["action_mask"] == 0)[0])
        expect = pas_action(twin)
        oa, ra, ta, ua, ia = env.step(bad)
        ob, rb, tb, ub, ib = twin.step(expect)
        assert ia["invalid_action"] and not ib["invalid_action"]
        assert ia["invalid_actions"] == ib["invalid_actions"] + 1  # counted since reset
        ia["invalid_action"], ia["invalid_actions"] = False, ib["invalid_actions"]
        assert_identical((oa, ra, ta, ua, ia), (ob, rb, tb, ub, ib))
        # an action outside the action space is refused, not replaced (Gymnasium's rule)
        with pytest.raises(ValueError, match="not in the action space"):
            env.step(env.action_space.n + 5)


# ---------------------------------------------------------------------------------------------
# construction, registration, wrappers
# ---------------------------------------------------------------------------------------------
def test_make_with_preset_file_dict_and_config(tmp_path) -> None:
    ref = load_preset("tiny")
    path = tmp_path / "farm.yaml"
    path.write_text(yaml.safe_dump(ref.to_dict()))
    for spec in ("tiny", str(path), path, ref.to_dict(), ref):
        for mode in MODES:
            env = make(spec, mode)
            assert env.unwrapped.config == ref
            env.reset(seed=0)
    with pytest.raises(ConfigError, match="neither a preset"):
        gym.make("ServerFarm-v0", scenario="no-such-farm")


def test_default_scenario_and_modes() -> None:
    env = gym.make("ServerFarm-v0")
    assert env.unwrapped.config.name == "tiny" and env.unwrapped.action_mode == "server"
    assert gym.make("ServerFarmGroup-v0").unwrapped.action_mode == "group"
    assert env.spec.max_episode_steps == 1000


@pytest.mark.parametrize("mode", MODES)
def test_max_episode_steps_override_truncates(mode: str) -> None:
    env = make("tiny", mode, max_episode_steps=5)
    _, info = env.reset(seed=0)
    for t in range(1, 6):
        _, _, term, trunc, info = env.step(int(np.flatnonzero(info["action_mask"])[0]))
        assert not term
        assert trunc == (t == 5)


def test_registration_survives_reload() -> None:
    importlib.reload(envs)
    importlib.reload(envs)
    envs.register_envs()
    for env_id in IDS.values():
        assert env_id in gym.registry
        assert gym.registry[env_id].max_episode_steps == 1000
    gym.make("ServerFarm-v0", scenario="tiny").reset(seed=0)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"action_mode": "servers"}, "action_mode"),
        ({"reward_eta": "fixed"}, "reward_eta"),
        ({"reward_eta": -1.0}, "reward_eta"),
        ({"reward_eta": float("nan")}, "reward_eta"),
        ({"eta_tau": 0}, "eta_tau"),
        ({"reward_scale": 0.0}, "reward_scale"),
        ({"objective": "money"}, "objective"),
        ({"invalid_action": "ignore"}, "invalid_action"),
        ({"warmup_epochs": -1}, "warmup_epochs"),
        ({"warmup_policy": "jsq"}, "warmup_policy"),
        ({"render_mode": "video"}, "render_mode"),
    ],
)
def test_constructor_validation(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ServerFarmEnv("tiny", **kwargs)


def test_step_before_reset() -> None:
    with pytest.raises(RuntimeError, match="reset"):
        ServerFarmEnv("tiny").step(0)


def test_returned_arrays_are_copies() -> None:
    env = ServerFarmEnv("tiny")
    obs, info = env.reset(seed=0)
    keep_obs, keep_mask = obs.copy(), info["action_mask"].copy()
    obs[:] = 7
    info["action_mask"][:] = False
    env.action_masks()[:] = False
    np.testing.assert_array_equal(env.action_masks(), keep_mask)
    a = int(np.flatnonzero(keep_mask)[0])
    obs2, _, _, _, _ = env.step(a)
    assert env.observation_space.contains(obs2)
    assert not np.array_equal(obs2, np.full_like(keep_obs, 7))


@pytest.mark.parametrize("mode", MODES)
def test_render_ansi(mode: str) -> None:
    env = make("tiny", mode, render_mode="ansi")
    env.reset(seed=0)
    text = env.render()
    assert isinstance(text, str) and "t=" in text
    for g in env.unwrapped.config.groups:
        assert g.name in text
    plain = ServerFarmEnv("tiny", action_mode=mode)
    plain.reset(seed=0)
    with pytest.warns(UserWarning, match="render_mode"):
        assert plain.render() is None
    big = ServerFarmEnv("large-10k", render_mode="ansi")
    big.reset(seed=0)
    assert "..." in big.render()  # long groups are abbreviated


# ---------------------------------------------------------------------------------------------
# vector envs
# ---------------------------------------------------------------------------------------------
def _drive_gym_vector(venv: gym.vector.VectorEnv, steps: int) -> None:
    obs, infos = venv.reset(seed=[1, 2])
    assert obs.shape == (2, *venv.single_observation_space.shape)
    trunc_seen = 0
    for _ in range(steps):
        masks = infos["action_mask"]
        actions = np.array([int(np.flatnonzero(m)[-1]) for m in masks])
        obs, rewards, term, trunc, infos = venv.step(actions)
        assert obs.shape[0] == 2 and rewards.shape == (2,) and not term.any()
        assert all(venv.single_observation_space.contains(o) for o in obs)
        trunc_seen += int(trunc.sum())
    venv.close()
    assert trunc_seen >= 2  # max_episode_steps=3 below: both copies truncate


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_gymnasium_make_vec(mode: str) -> None:
    kw = {"vector_kwargs": {"context": "fork"}} if mode == "async" else {}
    venv = gym.make_vec(
        "ServerFarm-v0", num_envs=2, vectorization_mode=mode, scenario="tiny",
        max_episode_steps=3, **kw,
    )  # fmt: skip
    _drive_gym_vector(venv, 8)


def test_gymnasium_async_vector_env_group_mode() -> None:
    fns = [lambda: gym.make("ServerFarmGroup-v0", scenario="small-1", max_episode_steps=3)] * 2
    _drive_gym_vector(gym.vector.AsyncVectorEnv(fns, context="fork"), 8)


# ---------------------------------------------------------------------------------------------
# what other RL libraries rely on: int8 masks, NumPy info values, invalid-action modes, bad input
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("env_id", ["ServerFarm-v0", "ServerFarmGroup-v0", "ServerFarmTokens-v0"])
def test_every_id_passes_the_checker_and_samples_with_its_mask(env_id: str) -> None:
    env = gym.make(env_id, scenario="paper-100")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", InvalidActionWarning)
        gym_check_env(env.unwrapped)
    _, info = env.reset(seed=0)
    rng_hits = 0
    for _ in range(50):
        mask = env.unwrapped.action_masks()
        assert mask.dtype == np.int8 and set(np.unique(mask)) <= {0, 1}
        np.testing.assert_array_equal(mask, info["action_mask"])
        a = env.action_space.sample(mask=mask)  # Gymnasium requires int8 masks here
        rng_hits += int(mask[a] == 1)
        _, _, _, _, info = env.step(a)
        assert not info["invalid_action"] and info["invalid_actions"] == 0
    assert rng_hits == 50


def test_info_values_are_numpy_with_stable_dtypes() -> None:
    env = ServerFarmEnv("tiny", objective="cost")
    infos = [env.reset(seed=0)[1]]
    infos += [env.step(int(np.argmax(env.action_masks())))[4] for _ in range(5)]
    dtypes = {k: (type(v), getattr(v, "dtype", None)) for k, v in infos[0].items()}
    for info in infos:
        assert {k: (type(v), getattr(v, "dtype", None)) for k, v in info.items()} == dtypes
    for key in ("work", "energy", "time", "efficiency", "eta", "cost", "cost_efficiency"):
        assert type(infos[0][key]) is np.float64, key
    assert type(infos[0]["job_type"]) is np.int64 and type(infos[0]["invalid_actions"]) is np.int64
    assert infos[0]["action_mask"].dtype == np.int8
    assert infos[0]["blocking_per_type"].dtype == np.float64
    # a Python bool: SyncVectorEnv batches it into a bool array (a NumPy bool: an object array)
    assert type(infos[0]["invalid_action"]) is bool


def _masked(env: ServerFarmEnv, seed: int) -> int:
    """Reset ``env`` and step until an action is masked out; that action."""
    _, info = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    while info["action_mask"].all():
        _, _, _, _, info = env.step(masked_choice(rng, info["action_mask"]))
    return int(np.flatnonzero(info["action_mask"] == 0)[0])


def test_fallback_warns_once_and_counts_and_penalty_lowers_the_reward() -> None:
    fb = ServerFarmEnv("paper-100", reward_eta=0.5)
    pen = ServerFarmEnv("paper-100", reward_eta=0.5, invalid_action="penalty", invalid_penalty=2.5)
    bad = _masked(fb, 3)
    assert _masked(pen, 3) == bad
    with pytest.warns(InvalidActionWarning, match="masked out") as record:
        o1, r1, _, _, i1 = fb.step(bad)
        bad2 = (
            int(np.flatnonzero(i1["action_mask"] == 0)[0]) if not i1["action_mask"].all() else None
        )
        if bad2 is not None:
            fb.step(bad2)
    assert len(record) == 1  # once per env
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # penalty: no warning
        o2, r2, _, _, i2 = pen.step(bad)
    np.testing.assert_array_equal(o1, o2)
    assert r2 == r1 - 2.5 and i1["invalid_action"] and i2["invalid_action"]
    assert i1["invalid_actions"] == i2["invalid_actions"] == 1
    assert fb.step(0)[4]["invalid_actions"] >= 1 + (bad2 is not None)
    fb.reset(seed=1)
    assert fb.step(int(np.flatnonzero(fb.action_masks())[0]))[4]["invalid_actions"] == 0
    strict = ServerFarmEnv("paper-100", invalid_action="raise")
    with pytest.raises(ValueError, match="masked out"):
        strict.step(_masked(strict, 3))
    for bad_arg in ({"invalid_action": "ignore"}, {"invalid_penalty": -1.0}):
        with pytest.raises(ValueError, match=next(iter(bad_arg))):
            ServerFarmEnv("tiny", **bad_arg)


def test_bad_actions_and_reset_options_are_refused_by_name() -> None:
    env = ServerFarmEnv("tiny")
    env.reset(seed=0)
    for a in (True, False, np.bool_(True), np.array(True)):
        with pytest.raises(ValueError, match="not in the action space"):
            env.step(a)
    huge = 2**64 - 1
    for a in (np.uint64(huge), np.array(huge, dtype=np.uint64)):
        with pytest.raises(ValueError, match=f"action {huge} "):
            env.step(a)
    for options in ("bad", ["reset_mask"], 3):
        with pytest.raises(ValueError, match="options: expected a dict or None"):
            env.reset(options=options)
    env.reset(options={})  # a dict (unused) is fine
