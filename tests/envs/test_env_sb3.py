"""The environment under Stable-Baselines3 (the ``train`` extra): SB3's env checker and its
vector envs. Skipped when stable_baselines3 is not installed; the rest of the env tests need only
the base dependencies."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

from stable_baselines3.common.env_checker import check_env as sb3_check_env
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.scenarios import PRESETS
from serverfarm_gym.envs.server_farm import InvalidActionWarning
from tests.helpers.env import CHECKER_OPTIONS, ENV_IDS, make_env
from tests.helpers.farms import random_env_configs

MODES = list(ENV_IDS)
RANDOM_CONFIGS = random_env_configs()
CHECK_SCENARIOS = list(PRESETS) + RANDOM_CONFIGS


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("scenario", CHECK_SCENARIOS, ids=lambda s: getattr(s, "name", s))
def test_sb3_checker(scenario: str | FarmConfig, mode: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # the checkers send unmasked random actions: the fallback is meant to replace them
        warnings.simplefilter("ignore", InvalidActionWarning)
        sb3_check_env(make_env(scenario, mode).unwrapped, warn=True)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "options",
    CHECKER_OPTIONS,
    ids=str,
)
def test_sb3_checker_with_options(options: dict, mode: str) -> None:
    scenario = RANDOM_CONFIGS[4]  # time-varying prices and rates, general sizes
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # the checkers send unmasked random actions: the fallback is meant to replace them
        warnings.simplefilter("ignore", InvalidActionWarning)
        sb3_check_env(make_env(scenario, mode, **options).unwrapped, warn=True)


@pytest.mark.parametrize("cls", [DummyVecEnv, SubprocVecEnv])
def test_sb3_vec_envs(cls: type) -> None:
    fns = [lambda: gym.make("ServerFarm-v0", scenario="tiny")] * 2
    venv = cls(fns, start_method="fork") if cls is SubprocVecEnv else cls(fns)
    venv.seed(0)
    obs = venv.reset()
    assert obs.shape == (2, 6)
    for _ in range(10):
        masks = np.array(venv.env_method("action_masks"))
        actions = np.array([int(np.flatnonzero(m)[0]) for m in masks])
        obs, rewards, dones, infos = venv.step(actions)
        assert obs.shape == (2, 6) and rewards.shape == (2,) and not dones.any()
        assert all(not i["invalid_action"] for i in infos)
    venv.close()


def test_maskable_ppo_finds_the_masks_without_an_action_masker() -> None:
    # docs/ecosystem.md: MaskablePPO needs no ActionMasker on gym.make's wrapped env; its vector
    # env reaches action_masks() through the wrappers, and the masks it gets are the env's own
    sb3_contrib = pytest.importorskip("sb3_contrib")
    from sb3_contrib.common.maskable.utils import get_action_masks, is_masking_supported

    model = sb3_contrib.MaskablePPO(
        "MlpPolicy", gym.make("serverfarm_gym:ServerFarm-v0", scenario="tiny"), n_steps=64,
        batch_size=32, seed=0,
    )  # fmt: skip
    assert is_masking_supported(model.env)
    model.env.reset()
    masks = get_action_masks(model.env)
    inner = model.env.envs[0].unwrapped
    np.testing.assert_array_equal(masks[0], inner.action_masks())
    assert masks[0].any()
    model.learn(128)
