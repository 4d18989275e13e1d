"""Dynamic right-sizing (groups with ``sleep``): validation, the simulator against exact references
(Welch's closed form for the M/M/1 with exponential setup; a per-server CTMC solved here, with no
aggregation and no code of the project), bookkeeping invariants and the env's observation.

Statistical checks compare the mean over independent replications with the exact value within a
Student-t interval at 99.9% (fixed seeds)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from scipy import stats

from serverfarm_gym.envs.config import ConfigError, FarmConfig, farm_from_dict
from serverfarm_gym.envs.kernels import layout
from serverfarm_gym.envs.kernels.sleep import sleep_rates
from serverfarm_gym.envs.observation import obs_size
from serverfarm_gym.envs.server_farm import ServerFarmEnv
from serverfarm_gym.envs.simulator import MODE_OFF, MODE_ON, MODE_SETUP, FarmSimulator, _sleep_table
from tests.helpers.sleep import SLEEP, exact_priority_chain, sleep_farm_dict

REPLICATIONS = 12
T_QUANTILE = float(stats.t.ppf(0.9995, REPLICATIONS - 1))  # two-sided 99.9%


def _table(c: FarmConfig) -> np.ndarray:
    return np.repeat(c.group_efficiency[:, None], c.max_buffer + 1, axis=1)


# ---- validation -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("sleep", "field"),
    [
        ({"power": -1.0}, "sleep.power"),
        ({"setup_rate": 0.0}, "sleep.setup_rate"),
        ({"setup_rate": "fast"}, "sleep.setup_rate"),
        ({"setup_power": math.nan}, "sleep.setup_power"),
        ({"idle_timeout_rate": -2.0}, "sleep.idle_timeout_rate"),
        ({"idle_timeout_rate": "soon"}, "sleep.idle_timeout_rate"),
        ({"idle_timeout_rate": -math.inf}, "sleep.idle_timeout_rate"),
        ({"wake": 1.0}, "sleep"),
    ],
)
def test_bad_sleep_fields_are_refused_by_name(sleep: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=f"groups\\[0\\] \\(a\\)\\.{field}"):
        farm_from_dict(sleep_farm_dict(sleep_a={**SLEEP, **sleep}))


def test_sleep_needs_every_field_and_a_mapping() -> None:
    partial = {k: v for k, v in SLEEP.items() if k != "setup_rate"}
    with pytest.raises(ConfigError, match=r"\.sleep\.setup_rate: missing"):
        farm_from_dict(sleep_farm_dict(sleep_a=partial))
    d = sleep_farm_dict()
    d["groups"][0]["sleep"] = 3.0
    with pytest.raises(ConfigError, match=r"groups\[0\] \(a\)\.sleep: expected a mapping"):
        farm_from_dict(d)


def test_sleep_needs_exponential_sizes() -> None:
    d = sleep_farm_dict()
    d["job_size"] = {"distribution": "deterministic"}
    with pytest.raises(ConfigError, match=r"\.sleep: right-sizing needs exponential"):
        farm_from_dict(d)


@pytest.mark.parametrize("inf", ["inf", ".inf", math.inf])
def test_infinite_timeout_spellings_and_round_trip(inf) -> None:
    c = farm_from_dict(sleep_farm_dict(sleep_a={**SLEEP, "idle_timeout_rate": inf}))
    assert c.groups[0].sleep.idle_timeout_rate == math.inf and c.has_sleep
    assert farm_from_dict(c.to_dict()) == c
    assert not farm_from_dict(sleep_farm_dict(sleep_a=None)).has_sleep


def test_force_general_is_refused_with_sleep() -> None:
    with pytest.raises(ValueError, match="force_general"):
        FarmSimulator(farm_from_dict(sleep_farm_dict()), force_general=True)


# ---- exact references -----------------------------------------------------------------------
def _replicate(c: FarmConfig, epochs: int) -> np.ndarray:
    """(efficiency, mean jobs in system, mean response time) per replication after a warm-up."""
    out = []
    for seed in range(REPLICATIONS):
        sim = FarmSimulator(c, seed=500 + seed)
        sim.run(epochs // 10, "priority", _table(c))
        st = sim.run(epochs, "priority", _table(c))
        out.append((st.efficiency, st.mean_jobs_in_system, st.mean_response_time))
    return np.array(out)


def _within_ci(samples: np.ndarray, exact: float) -> None:
    mean = samples.mean()
    half = T_QUANTILE * samples.std(ddof=1) / np.sqrt(len(samples))
    assert abs(mean - exact) <= half, (mean, exact, half)


def test_mm1_with_setup_closed_form() -> None:
    """One server, large buffer, off at once when idle: E[T] = 1/(mu - lambda) + 1/gamma."""
    lam, mu, gamma = 0.5, 1.0, 0.25
    c = farm_from_dict({
        "name": "mm1-setup",
        "groups": [{"name": "g", "count": 1, "service_rate": mu, "busy_power": 2.0,
                    "idle_power": 1.0, "buffer": 60,
                    "sleep": {"power": 0.1, "setup_rate": gamma, "setup_power": 3.0,
                              "idle_timeout_rate": "inf"}}],
        "job_types": [{"name": "j", "arrival_rate": lam, "groups": ["g"]}],
    })  # fmt: skip
    res = _replicate(c, 60_000)
    _within_ci(res[:, 2], 1.0 / (mu - lam) + 1.0 / gamma)


@pytest.mark.parametrize(
    "sleeps",
    [
        (SLEEP, None),
        ({**SLEEP, "idle_timeout_rate": "inf"}, {**SLEEP, "setup_rate": 2.0}),
        (None, {**SLEEP, "idle_timeout_rate": 0.3, "power": 0.0}),
    ],
    ids=["timeout", "off-at-once", "fast-group-sleeps"],
)
def test_farm_matches_exact_chain(sleeps) -> None:
    c = farm_from_dict(sleep_farm_dict(*sleeps))
    eff, en, et = exact_priority_chain(c)
    res = _replicate(c, 40_000)
    _within_ci(res[:, 0], eff)
    _within_ci(res[:, 1], en)
    _within_ci(res[:, 2], et)


def test_no_timeout_is_the_base_model() -> None:
    """idle_timeout_rate 0: servers start on and never sleep, so the right-sizing loop draws
    the same random numbers in the same order as the base loop: the same trajectory."""
    c0 = farm_from_dict(sleep_farm_dict(sleep_a=None))
    c1 = farm_from_dict(sleep_farm_dict(sleep_a={**SLEEP, "idle_timeout_rate": 0.0}))
    a = FarmSimulator(c0, seed=9).run(20_000, "priority", _table(c0))
    b = FarmSimulator(c1, seed=9).run(20_000, "priority", _table(c1))
    assert (a.accepted == b.accepted).all() and a.departures == b.departures
    assert b.efficiency == pytest.approx(a.efficiency, rel=1e-12)
    assert b.mean_response_time == pytest.approx(a.mean_response_time, rel=1e-12)


# ---- bookkeeping ----------------------------------------------------------------------------
@pytest.mark.parametrize("policy", ["priority", "random"])
def test_modes_and_rates_stay_consistent(policy: str) -> None:
    c = farm_from_dict(sleep_farm_dict({**SLEEP, "idle_timeout_rate": "inf"}, SLEEP, counts=(5, 3)))
    sim = FarmSimulator(c, seed=2)
    seen = set()
    for _ in range(40):
        sim.run(250, policy, _table(c) if policy == "priority" else None)
        modes, occ = sim.modes, sim.occ
        seen |= set(modes.tolist())
        assert (occ[modes == MODE_OFF] == 0).all()
        assert (occ[modes == MODE_SETUP] >= 1).all()
        counts = sim.mode_counts
        for k in range(c.n_groups):
            mine = c.server_group == k
            assert counts[k, 0] == int(np.sum(modes[mine] == MODE_OFF))
            assert counts[k, 1] == int(np.sum(modes[mine] == MODE_SETUP))
        # the incremental rates equal a re-sum by mode
        fs = sim._fs.copy()
        sleep_rates(sim.occ, c.server_group, c.mu_table, c.power_table, c.prices[0],
                    sim._modes, _sleep_table(c), fs)  # fmt: skip
        assert fs[layout.WRATE] == pytest.approx(sim._fs[layout.WRATE], abs=1e-9)
        assert fs[layout.PRATE] == pytest.approx(sim._fs[layout.PRATE], abs=1e-9)
        assert fs[layout.NJOBS] == sim.jobs_in_system == sim._fs[layout.NJOBS]
    assert seen == {MODE_ON, MODE_SETUP, MODE_OFF}


# ---- env ------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["server", "group"])
def test_env_observes_modes(mode: str) -> None:
    c = farm_from_dict(sleep_farm_dict(SLEEP, None, counts=(3, 2)))
    env = ServerFarmEnv(c, action_mode=mode)
    check_env(env, skip_render_check=True)
    obs, info = env.reset(seed=0)
    assert obs.shape == (obs_size(c, mode),)
    rng = np.random.default_rng(1)
    for _ in range(300):
        obs, _, _, _, info = env.step(int(rng.choice(np.flatnonzero(info["action_mask"]))))
        modes = env.sim.modes
        occ = env.sim.occ
        j = info["job_type"]
        avail = c.server_availability[j] & (occ < c.buffers[c.server_group])
        if mode == "server":
            S = c.n_servers
            np.testing.assert_array_equal(obs[S : 2 * S], (modes * 0.5).astype(np.float32))
            np.testing.assert_array_equal(info["action_mask"], avail)  # off counts as n = 0
        else:
            L = sum(g.buffer + 1 for g in c.groups)
            counts = env.sim.mode_counts
            want = (counts / np.array([g.count for g in c.groups])[:, None]).astype(np.float32)
            np.testing.assert_array_equal(obs[L : L + 2 * c.n_groups], want.ravel())
    assert info["mean_response_time"] > 0.0


def test_env_without_sleep_keeps_its_spaces() -> None:
    c = farm_from_dict(sleep_farm_dict(sleep_a=None))
    assert obs_size(c, "server") == c.n_servers + c.n_job_types
    assert ServerFarmEnv(c).observation_space.shape == (c.n_servers + c.n_job_types,)


def test_vector_env_with_sleep_matches_single_envs() -> None:
    """The vector env's compiled batch runs the right-sizing loop as the single env does."""
    from serverfarm_gym.envs.vector import ServerFarmVectorEnv

    c = farm_from_dict(sleep_farm_dict(SLEEP, {**SLEEP, "idle_timeout_rate": "inf"}))
    venv = ServerFarmVectorEnv(num_envs=2, scenario=c, action_mode="group", max_episode_steps=0)
    obs, infos = venv.reset(seed=[3, 4])
    envs = [ServerFarmEnv(c, action_mode="group") for _ in range(2)]
    singles = [e.reset(seed=s) for e, s in zip(envs, (3, 4), strict=True)]
    for e in range(2):
        np.testing.assert_array_equal(obs[e], singles[e][0])
    for _ in range(200):
        acts = np.array([np.flatnonzero(m)[-1] for m in infos["action_mask"]])
        obs, _, _, _, infos = venv.step(acts)
        for e in range(2):
            o, _, _, _, info = envs[e].step(int(acts[e]))
            np.testing.assert_array_equal(obs[e], o)
            assert infos["mean_response_time"][e] == info["mean_response_time"]
