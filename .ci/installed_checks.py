"""Checks of an installed serverfarm-gym, run from a user's folder by .ci/installed.

``python installed_checks.py full MODEL``: the wheel's package (not the user's envs/ etc.) is
imported, ``__version__`` comes from the distribution, every registered policy name builds
through ``make_policy`` (``ppo:MODEL`` with the model serverfarm-train wrote) and acts, and the
Gymnasium ids work three ways. ``python installed_checks.py core``: the same without the
``train`` extra: the env and the baselines work, and the policies that need torch fail with a
message naming the extra.
"""

from __future__ import annotations

import sys
from importlib import metadata

import gymnasium as gym

import envs as user_envs  # the user's own package of that name
import serverfarm_gym
from serverfarm_gym.baselines.registry import POLICIES, TRAIN_EXTRA_MODULES, make_policy

# the policies whose code needs the train extra (torch, stable-baselines3)
NEEDS_TRAIN = {"ppo", "generalist-checked"}
# the farm each policy is built for: tiny, unless it needs what tiny lacks (an SLO, geo data)
SCENARIO = {"slo-optimal": "tiny-slo", "slo-priority": "tiny-slo", "slo-mix": "tiny-slo",
            "pdr-pas": "geo-us-eu"}  # fmt: skip


def check_imports() -> None:
    assert user_envs.OWNER == "the user", user_envs.__file__
    assert "site-packages" in (serverfarm_gym.__file__ or ""), serverfarm_gym.__file__
    assert serverfarm_gym.__version__ == metadata.version("serverfarm-gym")
    env = gym.make("serverfarm_gym:ServerFarm-v0", scenario="tiny")
    gym.register_envs(serverfarm_gym)
    for env_id in serverfarm_gym.ENV_IDS:
        gym.make(env_id, scenario="tiny").reset(seed=0)
    vec = serverfarm_gym.make_vec("ServerFarm-v0", num_envs=2, scenario="tiny")
    vec.reset(seed=0)
    # one mask dtype: the vector env's masks sample like the single env's
    vec.single_action_space.sample(mask=vec.action_masks()[0])
    env.reset(seed=0)


def act(name: str, model: str | None) -> None:
    spec = f"{name}:{model}" if POLICIES.entry(name).argument else name
    env = gym.make("serverfarm_gym:ServerFarm-v0", scenario=SCENARIO.get(name, "tiny"))
    obs, _ = env.reset(seed=0)
    policy = make_policy(spec, env.unwrapped.config)
    for _ in range(20):
        action, _ = policy.predict(obs, action_masks=env.unwrapped.action_masks())
        obs, *_ = env.step(action)


def main(kind: str, model: str | None = None) -> None:
    check_imports()
    for name in sorted(POLICIES):
        if kind == "core" and name in NEEDS_TRAIN:
            try:
                act(name, model)
            except ModuleNotFoundError as e:
                assert "serverfarm-gym[train]" in str(e), e
                assert (e.name or "").split(".")[0] in TRAIN_EXTRA_MODULES, e.name
                print(f"  {name}: needs the train extra, and says so")
                continue
            raise AssertionError(f"{name}: built without the train extra")
        act(name, model)
        print(f"  {name}: built and acted")
    print(f"CI: installed serverfarm-gym {serverfarm_gym.__version__} ({kind}) checked")


if __name__ == "__main__":
    main(*sys.argv[1:])
