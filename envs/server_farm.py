"""The Gymnasium environment: energy-efficient job assignment in a heterogeneous server farm."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeAlias

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray

from serverfarm_gym.envs import kernels as kn
from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.kernels import schema
from serverfarm_gym.envs.observation import (
    check_action_mode,
    hist_offsets,
    level_offsets,
    n_actions,
    n_interval_features,
    n_sleep_features,
    obs_size,
)
from serverfarm_gym.envs.render import RENDER_MODES, Decision, FarmRenderer, chosen
from serverfarm_gym.envs.scenarios import load_scenario
from serverfarm_gym.envs.simulator import FarmSimulator
from serverfarm_gym.envs.slo import default_multiplier
from serverfarm_gym.envs.tokens import DEFAULT_MAX_GROUPS, DEFAULT_MAX_LEVELS, TokenEncoding
from serverfarm_gym.envs.validation import count_argument, real_argument

#: what a step does with a masked action (see ServerFarmEnv's Action Space)
INVALID_ACTION_MODES = ("fallback", "raise", "penalty")
_ONE = np.ones(1, dtype=bool)  # "reset env 0" for the batch-of-one kernel call
OBJECTIVES = ("energy", "cost")
#: what reset/step return: the action mode's flat float32 vector, or a dict of token arrays
Observation: TypeAlias = NDArray[np.float32] | dict[str, np.ndarray]


class InvalidActionWarning(RuntimeWarning):
    """A masked action was replaced by PAS's choice (``invalid_action="fallback"``); filter it
    with ``warnings.filterwarnings("ignore", category=InvalidActionWarning)`` where that is
    intended (Gymnasium's and SB3's env checkers send unmasked random actions)."""


def pack_env(
    config: FarmConfig,
    action_mode: str,
    invalid_action: str,
    objective: str,
    reward_eta: str | float,
    eta_tau: float,
    reward_scale: float,
    warmup_epochs: int,
    warmup_policy: str,
    max_steps: int = 0,
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """The env buffers ``(eib, efb)`` of one env (arguments as ``ServerFarmEnv``; ``max_steps`` > 0
    makes the vector kernel truncate episodes, the single env leaves that to ``TimeLimit``)."""
    J, B1 = config.n_job_types, config.max_buffer + 1
    act_r = np.concatenate([np.full(g.buffer, k) for k, g in enumerate(config.groups)])
    act_c = np.concatenate([np.arange(g.buffer) for g in config.groups])
    hist_r = np.concatenate([np.full(g.buffer + 1, k) for k, g in enumerate(config.groups)])
    hist_c = np.concatenate([np.arange(g.buffer + 1) for g in config.groups])
    n_hist = int(hist_offsets(config)[-1])
    server = action_mode == "server"
    # float32 reciprocals exactly as the Python encodings (numpy promotes them to float64)
    inv_b = (1.0 / config.buffers).astype(np.float32).astype(np.float64)
    hist_inv = np.array([1.0 / config.groups[k].count for k in hist_r], np.float32)
    eib, efb = schema.pack_env_buffers(
        islots={
            "MODE": kn.MODE_SERVER if server else kn.MODE_GROUP,
            "INVALID": 1 if invalid_action == "raise" else 0,
            "OBJ": 1 if objective == "cost" else 0,
            "RUNNING": 1 if reward_eta == "running" else 0,
            "WARMUP": int(warmup_epochs),
            "WPOL": kn.POLICY_PRIORITY if warmup_policy == "pas" else kn.POLICY_RANDOM,
            "JOB": -1,
            "A": config.n_servers if server else len(act_r),
            "L": n_hist,
            "NIV": n_interval_features(config),
            "OBSBASE": (config.n_servers if server else n_hist)
            + n_sleep_features(config, action_mode),
            "SLEEP": int(config.has_sleep),
            "MAXSTEPS": int(max_steps),
        },
        itables={
            "ACTR": act_r, "ACTC": act_c, "HISTR": hist_r, "HISTC": hist_c,
            "AVAIL": config.availability.astype(np.int64).ravel(),
            "LOFF": level_offsets(config), "BARR": np.zeros(J), "BBLK": np.zeros(J),
        },
        fslots={
            "FIXETA": 0.0 if reward_eta == "running" else float(reward_eta),
            "TAU": float(eta_tau),
            "SCALE": float(reward_scale),
            "LAM": config.total_arrival_rate,
        },
        ftables={
            "INVB": inv_b, "HINV": hist_inv.astype(np.float64),
            "PAS": np.repeat(config.group_efficiency[:, None], B1, axis=1).ravel(),
            "OUT": np.zeros(kn.N_OUT + J),
        },
    )  # fmt: skip
    assert obs_size(config, action_mode) == eib[kn.E_OBSBASE] + eib[kn.E_NIV] + J
    return eib, efb


class ServerFarmEnv(gym.Env):
    """
    ## Description

    A farm of K groups of processor-sharing servers (group k: ``count`` servers R_k, buffer B_k,
    service rate mu_k(n), power eps_k(n) with n jobs, idle power eps_k(0)) receives J Poisson job
    streams; type j may only use its groups K_j. Each arriving job must be sent to a non-full
    server it may use; it is lost (blocked) only when all of them are full. The goal is the
    long-run energy efficiency: work served per unit time over power, i.e. jobs per unit energy
    (Fu & Moran, "Energy-efficient job-assignment policy with asymptotically guaranteed
    performance deviation"). This is a continuing task simulated exactly in continuous time.

    Servers are numbered group by group in the scenario's group order: server 0 is the first
    server of the first group, servers ``config.group_offsets[k]`` to ``config.group_offsets[k+1]-1``
    belong to group k.

    ## Action Space

    ``action_mode="server"`` (default): ``Discrete(S)``, the server that receives the job.

    ``action_mode="group"`` (size-independent): ``Discrete(sum_k B_k)``; action
    ``level_offsets[k] + b`` sends the job to a server of group k that holds b < B_k jobs (the
    smallest-index one). Servers of a group are exchangeable, so this loses no optimality.

    In both modes only actions allowed by :meth:`action_masks` (also ``info["action_mask"]``)
    are valid: servers available to the job's type and not full. The mask is ``int8`` (1 =
    valid), the dtype Gymnasium's ``action_space.sample(mask=...)`` requires; sb3-contrib,
    RLlib, Tianshou and TorchRL take it as it is (``serverfarm_gym.envs.wrappers`` puts it into observations).
    A masked action is never executed as a block; ``invalid_action`` chooses what happens:

    * ``"fallback"`` (default: Gymnasium's checker and unmasked exploration send random
      actions): the job goes where PAS would send it, ``info["invalid_action"]`` is True,
      ``info["invalid_actions"]`` counts the replacements since reset, and the first
      replacement of the env warns once (an unmasked learner is being corrected silently).
    * ``"penalty"``: the same replacement, without the warning, and the step's reward is
      lowered by ``invalid_penalty`` (reward units; default 1, one mean job's work).
    * ``"raise"``: a ``ValueError``; the env does not move.

    An action outside the action space (a bool, a float, a string, an array of shape (1,), an
    index out of range) is refused with a ``ValueError`` in every mode, as
    ``action_space.contains`` would (a bool is refused although Python counts it as an int).

    ## Observation Space

    ``Box(0, 1, float32)``:

    | mode   | index                      | value                                              |
    |--------|----------------------------|----------------------------------------------------|
    | server | ``0 .. S-1``               | occupancy of server s divided by its buffer B_k     |
    | group  | ``hist_offsets[k] + b``    | share of group-k servers holding b jobs, b=0..B_k   |
    | both   | next ``n_intervals``       | one-hot current interval (time-varying scenarios)   |
    | both   | last J entries             | one-hot type of the arriving job                    |

    With ``obs_mode="tokens"`` (group actions only) the observation is instead a ``Dict`` of one
    padded token per group (occupancy fractions, unit-free rates and powers per level,
    availability, load, price), a group mask and the arriving job's features, the same spaces for
    every farm up to ``max_groups`` groups and ``max_levels`` buffer places; the action is
    ``Discrete(max_groups * max_levels)`` (``g * max_levels + b``: a server of group g holding b
    jobs) and a padded slot counts as a masked action. See :mod:`serverfarm_gym.envs.tokens`.

    ## Rewards

    The reward of a step is the integral, over the time from this decision to the next one, of
    ``W(t) - eta * P(t)`` divided by ``reward_scale``, with W the total service rate (work served
    per unit time) and P the total power (or the energy cost rate when ``objective="cost"``).
    By the Dinkelbach argument (docs/model.md) with eta equal to the policy's own efficiency, a
    policy change with positive average reward strictly improves efficiency, so maximising the
    return maximises long-run efficiency. ``reward_eta="running"`` (default) sets eta to an
    exponentially weighted estimate (time constant ``eta_tau`` arrivals) of the efficiency the
    agent is achieving, kept across episodes (restarted from PAS's efficiency by ``reset(seed=...)``,
    so the env is deterministic given the seed); a number fixes eta.

    With an SLO (the scenario's ``slo: {mean_response_time: D}``) the reward is the Lagrangian
    of the constrained problem: the step's integral of ``W(t) - eta * P(t) - beta * N(t)``
    divided by ``reward_scale``, with N the jobs in the system (those waiting for a setup
    included) and beta = ``slo_multiplier`` (default 1/D; 0 gives the reward above exactly).
    Set :attr:`slo_multiplier` between rollouts, e.g. by the dual-ascent step
    :func:`serverfarm_gym.envs.slo.update_multiplier` on the rollout's measured mean response time (module doc
    of :mod:`serverfarm_gym.envs.slo`). Without an SLO there is no such term.
    ``info`` carries the step's ``work`` and ``energy`` (and ``cost``), and since reset the running
    ``throughput``, ``power``, ``efficiency``, ``blocking`` and ``blocking_per_type``: evaluate
    policies with these, never with the return.

    ## Starting State

    An empty farm at time 0, advanced to the first decision epoch; with ``warmup_epochs > 0``
    the farm is first run for that many epochs under ``warmup_policy`` (a built-in dispatcher,
    "pas" or "random"), so episodes start near steady state. Statistics in ``info`` start after
    the warm-up.

    ## Episode End

    The task is continuing: there is no terminal state. Episodes are truncated after
    ``max_episode_steps`` decision epochs (``gymnasium.make`` default 1000; override with
    ``max_episode_steps=``).

    ## Arguments

    * ``scenario``: preset name (``serverfarm_gym.envs.scenarios.PRESETS``), YAML/JSON path, dict or FarmConfig.
    * ``action_mode``: ``"server"`` or ``"group"``.
    * ``reward_eta``: ``"running"`` or a fixed float.
    * ``eta_tau``: memory of the running eta, in mean inter-arrival times (default 10,000).
    * ``reward_scale``: divides the reward (default 1: rewards are in units of one mean job).
    * ``slo_multiplier``: beta of the SLO's Lagrangian reward (see Rewards; None: 1/D with an
      ``slo:``, no term without one).
    * ``objective``: ``"energy"`` (jobs per unit energy) or ``"cost"`` (jobs per unit of money,
      with the scenario's electricity prices).
    * ``invalid_action``: ``"fallback"`` (default), ``"penalty"`` or ``"raise"`` (see Action
      Space); ``invalid_penalty``: the reward lost per replaced action with ``"penalty"``.
    * ``warmup_epochs``, ``warmup_policy``: see Starting State.
    * ``render_mode``: ``None``, ``"ansi"``, ``"rgb_array"`` or ``"human"`` (see Rendering).
    * ``obs_mode``: ``None`` (the action mode's encoding above) or ``"tokens"`` (with
      ``action_mode="group"``): the farm-agnostic token encoding of :mod:`serverfarm_gym.envs.tokens`.
    * ``max_groups``, ``max_levels``: the token encoding's padding limits (default 8 and 16).

    ## Rendering

    ``"ansi"``: a few lines of text (time, job type, occupancies). ``"rgb_array"``: ``render()``
    returns a ``uint8[540, 960, 3]`` frame (``gymnasium.wrappers.RecordVideo``, notebooks);
    ``"human"``: the same picture in a matplotlib window, redrawn at every ``step`` and ``reset``
    (``metadata["render_fps"]`` frames per second). The frame shows the groups as labelled blocks
    of server cells coloured by occupancy n / B_k (per-group occupancy histograms on farms too
    large for cells, e.g. ``large-10k``), the arriving job and the groups it may use, the server
    that got the previous job, the running throughput, power, efficiency and blocking since
    reset, and the running efficiency against PAS's on this farm (a seeded simulation of the
    built-in PAS dispatcher, run at the first frame). Layout: :mod:`serverfarm_gym.envs.render`. Read-only
    state for other renderers: :attr:`occupancy`, :attr:`level_counts`, :attr:`job_type`,
    :attr:`last_decision`, :attr:`running_stats`.
    """

    # gymnasium.Env declares metadata an instance attribute (a ClassVar would be an incompatible
    # override); the dict is shared by every env and never mutated
    metadata: dict[str, Any] = {"render_modes": list(RENDER_MODES), "render_fps": 10}  # noqa: RUF012

    def __init__(
        self,
        scenario: str | Path | Mapping[str, Any] | FarmConfig = "tiny",
        action_mode: str = "server",
        reward_eta: str | float = "running",
        eta_tau: float = 10_000.0,
        reward_scale: float = 1.0,
        objective: str = "energy",
        invalid_action: str = "fallback",
        warmup_epochs: int = 0,
        warmup_policy: str = "pas",
        render_mode: str | None = None,
        obs_mode: str | None = None,
        max_groups: int = DEFAULT_MAX_GROUPS,
        max_levels: int = DEFAULT_MAX_LEVELS,
        invalid_penalty: float = 1.0,
        slo_multiplier: float | None = None,
    ):
        self.config = config = load_scenario(scenario)
        self.action_mode = check_action_mode(action_mode)
        # every argument is checked before any state is built: a bad one raises a ValueError
        # that names it, never a failure deep inside the kernels' packing
        _check_settings(
            action_mode, obs_mode, reward_eta, eta_tau, reward_scale, objective, invalid_action,
            invalid_penalty, warmup_epochs, warmup_policy, render_mode,
        )  # fmt: skip
        self.obs_mode = obs_mode or action_mode
        self.reward_eta = reward_eta
        self.eta_tau = float(eta_tau)
        self.reward_scale = float(reward_scale)
        self._beta = default_multiplier(config)
        if slo_multiplier is not None:
            self.slo_multiplier = slo_multiplier
        self.objective = objective
        self.invalid_action = invalid_action
        self.invalid_penalty = float(invalid_penalty)
        self._warned_invalid = False
        self.warmup_epochs = int(warmup_epochs)
        self.warmup_policy = warmup_policy
        self.render_mode = render_mode

        # the compiled step always works in the action mode's own encoding; tokens are a view
        native_obs = spaces.Box(0.0, 1.0, (obs_size(config, action_mode),), np.float32)
        native_act = spaces.Discrete(n_actions(config, action_mode))
        self.tokens: TokenEncoding | None = None
        if self.obs_mode == "tokens":
            self.tokens = TokenEncoding(config, max_groups, max_levels)
            self.observation_space = self.tokens.observation_space
            self.action_space = self.tokens.action_space
        else:
            self.observation_space, self.action_space = native_obs, native_act
        self._n_act = int(self.action_space.n)
        self.sim = FarmSimulator(config)

        # A step is one compiled call (serverfarm_gym.envs.kernels.vec_step, as a batch of one) on packed
        # buffers: the simulator's, and the env's own settings, tables and running state
        # (eib/efb). The mask, observation and info numbers are written into the arrays below.
        self._pas_table = np.repeat(config.group_efficiency[:, None], config.max_buffer + 1, axis=1)
        eib, efb = pack_env(
            config, action_mode, invalid_action, objective, reward_eta, eta_tau, reward_scale,
            self.warmup_epochs, warmup_policy,
        )  # fmt: skip
        self._build_buffers(eib, efb, native_obs, native_act)
        self._bind_buffers()
        self._eta_initialised = False
        self._started = False
        self._renderer: FarmRenderer | None = None  # built at the first rgb_array/human frame
        self._last_decision: Decision | None = None  # kept only when rendering

    # ---- helpers -------------------------------------------------------------------------------
    def _build_buffers(
        self, eib: NDArray[np.int64], efb: NDArray[np.float64], native_obs: spaces.Box,
        native_act: spaces.Discrete,
    ) -> None:  # fmt: skip
        """The merged buffers ``_IB``/``_FB`` (the simulator's packed state, then the env's
        ``eib``/``efb``) and the arrays the kernels write the observation, mask and codes to."""
        # one row: the env is a batch of one for the kernels (the vector env uses N rows)
        ib, fb = self.sim.packed
        self._IB = np.concatenate([ib, eib])[None, :]
        self._FB = np.concatenate([fb, efb])[None, :]
        self._OBS = np.zeros((1, *native_obs.shape), np.float32)
        self._MASK = np.zeros((1, native_act.n), dtype=bool)
        self._act = np.zeros(1, dtype=np.int64)
        self._codes = np.zeros(1, dtype=np.int64)
        self._tag = self.sim.kind_tag  # fixed per farm; an attribute read on the hot path

    def _bind_buffers(self) -> None:
        """Point the simulator and the env's views into the merged buffers ``_IB``/``_FB``."""
        ib, fb = self._IB[0], self._FB[0]
        ni, nf = int(ib[kn.H_ILEN]), int(ib[kn.H_FLEN])
        self.sim._bind(ib[:ni], fb[:nf])
        self._eib = ib[ni:]
        self._efb = fb[nf:]
        self._out = self._efb[self._eib[kn.EFO_OUT] :]
        # typed names: numpy's stubs give a row of a 2-d array no type
        self._obs: NDArray[np.float32] = self._OBS[0]
        self._mask: NDArray[np.bool_] = self._MASK[0]

    @property
    def packed_buffers(self) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        """The merged buffers ``(IB, FB)`` a step runs on, one row each: the simulator's packed
        ``ib`` / ``fb`` followed by the env's ``eib`` / ``efb`` (layout: ``serverfarm_gym.envs.kernels.schema``;
        ``IB[0, kernels.H_ILEN]`` is where eib starts). ``serverfarm_gym.envs.vector`` stacks copies of them."""
        return self._IB, self._FB

    @property
    def _job(self) -> int:
        """Type of the job waiting for the decision (-1 before the first reset)."""
        return int(self._eib[kn.E_JOB])

    def __setstate__(self, state: dict[str, Any]) -> None:
        # pickling copies views: re-derive them from the merged buffers (the authoritative state)
        self.__dict__.update(state)
        self._bind_buffers()

    def _init_eta(self) -> None:
        """Start the running eta at PAS's efficiency (a short seeded simulation, once per env)."""
        probe = FarmSimulator(self.config, seed=12345)
        probe.run(2_000, table=self._pas_table)
        st = probe.run(20_000, table=self._pas_table)
        denom = st.cost if self.objective == "cost" else st.energy
        eta0 = st.work / denom if denom > 0 else 0.0
        horizon = self.eta_tau / self.config.total_arrival_rate
        power = denom / st.time if st.time > 0 else 1.0
        eta_e = power * horizon
        # running eta = exponentially weighted work / energy (kept in the packed env buffer)
        self._efb[kn.EF_ETAE] = eta_e
        self._efb[kn.EF_ETAW] = eta0 * eta_e
        self._eta_initialised = True

    @property
    def eta(self) -> float:
        """The eta currently used in the reward."""
        if self.reward_eta != "running":
            return float(self.reward_eta)
        if not self._eta_initialised:
            self._init_eta()
        eta_w, eta_e = float(self._efb[kn.EF_ETAW]), float(self._efb[kn.EF_ETAE])
        return eta_w / eta_e if eta_e > 0 else 0.0

    @property
    def slo_multiplier(self) -> float:
        """beta of the SLO's Lagrangian reward (0.0 without an SLO); settable between rollouts."""
        return self._beta

    @slo_multiplier.setter
    def slo_multiplier(self, beta: float) -> None:
        real_argument(beta, "slo_multiplier", minimum=0.0, strict=False)
        if self.config.slo is None and beta != 0:
            raise ValueError(
                f"slo_multiplier: {beta!r} needs a scenario with an slo: block "
                "({mean_response_time: D}); leave it None or 0 without an SLO"
            )
        self._beta = float(beta)

    @property
    def job_area(self) -> float:
        """The time integral of the jobs in the system over the last step (0 after a reset):
        the SLO reward's ``N dt``. Summed over a rollout and divided by the jobs accepted, the
        rollout's mean response time (Little's law), as ``ServerFarmVectorEnv.job_area``."""
        return float(self._out[kn.X_JOBAREA])

    @property
    def _n_invalid(self) -> int:
        """Masked actions replaced by the fallback since the last reset."""
        return int(self._eib[kn.E_NINV])

    def _get_info(self, o: np.ndarray) -> dict[str, Any]:
        """info from the numbers the kernel wrote into ``self._out`` (``o`` = a copy of it). The
        values are NumPy scalars and arrays of fixed dtypes (float64, int64, int8 masks; the flag
        ``invalid_action`` a bool): libraries that stack infos into tensors (TorchRL) need a
        dtype, not a Python number."""
        info = {
            "job_type": np.int64(o[kn.X_JOB]),
            "action_mask": self.action_masks(),
            "work": o[kn.X_WORK],
            "energy": o[kn.X_ENERGY],
            "time": o[kn.X_TIME],
            "throughput": o[kn.X_THROUGHPUT],
            "power": o[kn.X_POWER],
            "efficiency": o[kn.X_EFFICIENCY],
            "blocking": o[kn.X_BLOCKING],
            "blocking_per_type": o[kn.N_OUT :],
            "mean_response_time": np.float64(o[kn.X_RESPONSE]),  # Little's law, since reset
            "eta": o[kn.X_ETA],
            # a Python bool: SyncVectorEnv batches it into a bool array (a NumPy bool, not being
            # a np.number, would become an object array)
            "invalid_action": bool(o[kn.X_INVALID] != 0.0),
            "invalid_actions": np.int64(self._eib[kn.E_NINV]),
        }
        if self.objective == "cost":
            info["cost"] = o[kn.X_COST]
            info["cost_efficiency"] = o[kn.X_COSTEFF]
        return info

    # ---- Gymnasium API ---------------------------------------------------------------------------
    def action_masks(self) -> NDArray[np.int8]:
        """``int8[n_actions]``, 1 for the valid actions at the current decision epoch
        (sb3-contrib's MaskablePPO reads this; ``action_space.sample(mask=...)`` takes it)."""
        if self.tokens is not None:
            return self.tokens.masks(self._mask).view(np.int8)
        # the kernels write a bool mask; viewing its bytes as int8 gives the 0/1 mask for free
        mask: NDArray[np.int8] = self._mask.view(np.int8).copy()  # typed: .copy() is untyped
        return mask

    def _observation(self) -> Observation:
        if self.tokens is not None:
            return self.tokens.encode(self._obs)
        obs: NDArray[np.float32] = self._obs.copy()  # a typed name: numpy's .copy() is untyped
        return obs

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        if options is not None and not isinstance(options, Mapping):
            raise ValueError(
                f"options: expected a dict or None, got {options!r} ({type(options).__name__}); "
                "the env takes no reset options"
            )
        super().reset(seed=seed)
        # eta persists across episodes (it estimates the *policy's* efficiency), but an explicit
        # seed restarts everything, so that the env is a deterministic function of the seed
        if self.reward_eta == "running" and (seed is not None or not self._eta_initialised):
            self._init_eta()
        if self.sim.rng is not self.np_random:
            self.sim.rng = self.np_random  # one random stream: the env's own generator
        # empty farm, warm-up (FarmSimulator.run's chunks), first decision epoch, mask, obs
        kn.vec_reset(self._IB, self._FB, self._OBS, self._MASK, _ONE, self._tag)
        self._started = True
        if self.render_mode is not None:
            self._after_transition(None)
        return self._observation(), self._get_info(self._out.copy())

    def step(
        self, action: int | np.integer[Any] | NDArray[np.integer[Any]]
    ) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        if not self._started:
            raise RuntimeError("call reset() before step()")
        # what Gymnasium's envs do: refuse what the action space does not contain (floats,
        # strings, arrays of shape (1,), None, out-of-range indices) instead of truncating it;
        # integer scalars (the common case, on the hot path) only need the range check
        if type(action) is int or isinstance(action, np.integer):
            if not 0 <= action < self._n_act:
                raise ValueError(self._not_an_action(action))
        elif isinstance(action, (bool, np.bool_)) or not self.action_space.contains(action):
            raise ValueError(self._not_an_action(action))
        requested = action
        if self.tokens is not None:
            # a padded (group, level) slot becomes -1, which the kernel treats as one more
            # masked action: PAS's choice with invalid_action="fallback", refused with "raise"
            token = int(action)
            action = self.tokens.group_action_or_invalid(token)
            if action < 0 and self.invalid_action == "raise":
                raise ValueError(
                    f"action {token} names a padded (group, level) slot of the token space: no "
                    f"such group or level in {self.config.name!r}; choose an action where "
                    "action_masks() is True"
                )
        self._act[0] = action
        decision = (
            chosen(self, int(self._act[0]))
            if self.render_mode is not None and self._act[0] >= 0
            else None
        )
        if kn.vec_step(
            self._IB, self._FB, self._OBS, self._MASK, self._act, self._codes, self._tag
        ):
            raise ValueError(
                f"action {action} is masked out for job type {self._job} (a full or "
                "unavailable server); choose an action where action_masks() is True"
            )
        if decision is not None:
            self._after_transition(decision)
        o = self._out.copy()
        reward = float(o[kn.X_REWARD])
        if self._beta != 0.0:
            # the SLO's Lagrangian term over the same interval (serverfarm_gym.envs.slo); skipped at beta 0 so
            # that the reward is bit-identical to the plain one
            reward -= self._beta * float(o[kn.X_JOBAREA]) / self.reward_scale
        if o[kn.X_INVALID] != 0.0:
            reward -= self._replaced(requested)
        return self._observation(), reward, False, False, self._get_info(o)

    def _replaced(self, action: Any) -> float:
        """Bookkeeping of a masked action the step replaced by PAS's choice: the penalty to
        subtract from the reward (0 with ``"fallback"``, which warns at the first one)."""
        if self.invalid_action == "penalty":
            return self.invalid_penalty
        if not self._warned_invalid:
            self._warned_invalid = True
            warnings.warn(
                f"ServerFarmEnv: action {action} is masked out for job type {self._job}; the job "
                "went where PAS sends it (invalid_action='fallback'). info['invalid_actions'] "
                "counts these replacements; mask the policy (action_masks()) or pass "
                "invalid_action='raise' or 'penalty'. Warned once per env.",
                InvalidActionWarning,
                stacklevel=3,
            )
        return 0.0

    def _not_an_action(self, action: Any) -> str:
        return (
            f"action {_shown(action)} ({type(action).__name__}) is not in the action space "
            f"{self.action_space}: expected an integer index 0..{self._n_act - 1} (a Python "
            "int, a NumPy integer or a 0-d integer array)"
        )

    def _after_transition(self, decision: Decision | None) -> None:
        """Rendering bookkeeping after a reset (``None``) or a step; human mode draws now."""
        self._last_decision = decision
        if decision is None and self._renderer is not None:
            self._renderer.clear_history()
        if self.render_mode == "human":
            self.render()

    def render(self) -> str | np.ndarray | None:
        """The frame of ``render_mode`` (see Rendering): text, ``uint8[H, W, 3]`` or None."""
        if self.render_mode is None:
            gym.logger.warn(
                "You are calling render method without specifying any render mode. "
                "You can specify the render_mode at initialization, "
                f'e.g. gym.make("{self.spec.id if self.spec else "ServerFarm-v0"}", render_mode="rgb_array")'
            )
            return None
        if self.render_mode != "ansi":
            if self._renderer is None:
                self._renderer = FarmRenderer(self.render_mode, fps=self.metadata["render_fps"])
            return self._renderer.render(self)
        c = self.config
        lines = [f"t={self.sim.time:.3f} job type {self._job} ({c.job_types[self._job].name})"]
        for k, g in enumerate(c.groups):
            occ = self.sim.occ[c.group_offsets[k] : c.group_offsets[k + 1]]
            shown = " ".join(str(int(n)) for n in occ[:40]) + (" ..." if len(occ) > 40 else "")
            lines.append(f"{g.name:>12} (B={g.buffer}): {shown}")
        return "\n".join(lines)

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
        super().close()

    # ---- read-only state for renderers -----------------------------------------------------------
    @property
    def occupancy(self) -> NDArray[np.int64]:
        """int64[S]: jobs on each server now (a copy)."""
        occ: NDArray[np.int64] = self.sim.occ.copy()  # a typed name: numpy's .copy() is untyped
        return occ

    @property
    def level_counts(self) -> NDArray[np.int64]:
        """int64[K, Bmax+1]: servers of group k holding b jobs now (a copy)."""
        counts: NDArray[np.int64] = self.sim.level_counts.copy()  # (.copy() is untyped)
        return counts

    @property
    def job_type(self) -> int:
        """Type of the job waiting for the decision (-1 before the first reset)."""
        return self._job

    @property
    def last_decision(self) -> Decision | None:
        """Where the last step sent its job (None after a reset, or when not rendering)."""
        return self._last_decision

    @property
    def running_stats(self) -> dict[str, float]:
        """Since the last reset: time, steps, throughput, power, efficiency (work / energy),
        cost_efficiency (work / money), blocking and mean response time, as in ``info``."""
        o = self._out
        return {
            "time": float(o[kn.X_TIME]),
            "steps": int(self._eib[kn.E_STEPS]),
            "throughput": float(o[kn.X_THROUGHPUT]),
            "power": float(o[kn.X_POWER]),
            "efficiency": float(o[kn.X_EFFICIENCY]),
            "cost_efficiency": float(o[kn.X_COSTEFF]),
            "blocking": float(o[kn.X_BLOCKING]),
            "mean_response_time": float(o[kn.X_RESPONSE]),
        }


def _check_settings(
    action_mode: str,
    obs_mode: str | None,
    reward_eta: str | float,
    eta_tau: float,
    reward_scale: float,
    objective: str,
    invalid_action: str,
    invalid_penalty: float,
    warmup_epochs: int,
    warmup_policy: str,
    render_mode: str | None,
) -> None:
    """Refuse a :class:`ServerFarmEnv` setting it cannot run with (a ``ValueError`` naming it)."""
    if obs_mode not in (None, action_mode, "tokens"):
        raise ValueError(
            f"obs_mode: {obs_mode!r} with action_mode={action_mode!r}; choose None (the "
            f"action mode's own encoding), {action_mode!r} or 'tokens' (with group actions)"
        )
    if obs_mode == "tokens" and action_mode != "group":
        raise ValueError("obs_mode: 'tokens' acts on (group, level) pairs; use action_mode='group'")
    if not (isinstance(reward_eta, str) and reward_eta == "running"):
        if isinstance(reward_eta, str):
            raise ValueError(f"reward_eta: expected 'running' or a number, got {reward_eta!r}")
        real_argument(reward_eta, "reward_eta (a fixed eta)", minimum=0.0, strict=False)
    real_argument(eta_tau, "eta_tau (mean inter-arrival times)", minimum=0.0, strict=True)
    real_argument(reward_scale, "reward_scale", minimum=0.0, strict=True)
    if objective not in OBJECTIVES:
        raise ValueError(f"objective: unknown {objective!r}; choose one of {list(OBJECTIVES)}")
    if invalid_action not in INVALID_ACTION_MODES:
        raise ValueError(
            f"invalid_action: unknown {invalid_action!r}; choose one of {list(INVALID_ACTION_MODES)}"
        )
    real_argument(invalid_penalty, "invalid_penalty", minimum=0.0, strict=False)
    count_argument(warmup_epochs, "warmup_epochs", minimum=0)
    if warmup_policy not in ("pas", "random"):
        raise ValueError(f"warmup_policy: choose 'pas' or 'random', got {warmup_policy!r}")
    if render_mode is not None and render_mode not in RENDER_MODES:
        raise ValueError(
            f"render_mode: unsupported {render_mode!r}; use None or one of {list(RENDER_MODES)}"
        )


def _shown(action: Any) -> str:
    """An action as an error message shows it: NumPy integers (uint64 included) by their
    value, everything else by its repr."""
    if isinstance(action, np.integer) or (
        isinstance(action, np.ndarray) and action.ndim == 0 and action.dtype.kind in "iu"
    ):
        return str(int(action))
    return repr(action)
