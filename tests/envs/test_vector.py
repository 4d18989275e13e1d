"""The native vector env (serverfarm_gym.envs.vector): same trajectories as the single env, Gymnasium's next-step
autoreset, masks, the SB3 adapter (sb3-contrib's mask protocol, a short MaskablePPO run)."""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from serverfarm_gym import envs  # noqa: F401  (registers the env ids)
from serverfarm_gym.envs.config import farm_from_dict
from serverfarm_gym.envs.scenarios import load_scenario
from serverfarm_gym.envs.server_farm import InvalidActionWarning, ServerFarmEnv
from serverfarm_gym.envs.vector import ServerFarmVectorEnv

SCALARS = ("work", "energy", "time", "throughput", "power", "efficiency", "blocking", "eta")


def _time_varying() -> object:
    d = load_scenario("tiny").to_dict()
    d["interval_length"] = 2.0
    d["groups"][1]["price"] = [1.0, 3.0]
    d["job_types"][0]["arrival_rate"] = [1.5, 3.0]
    return farm_from_dict(d)


CASES = [
    ("ServerFarm-v0", "paper-100", {}),
    ("ServerFarmGroup-v0", "paper-100", {}),
    ("ServerFarm-v0", "tiny", {"warmup_epochs": 30, "warmup_policy": "random"}),
    ("ServerFarmGroup-v0", "tv", {"objective": "cost", "reward_eta": 0.3}),
    ("ServerFarm-v0", "det", {}),
]


def _scenario(name: str) -> object:
    if name == "tv":
        return _time_varying()
    if name == "det":
        return load_scenario("small-1").with_job_size({"distribution": "erlang", "k": 3})
    return name


@pytest.mark.parametrize(("env_id", "scen", "kw"), CASES, ids=lambda x: str(x))
def test_vector_env_matches_single_envs(env_id: str, scen: str, kw: dict) -> None:
    """Env i of a vector env reset with seed s follows a single env reset with seed s + i, step
    for step and bit for bit, across the next-step autoreset (actions partly masked out)."""
    n, horizon, seed = 3, 7, 11
    scenario = _scenario(scen)
    venv = gym.make_vec(env_id, num_envs=n, vectorization_mode="vector_entry_point",
                        scenario=scenario, max_episode_steps=horizon, **kw)  # fmt: skip
    singles = [gym.make(env_id, scenario=scenario, max_episode_steps=horizon, **kw)
               for _ in range(n)]  # fmt: skip
    obs, infos = venv.reset(seed=seed)
    outs = [s.reset(seed=seed + i) for i, s in enumerate(singles)]
    for i in range(n):
        np.testing.assert_array_equal(obs[i], outs[i][0])
    rng = np.random.default_rng(0)
    done = np.zeros(n, dtype=bool)
    for t in range(3 * horizon + 2):
        masks = infos["action_mask"]
        acts = np.array([int(rng.choice(np.flatnonzero(m))) if t % 5 else int(rng.integers(len(m)))
                         for m in masks])  # fmt: skip
        obs, rew, term, trunc, infos = venv.step(acts)
        assert not term.any()
        for i, env in enumerate(singles):
            if done[i]:  # next-step autoreset: the action is ignored
                o, info = env.reset()
                r, tr = 0.0, False
            else:
                o, r, _, tr, info = env.step(int(acts[i]))
            np.testing.assert_array_equal(obs[i], o)
            assert rew[i] == r and trunc[i] == tr
            np.testing.assert_array_equal(infos["action_mask"][i], info["action_mask"])
            np.testing.assert_array_equal(infos["blocking_per_type"][i], info["blocking_per_type"])
            assert infos["job_type"][i] == info["job_type"]
            assert infos["invalid_action"][i] == info["invalid_action"]
            for key in SCALARS:
                assert infos[key][i] == info[key], key
            if kw.get("objective") == "cost":
                assert infos["cost_efficiency"][i] == info["cost_efficiency"]
        done = trunc
    assert infos["_efficiency"].all()


def test_make_vec_default_mode_and_spaces() -> None:
    venv = gym.make_vec("ServerFarmGroup-v0", num_envs=4, scenario="paper-100")
    assert isinstance(venv.unwrapped, ServerFarmVectorEnv)
    assert venv.metadata["autoreset_mode"] == gym.vector.AutoresetMode.NEXT_STEP
    obs, infos = venv.reset(seed=0)
    assert obs.shape == (4, *venv.single_observation_space.shape)
    assert obs in venv.observation_space
    masks = venv.unwrapped.action_masks()
    assert masks.shape == (4, venv.single_action_space.n) and masks.dtype == np.int8
    np.testing.assert_array_equal(masks, infos["action_mask"])
    assert infos["action_mask"].dtype == np.int8  # the single env's masks, stacked
    assert len(venv.unwrapped.call("action_masks")) == 4
    assert venv.unwrapped.get_attr("action_mode") == ("group",) * 4
    _, rew, _, trunc, _ = venv.step(venv.action_space.sample())
    assert rew.shape == (4,) and rew.dtype == np.float64 and not trunc.any()
    assert venv.unwrapped.sims[0].stats().epochs == 2  # the row's simulator view
    venv.close()


def test_seeding_and_reset_without_seed_continue() -> None:
    a = ServerFarmVectorEnv(2, "tiny", max_episode_steps=None)
    b = ServerFarmVectorEnv(2, "tiny", max_episode_steps=None)
    oa, _ = a.reset(seed=[5, 9])
    ob, _ = b.reset(seed=[5, 9])
    np.testing.assert_array_equal(oa, ob)
    for _ in range(20):
        acts = a.action_masks().argmax(axis=1)
        ra = a.step(acts)[1]
        rb = b.step(acts)[1]
        np.testing.assert_array_equal(ra, rb)
    # a reset without a seed continues the streams: both stay in lockstep
    np.testing.assert_array_equal(a.reset()[0], b.reset()[0])
    with pytest.raises(ValueError, match="seed"):
        a.reset(seed=[1, 2, 3])


def test_parallel_kernel_gives_the_same_results() -> None:
    kw = {"num_envs": 5, "scenario": "small-1", "max_episode_steps": 4}
    serial, par = ServerFarmVectorEnv(**kw), ServerFarmVectorEnv(parallel=True, **kw)
    serial.reset(seed=1)
    par.reset(seed=1)
    for _ in range(12):
        acts = serial.action_masks().argmax(axis=1)
        s, p = serial.step(acts), par.step(acts)
        for x, y in zip(s[:4], p[:4], strict=True):
            np.testing.assert_array_equal(x, y)


def test_invalid_actions_raise_or_fall_back() -> None:
    for mode in ("raise", "fallback"):
        venv = ServerFarmVectorEnv(1, "tiny", invalid_action=mode)
        _, infos = venv.reset(seed=0)
        while infos["job_type"][0] != 1:  # tiny: "gpu" jobs (type 1) cannot use server 0
            _, _, _, _, infos = venv.step(venv.action_masks().argmax(axis=1))
        if mode == "raise":
            with pytest.raises(ValueError, match="masked out"):
                venv.step(np.zeros(1, dtype=np.int64))
        else:
            _, _, _, _, infos = venv.step(np.zeros(1, dtype=np.int64))
            assert infos["invalid_action"][0] and venv.n_invalid[0] == 1
    with pytest.raises(RuntimeError, match="reset"):
        ServerFarmVectorEnv(1, "tiny").step(np.zeros(1, dtype=np.int64))
    with pytest.raises(ValueError, match="num_envs"):
        ServerFarmVectorEnv(0, "tiny")


def test_sb3_adapter_protocol() -> None:
    from sb3_contrib.common.maskable.utils import get_action_masks, is_masking_supported

    from serverfarm_gym.envs.vector import SB3VecEnvAdapter

    venv = SB3VecEnvAdapter(num_envs=3, scenario="tiny", max_episode_steps=5)
    assert is_masking_supported(venv)
    venv.seed(4)
    obs = venv.reset()
    assert obs.shape == (3, 6) and len(venv.reset_infos) == 3
    single = gym.make("ServerFarm-v0", scenario="tiny", max_episode_steps=5)
    o, info = single.reset(seed=4)
    np.testing.assert_array_equal(obs[0], o)
    dones_seen = 0
    for _ in range(12):
        masks = get_action_masks(venv)
        assert masks.shape == (3, 4)
        acts = masks.argmax(axis=1)
        obs, rewards, dones, infos = venv.step(acts)
        # SB3 same-step autoreset, compared with env 0 driven by hand
        o, r, _, tr, info = single.step(int(acts[0]))
        assert rewards[0] == r and dones[0] == tr
        assert infos[0]["work"] == info["work"] and infos[0]["eta"] == info["eta"]
        if tr:
            np.testing.assert_array_equal(infos[0]["terminal_observation"], o)
            assert infos[0]["TimeLimit.truncated"]
            o, info = single.reset()
        np.testing.assert_array_equal(obs[0], o)
        dones_seen += int(dones.sum())
    assert dones_seen == 6  # 3 envs truncated twice in 12 steps of 5
    assert venv.get_attr("action_mode") == ["server"] * 3
    assert venv.env_is_wrapped(gym.Wrapper) == [False] * 3
    venv.close()


def test_maskable_ppo_trains_on_the_adapter() -> None:
    from sb3_contrib import MaskablePPO

    from serverfarm_gym.envs.vector import make_sb3_vec_env

    venv = make_sb3_vec_env(4, "tiny", max_episode_steps=50)
    model = MaskablePPO("MlpPolicy", venv, n_steps=32, batch_size=64, n_epochs=1, seed=0,
                        device="cpu")  # fmt: skip
    model.learn(256)
    assert model.num_timesteps >= 256
    acts, _ = model.predict(venv.reset(), action_masks=np.stack(venv.env_method("action_masks")))
    assert np.stack(venv.env_method("action_masks"))[np.arange(4), acts].all()


def test_parallel_kernel_runs_threads_from_the_disk_cache() -> None:
    """Regression: ``vec_step_parallel`` once shared the serial kernel's cache entry (numba keys
    its cache by function name and line, not by ``parallel=True``), so from a warm cache it ran
    serially. Two fresh processes: the second loads both kernels from the cache."""
    import subprocess
    import sys

    code = (
        "import numba, numpy as np\n"
        "from serverfarm_gym.envs.vector import ServerFarmVectorEnv\n"
        "for par in (False, True):\n"
        "    v = ServerFarmVectorEnv(4, 'tiny', parallel=par)\n"
        "    v.reset(seed=0)\n"
        "    v.step(v.action_masks().argmax(axis=1))\n"
        "print(numba.threading_layer())\n"  # raises unless a parallel region has run
    )
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr[-2000:]


@pytest.mark.parametrize("scenario", ["paper-100", "tiny"])
def test_incremental_rates_stay_exact_and_are_resummed(scenario: str) -> None:
    """Steps keep the rates W, P, C incrementally (no O(S) work per step); they stay equal to a
    re-sum over all servers up to rounding (and are re-summed every ``max(RESUM_STEPS, S)``
    steps, across which this runs)."""
    from serverfarm_gym.envs import kernels as kn
    from serverfarm_gym.envs.kernels import layout
    from serverfarm_gym.envs.kernels.env_step import RESUM_STEPS

    env = gym.make("ServerFarm-v0", scenario=scenario, max_episode_steps=None).unwrapped
    env.reset(seed=0)
    sim = env.sim
    fs = sim._fs

    def resummed() -> np.ndarray:
        occ, sg = sim.occ, env.config.server_group
        mu, pw = sim._mu, sim._pw
        price = sim._prices[int(sim._isc[kn.INTERVAL])]
        w = p = c = 0.0
        for s in range(len(occ)):  # the order recompute_rates sums in
            k, n = sg[s], occ[s]
            w += mu[k, n]
            p += pw[k, n]
            c += price[k] * pw[k, n]
        return np.array([w, p, c])

    for steps in range(1, RESUM_STEPS + 2):
        env.step(env.action_masks().argmax())
        if steps in (1, 1000, RESUM_STEPS, RESUM_STEPS + 1):
            np.testing.assert_allclose(
                fs[[layout.WRATE, layout.PRATE, layout.CRATE]], resummed(), rtol=1e-12, atol=1e-12
            )


@pytest.mark.parametrize(
    "bad", [[1.7, 0], ["1", "0"], [[1, 0]], [0], [0, 0, 0], [-1, 0], [10**6, 0], None]
)
def test_vector_env_refuses_what_the_action_space_does_not_contain(bad) -> None:
    # like the single env: no silent truncation of floats, no wrap-around of indices
    venv = ServerFarmVectorEnv(2, "tiny")
    venv.reset(seed=0)
    with pytest.raises(ValueError, match="actions"):
        venv.step(np.array(bad, dtype=object) if bad is None else bad)


@pytest.mark.parametrize("mode", ["server", "group"])
@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
def test_pickled_or_copied_vector_env_continues_exactly(mode: str, how: str) -> None:
    import copy
    import pickle

    venv = ServerFarmVectorEnv(3, "tiny", action_mode=mode, max_episode_steps=25)
    venv.reset(seed=5)
    rng = np.random.default_rng(0)

    def act(v: ServerFarmVectorEnv) -> np.ndarray:
        m = v.action_masks()
        return np.array([rng.choice(np.flatnonzero(row)) for row in m])

    for _ in range(10):
        venv.step(act(venv))
    twin = pickle.loads(pickle.dumps(venv)) if how == "pickle" else copy.deepcopy(venv)
    for _ in range(60):  # across autoresets (25-step episodes)
        a = act(venv)
        o1, r1, _, t1, _ = venv.step(a)
        o2, r2, _, t2, _ = twin.step(a)
        np.testing.assert_array_equal(o1, o2)
        np.testing.assert_array_equal(r1, r2)
        np.testing.assert_array_equal(t1, t2)
    assert [s.stats().efficiency for s in venv.sims] == [s.stats().efficiency for s in twin.sims]


def test_set_warmup_starts_each_env_after_its_own_warmup() -> None:
    """Per-env warm-ups (staggered over a day: the trainer does this on time-varying farms) put
    each env at its own time after the reset; env e with the same seed as a single env with the
    same warm-up is at the same clock. Bad lengths are refused by name."""
    venv = ServerFarmVectorEnv(3, "geo-us-eu", action_mode="group", warmup_epochs=100)
    venv.set_warmup([100, 50_000, 150_000])
    venv.reset(seed=7)
    times = [sim.time for sim in venv.sims]
    assert times[0] < times[1] < times[2]
    assert venv.sims[2].interval > 0  # 150,000 epochs of a 226,080-epoch day: past hour 0
    single = ServerFarmVectorEnv(1, "geo-us-eu", action_mode="group", warmup_epochs=50_000)
    single.reset(seed=8)  # env 1 of the seed-7 vector env has seed 8
    assert single.sims[0].time == times[1]
    for bad in ([1, 2], [0, -1, 5], [0.5, 1.0, 2.0]):
        with pytest.raises(ValueError, match="epochs: expected 3 non-negative integers"):
            venv.set_warmup(bad)


# ---------------------------------------------------------------------------------------------
# Gymnasium 1.x conformance: the three autoreset modes against SyncVectorEnv, step for step
# ---------------------------------------------------------------------------------------------
def _same(a: Any, b: Any, path: str = "") -> None:
    """Equal values and dtypes, through dicts and SyncVectorEnv's object arrays of final_obs."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), (path, set(a) ^ set(b))
        for k in a:
            _same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, np.ndarray) and a.dtype == object:
        assert b.dtype == object, path
        for x, y in zip(a, b, strict=True):
            assert (x is None) == (y is None), path
            if x is not None:
                np.testing.assert_array_equal(x, y, err_msg=path)
    else:
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype, (path, a.dtype, b.dtype)
        np.testing.assert_array_equal(a, b, err_msg=path)


@pytest.mark.parametrize("mode", list(AutoresetMode), ids=lambda m: m.value)
@pytest.mark.parametrize(
    ("env_id", "kw"),
    [
        ("ServerFarm-v0", {}),
        (
            "ServerFarmGroup-v0",
            {"objective": "cost", "reward_eta": 0.3, "invalid_action": "penalty"},
        ),
    ],
    ids=["server", "group-cost-penalty"],
)
def test_autoreset_modes_match_sync_vector_env(mode: AutoresetMode, env_id: str, kw: dict) -> None:
    """Observations, rewards, dones and every info (final_obs / final_info of SAME_STEP, the
    partial resets of DISABLED) equal, with dtypes, to SyncVectorEnv over single envs."""
    n, horizon = 3, 5
    kw = dict(kw, scenario=_time_varying() if "objective" in kw else "tiny")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InvalidActionWarning)
        native = gym.make_vec(env_id, n, "vector_entry_point", max_episode_steps=horizon,
                              autoreset_mode=mode, **kw)  # fmt: skip
        sync = gym.make_vec(env_id, n, "sync", vector_kwargs={"autoreset_mode": mode},
                            max_episode_steps=horizon, **kw)  # fmt: skip
        assert native.autoreset_mode == sync.autoreset_mode == native.metadata["autoreset_mode"]
        for x, y in zip(native.reset(seed=3), sync.reset(seed=3), strict=True):
            _same(x, y, "reset")
        rng = np.random.default_rng(0)
        ended = 0
        for t in range(4 * horizon + 3):
            a = rng.integers(0, native.single_action_space.n, n)  # partly masked: replaced
            out_n, out_s = native.step(a), sync.step(a)
            for x, y in zip(out_n, out_s, strict=True):
                _same(x, y, f"step {t}")
            ended += int(out_n[3].sum())
            if mode is AutoresetMode.DISABLED and out_n[3].any():
                with pytest.raises(RuntimeError, match="reset_mask"):
                    native.step(a)
                m = out_n[3].copy()
                for x, y in zip(native.reset(options={"reset_mask": m}),
                                sync.reset(options={"reset_mask": m}), strict=True):  # fmt: skip
                    _same(x, y, f"partial reset {t}")
        assert ended >= n * 3


def test_reset_mask_options_and_autoreset_mode_are_checked_by_name() -> None:
    v = ServerFarmVectorEnv(3, "tiny", autoreset_mode="SameStep")
    assert v.autoreset_mode is AutoresetMode.SAME_STEP
    with pytest.raises(ValueError, match="first reset must reset every env"):
        v.reset(options={"reset_mask": np.array([True, False, False])})
    v.reset(seed=0)
    for bad in (np.array([1, 0, 0]), np.array([True, False]), [True, False, True]):
        with pytest.raises(ValueError, match="options: 'reset_mask' must be a numpy bool array"):
            v.reset(options={"reset_mask": bad})
    with pytest.raises(ValueError, match="selects no env"):
        v.reset(options={"reset_mask": np.zeros(3, dtype=bool)})
    with pytest.raises(ValueError, match="options: expected a dict or None"):
        v.reset(options="bad")
    with pytest.raises(ValueError, match="autoreset_mode: unknown 'sometimes'"):
        ServerFarmVectorEnv(2, "tiny", autoreset_mode="sometimes")
    with pytest.raises(ValueError, match="vector_kwargs: \\['shared_memory'\\]"):
        ServerFarmVectorEnv(2, "tiny", vector_kwargs={"shared_memory": True})
    assert (
        ServerFarmVectorEnv(2, "tiny", vector_kwargs={"autoreset_mode": "Disabled"}).autoreset_mode
        is AutoresetMode.DISABLED
    )


def test_make_vec_takes_wrappers_and_vector_kwargs() -> None:
    """Gymnasium's make_vec refuses wrappers / vector_kwargs in its default (native) mode;
    serverfarm_gym.envs.vector.make_vec routes them: native for what it understands, sync otherwise."""
    from serverfarm_gym.envs.vector import make_vec
    from serverfarm_gym.envs.wrappers import MaskInObservation

    v = make_vec("ServerFarm-v0", 2, vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP})
    assert (
        isinstance(v.unwrapped, ServerFarmVectorEnv) and v.autoreset_mode is AutoresetMode.SAME_STEP
    )
    w = make_vec("ServerFarm-v0", 2, wrappers=[MaskInObservation], scenario="tiny")
    assert isinstance(w, gym.vector.SyncVectorEnv)
    obs, _ = w.reset(seed=0)
    assert obs["action_mask"].dtype == np.int8 and obs["action_mask"].shape == (2, 4)
    s = make_vec("ServerFarm-v0", 2, vector_kwargs={"copy": False, "observation_mode": "same"})
    assert isinstance(s, gym.vector.SyncVectorEnv)
    with pytest.raises(ValueError, match="vectorization_mode: 'vector_entry_point'"):
        make_vec("ServerFarm-v0", 2, "vector_entry_point", wrappers=[MaskInObservation])


def test_huge_num_envs_and_bad_actions_are_refused_up_front() -> None:
    from serverfarm_gym.envs.vector import bytes_per_env, max_num_envs

    limit = max_num_envs(ServerFarmEnv("paper-100"))
    assert 1 < limit < 2**40 and bytes_per_env(ServerFarmEnv("paper-100")) > 1000
    for make in (
        lambda: gym.make_vec("ServerFarm-v0", num_envs=10**12, scenario="paper-100"),
        lambda: ServerFarmVectorEnv(limit + 1, "paper-100"),
    ):
        with pytest.raises(ValueError, match=r"num_envs: .* at most [\d,]+ fit"):
            make()
    for bad in (True, 2.0, 0):
        with pytest.raises(ValueError, match="num_envs"):
            ServerFarmVectorEnv(bad, "tiny")
    v = ServerFarmVectorEnv(2, "tiny")
    v.reset(seed=0)
    huge = 2**64 - 1
    with pytest.raises(ValueError, match=f"\\[{huge}, 0\\] has an index outside"):
        v.step(np.array([huge, 0], dtype=np.uint64))
    with pytest.raises(ValueError, match="expected integers"):
        v.step(np.array([True, False]))
    v.step(np.array([1, 0], dtype=np.uint64))  # small unsigned indices are fine


def test_fallback_warns_once_and_penalty_in_the_vector_env() -> None:
    fb = ServerFarmVectorEnv(4, "paper-100", reward_eta=0.5)
    pen = ServerFarmVectorEnv(4, "paper-100", reward_eta=0.5, invalid_action="penalty",
                              invalid_penalty=3.0)  # fmt: skip
    fb.reset(seed=1)
    pen.reset(seed=1)
    rng = np.random.default_rng(2)
    with pytest.warns(InvalidActionWarning) as record:
        for _ in range(20):
            a = rng.integers(0, fb.single_action_space.n, 4)
            _, r1, _, _, i1 = fb.step(a)
            _, r2, _, _, i2 = pen.step(a)
            np.testing.assert_array_equal(r2, r1 - 3.0 * i1["invalid_action"])
            np.testing.assert_array_equal(i1["invalid_actions"], i2["invalid_actions"])
    assert len(record) == 1 and i1["invalid_actions"].sum() > 0


def _masked_random(venv: ServerFarmVectorEnv, rng: np.random.Generator) -> np.ndarray:
    m = venv.action_masks()
    return np.array([rng.choice(np.flatnonzero(r)) if r.any() else 0 for r in m])


def test_job_area_is_littles_law_of_the_mean_response_time() -> None:
    """``job_area`` summed since the reset over the jobs accepted (arrivals with a vacancy) is
    the info's mean response time, the single env's Little's law, env by env."""
    venv = ServerFarmVectorEnv(3, "tiny-slo", max_episode_steps=None)
    rng = np.random.default_rng(0)
    venv.reset(seed=5)
    area, accepted = np.zeros(3), np.zeros(3)
    info: dict[str, Any] = {}
    for _ in range(200):
        accepted += venv.action_masks().any(-1)
        _, _, _, _, info = venv.step(_masked_random(venv, rng))
        area += venv.job_area
    assert (area > 0).all()
    np.testing.assert_allclose(area / accepted, info["mean_response_time"], rtol=1e-12)


def test_job_area_is_the_lagrangian_term_and_survives_a_same_step_reset() -> None:
    """The reward with beta is the reward without it minus beta job_area / reward_scale; in
    SAME_STEP mode the step that ends an episode still reports its own area (the NEXT_STEP
    env's), not the new episode's 0."""
    kw: dict[str, Any] = {"max_episode_steps": 5}
    plain = ServerFarmVectorEnv(2, "tiny-slo", **kw)
    priced = ServerFarmVectorEnv(2, "tiny-slo", **kw)
    same = ServerFarmVectorEnv(2, "tiny-slo", autoreset_mode="SameStep", **kw)
    plain.slo_multiplier, priced.slo_multiplier = 0.0, 0.7  # (an SLO farm starts at 1/D)
    for v in (plain, priced, same):
        v.reset(seed=3)
    rng = np.random.default_rng(1)
    for _ in range(5):
        a = _masked_random(plain, rng)
        r0, r1 = plain.step(a)[1], priced.step(a)[1]
        trunc = same.step(a)[3]
        np.testing.assert_allclose(
            r1, r0 - 0.7 * plain.job_area / plain._template.reward_scale, rtol=1e-12
        )
        np.testing.assert_array_equal(same.job_area, plain.job_area)
    assert trunc.all() and (same.job_area > 0).all()


def test_vector_masks_are_the_single_envs_dtype() -> None:
    # one mask dtype everywhere: Gymnasium's Discrete.sample(mask=) requires int8
    v = ServerFarmVectorEnv(3, "tiny", max_episode_steps=None)
    v.reset(seed=0)
    single = gym.make("serverfarm_gym:ServerFarm-v0", scenario="tiny")
    _, info = single.reset(seed=0)
    masks = v.action_masks()
    assert masks.dtype == np.int8 == single.unwrapped.action_masks().dtype
    assert masks.dtype == info["action_mask"].dtype
    assert masks.shape == (3, single.action_space.n)
    assert set(np.unique(masks)) <= {0, 1}
    for i in range(3):
        a = v.single_action_space.sample(mask=masks[i])
        assert masks[i, a] == 1
