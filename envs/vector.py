"""Native batched env: N copies of :class:`~envs.server_farm.ServerFarmEnv` stepped in one compiled
call, as a Gymnasium :class:`~gymnasium.vector.VectorEnv` and, through :class:`SB3VecEnvAdapter`,
as a Stable-Baselines3 ``VecEnv`` (MaskablePPO reads its masks).

``gymnasium.make_vec("ServerFarm-v0", num_envs=64, vectorization_mode="vector_entry_point",
scenario="paper-100")`` builds a :class:`ServerFarmVectorEnv` (it is also ``make_vec``'s default
mode for these ids). Semantics, per env, are exactly those of ``ServerFarmEnv`` wrapped in
``TimeLimit(max_episode_steps)``:

* **Seeding**: ``reset(seed=s)`` gives env ``i`` the stream ``numpy.random.default_rng(s + i)``
  (what ``env.reset(seed=s + i)`` gives a single env, and Gymnasium's ``SyncVectorEnv`` uses);
  a list seeds env by env. The first reset without a seed draws fresh entropy; later resets
  without a seed continue each env's stream. With the same seed, env ``i`` follows the same
  trajectory as a single env reset with ``seed + i`` and given the same actions.
* **Autoreset** (``metadata["autoreset_mode"] = AutoresetMode.NEXT_STEP``, Gymnasium 1.x's
  default): when env ``i`` returns ``truncated[i] = True`` (after ``max_episode_steps`` steps;
  the task never terminates), its next ``step`` ignores ``actions[i]``, resets it and returns
  the first observation of the new episode with reward 0 and ``terminated = truncated = False``.
  Running eta, as in the single env, carries over autoresets; a seeded ``reset`` restarts it.
* **Masks**: :meth:`ServerFarmVectorEnv.action_masks` returns ``bool[num_envs, n_actions]``;
  ``infos["action_mask"]`` holds the same.
* **infos**: Gymnasium's vector layout: each key of the single env's info (``work``,
  ``energy``, ``efficiency``, ...) maps to an array over envs, with a boolean ``"_key"`` array
  (all True: every env reports every key at every step).

``parallel=True`` spreads the envs over numba's thread pool (``prange``): 1.44x the decision
epochs per second on two cores with 64 envs of paper-100 (BENCHMARKS.md). The default serial
loop never oversubscribes a machine shared with other work (the learner, other runs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from envs import kernels as kn
from envs.config import FarmConfig
from envs.server_farm import ServerFarmEnv
from envs.simulator import FarmSimulator

_SCALAR_INFO = (
    ("work", kn.X_WORK),
    ("energy", kn.X_ENERGY),
    ("time", kn.X_TIME),
    ("throughput", kn.X_THROUGHPUT),
    ("power", kn.X_POWER),
    ("efficiency", kn.X_EFFICIENCY),
    ("blocking", kn.X_BLOCKING),
    ("mean_response_time", kn.X_RESPONSE),
    ("eta", kn.X_ETA),
)


class ServerFarmVectorEnv(VectorEnv):
    """``num_envs`` independent farms (same scenario and settings) stepped by one compiled call.

    Args:
        num_envs: number of farms.
        scenario, action_mode, reward_eta, eta_tau, reward_scale, objective, invalid_action,
            warmup_epochs, warmup_policy: as :class:`~envs.server_farm.ServerFarmEnv`.
        max_episode_steps: steps per episode (truncation); ``None`` or 0: never truncate.
        parallel: step the envs on numba's thread pool.
        render_mode: only ``None`` is supported.
    """

    metadata: dict[str, Any] = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}  # noqa: RUF012

    def __init__(
        self,
        num_envs: int = 1,
        scenario: str | Path | Mapping[str, Any] | FarmConfig = "tiny",
        action_mode: str = "server",
        reward_eta: str | float = "running",
        eta_tau: float = 10_000.0,
        reward_scale: float = 1.0,
        objective: str = "energy",
        invalid_action: str = "fallback",
        warmup_epochs: int = 0,
        warmup_policy: str = "pas",
        max_episode_steps: int | None = 1000,
        parallel: bool = False,
        render_mode: str | None = None,
    ):
        if int(num_envs) < 1:
            raise ValueError(f"num_envs: must be >= 1, got {num_envs}")
        if max_episode_steps is not None and int(max_episode_steps) < 0:
            raise ValueError(f"max_episode_steps: must be >= 0 or None, got {max_episode_steps}")
        if render_mode is not None:
            raise ValueError(f"render_mode: the vector env does not render, got {render_mode!r}")
        # a template single env validates the arguments and builds spaces and packed buffers
        self._template = env = ServerFarmEnv(
            scenario, action_mode, reward_eta, eta_tau, reward_scale, objective, invalid_action,
            warmup_epochs, warmup_policy,
        )  # fmt: skip
        self.config = env.config
        self.action_mode = action_mode
        self.objective = objective
        self.invalid_action = invalid_action
        self.reward_eta = reward_eta
        self.max_episode_steps = int(max_episode_steps or 0)
        self.parallel = bool(parallel)
        self.render_mode = None
        self.num_envs = n = int(num_envs)
        self.single_observation_space = env.observation_space
        self.single_action_space = env.action_space
        self.observation_space = batch_space(env.observation_space, n)
        self.action_space = batch_space(env.action_space, n)

        IB, FB = env.packed_buffers
        ni = int(IB[0, kn.H_ILEN])
        self._ibuf = np.tile(IB, (n, 1))
        self._fbuf = np.tile(FB, (n, 1))
        self._ibuf[:, ni + kn.E_MAXSTEPS] = self.max_episode_steps
        self._obs = np.zeros((n, *env.observation_space.shape), np.float32)
        self._mask = np.zeros((n, env.action_space.n), dtype=bool)
        self._codes = np.zeros(n, dtype=np.int64)
        self._tag = env.sim.kind_tag
        self._rngs: list[np.random.Generator | None] = [None] * n
        self._bind()
        self._info_slots = _SCALAR_INFO
        if objective == "cost":
            self._info_slots += (("cost", kn.X_COST), ("cost_efficiency", kn.X_COSTEFF))
        every = np.ones(n, dtype=bool)
        every.flags.writeable = False
        keys = [k for k, _ in self._info_slots]
        keys += ["job_type", "action_mask", "blocking_per_type", "invalid_action"]
        self._every = {"_" + k: every for k in keys}
        self._eta_initialised = False
        self._needs_reset = True
        self.closed = False

    def _bind(self) -> None:
        """Derive the views of the packed buffers and one FarmSimulator per env viewing its row
        (for stats() and inspection); writes each env's Generator pointers into its row."""
        env = self._template
        ni, nf = int(self._ibuf[0, kn.H_ILEN]), int(self._ibuf[0, kn.H_FLEN])
        self._eib = self._ibuf[:, ni:]
        self._efb = self._fbuf[:, nf:]
        o = nf + int(self._eib[0, kn.EFO_OUT])
        self._out = self._fbuf[:, o : o + kn.N_OUT + self.config.n_job_types]
        self.sims: list[FarmSimulator] = []
        for e in range(self.num_envs):
            rng = self._rngs[e] if self._rngs[e] is not None else env.sim.rng
            self.sims.append(FarmSimulator.from_buffers(
                self.config, env.sim.general, self._ibuf[e, :ni], self._fbuf[e, :nf], rng
            ))  # fmt: skip

    def __getstate__(self) -> dict[str, Any]:
        # the buffers hold raw pointers to the Generators and the attributes below are views of
        # them (pickle would copy each view apart from its buffer): keep the buffers and the
        # Generators, re-derive the rest, so a copy steps exactly as the original would
        state = self.__dict__.copy()
        for key in ("_eib", "_efb", "_out", "sims"):
            del state[key]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._bind()

    # ---- Gymnasium VectorEnv API ---------------------------------------------------------------
    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset every env (``options`` are not used). See the module doc for seeding."""
        n = self.num_envs
        if seed is None:
            seeds: Sequence[int | None] = [None] * n
        elif isinstance(seed, (int, np.integer)):
            seeds = [int(seed) + i for i in range(n)]
        else:
            seeds = list(seed)
            if len(seeds) != n:
                raise ValueError(f"seed: expected an int or {n} seeds, got {len(seeds)}")
        for e, s in enumerate(seeds):
            if s is not None or self._rngs[e] is None:
                self._rngs[e] = np.random.default_rng(s)
            self.sims[e].rng = self._rngs[e]  # writes the pointers into the env's row
        if self.reward_eta == "running" and (seed is not None or not self._eta_initialised):
            self._template._init_eta()  # PAS's efficiency: the same for every env
            for slot in (kn.EF_ETAW, kn.EF_ETAE):
                self._efb[:, slot] = self._template._efb[slot]
            self._eta_initialised = True
        kn.vec_reset(
            self._ibuf, self._fbuf, self._obs, self._mask, np.ones(n, dtype=bool), self._tag
        )
        self._needs_reset = False
        return self._obs.copy(), self._infos()

    def _check_actions(self, actions: Any) -> np.ndarray:
        """The actions as ``int64[num_envs]``; like the single env (and Gymnasium's own envs), a
        float, a string, a wrong shape or an index outside the action space is refused rather
        than truncated or wrapped."""
        a = np.asarray(actions)
        n = int(self.single_action_space.n)
        if a.dtype.kind not in "iu" or a.shape not in ((self.num_envs,), (self.num_envs, 1)):
            raise ValueError(
                f"actions: expected integers of shape ({self.num_envs},) (one index 0..{n - 1} "
                f"of {self.single_action_space} per env), got dtype {a.dtype} shape {a.shape}"
            )
        a = a.reshape(self.num_envs).astype(np.int64, copy=False)
        if self.num_envs and (a.min() < 0 or a.max() >= n):
            raise ValueError(
                f"actions: {a.tolist()} has an index outside 0..{n - 1} ({self.single_action_space})"
            )
        return a

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every env (next-step autoreset of the envs truncated at the previous step)."""
        if self._needs_reset:
            raise RuntimeError("call reset() before step()")
        acts = self._check_actions(actions)
        step = kn.vec_step_parallel if self.parallel else kn.vec_step
        if step(self._ibuf, self._fbuf, self._obs, self._mask, acts, self._codes, self._tag):
            bad = np.flatnonzero(self._codes)
            raise ValueError(
                f"actions {acts[bad].tolist()} of envs {bad.tolist()} are masked out (full or "
                "unavailable servers); choose actions where action_masks() is True (those envs "
                "did not move; the others were stepped)"
            )
        out = self._out
        rewards = out[:, kn.X_REWARD].copy()
        truncated = out[:, kn.X_TRUNC] != 0.0
        terminated = np.zeros(self.num_envs, dtype=bool)
        return self._obs.copy(), rewards, terminated, truncated, self._infos()

    def _infos(self) -> dict[str, Any]:
        # the arrays below are views of one fresh copy, built with as few numpy calls as
        # possible: at 64 envs this dict is a quarter of the Python cost of a vector step
        o = self._out.copy()
        infos: dict[str, Any] = {key: o[:, slot] for key, slot in self._info_slots}
        infos["job_type"] = o[:, kn.X_JOB].astype(np.int64)
        infos["action_mask"] = self._mask.copy()
        infos["blocking_per_type"] = o[:, kn.N_OUT :]
        infos["invalid_action"] = o[:, kn.X_INVALID] != 0.0
        infos.update(self._every)  # the "_key" arrays: one read-only all-True array
        return infos

    def set_warmup(self, epochs: Sequence[int]) -> None:
        """Per-env warm-up lengths (decision epochs from the empty farm under ``warmup_policy``)
        for the next reset. Staggered over a time-varying schedule's cycle, they start the envs
        at different times of the day: a continuing run whose envs all start at time 0 learns
        only from the first hours of the day."""
        w = np.asarray(epochs)
        if w.shape != (self.num_envs,) or not np.issubdtype(w.dtype, np.integer) or (w < 0).any():
            raise ValueError(
                f"epochs: expected {self.num_envs} non-negative integers (one per env), got {epochs!r}"
            )
        self._eib[:, kn.E_WARMUP] = w
        self._needs_reset = True

    def action_masks(self) -> np.ndarray:
        """``bool[num_envs, n_actions]``: valid actions of each env at its current epoch."""
        return self._mask.copy()

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Per-env results of ``name`` (``"action_masks"`` or an attribute of the settings)."""
        if name == "action_masks":
            return tuple(self.action_masks())
        value = getattr(self._template, name)
        if callable(value):
            raise AttributeError(f"call: only 'action_masks' can be called per env, not {name!r}")
        return (value,) * self.num_envs

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """Per-env value of an attribute shared by all envs (``config``, ``action_mode``, ...)."""
        return self.call(name)

    @property
    def n_invalid(self) -> np.ndarray:
        """Masked actions replaced by the fallback in each env's current episode."""
        return self._eib[:, kn.E_NINV].copy()

    def close_extras(self, **kwargs: Any) -> None:
        self.closed = True


def _adapter_class() -> type:
    """Build :class:`SB3VecEnvAdapter` (Stable-Baselines3, and with it torch, is imported only
    when the adapter is first used: the vector env itself does not need it)."""
    from stable_baselines3.common.vec_env import VecEnv
    from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvStepReturn

    class SB3VecEnvAdapter(VecEnv):
        """A :class:`ServerFarmVectorEnv` as a Stable-Baselines3 ``VecEnv`` (for MaskablePPO).

        SB3's convention is *same-step* autoreset: when env ``i`` is done the returned observation is
        already the first of the next episode, the last one is in ``infos[i]["terminal_observation"]``
        and ``infos[i]["TimeLimit.truncated"]`` is True. ``env_method("action_masks")`` returns one
        mask per env, which is what ``sb3_contrib``'s ``get_action_masks`` stacks. ``infos`` are the
        single env's dicts (``work``, ``energy``, ``eta``, ``invalid_action``, ...).

        Args:
            venv: the vector env, or ``None`` to build one from ``kwargs``.
            **kwargs: arguments of :class:`ServerFarmVectorEnv` (``num_envs``, ``scenario``, ...).
        """

        def __init__(self, venv: ServerFarmVectorEnv | None = None, **kwargs: Any):
            self.venv = venv if venv is not None else ServerFarmVectorEnv(**kwargs)
            super().__init__(
                self.venv.num_envs,
                self.venv.single_observation_space,
                self.venv.single_action_space,
            )
            self._actions = np.zeros(self.num_envs, dtype=np.int64)

        def reset(self) -> np.ndarray:
            seeds = self._seeds if any(s is not None for s in self._seeds) else None
            obs, infos = self.venv.reset(seed=seeds)
            self.reset_infos = self._info_dicts(infos)
            self._reset_seeds()
            self._reset_options()
            return obs

        def step_async(self, actions: np.ndarray) -> None:
            self._actions = np.asarray(actions, dtype=np.int64).reshape(self.num_envs)

        def step_wait(self) -> VecEnvStepReturn:
            obs, rewards, terminated, truncated, infos = self.venv.step(self._actions)
            dones = terminated | truncated
            info_list = self._info_dicts(infos)
            if dones.any():
                # SB3 resets at once: reset the finished envs now (the vector env would at its next
                # step), keep their last observation for bootstrapping
                v = self.venv
                kn.vec_reset(v._ibuf, v._fbuf, v._obs, v._mask, dones, v._tag)
                reset_infos = self._info_dicts(v._infos())
                for i in np.flatnonzero(dones):
                    info_list[i]["terminal_observation"] = obs[i].copy()
                    info_list[i]["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
                    self.reset_infos[i] = reset_infos[i]
                    obs[i] = v._obs[i]
            return obs, rewards, dones, info_list

        @staticmethod
        def _info_dicts(infos: dict[str, Any]) -> list[dict[str, Any]]:
            keys = [k for k in infos if not k.startswith("_")]
            cols = [infos[k].tolist() if k not in ("action_mask", "blocking_per_type") else infos[k]
                    for k in keys]  # fmt: skip
            return [dict(zip(keys, row, strict=True)) for row in zip(*cols, strict=True)]

        def close(self) -> None:
            self.venv.close()

        def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
            idx = list(self._get_indices(indices))
            if attr_name == "action_masks":
                return [lambda i=i: self.venv._mask[i].copy() for i in idx]  # type: ignore[misc]
            value = getattr(self.venv._template, attr_name)
            return [value for _ in idx]

        def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
            raise AttributeError(
                f"set_attr: the envs of a ServerFarmVectorEnv share their settings; build a new "
                f"vector env to change {attr_name!r}"
            )

        def env_method(
            self,
            method_name: str,
            *method_args: Any,
            indices: VecEnvIndices = None,
            **method_kwargs,
        ) -> list[Any]:
            idx = list(self._get_indices(indices))
            if method_name == "action_masks":
                masks = self.venv._mask
                return [masks[i].copy() for i in idx]
            raise AttributeError(
                f"env_method: only 'action_masks' is supported, not {method_name!r}"
            )

        def env_is_wrapped(
            self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None
        ) -> list[bool]:
            return [False for _ in self._get_indices(indices)]

    return SB3VecEnvAdapter


def __getattr__(name: str) -> Any:
    if name == "SB3VecEnvAdapter":
        cls = _adapter_class()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_sb3_vec_env(num_envs: int, scenario: Any = "paper-100", **kwargs: Any) -> Any:
    """Shortcut: ``SB3VecEnvAdapter(ServerFarmVectorEnv(num_envs, scenario, **kwargs))``."""
    return __getattr__("SB3VecEnvAdapter")(ServerFarmVectorEnv(num_envs, scenario, **kwargs))
