"""Native batched env: N copies of :class:`~serverfarm_gym.envs.server_farm.ServerFarmEnv` stepped in one compiled
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
* **Autoreset**: the three modes of Gymnasium 1.x (``autoreset_mode=``, also
  ``env.autoreset_mode`` and ``metadata["autoreset_mode"]``), step for step those of
  ``SyncVectorEnv`` over single envs (``tests/envs/test_vector.py``). The task never terminates;
  env ``i`` returns ``truncated[i] = True`` after ``max_episode_steps`` steps, then:

  - ``NEXT_STEP`` (default): its next ``step`` ignores ``actions[i]``, resets it and returns the
    first observation of the new episode with reward 0 and ``terminated = truncated = False``;
  - ``SAME_STEP``: the same ``step`` resets it and returns the new episode's first observation;
    the last one is in ``infos["final_obs"][i]`` and its info in ``infos["final_info"]``;
  - ``DISABLED``: nothing resets it; call ``reset(options={"reset_mask": mask})`` before the
    next ``step`` (a ``step`` with an ended env raises ``RuntimeError``).

  ``reset(options={"reset_mask": bool[num_envs]})`` resets only those envs, in every mode.
  Running eta, as in the single env, carries over autoresets; a seeded ``reset`` restarts it.
* **SLO**: ``slo_multiplier`` (and the settable attribute) is the single env's: one beta for
  every env, the Lagrangian reward of ``ServerFarmEnv``'s Rewards section.
* **Jobs in the system**: :attr:`ServerFarmVectorEnv.job_area` is each env's time integral of
  the number of jobs in the system over its last step (the SLO reward's ``N dt``; summed over
  accepted jobs it gives E[T] by Little's law). A property read from the step's output row,
  not an info key: the info dict stays as the single env's, and a step pays nothing for it.
* **Masks**: :meth:`ServerFarmVectorEnv.action_masks` returns ``int8[num_envs, n_actions]``
  (1 = valid), the single env's dtype, so ``single_action_space.sample(mask=masks[i])`` works;
  ``infos["action_mask"]`` holds the single env's masks, stacked.
* **infos**: Gymnasium's vector layout: each key of the single env's info (``work``,
  ``energy``, ``efficiency``, ...) maps to an array over envs, with a boolean ``"_key"`` array
  (all True: every env reports every key at every step, except after a partial reset).
* **Size**: ``num_envs`` is limited to what half the machine's physical memory holds at the
  env's packed size per env (:func:`max_num_envs`); a larger request is a ``ValueError`` up
  front, not a ``MemoryError`` half way through building the rows.
* **Gymnasium's ``make_vec``** passes no ``wrappers=`` or ``vector_kwargs=`` to a native vector
  env (it refuses them in ``"vector_entry_point"`` mode, its default for these ids);
  :func:`make_vec` takes both: ``vector_kwargs`` the native env understands
  (``autoreset_mode``, ``copy``) go to it, and ``wrappers=`` (or other ``vector_kwargs``) fall
  back to ``SyncVectorEnv`` over wrapped single envs.

``parallel=True`` spreads the envs over numba's thread pool (``prange``): 1.44x the decision
epochs per second on two cores with 64 envs of paper-100 (BENCHMARKS.md). The default serial
loop never oversubscribes a machine shared with other work (the learner, other runs).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import gymnasium as gym
import numpy as np
from gymnasium.spaces import Box, Discrete
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space
from numpy.typing import NDArray

from serverfarm_gym.envs import kernels as kn
from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.server_farm import InvalidActionWarning, ServerFarmEnv
from serverfarm_gym.envs.simulator import FarmSimulator
from serverfarm_gym.envs.validation import count_argument

if TYPE_CHECKING:
    from stable_baselines3.common.vec_env import VecEnv as _VecEnvBase
    from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvStepReturn
else:  # the adapter's base class is added when it is built (_adapter_class)
    _VecEnvBase = object

#: bytes a FarmSimulator view object of one env costs beside its packed row (an upper bound of
#: its attributes and NumPy views; the rows themselves are counted exactly)
_SIM_BYTES = 8192
#: share of physical memory the rows of one vector env may take
_MEMORY_SHARE = 0.5
#: the vector_kwargs the native env takes (others need SyncVectorEnv, see make_vec)
NATIVE_VECTOR_KWARGS = ("autoreset_mode", "copy")

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
            warmup_epochs, warmup_policy: as :class:`~serverfarm_gym.envs.server_farm.ServerFarmEnv`.
        max_episode_steps: steps per episode (truncation); ``None`` or 0: never truncate.
        parallel: step the envs on numba's thread pool.
        render_mode: only ``None`` is supported.
        autoreset_mode: ``AutoresetMode`` (or its string value): see the module doc.
        invalid_penalty: as :class:`~serverfarm_gym.envs.server_farm.ServerFarmEnv`.
        copy: accepted for ``SyncVectorEnv`` compatibility; observations are always copies.
        vector_kwargs: ``autoreset_mode`` / ``copy`` as a dict (what ``make_vec`` users pass).
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
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        invalid_penalty: float = 1.0,
        copy: bool = True,
        vector_kwargs: Mapping[str, Any] | None = None,
        slo_multiplier: float | None = None,
    ):
        # the vector env's own arguments first (the template env below checks the rest)
        autoreset_mode = _check_vector_arguments(
            num_envs, vector_kwargs, autoreset_mode, max_episode_steps, render_mode
        )
        self.autoreset_mode = _autoreset_mode(autoreset_mode)
        self.metadata = {**type(self).metadata, "autoreset_mode": self.autoreset_mode}
        # a template single env validates the arguments and builds spaces and packed buffers
        self._template = env = ServerFarmEnv(
            scenario, action_mode, reward_eta, eta_tau, reward_scale, objective, invalid_action,
            warmup_epochs, warmup_policy, invalid_penalty=invalid_penalty,
            slo_multiplier=slo_multiplier,
        )  # fmt: skip
        _check_size(int(num_envs), env)
        self.config = env.config
        self.action_mode = action_mode
        self.objective = objective
        self.invalid_action = invalid_action
        self.invalid_penalty = float(invalid_penalty)
        self._warned_invalid = False
        self.reward_eta = reward_eta
        self.max_episode_steps = int(max_episode_steps or 0)
        self.parallel = bool(parallel)
        self.render_mode = None
        self.num_envs = n = int(num_envs)
        self.single_observation_space = env.observation_space
        self.single_action_space = env.action_space
        self.observation_space = batch_space(env.observation_space, n)
        self.action_space = batch_space(env.action_space, n)

        self._build_buffers(env)
        self._bind()
        self._build_info_slots(objective)
        self._ended = np.zeros(n, dtype=bool)  # DISABLED mode: truncated and not yet reset
        self._eta_initialised = False
        self._needs_reset = True
        self.closed = False

    def _build_buffers(self, env: ServerFarmEnv) -> None:
        """The batched buffers: ``num_envs`` copies of the template env's packed row, and the
        observation, mask and code arrays the kernels write to."""
        n = self.num_envs
        # the template's spaces are its action mode's own (a vector env has no token view)
        assert isinstance(env.observation_space, Box) and isinstance(env.action_space, Discrete)
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

    def _build_info_slots(self, objective: str) -> None:
        """Which scalar info numbers to copy out of the packed rows, and the all-True ``_key``
        masks Gymnasium's vector info convention pairs with every key."""
        n = self.num_envs
        self._info_slots: tuple[tuple[str, int], ...] = _SCALAR_INFO
        if objective == "cost":
            self._info_slots += (("cost", kn.X_COST), ("cost_efficiency", kn.X_COSTEFF))
        every = np.ones(n, dtype=bool)
        every.flags.writeable = False
        keys = [k for k, _ in self._info_slots]
        keys += [
            "job_type",
            "action_mask",
            "blocking_per_type",
            "invalid_action",
            "invalid_actions",
        ]
        self._every = {"_" + k: every for k in keys}

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
            own = self._rngs[e]
            rng = own if own is not None else env.sim.rng
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
        """Reset every env, or those of ``options["reset_mask"]`` (``bool[num_envs]``, as
        ``SyncVectorEnv``); other options are not used. See the module doc for seeding."""
        n = self.num_envs
        which = self._reset_mask(options)
        if seed is None:
            seeds: Sequence[int | None] = [None] * n
        elif isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
            seeds = [int(seed) + i for i in range(n)]
        else:
            seeds = list(cast(Sequence[int | None], seed))  # the int seeds took the branch above
            if len(seeds) != n:
                raise ValueError(f"seed: expected an int or {n} seeds, got {len(seeds)}")
        for e, s in enumerate(seeds):
            if not which[e]:
                continue
            rng = self._rngs[e]
            if s is not None or rng is None:
                self._rngs[e] = rng = np.random.default_rng(s)
            self.sims[e].rng = rng  # writes the pointers into the env's row
        if self.reward_eta == "running" and (seed is not None or not self._eta_initialised):
            self._template._init_eta()  # PAS's efficiency: the same for every env
            rows = which if self._eta_initialised else np.ones(n, dtype=bool)
            for slot in (kn.EF_ETAW, kn.EF_ETAE):
                self._efb[rows, slot] = self._template._efb[slot]
            self._eta_initialised = True
        kn.vec_reset(self._ibuf, self._fbuf, self._obs, self._mask, which, self._tag)
        self._ended &= ~which
        self._needs_reset = False
        infos = self._infos()
        return self._obs.copy(), infos if which.all() else _only(infos, which)

    def _reset_mask(self, options: Any) -> np.ndarray:
        """The envs a reset acts on: all, or ``options["reset_mask"]`` (checked as Gymnasium's
        ``SyncVectorEnv`` checks it, but with ``ValueError`` naming the option)."""
        if options is not None and not isinstance(options, Mapping):
            raise ValueError(
                f"options: expected a dict or None, got {options!r} ({type(options).__name__})"
            )
        if not options or "reset_mask" not in options:
            return np.ones(self.num_envs, dtype=bool)
        m = options["reset_mask"]
        if not (isinstance(m, np.ndarray) and m.dtype == np.bool_ and m.shape == (self.num_envs,)):
            raise ValueError(
                f"options: 'reset_mask' must be a numpy bool array of shape ({self.num_envs},), "
                f"got {m!r}"
            )
        if not m.any():
            raise ValueError("options: 'reset_mask' selects no env; set at least one True")
        if self._needs_reset and not m.all():
            raise ValueError("options: the first reset must reset every env (no 'reset_mask')")
        return m

    def _check_actions(self, actions: Any) -> np.ndarray:
        """The actions as ``int64[num_envs]``; like the single env (and Gymnasium's own envs), a
        bool, a float, a string, a wrong shape or an index outside the action space is refused
        rather than truncated or wrapped. Bad indices are shown as given (uint64 included)."""
        a = np.asarray(actions)
        n = self._template._n_act
        if a.dtype.kind not in "iu" or a.shape not in ((self.num_envs,), (self.num_envs, 1)):
            raise ValueError(
                f"actions: expected integers of shape ({self.num_envs},) (one index 0..{n - 1} "
                f"of {self.single_action_space} per env), got dtype {a.dtype} shape {a.shape}"
            )
        a = a.reshape(self.num_envs)
        # compared in the given dtype: a cast to int64 first would show huge uint64 as negatives
        bad = (a >= n) if a.dtype.kind == "u" else (a < 0) | (a >= n)
        if bad.any():
            raise ValueError(
                f"actions: {a.tolist()} has an index outside 0..{n - 1} ({self.single_action_space})"
            )
        return a.astype(np.int64, copy=False)

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every env (autoreset per ``autoreset_mode``, see the module doc)."""
        if self._needs_reset:
            raise RuntimeError("call reset() before step()")
        acts = self._check_actions(actions)
        if self._ended.any():
            raise RuntimeError(
                f"step: envs {np.flatnonzero(self._ended).tolist()} ended at the previous step "
                "and autoreset_mode is DISABLED; reset them first with "
                "reset(options={'reset_mask': mask})"
            )
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
        beta = self._template.slo_multiplier
        if beta != 0.0:  # the SLO's Lagrangian term, as in ServerFarmEnv.step
            rewards -= beta * out[:, kn.X_JOBAREA] / self._template.reward_scale
        truncated = out[:, kn.X_TRUNC] != 0.0
        terminated = np.zeros(self.num_envs, dtype=bool)
        replaced = out[:, kn.X_INVALID] != 0.0
        if replaced.any():
            rewards -= self._replaced(replaced, acts)
        infos = self._infos()
        if self.autoreset_mode is not AutoresetMode.NEXT_STEP and truncated.any():
            infos = self._after_truncation(truncated, infos)
        return self._obs.copy(), rewards, terminated, truncated, infos

    def _after_truncation(self, done: np.ndarray, infos: dict[str, Any]) -> dict[str, Any]:
        """SAME_STEP: reset the ended envs now, their last observation and info under
        ``final_obs`` / ``final_info``; DISABLED: only stop the kernel's next-step reset."""
        if self.autoreset_mode is AutoresetMode.DISABLED:
            self._eib[done, kn.E_DONE] = 0
            self._ended |= done
            return infos
        final_obs = np.full(self.num_envs, None, dtype=object)
        for i in np.flatnonzero(done):
            final_obs[i] = self._obs[i].copy()
        area = self._out[:, kn.X_JOBAREA].copy()
        kn.vec_reset(self._ibuf, self._fbuf, self._obs, self._mask, done, self._tag)
        # the reset zeroes the row's area; job_area reports the step that ended the episode
        # (the next step overwrites the slot, nothing else reads it)
        self._out[:, kn.X_JOBAREA] = area
        new = self._infos()
        new["final_obs"], new["_final_obs"] = final_obs, done.copy()
        new["final_info"], new["_final_info"] = _only(infos, done), done.copy()
        return new

    def _replaced(self, rows: np.ndarray, acts: np.ndarray) -> np.ndarray | float:
        """Penalties of the envs whose masked action was replaced by PAS's choice (see
        ``ServerFarmEnv``); with ``"fallback"`` warns once per vector env."""
        if self.invalid_action == "penalty":
            return np.where(rows, self.invalid_penalty, 0.0)
        if not self._warned_invalid:
            self._warned_invalid = True
            e = int(np.flatnonzero(rows)[0])
            warnings.warn(
                f"ServerFarmVectorEnv: action {int(acts[e])} of env {e} is masked out; the job "
                "went where PAS sends it (invalid_action='fallback'). infos['invalid_actions'] "
                "counts these replacements; mask the policy (action_masks()) or pass "
                "invalid_action='raise' or 'penalty'. Warned once per vector env.",
                InvalidActionWarning,
                stacklevel=3,
            )
        return 0.0

    def _infos(self) -> dict[str, Any]:
        # the arrays below are views of one fresh copy, built with as few numpy calls as
        # possible: at 64 envs this dict is a quarter of the Python cost of a vector step
        o = self._out.copy()
        infos: dict[str, Any] = {key: o[:, slot] for key, slot in self._info_slots}
        infos["job_type"] = o[:, kn.X_JOB].astype(np.int64)
        infos["action_mask"] = self._mask.view(np.int8).copy()
        infos["blocking_per_type"] = o[:, kn.N_OUT :]
        infos["invalid_action"] = o[:, kn.X_INVALID] != 0.0
        infos["invalid_actions"] = self._eib[:, kn.E_NINV].copy()
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

    def action_masks(self) -> NDArray[np.int8]:
        """``int8[num_envs, n_actions]`` (1 = valid): the valid actions of each env at its current
        epoch; the single env's dtype, which Gymnasium's ``Discrete.sample(mask=...)`` requires."""
        return self._mask.astype(np.int8)

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
    def slo_multiplier(self) -> float:
        """beta of the SLO's Lagrangian reward, shared by every env (``ServerFarmEnv``'s)."""
        return self._template.slo_multiplier

    @slo_multiplier.setter
    def slo_multiplier(self, beta: float) -> None:
        self._template.slo_multiplier = beta

    @property
    def job_area(self) -> NDArray[np.float64]:
        """``float64[num_envs]``: each env's time integral of the jobs in the system over its
        last step (0 after a reset, and at a NEXT_STEP autoreset step). The SLO reward's
        ``N dt``; its sum over a rollout divided by the jobs accepted is the rollout's mean
        response time (Little's law)."""
        area: NDArray[np.float64] = self._out[:, kn.X_JOBAREA].copy()  # (.copy() is untyped)
        return area

    @property
    def n_invalid(self) -> NDArray[np.int64]:
        """Masked actions replaced by the fallback in each env's current episode."""
        counts: NDArray[np.int64] = self._eib[:, kn.E_NINV].copy()  # (.copy() is untyped)
        return counts

    def close_extras(self, **kwargs: Any) -> None:
        self.closed = True


def _only(infos: dict[str, Any], rows: np.ndarray) -> dict[str, Any]:
    """``infos`` as ``SyncVectorEnv`` reports envs ``rows`` only: other rows zeroed, every
    ``"_key"`` array equal to ``rows``."""
    out: dict[str, Any] = {}
    for key, value in infos.items():
        if key.startswith("_"):
            continue
        v = value.copy()
        v[~rows] = 0
        out[key], out["_" + key] = v, rows.copy()
    return out


def _check_vector_arguments(
    num_envs: int,
    vector_kwargs: Mapping[str, Any] | None,
    autoreset_mode: AutoresetMode | str,
    max_episode_steps: int | None,
    render_mode: str | None,
) -> AutoresetMode | str:
    """Refuse a vector-env argument it cannot honour; the autoreset mode ``vector_kwargs`` sets."""
    count_argument(num_envs, "num_envs", minimum=1)
    if vector_kwargs:
        unknown = sorted(set(vector_kwargs) - set(NATIVE_VECTOR_KWARGS))
        if unknown:
            raise ValueError(
                f"vector_kwargs: {unknown} not understood by the native vector env (it takes "
                f"{list(NATIVE_VECTOR_KWARGS)}); use vectorization_mode='sync' for those"
            )
        autoreset_mode = vector_kwargs.get("autoreset_mode", autoreset_mode)
    if max_episode_steps is not None and int(max_episode_steps) < 0:
        raise ValueError(f"max_episode_steps: must be >= 0 or None, got {max_episode_steps}")
    if render_mode is not None:
        raise ValueError(f"render_mode: the vector env does not render, got {render_mode!r}")
    return autoreset_mode


def _autoreset_mode(mode: AutoresetMode | str) -> AutoresetMode:
    try:
        return AutoresetMode(mode)
    except ValueError:
        raise ValueError(
            f"autoreset_mode: unknown {mode!r}; choose one of {[m.value for m in AutoresetMode]}"
        ) from None


def _physical_memory() -> int:
    """Bytes of physical memory (16 GiB where the OS does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return 16 * 2**30


def bytes_per_env(env: ServerFarmEnv) -> int:
    """Memory one env of a vector env takes: its packed buffers, observation and mask rows,
    and its simulator view object."""
    IB, FB = env.packed_buffers
    obs = int(np.prod(env._OBS.shape)) * 4 if env.tokens is None else 0
    return int(IB.nbytes + FB.nbytes) + obs + env._n_act + _SIM_BYTES


def max_num_envs(env: ServerFarmEnv) -> int:
    """The largest ``num_envs`` of ``env``'s farm and settings: half the physical memory over
    :func:`bytes_per_env` (a vector env that large would still not fit beside the learner)."""
    return max(1, int(_physical_memory() * _MEMORY_SHARE) // bytes_per_env(env))


def _check_size(num_envs: int, env: ServerFarmEnv) -> None:
    limit = max_num_envs(env)
    if num_envs > limit:
        raise ValueError(
            f"num_envs: {num_envs:,} envs of {env.config.name!r} need "
            f"{num_envs * bytes_per_env(env) / 2**30:,.1f} GiB ({bytes_per_env(env):,} bytes "
            f"each); at most {limit:,} fit in half of this machine's memory. Use fewer envs"
        )


def make_vec(
    env_id: str = "ServerFarm-v0",
    num_envs: int = 1,
    vectorization_mode: str | None = None,
    vector_kwargs: Mapping[str, Any] | None = None,
    wrappers: Sequence[Callable[[gym.Env], gym.Wrapper]] | None = None,
    **kwargs: Any,
) -> VectorEnv:
    """``gymnasium.make_vec`` that also takes ``wrappers=`` and ``vector_kwargs=`` in its default
    mode: the native :class:`ServerFarmVectorEnv` when it can honour them (no wrappers, only
    ``autoreset_mode`` / ``copy``), else ``SyncVectorEnv`` over (wrapped) single envs."""
    vk = dict(vector_kwargs or {})
    native_ok = not wrappers and set(vk) <= set(NATIVE_VECTOR_KWARGS)
    if vectorization_mode is None:
        vectorization_mode = "vector_entry_point" if native_ok else "sync"
    if vectorization_mode == "vector_entry_point":
        if not native_ok:
            raise ValueError(
                "vectorization_mode: 'vector_entry_point' (the native vector env) takes no "
                f"wrappers and only vector_kwargs {list(NATIVE_VECTOR_KWARGS)}; use 'sync'"
            )
        # Gymnasium passes kwargs, not vector_kwargs, to a vector entry point
        return gym.make_vec(env_id, num_envs, "vector_entry_point", **kwargs, **vk)
    return gym.make_vec(
        env_id, num_envs, vectorization_mode, vector_kwargs=vk, wrappers=wrappers, **kwargs
    )


class _SB3AdapterMethods(_VecEnvBase):
    """The methods of :class:`SB3VecEnvAdapter`, kept apart from the class itself so that
    Stable-Baselines3 (and with it torch) is imported only when the adapter is first used."""

    def __init__(self, venv: ServerFarmVectorEnv | None = None, **kwargs: Any):
        self.venv = venv if venv is not None else ServerFarmVectorEnv(**kwargs)
        if self.venv.autoreset_mode is not AutoresetMode.NEXT_STEP:
            raise ValueError(
                "venv: the adapter does SB3's own same-step reset on a vector env with "
                f"autoreset_mode NEXT_STEP, got {self.venv.autoreset_mode}"
            )
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
            return [lambda i=i: self.venv._mask[i].copy() for i in idx]
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
        **method_kwargs: Any,
    ) -> list[Any]:
        idx = list(self._get_indices(indices))
        if method_name == "action_masks":
            masks = self.venv._mask
            return [masks[i].copy() for i in idx]
        raise AttributeError(f"env_method: only 'action_masks' is supported, not {method_name!r}")

    def env_is_wrapped(
        self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None
    ) -> list[bool]:
        return [False for _ in self._get_indices(indices)]


def _adapter_class() -> type:
    """Build :class:`SB3VecEnvAdapter` on Stable-Baselines3's ``VecEnv`` (imported here, at the
    adapter's first use: the vector env itself does not need it)."""
    from stable_baselines3.common.vec_env import VecEnv

    class SB3VecEnvAdapter(_SB3AdapterMethods, VecEnv):
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
