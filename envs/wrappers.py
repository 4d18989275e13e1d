"""The action mask inside the observation, in the key names and dtype each RL library expects.

:class:`MaskInObservation` turns the env's observation into ``{obs_key: observation, mask_key:
mask}``, the mask being ``env.unwrapped.action_masks()`` of the decision the observation belongs
to (so it works through ``TimeLimit``, ``OrderEnforcing`` and any other wrapper), cast to
``dtype``. Presets:

* RLlib (``"rllib"``): ``{"observations": obs, "action_mask": float32 0/1}``;
* Tianshou (``"tianshou"``): ``{"obs": obs, "mask": int8}``;
* TorchRL (``"torchrl"``): ``{"observation": obs, "action_mask": bool}``.

``MaskInObservation.preset(env, "tianshou")`` (or ``MaskInObservation(env, **PRESETS[name])``).
RLlib reads the float mask in its action-masking RLModule, Tianshou's DQN/PPO read
``obs.mask`` (1 = valid) and pass ``obs.obs`` to the network, TorchRL's ``ActionMask``
transform reads a boolean ``"action_mask"`` entry. docs/ecosystem.md shows each in use.

For sb3-contrib no wrapper is needed: ``MaskablePPO`` calls ``env.action_masks()``, and
``ActionMasker(env, lambda e: e.unwrapped.action_masks())`` works through ``TimeLimit`` (the
``lambda e: e.action_masks()`` of sb3-contrib's docs does not: Gymnasium's wrappers do not
forward attributes).
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol, cast

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = ["PRESETS", "MaskInObservation"]

#: the key names and mask dtype each library expects (see the module doc)
PRESETS: dict[str, dict[str, Any]] = {
    "rllib": {"obs_key": "observations", "mask_key": "action_mask", "dtype": np.float32},
    "tianshou": {"obs_key": "obs", "mask_key": "mask", "dtype": np.int8},
    "torchrl": {"obs_key": "observation", "mask_key": "action_mask", "dtype": np.bool_},
}


class _MaskedEnv(Protocol):
    def action_masks(self) -> np.ndarray: ...


class MaskInObservation(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """``{obs_key: observation, mask_key: mask}`` observations (see the module doc).

    Args:
        env: an env whose ``unwrapped`` has ``action_masks()`` and a ``Discrete`` action space.
        obs_key, mask_key: the two keys (different strings).
        dtype: the mask's dtype (1 / True = valid): ``np.int8``, ``np.bool_``, a float, ...
    """

    presets: ClassVar[tuple[str, ...]] = tuple(PRESETS)

    def __init__(
        self,
        env: gym.Env,
        obs_key: str = "observations",
        mask_key: str = "action_mask",
        dtype: Any = np.int8,
    ):
        # recorded so that env.spec can rebuild the wrapper (gymnasium.make(spec), check_env)
        gym.utils.RecordConstructorArgs.__init__(
            self, obs_key=obs_key, mask_key=mask_key, dtype=dtype
        )
        gym.ObservationWrapper.__init__(self, env)
        if not isinstance(env.action_space, spaces.Discrete):
            raise ValueError(
                f"env: action masking needs a Discrete action space, got {env.action_space}"
            )
        if not callable(getattr(env.unwrapped, "action_masks", None)):
            raise ValueError("env: its unwrapped env has no action_masks() method")
        if not (isinstance(obs_key, str) and isinstance(mask_key, str)) or obs_key == mask_key:
            raise ValueError(
                f"obs_key, mask_key: expected two different strings, got {obs_key!r}, {mask_key!r}"
            )
        self.obs_key, self.mask_key = obs_key, mask_key
        self.mask_dtype = np.dtype(dtype)
        n = int(env.action_space.n)
        self.observation_space = spaces.Dict(
            {
                mask_key: spaces.Box(0, 1, (n,), self.mask_dtype),
                obs_key: env.observation_space,
            }
        )

    @classmethod
    def preset(cls, env: gym.Env, library: str) -> MaskInObservation:
        """The wrapper with ``library``'s keys and dtype (``"rllib"``, ``"tianshou"``,
        ``"torchrl"``)."""
        if library not in PRESETS:
            raise ValueError(f"library: unknown {library!r}; choose one of {list(PRESETS)}")
        return cls(env, **PRESETS[library])

    def observation(self, observation: Any) -> dict[str, Any]:
        return {self.mask_key: self.action_masks(), self.obs_key: observation}

    def action_masks(self) -> np.ndarray:
        """The current mask in this wrapper's dtype (sb3-contrib can read it here too)."""
        # __init__ checked that the unwrapped env has action_masks() (gymnasium types it as Env)
        env = cast(_MaskedEnv, self.env.unwrapped)
        masks: np.ndarray = env.action_masks().astype(self.mask_dtype)
        return masks
