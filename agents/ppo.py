"""Learned dispatchers: a trained MaskablePPO model behind the common ``predict`` interface, and the
tools that measure how efficient such a policy is.

A model saved by ``train.py`` is ``<name>.zip`` (the sb3-contrib ``MaskablePPO`` file) plus a JSON
sidecar ``<name>.json`` holding the scenario (as a plain dict, so the file stands alone), the action
mode and the training arguments. :meth:`PPOAgent.load` reads both, so
``evaluate.py --policies ppo:runs/tiny/best_model.zip`` needs nothing else.

Measuring a policy (used by the training callbacks and the final report):

* :func:`exact_efficiency`: the deterministic policy's exact long-run efficiency, by solving its
  per-server CTMC (``baselines.ctmc``); small farms with exponential sizes and constant rates only.
* :func:`rollout_efficiency`: the deterministic masked policy run in independent
  :class:`~envs.server_farm.ServerFarmEnv` replications after a PAS warm-up; efficiency read
  from ``info["work"]``/``info["energy"]`` (never from the return) with a 95% confidence interval.
* :func:`reference_efficiencies`: PAS (exact or simulated), the optimum (``baselines.optimum``) and
  the relaxation upper bound (``baselines.bounds``) when they are computable.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from baselines.base import Policy
from envs.config import FarmConfig, farm_from_dict
from envs.observation import check_action_mode, level_offsets, n_actions, obs_size
from envs.scenarios import load_scenario
from envs.server_farm import ServerFarmEnv
from envs.simulator import FarmSimulator
from evaluation.report import atomic_write, to_json
from evaluation.stats import gap_pct, mean_ci, shortfall_pct

__all__ = [
    "EfficiencyEstimate",
    "PPOAgent",
    "References",
    "TrainingWrapper",
    "atomic_write_json",
    "epochs_per_duration",
    "exact_efficiency",
    "exact_solvable",
    "gaps",
    "measure_efficiency",
    "model_predictor",
    "optimum_efficiency",
    "pas_efficiency",
    "pas_table",
    "policy_decisions",
    "reference_efficiencies",
    "rollout_efficiency",
    "sidecar_path",
    "write_sidecar",
]

#: the largest per-server state space solved exactly (sparse LU; ~1 s at this size)
EXACT_MAX_STATES = 50_000

#: a predictor maps (obs float32[n, d], masks bool[n, A]) to actions int64[n], deterministically
Predictor = Callable[[np.ndarray, np.ndarray], np.ndarray]


# ---------------------------------------------------------------------------------------------
# small helpers
# ---------------------------------------------------------------------------------------------
def atomic_write_json(path: str | Path, obj: Any) -> None:
    """Write JSON atomically (``evaluation.report.atomic_write``: a kill never leaves half a file)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, to_json(obj))


def sidecar_path(model_path: str | Path) -> Path:
    """``runs/x/model.zip`` -> ``runs/x/model.json`` (config, action mode and args of the model)."""
    p = Path(model_path)
    return p.with_suffix(".json") if p.suffix == ".zip" else p.with_name(p.name + ".json")


def pas_table(config: FarmConfig) -> np.ndarray:
    """PAS as a priority table: ``table[k, b] = mu_k / (eps_k - eps0_k)`` for every level b."""
    return np.repeat(config.group_efficiency[:, None], config.max_buffer + 1, axis=1)


def epochs_per_duration(config: FarmConfig) -> float:
    """Decision epochs per mean job duration at the slowest group (epochs are arrivals, so a
    large farm covers little model time per epoch); warm-ups are sized in these units, as in
    ``evaluation.harness.window_warnings``."""
    slowest = float(min(max(g.service_rate) for g in config.groups))
    return config.total_arrival_rate / slowest if slowest > 0 else 1.0


def gaps(
    value: float, pas: float | None, optimum: float | None, bound: float | None = None
) -> dict[str, float | None]:
    """Percent gaps with the evaluation harness's conventions (``evaluation.stats``):
    ``gap_to_pas_pct = 100 (value - pas) / pas`` (positive: better than PAS) and
    ``gap_to_optimum_pct = 100 (optimum - value) / optimum`` (shortfall; same for the bound);
    ``pas_gap_closed`` = share of PAS's shortfall to the optimum that ``value`` recovers."""
    out: dict[str, float | None] = {
        "gap_to_pas_pct": gap_pct(value, pas) if pas else None,
        "gap_to_optimum_pct": shortfall_pct(value, optimum),
        "gap_to_bound_pct": shortfall_pct(value, bound),
        "pas_gap_closed": None,
    }
    if pas is not None and optimum is not None and optimum - pas > 1e-12 * optimum:
        out["pas_gap_closed"] = (value - pas) / (optimum - pas)
    return out


# ---------------------------------------------------------------------------------------------
# the agent
# ---------------------------------------------------------------------------------------------
def model_predictor(model: Any) -> Predictor:
    """Deterministic masked predictor of an sb3-contrib ``MaskablePPO`` model (or its policy)."""
    policy = getattr(model, "policy", model)

    def predict(obs: np.ndarray, masks: np.ndarray) -> np.ndarray:
        acts, _ = policy.predict(obs, deterministic=True, action_masks=masks)
        return np.asarray(acts, dtype=np.int64).reshape(-1)

    return predict


class PPOAgent(Policy):
    """A trained MaskablePPO policy with the common ``predict`` interface of ``baselines.base``.

    Build it with :meth:`load`. ``config`` and ``action_mode`` are those the model was trained on
    (observations must use the same encoding); ``meta`` holds the sidecar (training args, ...).
    """

    name = "ppo"
    builtin = None

    def __init__(self, model: Any, config: FarmConfig, action_mode: str, meta: Mapping[str, Any]):
        super().__init__(config, action_mode)
        self.model = model
        self.meta = dict(meta)
        n_obs = int(np.prod(model.observation_space.shape))

        if n_obs != obs_size(config, action_mode) or model.action_space.n != n_actions(
            config, action_mode
        ):
            raise ValueError(
                f"model: its spaces (obs {n_obs}, actions {model.action_space.n}) do not match "
                f"scenario {config.name!r} in action mode {action_mode!r}; load the sidecar that "
                "was saved with the model"
            )

    @classmethod
    def load(cls, path: str | Path, device: str = "cpu") -> PPOAgent:
        """Load ``path`` (a ``.zip`` saved by ``train.py``, or a run directory, which loads its
        ``best_model.zip`` if present, else ``final_model.zip``) and its JSON sidecar."""
        from sb3_contrib import MaskablePPO  # heavy import: only when a model is loaded

        p = Path(path)
        if p.is_dir():
            cands = [p / "best_model.zip", p / "final_model.zip"]
            found = [c for c in cands if c.exists()]
            if not found:
                raise FileNotFoundError(
                    f"path: {p} is a directory without best_model.zip or final_model.zip; "
                    "pass the model's .zip file"
                )
            p = found[0]
        if not p.exists() and p.with_suffix(".zip").exists():
            p = p.with_suffix(".zip")
        if not p.exists():
            raise FileNotFoundError(f"path: no model at {p}")
        side = sidecar_path(p)
        if not side.exists():
            raise FileNotFoundError(
                f"path: {p} has no sidecar {side.name} (scenario and action mode); "
                "models saved by train.py always have one"
            )
        meta = json.loads(side.read_text())
        model = MaskablePPO.load(p, device=device)
        config = farm_from_dict(meta["scenario"])
        return cls(model, config, meta["action_mode"], meta)

    def act(self, obs: np.ndarray, mask: np.ndarray, deterministic: bool = True) -> int:
        return int(self._act_batch(np.asarray(obs)[None], np.asarray(mask)[None], deterministic)[0])

    def _act_batch(
        self, obs: np.ndarray, masks: np.ndarray, deterministic: bool = True
    ) -> np.ndarray:
        """One forward pass of the model for the whole batch (:meth:`Policy.predict` batches)."""
        acts, _ = self.model.policy.predict(
            np.asarray(obs, dtype=np.float32), deterministic=deterministic, action_masks=masks
        )
        return np.asarray(acts, dtype=np.int64).reshape(-1)

    def predictor(self) -> Predictor:
        """Deterministic masked predictor (for :func:`rollout_efficiency`, :func:`exact_efficiency`)."""
        return model_predictor(self.model)


def write_sidecar(
    model_path: str | Path, config: FarmConfig, action_mode: str, **extra: Any
) -> None:
    """Write the JSON sidecar that :meth:`PPOAgent.load` needs next to a saved model."""
    meta = {"scenario": config.to_dict(), "action_mode": check_action_mode(action_mode), **extra}
    atomic_write_json(sidecar_path(model_path), meta)


# ---------------------------------------------------------------------------------------------
# training reward
# ---------------------------------------------------------------------------------------------
class TrainingWrapper(gym.Wrapper):
    """The training view of a :class:`~envs.server_farm.ServerFarmEnv`: the reward PPO sees and
    the action mask.

    ``reward="env"`` keeps the env's reward: the integral of ``W(t) - eta P(t)`` up to the next
    decision epoch (W: total service rate, P: total power or cost rate).

    ``reward="expected"`` replaces it by a reward with the same long-run average and no
    exponential-duration noise. Decision epochs are the arrivals that find a vacancy, so in state
    x they occur at rate ``L(x) = sum of lambda_j over the types with an available non-full
    server``. By the Campbell-Mecke formula (decision epochs have stochastic intensity
    ``L(X(t))``), summing ``g(x_n) = (W(x_n) - eta P(x_n)) / L(x_n)`` over the states x_n found at
    the decision epochs (before the assignment) gives in expectation the time integral of
    ``W - eta P``: every stationary policy has the same long-run average reward under both, hence
    the same ranking. The step's reward is ``g`` of the state at the *next* epoch, which the action
    influences. Measured (docs/training.md): it helps little on tiny and is noisier where ``L(x)``
    can be small (heavy blocking of the main job type), so ``"env"`` is the default.
    ``info["env_reward"]`` keeps the env's own reward.
    """

    REWARDS = ("env", "expected")

    def __init__(self, env: gym.Env, reward: str = "env"):
        super().__init__(env)
        u = env.unwrapped
        if not isinstance(u, ServerFarmEnv):
            raise ValueError("env: TrainingWrapper wraps a ServerFarmEnv")
        if reward not in self.REWARDS:
            raise ValueError(f"reward: choose one of {list(self.REWARDS)}, got {reward!r}")
        self.reward_mode = reward
        self.farm: ServerFarmEnv = u
        c = u.config
        self._sbuf = c.buffers[c.server_group]
        self._mu = c.mu_table[c.server_group]  # [S, Bmax+1]
        self._pw = c.power_table[c.server_group]
        self._avail = c.server_availability  # [J, S]
        self._rates = c.arrival_rates  # [I, J]
        self._prices = c.prices[:, c.server_group]  # [I, S]
        self._S = np.arange(c.n_servers)

    def action_masks(self) -> np.ndarray:
        """The env's action mask (gymnasium wrappers do not forward attributes)."""
        return self.farm.action_masks()

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self.reward_mode == "env":
            return obs, reward, terminated, truncated, info
        u = self.farm
        occ, it = u.sim.occ, u.sim.interval
        work_rate = float(self._mu[self._S, occ].sum())
        power = self._pw[self._S, occ]
        if u.objective == "cost":
            power = power * self._prices[it]
        open_types = (self._avail & (occ < self._sbuf)[None, :]).any(axis=1)
        rate = float(self._rates[it][open_types].sum())
        info["env_reward"] = reward
        g = (work_rate - u.eta * float(power.sum())) / rate if rate > 0 else 0.0
        return obs, g / u.reward_scale, terminated, truncated, info


# ---------------------------------------------------------------------------------------------
# measuring a deterministic policy
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EfficiencyEstimate:
    """An efficiency with its 95% CI half-width (0 when exact) and how it was obtained."""

    efficiency: float
    ci95: float
    method: str  # "exact" or "simulation"
    epochs: int = 0  # decision epochs simulated in total (0 when exact)
    replications: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "efficiency": self.efficiency,
            "ci95": self.ci95,
            "method": self.method,
            "epochs": self.epochs,
            "replications": self.replications,
        }


def exact_solvable(config: FarmConfig, max_states: int = EXACT_MAX_STATES) -> bool:
    """True when the per-server CTMC of ``config`` is small and exactly Markov."""
    from baselines.ctmc import n_full_states

    return (
        config.all_exponential
        and not config.is_time_varying
        and n_full_states(config) <= max_states
    )


def _encode_states(config: FarmConfig, action_mode: str, occ: np.ndarray, j: int) -> tuple:
    """(obs float32[N, d], masks bool[N, A]) of occupancy vectors ``occ`` int64[N, S] for an
    arriving type-j job, exactly as ``ServerFarmEnv`` encodes them."""
    N, J = occ.shape[0], config.n_job_types
    sg, bufs = config.server_group, config.buffers
    if action_mode == "server":
        inv = (1.0 / bufs[sg]).astype(np.float32)
        feats = (occ * inv).astype(np.float32)
        masks = (occ < bufs[sg][None, :]) & config.server_availability[j][None, :]
    else:
        K, B = config.n_groups, config.max_buffer
        counts = np.zeros((N, K, B + 1), dtype=np.int64)
        for s in range(config.n_servers):
            np.add.at(counts, (np.arange(N), sg[s], occ[:, s]), 1)
        rows = np.concatenate([np.full(g.buffer + 1, k) for k, g in enumerate(config.groups)])
        cols = np.concatenate([np.arange(g.buffer + 1) for g in config.groups])
        inv = np.array([1.0 / config.groups[k].count for k in rows], np.float32)
        feats = (counts[:, rows, cols] * inv).astype(np.float32)
        arows = np.concatenate([np.full(g.buffer, k) for k, g in enumerate(config.groups)])
        acols = np.concatenate([np.arange(g.buffer) for g in config.groups])
        masks = (counts[:, arows, acols] > 0) & config.availability[j, arows][None, :]
    onehot = np.zeros((N, J), np.float32)
    onehot[:, j] = 1.0
    obs = np.concatenate([feats, onehot], axis=1)
    # constant-rate farms only (exact_solvable): no schedule-interval features in between
    assert obs.shape[1] == obs_size(config, action_mode), "observation layout changed"
    return obs, masks


def policy_decisions(
    predict: Predictor, config: FarmConfig, action_mode: str, states: np.ndarray
) -> np.ndarray:
    """int64[N, J]: the server each state's type-j arrival is sent to (-1: blocked)."""
    occ = states.astype(np.int64)
    N, J = occ.shape[0], config.n_job_types
    out = np.full((N, J), -1, dtype=np.int64)
    for j in range(J):
        obs, masks = _encode_states(config, action_mode, occ, j)
        ok = masks.any(axis=1)
        if not ok.any():
            continue
        acts = np.empty(N, dtype=np.int64)
        for lo in range(0, N, 8192):  # bounded batches keep memory flat
            sl = slice(lo, min(N, lo + 8192))
            acts[sl] = predict(obs[sl], masks[sl])
        rows = np.flatnonzero(ok)
        if not masks[rows, acts[rows]].all():
            raise RuntimeError("predictor chose a masked action; it must respect action_masks")
        if action_mode == "server":
            out[rows, j] = acts[rows]
        else:
            loff = level_offsets(config)
            k = np.searchsorted(loff, acts[rows], side="right") - 1
            b = acts[rows] - loff[k]
            # the env sends a group-mode action to the smallest-index server of group k at level b
            hit = (config.server_group[None, :] == k[:, None]) & (occ[rows] == b[:, None])
            out[rows, j] = np.argmax(hit, axis=1)
    return out


def exact_efficiency(
    predict: Predictor,
    config: FarmConfig,
    action_mode: str,
    max_states: int = EXACT_MAX_STATES,
) -> EfficiencyEstimate | None:
    """Exact long-run efficiency of a deterministic masked policy (None if not solvable)."""
    if not exact_solvable(config, max_states):
        return None
    from baselines import ctmc

    states, strides = ctmc._full_states(config)
    choice = policy_decisions(predict, config, action_mode, states)

    def rule(occ: np.ndarray, j: int) -> int:
        return int(choice[int(occ @ strides), j])

    res = ctmc.evaluate_policy(config, rule, max_states=max_states)
    return EfficiencyEstimate(float(res.efficiency), 0.0, "exact")


def rollout_efficiency(
    predict: Predictor,
    config: FarmConfig,
    action_mode: str,
    n_epochs: int = 20_000,
    replications: int = 8,
    warmup_epochs: int | None = None,
    policy_warmup: int | None = None,
    seed: int = 10_000,
    cache_size: int = 200_000,
) -> EfficiencyEstimate:
    """Efficiency of the deterministic masked policy in ``replications`` independent envs.

    Each env is warmed up by PAS for ``warmup_epochs`` (compiled; default 50 mean job durations,
    at least 2,000 epochs: the farm starts empty), then the policy runs ``policy_warmup``
    (default 10 durations, at least 500 epochs) ``+ n_epochs`` decision epochs; work and energy of the last ``n_epochs`` are
    read from ``info``. The envs step in lockstep so the network sees one batch per epoch, and
    decisions are memoised per observation (small farms revisit few states), which makes this
    cost about as much as the env steps themselves.
    """
    if replications < 1 or n_epochs < 1:
        raise ValueError("replications and n_epochs: must be >= 1")
    per = epochs_per_duration(config)
    if warmup_epochs is None:
        warmup_epochs = max(2_000, math.ceil(50 * per))
    if policy_warmup is None:
        policy_warmup = max(500, math.ceil(10 * per))
    envs = [
        ServerFarmEnv(config, action_mode=action_mode, reward_eta=0.0, warmup_epochs=warmup_epochs)
        for _ in range(replications)
    ]
    obs = np.stack([env.reset(seed=seed + i)[0] for i, env in enumerate(envs)])
    masks = np.stack([env.action_masks() for env in envs])
    cache: dict[bytes, int] = {}
    work = np.zeros(replications)
    energy = np.zeros(replications)
    for t in range(policy_warmup + n_epochs):
        keys = [o.tobytes() for o in obs]
        acts = np.empty(replications, dtype=np.int64)
        miss = []
        for i, key in enumerate(keys):
            a = cache.get(key)
            if a is None:
                miss.append(i)
            else:
                acts[i] = a
        if miss:
            acts[miss] = predict(obs[miss], masks[miss])
            if len(cache) < cache_size:
                for i in miss:
                    cache[keys[i]] = int(acts[i])
        for i, env in enumerate(envs):
            o, _, _, _, info = env.step(int(acts[i]))
            if info["invalid_action"]:
                raise RuntimeError("predictor chose a masked action; it must respect action_masks")
            obs[i] = o
            masks[i] = info["action_mask"]
            if t >= policy_warmup:
                work[i] += info["work"]
                energy[i] += info["energy"]
    return _estimate(work / energy, n_epochs)


def _estimate(per_replication: np.ndarray, n_epochs: int) -> EfficiencyEstimate:
    """Mean of the replications' efficiencies with its Student-t 95% half-width (as the
    evaluation harness reports them)."""
    mean, half = mean_ci(per_replication, 0.95)
    n = len(per_replication)
    return EfficiencyEstimate(
        mean, math.inf if half is None else half, "simulation", n_epochs * n, n
    )


def measure_efficiency(
    predict: Predictor,
    config: FarmConfig,
    action_mode: str,
    exact: bool = True,
    **rollout_kwargs: Any,
) -> EfficiencyEstimate:
    """Exact efficiency when solvable (and ``exact``), else :func:`rollout_efficiency`."""
    if exact:
        est = exact_efficiency(predict, config, action_mode)
        if est is not None:
            return est
    return rollout_efficiency(predict, config, action_mode, **rollout_kwargs)


# ---------------------------------------------------------------------------------------------
# reference points: PAS, the optimum, the upper bound
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class References:
    """Efficiencies the learned policy is compared with (None, with the reason, when not
    computable: the exact optimum only exists for small farms)."""

    pas: EfficiencyEstimate
    optimum: float | None
    optimum_note: str
    upper_bound: float | None
    upper_bound_note: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "pas": self.pas.as_dict(),
            "optimum": self.optimum,
            "optimum_note": self.optimum_note,
            "upper_bound": self.upper_bound,
            "upper_bound_note": self.upper_bound_note,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> References:
        return cls(
            EfficiencyEstimate(**d["pas"]),
            d["optimum"],
            d["optimum_note"],
            d["upper_bound"],
            d["upper_bound_note"],
        )


def pas_efficiency(
    config: FarmConfig, n_epochs: int = 200_000, replications: int = 8, seed: int = 20_000
) -> EfficiencyEstimate:
    """PAS's efficiency: exact (CTMC) when solvable, else compiled simulation with a 95% CI."""
    table = pas_table(config)
    if exact_solvable(config):
        from baselines.ctmc import evaluate_policy

        return EfficiencyEstimate(float(evaluate_policy(config, table).efficiency), 0.0, "exact")
    effs = np.empty(replications)
    warmup = max(2_000, n_epochs // 10, math.ceil(50 * epochs_per_duration(config)))
    for i in range(replications):
        sim = FarmSimulator(config, seed=seed + i)
        sim.run(warmup, "priority", table)  # the farm starts empty
        effs[i] = sim.run(n_epochs, "priority", table).efficiency
    return _estimate(effs, n_epochs)


def optimum_efficiency(config: FarmConfig) -> tuple[float | None, str]:
    """(exact optimal efficiency, source) from ``baselines.optimum.solve``; (None, why) when the
    solver is missing or refuses the instance (too large, non-exponential sizes: ValueError)."""
    try:
        from baselines.optimum import solve
    except ImportError as err:
        return None, f"not computable (baselines.optimum unavailable: {err})"
    try:
        return float(solve(config).value), "exact (baselines.optimum.solve)"
    except (ValueError, MemoryError) as err:
        return None, f"not computable ({err})"


def reference_efficiencies(config: FarmConfig | str, **pas_kwargs: Any) -> References:
    """PAS, the exact optimum and the relaxation upper bound of a scenario (the bound through
    ``evaluation.reference_values``, i.e. ``baselines.bounds``)."""
    from evaluation.harness import reference_values

    config = load_scenario(config)
    opt, opt_note = optimum_efficiency(config)
    bnd = reference_values(config, compute_optimum=False)
    bound = bnd["upper_bound"]
    return References(
        pas_efficiency(config, **pas_kwargs),
        opt,
        opt_note,
        None if bound is None else float(bound["efficiency"]),
        bound["source"] if bound is not None else f"not computable: {bnd['upper_bound_reason']}",
    )
