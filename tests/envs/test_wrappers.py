"""serverfarm_gym.envs.wrappers.MaskInObservation (the mask inside the observation, per library preset), the
serverfarm_gym namespace (registration in a fresh process) and sb3-contrib's ActionMasker
through Gymnasium's wrappers."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import serverfarm_gym
import serverfarm_gym.cli
from serverfarm_gym.envs.server_farm import InvalidActionWarning
from serverfarm_gym.envs.wrappers import PRESETS, MaskInObservation

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("library", list(PRESETS))
@pytest.mark.parametrize("env_id", serverfarm_gym.ENV_IDS)
def test_presets_put_the_current_mask_under_the_library_keys(library: str, env_id: str) -> None:
    env = MaskInObservation.preset(gym.make(env_id, scenario="paper-100"), library)
    keys = PRESETS[library]
    space = env.observation_space[keys["mask_key"]]
    assert space.dtype == np.dtype(keys["dtype"]) and space.shape == (env.action_space.n,)
    obs, info = env.reset(seed=0)
    for _ in range(30):
        assert obs in env.observation_space
        mask = obs[keys["mask_key"]]
        assert mask.dtype == np.dtype(keys["dtype"])
        np.testing.assert_array_equal(mask, info["action_mask"])  # the decision's own mask
        np.testing.assert_array_equal(env.action_masks(), mask)
        a = env.action_space.sample(mask=info["action_mask"])
        obs, _, _, _, info = env.step(a)
        assert not info["invalid_action"]


def test_wrapped_env_passes_the_checker_and_refuses_bad_arguments() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", InvalidActionWarning)
        # checking a wrapper (not the raw env) is the point here
        warnings.filterwarnings("ignore", message=".*different from the unwrapped version")
        check_env(MaskInObservation(gym.make("ServerFarm-v0", scenario="tiny"), "obs", "mask"))
    env = gym.make("ServerFarm-v0", scenario="tiny")
    with pytest.raises(ValueError, match="obs_key, mask_key"):
        MaskInObservation(env, "x", "x")
    with pytest.raises(ValueError, match="library: unknown 'jax'"):
        MaskInObservation.preset(env, "jax")
    with pytest.raises(ValueError, match="Discrete action space"):
        MaskInObservation(_BoxEnv())


class _BoxEnv(gym.Env):
    action_space = gym.spaces.Box(0, 1, (2,))
    observation_space = gym.spaces.Box(0, 1, (2,))


def test_sb3_action_masker_through_time_limit() -> None:
    """sb3-contrib's ActionMasker with ``e.unwrapped.action_masks()`` reaches the env through
    TimeLimit/OrderEnforcing; sb3-contrib turns the int8 mask into its boolean tensor."""
    pytest.importorskip("sb3_contrib")
    import torch
    from sb3_contrib.common.maskable.distributions import MaskableCategorical
    from sb3_contrib.common.maskable.utils import get_action_masks
    from sb3_contrib.common.wrappers import ActionMasker
    from stable_baselines3.common.vec_env import DummyVecEnv

    def make() -> gym.Env:
        env = gym.make("ServerFarm-v0", scenario="paper-100", max_episode_steps=20)
        return ActionMasker(env, lambda e: e.unwrapped.action_masks())

    venv = DummyVecEnv([make, make])
    venv.reset()
    masks = get_action_masks(venv)
    assert masks.dtype == np.int8 and masks.shape == (2, venv.action_space.n)
    dist = MaskableCategorical(logits=torch.zeros(masks.shape))
    dist.apply_masking(masks)
    sampled = dist.sample().numpy()
    assert masks[np.arange(2), sampled].all()


def test_namespaced_ids_register_in_a_fresh_process(tmp_path: Path) -> None:
    """``serverfarm_gym:`` makes the ids available in a process that imported nothing of the
    project (what RLlib's env runners and other libraries' subprocess workers are)."""
    code = (
        "import sys, gymnasium as gym\n"
        "assert 'envs' not in sys.modules and 'serverfarm_gym' not in sys.modules\n"
        "for i in ('ServerFarm-v0', 'ServerFarmGroup-v0', 'ServerFarmTokens-v0'):\n"
        "    env = gym.make('serverfarm_gym:' + i, scenario='tiny')\n"
        "    env.reset(seed=0)\n"
        "    env.action_space.sample(mask=env.unwrapped.action_masks())\n"
        "v = gym.make_vec('ServerFarm-v0', num_envs=2, scenario='tiny')\n"
        "print(type(v.unwrapped).__name__, gym.spec('ServerFarm-v0').entry_point)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == [
        "ServerFarmVectorEnv",
        "serverfarm_gym.envs.server_farm:ServerFarmEnv",
    ]


def test_register_envs_accepts_the_package_and_console_scripts_run() -> None:
    gym.register_envs(serverfarm_gym)
    assert set(serverfarm_gym.ENV_IDS) <= set(gym.registry)
    for name in ("train", "evaluate"):
        assert serverfarm_gym.cli.script_path(name) == ROOT / f"{name}.py"
    out = subprocess.run([sys.executable, "-c", "from serverfarm_gym.cli import evaluate; evaluate()",
                          "--help"], capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))  # fmt: skip
    assert out.returncode == 0 and "usage: evaluate.py" in out.stdout, out.stderr[-2000:]
