"""One measurement API: the efficiency of one deterministic policy on one farm, with its interval.

:func:`measure` is the single entry point that training, model selection, experiments and
benchmarks call (``serverfarm_gym.evaluation.policy_report.evaluate``, the multi-policy report of ``evaluate.py``,
runs the same replication primitives, :func:`serverfarm_gym.evaluation.rollout.simulate_builtin` and
:func:`serverfarm_gym.evaluation.rollout.rollout`, with the same window and seeds)::

    from serverfarm_gym.evaluation import Window, measure, replication_seeds
    est = measure(policy, config, Window.for_farm(config, 20_000), replication_seeds(0, 8))
    est.efficiency, est.ci95, est.per_replication

Measurement window (:class:`Window`): the farm starts empty; ``pas_warmup`` epochs are
dispatched by PAS (compiled), then ``warmup`` epochs by the measured policy, then ``horizon``
epochs are measured. The one warm-up rule is :meth:`Window.for_farm`.

Routes (``Estimate.route``), chosen by ``method="auto"`` in this order:

* ``exact``: the stationary distribution of the per-server CTMC (``serverfarm_gym.evaluation.exact``), when the
  chain is solvable and the objective is energy; no sampling error (``ci95`` 0).
* ``builtin``: the compiled simulator's own dispatcher for a policy with a built-in form (a
  priority table in server mode: PAS, Whittle, the heuristics), at compiled speed.
* ``vector``: all replications in lockstep in :class:`serverfarm_gym.envs.vector.ServerFarmVectorEnv`, one batched
  policy call per epoch, when the window starts with a PAS warm-up;
* ``env``: one :class:`serverfarm_gym.envs.server_farm.ServerFarmEnv` rollout per replication otherwise.

Guarantees: the estimate is a deterministic function of (policy, config, window, seeds, action
mode, objective); replication ``i`` uses stream ``seeds[i]`` on every route, so two policies
measured with the same seeds are paired (common random numbers, ``serverfarm_gym.evaluation.paired``). For a
priority policy in server mode the ``builtin`` route gives the ``vector`` and ``env`` routes'
sample paths (to float rounding). Efficiencies are read from the simulator's counters, never from
the RL reward.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from serverfarm_gym.baselines.pas import PASPolicy
from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.scenarios import load_scenario
from serverfarm_gym.envs.simulator import FarmSimulator
from serverfarm_gym.envs.vector import ServerFarmVectorEnv
from serverfarm_gym.evaluation.exact import (
    EXACT_MAX_STATES,
    Predictor,
    as_predictor,
    exact_evaluation,
    exact_solvable,
)
from serverfarm_gym.evaluation.references import reference_values
from serverfarm_gym.evaluation.rollout import (
    check_window,
    policy_route,
    replication_seeds,
    rollout,
    simulate_builtin,
)
from serverfarm_gym.evaluation.stats import mean_ci

__all__ = [
    "METHODS",
    "Estimate",
    "References",
    "Window",
    "as_predictor",
    "consecutive_seeds",
    "measure",
    "pas_efficiency",
    "reference_efficiencies",
    "replication_seeds",
]

#: ``measure``'s ``method`` values
METHODS = ("auto", "exact", "builtin", "env", "vector")
#: the warm-up rule's constants (mean job durations at the slowest group, see Window.for_farm)
WARMUP_DURATIONS = 50.0
POLICY_WARMUP_DURATIONS = 10.0
POLICY_WARMUP_MIN_EPOCHS = 500
#: measure's defaults when no window / seeds are given
DEFAULT_HORIZON = 20_000
DEFAULT_REPLICATIONS = 8


@dataclass(frozen=True)
class Window:
    """Per replication: ``pas_warmup`` epochs dispatched by PAS from the empty farm, then
    ``warmup`` epochs dispatched by the measured policy (both discarded), then ``horizon``
    measured decision epochs."""

    horizon: int
    warmup: int
    pas_warmup: int = 0

    def __post_init__(self) -> None:
        check_window(self.horizon, self.warmup)
        if isinstance(self.pas_warmup, bool) or not isinstance(self.pas_warmup, (int, np.integer)):
            raise ValueError(f"pas_warmup: must be an integer >= 0, got {self.pas_warmup!r}")
        if self.pas_warmup < 0:
            raise ValueError(f"pas_warmup: must be an integer >= 0, got {self.pas_warmup!r}")

    @classmethod
    def for_farm(
        cls,
        config: FarmConfig,
        horizon: int,
        warmup: int | None = None,
        pas_warmup: int | bool | None = None,
    ) -> Window:
        """The one warm-up rule, filling in what is not given.

        The farm starts empty and must reach steady state before measuring: the warm-up from the
        empty farm is 50 mean job durations at the slowest group (``FarmConfig.epochs_per_duration``;
        the calibration is in ``serverfarm_gym.evaluation.policy_report.window_warnings``), and at least 10% of the
        horizon. Without a PAS warm-up (``pas_warmup`` None/False/0) the measured policy
        dispatches it; with one (``True``: the rule's length) PAS dispatches it and the policy
        then runs its own transient, 10 mean job durations and at least 500 epochs, unmeasured (a
        policy measured in the transient after PAS's regime can look better than any steady
        state).
        """
        check_window(horizon, 0)
        epd = config.epochs_per_duration
        from_empty = max(int(horizon) // 10, math.ceil(WARMUP_DURATIONS * epd))
        if not pas_warmup:  # None, False or 0: the policy warms the farm up itself
            return cls(int(horizon), from_empty if warmup is None else int(warmup))
        pas = from_empty if pas_warmup is True else int(pas_warmup)
        if warmup is None:
            warmup = max(POLICY_WARMUP_MIN_EPOCHS, math.ceil(POLICY_WARMUP_DURATIONS * epd))
        return cls(int(horizon), int(warmup), pas)


@dataclass(frozen=True, eq=False)  # identity: the per-replication array has no truth value
class Estimate:
    """An efficiency, its 95% Student-t half-width over replications (0 when exact, inf with one
    replication) and how it was measured: ``method`` (``"exact"`` or ``"simulation"``),
    ``route`` (``exact``/``builtin``/``env``/``vector``), measured ``epochs`` in total,
    ``replications`` and their values (empty when exact), the mean response time (None where
    the route does not report it)."""

    efficiency: float
    ci95: float
    method: str
    epochs: int = 0
    replications: int = 0
    per_replication: np.ndarray = field(default_factory=lambda: np.empty(0), repr=False)
    mean_response_time: float | None = None
    route: str = ""

    def interval(self, confidence: float) -> float:
        """Half-width of the Student-t interval at another confidence level (0 when exact)."""
        if self.method == "exact":
            return 0.0
        half = mean_ci(self.per_replication, confidence)[1]
        return math.inf if half is None else float(half)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, with the per-replication values when there are any."""
        out: dict[str, Any] = {
            "efficiency": self.efficiency,
            "ci95": self.ci95,
            "method": self.method,
            "epochs": self.epochs,
            "replications": self.replications,
        }
        if len(self.per_replication):
            out["per_replication"] = [float(x) for x in self.per_replication]
        if self.mean_response_time is not None:
            out["mean_response_time"] = self.mean_response_time
        if self.route:
            out["route"] = self.route
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Estimate:
        """Rebuild an estimate saved with :meth:`as_dict` (e.g. a best model's sidecar)."""
        per = np.asarray(d.get("per_replication") or [], dtype=np.float64)
        return cls(
            float(d["efficiency"]), float(d["ci95"]), str(d["method"]), int(d.get("epochs", 0)),
            int(d.get("replications", 0)), per, d.get("mean_response_time"), str(d.get("route", "")),
        )  # fmt: skip


def consecutive_seeds(first: int, replications: int) -> list[int]:
    """``[first, first + 1, ...]``: replication ``i`` on stream ``first + i`` (what
    ``ServerFarmVectorEnv.reset(seed=first)`` gives env ``i``); training's paired evaluations
    use these. :func:`replication_seeds` gives the harness's independent streams."""
    if isinstance(first, bool) or int(first) != first or first < 0:
        raise ValueError(f"seed: must be an integer >= 0, got {first!r}")
    if replications < 1:
        raise ValueError(f"replications: must be >= 1, got {replications}")
    return [int(first) + i for i in range(int(replications))]


def measure(
    policy: Any,
    config: FarmConfig | str,
    window: Window | int | None = None,
    seeds: Sequence[int] | None = None,
    *,
    action_mode: str = "server",
    method: str = "auto",
    objective: str = "energy",
    max_states: int = EXACT_MAX_STATES,
) -> Estimate:
    """The efficiency of the deterministic masked ``policy`` on ``config`` (see the module doc).

    Args:
        policy: an object with ``predict(obs, action_masks=..., deterministic=True)`` or a
            function ``(obs, masks) -> actions`` (:func:`as_predictor`).
        config: the farm (FarmConfig or preset name/path).
        window: a :class:`Window`, or a horizon (the rule fills in the warm-up); default a
            horizon of 20,000 epochs.
        seeds: one seed per replication; default ``replication_seeds(0, 8)``.
        action_mode: the action encoding the policy expects (``"server"``/``"group"``).
        method: ``"auto"`` or one route (``exact``, ``builtin``, ``env``, ``vector``).
        objective: ``"energy"`` (work / energy) or ``"cost"`` (work / energy cost; simulated
            only).
        max_states: the largest per-server chain solved exactly.

    Raises:
        ValueError: a bad argument (named), a route that cannot measure this policy/farm, or
            the policy chose a masked action.
    """
    config = load_scenario(config)
    win = _window(config, window)
    seeds = replication_seeds(0, DEFAULT_REPLICATIONS) if seeds is None else list(seeds)
    if not seeds:
        raise ValueError("seeds: give at least one seed (one per replication)")
    if objective not in ("energy", "cost"):
        raise ValueError(f"objective: 'energy' or 'cost', got {objective!r}")
    route = _choose(policy, config, win, action_mode, method, objective, max_states)
    if route == "exact":
        return _exact(policy, config, action_mode, max_states)
    if route == "builtin":
        return _builtin(policy, config, win, seeds, objective)
    if route == "vector":
        return _vector(policy, config, win, seeds, action_mode, objective)
    return _env(policy, config, win, seeds, action_mode, objective)


def _window(config: FarmConfig, window: Window | int | None) -> Window:
    if window is None:
        return Window.for_farm(config, DEFAULT_HORIZON)
    if isinstance(window, Window):
        return window
    return Window.for_farm(config, window)


def _choose(
    policy: Any,
    config: FarmConfig,
    win: Window,
    action_mode: str,
    method: str,
    objective: str,
    max_states: int,
) -> str:
    """The route ``method`` names, or auto's choice (module doc); ValueError if impossible."""
    if method not in METHODS:
        raise ValueError(f"method: one of {list(METHODS)}, got {method!r}")
    exact_ok = objective == "energy" and exact_solvable(config, max_states)
    builtin_ok = action_mode == "server" and policy_route(policy)[0] is not None
    if method == "exact" and not exact_ok:
        raise ValueError(
            "method: 'exact' needs a solvable per-server chain and the energy objective; "
            "use a simulated route"
        )
    if method == "builtin" and not builtin_ok:
        raise ValueError("method: 'builtin' needs a priority/random policy in server mode")
    if method != "auto":
        return method
    if exact_ok:
        return "exact"
    if builtin_ok:
        return "builtin"
    return "vector" if win.pas_warmup > 0 else "env"


def _exact(policy: Any, config: FarmConfig, action_mode: str, max_states: int) -> Estimate:
    res = exact_evaluation(policy, config, action_mode, max_states)
    rt = float(res.mean_response_time)
    return Estimate(float(res.efficiency), 0.0, "exact", mean_response_time=rt, route="exact")


def _estimate(
    per_rep: np.ndarray, horizon: int, route: str, response: np.ndarray | None = None
) -> Estimate:
    """Mean and Student-t 95% half-width of the per-replication efficiencies."""
    mean, half = mean_ci(per_rep, 0.95)
    rt = None
    if response is not None and np.all(np.isfinite(response)):
        rt = float(np.mean(response))
    return Estimate(
        mean, math.inf if half is None else half, "simulation", horizon * len(per_rep),
        len(per_rep), per_rep, rt, route,
    )  # fmt: skip


def _builtin(
    policy: Any, config: FarmConfig, win: Window, seeds: Sequence[int], objective: str
) -> Estimate:
    """The compiled simulator's dispatcher. Without a PAS warm-up: the harness's window
    (``simulate_builtin``, the ``env`` route's sample path). With one: the ``vector`` route's
    sample path -- the env's reset stops at the first decision, which the policy's first step
    makes, hence the one extra epoch before measuring."""
    kind, table = policy_route(policy)
    assert kind is not None
    per_rep = np.empty(len(seeds))
    resp = np.empty(len(seeds))
    for i, s in enumerate(seeds):
        if win.pas_warmup == 0:
            st = simulate_builtin(config, kind, win.horizon, win.warmup, s, table).stats
        else:
            sim = FarmSimulator(config, seed=int(s))
            pas = PASPolicy(config).priority_table()
            if kind == "priority" and np.array_equal(np.asarray(table), pas):
                sim.run(win.pas_warmup + win.warmup + 1, kind, table)
            else:
                sim.run(win.pas_warmup, "priority", pas)
                sim.run(win.warmup + 1, kind, table)
            st = sim.run(win.horizon, kind, table)
        per_rep[i] = st.cost_efficiency if objective == "cost" else st.efficiency
        resp[i] = st.mean_response_time
    return _estimate(per_rep, win.horizon, "builtin", resp)


class _MemoPolicy:
    """A predictor as a ``predict`` policy whose decisions are memoised per observation (small
    farms revisit few states, so a rollout costs about as much as the env steps)."""

    def __init__(self, predict: Predictor, action_mode: str, cache_size: int = 200_000):
        self._predict = predict
        self.action_mode = action_mode
        self._cache: dict[bytes, int] = {}
        self._size = cache_size

    def predict(
        self, obs: np.ndarray, action_masks: np.ndarray | None = None, deterministic: bool = True
    ) -> tuple[int, None]:
        key = np.asarray(obs).tobytes()
        a = self._cache.get(key)
        if a is None:
            a = int(self._predict(np.asarray(obs)[None], np.asarray(action_masks)[None])[0])
            if len(self._cache) < self._size:
                self._cache[key] = a
        return a, None


def _env(
    policy: Any,
    config: FarmConfig,
    win: Window,
    seeds: Sequence[int],
    action_mode: str,
    objective: str,
) -> Estimate:
    """One single-env rollout per replication (``serverfarm_gym.evaluation.rollout.rollout``)."""
    memo = _MemoPolicy(as_predictor(policy), action_mode)
    per_rep = np.empty(len(seeds))
    resp = np.empty(len(seeds))
    for i, s in enumerate(seeds):
        res = rollout(
            memo, config, win.horizon, win.warmup, s, action_mode=action_mode,
            pas_warmup=win.pas_warmup,
        )  # fmt: skip
        if res.invalid_actions:
            raise ValueError("policy: chose a masked action; it must respect action_masks")
        st = res.stats
        per_rep[i] = st.cost_efficiency if objective == "cost" else st.efficiency
        resp[i] = st.mean_response_time
    return _estimate(per_rep, win.horizon, "env", resp)


def _vector(
    policy: Any,
    config: FarmConfig,
    win: Window,
    seeds: Sequence[int],
    action_mode: str,
    objective: str,
) -> Estimate:
    """All replications in one vector env, one batched policy call per epoch; each
    replication's efficiency is its work / energy (or cost) over the measured epochs, read from
    the env's ``info``."""
    n = len(seeds)
    predict = as_predictor(policy)
    venv = ServerFarmVectorEnv(
        n, config, action_mode=action_mode, reward_eta=0.0, objective=objective,
        warmup_epochs=win.pas_warmup, max_episode_steps=None,
    )  # fmt: skip
    obs, _ = venv.reset(seed=[int(s) for s in seeds])
    work = np.zeros(n)
    energy = np.zeros(n)
    key = "cost" if objective == "cost" else "energy"
    for t in range(win.warmup + win.horizon):
        masks = venv.action_masks()
        acts = predict(obs, masks)
        if not masks[np.arange(n), acts].all():
            raise ValueError("policy: chose a masked action; it must respect action_masks")
        obs, _, _, _, info = venv.step(acts)
        if t >= win.warmup:
            work += info["work"]
            energy += info[key]
    return _estimate(work / energy, win.horizon, "vector")


# ---------------------------------------------------------------------------------------------
# the reference points a measured policy is compared with
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class References:
    """Efficiencies a learned policy is compared with (None, with the reason, when not
    computable: the exact optimum only exists for small farms)."""

    pas: Estimate
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
            Estimate.from_dict(d["pas"]),
            d["optimum"],
            d["optimum_note"],
            d["upper_bound"],
            d["upper_bound_note"],
        )


def pas_efficiency(
    config: FarmConfig, n_epochs: int = 200_000, replications: int = 8, seed: int = 20_000
) -> Estimate:
    """PAS's efficiency: exact when solvable, else the compiled simulator over ``n_epochs``
    with the warm-up rule's window and seeds ``replication_seeds(seed, replications)``."""
    win = Window.for_farm(config, n_epochs)
    return measure(PASPolicy(config), config, win, replication_seeds(seed, replications))


def reference_efficiencies(config: FarmConfig | str, **pas_kwargs: Any) -> References:
    """PAS, the exact optimum and the relaxation upper bound of a scenario."""
    config = load_scenario(config)
    refs = reference_values(config, compute_optimum=True)
    opt, bound = refs["optimum"], refs["upper_bound"]
    return References(
        pas_efficiency(config, **pas_kwargs),
        None if opt is None else float(opt["efficiency"]),
        f"not computable ({refs['optimum_reason']})" if opt is None else f"exact ({opt['source']})",
        None if bound is None else float(bound["efficiency"]),
        bound["source"] if bound is not None else f"not computable: {refs['upper_bound_reason']}",
    )
