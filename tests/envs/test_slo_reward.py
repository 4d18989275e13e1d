"""The SLO's Lagrangian reward (ServerFarmEnv's Rewards section, serverfarm_gym.envs.slo)."""

from __future__ import annotations

import numpy as np
import pytest

from serverfarm_gym.envs.config import farm_from_dict
from serverfarm_gym.envs.scenarios import load_scenario
from serverfarm_gym.envs.server_farm import ServerFarmEnv
from serverfarm_gym.envs.slo import default_multiplier, update_multiplier
from serverfarm_gym.envs.vector import ServerFarmVectorEnv

D = 0.9
TINY_SLO = farm_from_dict({**load_scenario("tiny").to_dict(), "slo": {"mean_response_time": D}})
EFF = TINY_SLO.group_efficiency[TINY_SLO.server_group]


def _action(env: ServerFarmEnv, mask: np.ndarray, policy: str) -> int:
    if policy == "pas":  # most efficient group, smallest index
        return int(np.argmax(np.where(mask, EFF, -np.inf)))
    occ = np.asarray(env.occupancy, dtype=float)  # jsq: fewest jobs, smallest index
    return int(np.argmin(np.where(mask, occ, np.inf)))


def _rollout(env: ServerFarmEnv, policy: str, steps: int, seed: int):
    _, info = env.reset(seed=seed)
    rewards = []
    for _ in range(steps):
        _, r, _, _, info = env.step(_action(env, info["action_mask"].astype(bool), policy))
        rewards.append(r)
    return np.array(rewards), info


def test_default_multiplier_and_no_term_without_slo():
    assert default_multiplier(TINY_SLO) == pytest.approx(1 / D)
    assert ServerFarmEnv(TINY_SLO).slo_multiplier == pytest.approx(1 / D)
    assert ServerFarmEnv("tiny").slo_multiplier == 0.0


def test_beta_zero_gives_the_base_reward_exactly():
    base, _ = _rollout(ServerFarmEnv("tiny", reward_eta=0.3), "pas", 600, seed=5)
    zero, _ = _rollout(ServerFarmEnv(TINY_SLO, reward_eta=0.3, slo_multiplier=0), "pas", 600, 5)
    running, _ = _rollout(ServerFarmEnv(TINY_SLO, slo_multiplier=0.0), "pas", 600, seed=5)
    plain, _ = _rollout(ServerFarmEnv("tiny"), "pas", 600, seed=5)
    assert np.array_equal(base, zero) and np.array_equal(running, plain)  # bit for bit


def test_lagrangian_term_is_the_integral_of_jobs_in_system():
    beta = 0.7
    r0, _ = _rollout(ServerFarmEnv(TINY_SLO, reward_eta=0.3, slo_multiplier=0), "jsq", 800, 9)
    env = ServerFarmEnv(TINY_SLO, reward_eta=0.3, slo_multiplier=beta, reward_scale=2.0)
    rb, info = _rollout(env, "jsq", 800, 9)
    area = (r0 / 2.0 - rb) * 2.0 / beta  # the same trajectory: only the term differs
    assert np.all(area >= -1e-12)
    # the whole episode's integral: time x the simulator's time-average number in system
    total = float(info["time"]) * float(env.sim.mean_jobs_in_system)
    assert area.sum() == pytest.approx(total, rel=1e-9)


def test_job_area_is_the_steps_integral_of_jobs_in_system():
    beta = 0.7
    r0, _ = _rollout(ServerFarmEnv(TINY_SLO, reward_eta=0.3, slo_multiplier=0), "jsq", 400, 9)
    env = ServerFarmEnv(TINY_SLO, reward_eta=0.3, slo_multiplier=beta)
    _, info = env.reset(seed=9)
    assert env.job_area == 0.0
    areas, rewards = [], []
    for _ in range(400):
        _, r, _, _, info = env.step(_action(env, info["action_mask"].astype(bool), "jsq"))
        areas.append(env.job_area)
        rewards.append(r)
    # the same trajectory as r0: the reward's Lagrangian term is beta times the step's area
    assert np.allclose(r0 - np.array(rewards), beta * np.array(areas), rtol=0, atol=1e-12)
    total = float(info["time"]) * float(env.sim.mean_jobs_in_system)
    assert sum(areas) == pytest.approx(total, rel=1e-9)


def test_large_beta_prefers_the_faster_dispatcher():
    """PAS is the more efficient dispatcher on tiny (E[T] ~1.53), JSQ the faster (~0.81): with
    eta fixed near PAS's efficiency the plain reward prefers PAS, a large beta JSQ."""

    def ret(policy: str, beta: float) -> float:
        env = ServerFarmEnv(TINY_SLO, reward_eta=0.33, slo_multiplier=beta)
        return float(_rollout(env, policy, 4000, seed=3)[0].sum())

    assert ret("pas", 0.0) > ret("jsq", 0.0)
    assert ret("jsq", 10 / D) > ret("pas", 10 / D)


def test_vector_env_applies_the_same_term():
    beta, seed = 0.5, 11
    single, _ = _rollout(
        ServerFarmEnv(TINY_SLO, reward_eta=0.3, slo_multiplier=beta), "pas", 50, seed
    )
    venv = ServerFarmVectorEnv(1, TINY_SLO, reward_eta=0.3, slo_multiplier=beta)
    assert venv.slo_multiplier == beta
    venv.reset(seed=seed)
    rewards = []
    for _ in range(50):
        mask = venv.action_masks()[0]
        _, r, _, _, _ = venv.step(np.array([int(np.argmax(np.where(mask, EFF, -np.inf)))]))
        rewards.append(r[0])
    assert np.array_equal(np.array(rewards), single)


def test_update_multiplier_is_projected_dual_ascent():
    assert update_multiplier(1.0, 1.8, 0.9, 0.5) == pytest.approx(1.5)  # 100% over: +step
    assert update_multiplier(1.0, 0.45, 0.9, 0.5) == pytest.approx(0.75)  # 50% under
    assert update_multiplier(0.1, 0.0, 0.9, 0.5) == 0.0  # projected onto beta >= 0
    assert update_multiplier(0.0, 0.9, 0.9, 0.5) == 0.0  # on the bound: unchanged


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((-1.0, 1.0, 0.9, 0.1), "beta"),
        ((1.0, float("nan"), 0.9, 0.1), "measured_response_time"),
        ((1.0, 1.0, 0.0, 0.1), "target"),
        ((1.0, 1.0, 0.9, 0.0), "step_size"),
    ],
)
def test_update_multiplier_refuses_bad_arguments(args, match):
    with pytest.raises(ValueError, match=match):
        update_multiplier(*args)


def test_bad_slo_multiplier_is_refused():
    with pytest.raises(ValueError, match="slo_multiplier: must be a finite number >= 0"):
        ServerFarmEnv(TINY_SLO, slo_multiplier=-1.0)
    with pytest.raises(ValueError, match=r"slo_multiplier: 0\.5 needs a scenario with an slo"):
        ServerFarmEnv("tiny", slo_multiplier=0.5)
    env = ServerFarmEnv(TINY_SLO)
    with pytest.raises(ValueError, match="slo_multiplier"):
        env.slo_multiplier = float("inf")
