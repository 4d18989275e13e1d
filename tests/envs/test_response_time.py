"""Mean response time (Little's law) in the simulator, the env's info and the vector env's infos.

The exact references are solved here, independently of the simulator: the M/M/1/B queue's closed
form, and the per-server CTMC of a small farm under PAS (every server's occupancy in the state,
no aggregation). Statistical checks compare the mean over independent replications with the
exact value within a Student-t interval at 99.9% (fixed seeds).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import linalg, stats

from serverfarm_gym.envs.config import FarmConfig, farm_from_dict
from serverfarm_gym.envs.kernels import layout
from serverfarm_gym.envs.server_farm import ServerFarmEnv
from serverfarm_gym.envs.simulator import FarmSimulator
from serverfarm_gym.envs.vector import ServerFarmVectorEnv

REPLICATIONS = 12
T_QUANTILE = float(stats.t.ppf(0.9995, REPLICATIONS - 1))  # two-sided 99.9%


def _one_server(lam: float, mu: float, buffer: int) -> FarmConfig:
    return farm_from_dict({
        "name": "mm1b",
        "groups": [{"name": "g", "count": 1, "service_rate": mu, "busy_power": 2.0,
                    "idle_power": 1.0, "buffer": buffer}],
        "job_types": [{"name": "j", "arrival_rate": lam, "groups": ["g"]}],
    })  # fmt: skip


def _mm1b(lam: float, mu: float, buffer: int) -> tuple[float, float]:
    """(E[N], E[T]) of the M/M/1/B queue (PS or FIFO: the same number in system)."""
    p = (lam / mu) ** np.arange(buffer + 1)
    p /= p.sum()
    en = float(np.arange(buffer + 1) @ p)
    return en, en / (lam * (1.0 - p[-1]))


def _replicate(config: FarmConfig, table: np.ndarray, epochs: int, general: bool = False):
    """(mean jobs in system, mean response time) of each replication after a warm-up."""
    out = []
    for seed in range(REPLICATIONS):
        sim = FarmSimulator(config, seed=1000 + seed, force_general=general)
        sim.run(epochs // 10, "priority", table)  # warm-up, discarded
        st = sim.run(epochs, "priority", table)
        out.append((st.mean_jobs_in_system, st.mean_response_time))
    return np.array(out)


def _within_ci(samples: np.ndarray, exact: float) -> None:
    mean = samples.mean()
    half = T_QUANTILE * samples.std(ddof=1) / np.sqrt(len(samples))
    assert abs(mean - exact) <= half, (mean, exact, half)


def _pas_table(c: FarmConfig) -> np.ndarray:
    return np.repeat(c.group_efficiency[:, None], c.max_buffer + 1, axis=1)


@pytest.mark.parametrize("general", [False, True])
def test_mm1b_closed_form(general: bool) -> None:
    lam, mu, buffer = 0.8, 1.0, 6
    c = _one_server(lam, mu, buffer)
    en, et = _mm1b(lam, mu, buffer)
    res = _replicate(c, _pas_table(c), 20_000, general)
    _within_ci(res[:, 0], en)
    _within_ci(res[:, 1], et)


def _small_farm() -> FarmConfig:
    return farm_from_dict({
        "name": "small",
        "groups": [
            {"name": "slow", "count": 2, "service_rate": 1.0, "busy_power": 2.0,
             "idle_power": 1.0, "buffer": 2},
            {"name": "fast", "count": 1, "service_rate": 2.0, "busy_power": 5.0,
             "idle_power": 1.0, "buffer": 3},
        ],
        "job_types": [
            {"name": "web", "arrival_rate": 1.5, "groups": ["slow", "fast"]},
            {"name": "gpu", "arrival_rate": 0.7, "groups": ["fast"]},
        ],
    })  # fmt: skip


def _pas_chain(c: FarmConfig) -> tuple[float, float]:
    """(E[N], E[T]) of the farm under PAS from its per-server CTMC (no aggregation): a type-j
    arrival goes to the smallest-index non-full server of its most efficient group with one."""
    group, buf = c.server_group, c.buffers[c.server_group]
    eff = c.group_efficiency
    mu = c.mu_table
    states = list(itertools.product(*[range(b + 1) for b in buf]))
    index = {s: i for i, s in enumerate(states)}
    n = len(states)
    q = np.zeros((n, n))
    accept = np.zeros(n)  # accepted arrival rate in each state
    for i, s in enumerate(states):
        for srv, occ in enumerate(s):
            if occ > 0:
                t = list(s)
                t[srv] -= 1
                q[i, index[tuple(t)]] += mu[group[srv], occ]
        for jt in c.job_types:
            free = [v for v in range(len(s)) if group[v] in jt.groups and s[v] < buf[v]]
            if not free:
                continue
            srv = min(free, key=lambda v: (-eff[group[v]], v))
            t = list(s)
            t[srv] += 1
            q[i, index[tuple(t)]] += jt.arrival_rate[0]
            accept[i] += jt.arrival_rate[0]
    q -= np.diag(q.sum(axis=1))
    # stationary: pi Q = 0, sum pi = 1 (one balance equation replaced by the normalisation)
    a = q.T.copy()
    a[-1, :] = 1.0
    rhs = np.zeros(n)
    rhs[-1] = 1.0
    pi = linalg.solve(a, rhs)
    en = float(pi @ np.array([sum(s) for s in states]))
    return en, en / float(pi @ accept)


def test_small_farm_pas_matches_exact_chain() -> None:
    c = _small_farm()
    en, et = _pas_chain(c)
    res = _replicate(c, _pas_table(c), 20_000)
    _within_ci(res[:, 0], en)
    _within_ci(res[:, 1], et)


def test_little_law_bookkeeping() -> None:
    """The integral is exact: stats deltas add up, and a snapshot difference is Little's
    quotient over that window; the base model's numbers do not depend on it."""
    c = _small_farm()
    sim = FarmSimulator(c, seed=7)
    a = sim.run(3000, "priority", _pas_table(c))
    b = sim.run(2000, "priority", _pas_table(c))
    total = sim.stats()
    assert a.job_time + b.job_time == pytest.approx(total.job_time, rel=1e-12)
    assert b.mean_response_time == pytest.approx(b.job_time / b.accepted.sum(), rel=1e-15)
    assert isinstance(sim.mean_response_time, np.float64)
    assert sim.mean_response_time == pytest.approx(total.mean_response_time, rel=1e-12)
    assert sim.mean_jobs_in_system == pytest.approx(total.job_time / total.time, rel=1e-12)
    assert total.as_dict()["mean_response_time"] == total.mean_response_time
    sim.reset()
    assert sim.mean_response_time == 0.0 and sim.stats().mean_response_time == 0.0


def test_exponential_and_general_kernels_agree_on_job_time() -> None:
    """The general kernel integrates N(t) by the same rule (statistically the same value)."""
    c = _small_farm()
    fast = _replicate(c, _pas_table(c), 10_000, general=False)[:, 1]
    slow = _replicate(c, _pas_table(c), 10_000, general=True)[:, 1]
    res = stats.ttest_ind(fast, slow)
    assert res.pvalue > 0.001


def test_env_info_matches_simulator() -> None:
    """info's mean response time is Little's quotient since the episode start, as the
    simulator's since its reset (no warm-up: the same window)."""
    c = _small_farm()
    env = ServerFarmEnv(c)
    _, info = env.reset(seed=3)
    assert info["mean_response_time"] == 0.0
    rng = np.random.default_rng(0)
    for _ in range(500):
        a = int(rng.choice(np.flatnonzero(info["action_mask"])))
        _, _, _, _, info = env.step(a)
    assert isinstance(info["mean_response_time"], np.float64)
    assert info["mean_response_time"] > 0.0
    assert info["mean_response_time"] == pytest.approx(env.sim.mean_response_time, rel=1e-12)
    assert env.running_stats["mean_response_time"] == info["mean_response_time"]


def test_env_info_after_warmup_counts_the_episode_only() -> None:
    c = _small_farm()
    env = ServerFarmEnv(c, warmup_epochs=2000)
    _, info = env.reset(seed=4)
    assert info["mean_response_time"] == 0.0  # nothing accepted in this episode yet
    # the window starts where efficiency's does, at the end of the warm-up (before the first
    # epoch): the integral there is kept next to the starting time and energy
    n0 = float(env._efb[layout.EF_BN])
    at_reset = env.sim.stats()
    assert 0.0 < n0 < at_reset.job_time
    acc0 = at_reset.accepted.sum()  # the first epoch's arrival is pending, not yet accepted
    for _ in range(300):
        _, _, _, _, info = env.step(int(np.flatnonzero(info["action_mask"])[0]))
    st = env.sim.stats()
    want = (st.job_time - n0) / (st.accepted.sum() - acc0)
    assert info["mean_response_time"] == pytest.approx(want, rel=1e-12)


def test_vector_env_infos() -> None:
    c = _small_farm()
    venv = ServerFarmVectorEnv(num_envs=3, scenario=c)
    _, infos = venv.reset(seed=1)
    for _ in range(50):
        acts = np.array([np.flatnonzero(m)[0] for m in infos["action_mask"]])
        _, _, _, _, infos = venv.step(acts)
    rt = infos["mean_response_time"]
    assert rt.shape == (3,) and rt.dtype == np.float64 and (rt > 0).all()
    assert infos["_mean_response_time"].all()
