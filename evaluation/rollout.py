"""One replication of one policy: the measurement window, the two simulation routes, and the
deterministic work unit that the local pool and Ray both execute.

Measurement window (both routes)
--------------------------------
A replication with seed ``s`` starts from an empty farm whose single random stream is seeded with
``s``. The policy itself dispatches ``warmup`` decision epochs (discarded: the transient from the
empty farm), then ``horizon`` more; the statistics are those between the (warmup+1)-th and the
(warmup+horizon+1)-th decision epoch (both taken at the arrival instant, before the decision).
Blocked arrivals are not decision epochs but are counted in the blocking probabilities.

Routes
------
* **built-in** (``policy.builtin`` is ``"priority"`` or ``"random"``, action mode ``"server"``):
  :meth:`serverfarm_gym.envs.simulator.FarmSimulator.run` with the policy's priority table, at compiled speed.
* **env** (everything else: the exact optimum, PPO, your own object with a ``predict`` method):
  the policy is stepped through :class:`serverfarm_gym.envs.server_farm.ServerFarmEnv` with
  ``predict(obs, action_masks=env.action_masks(), deterministic=True)``.

Both routes read efficiency, throughput, power and blocking from the simulator's own counters
(``SimStats``), never from the RL return. The env seeds its simulator exactly as
``FarmSimulator(config, seed=s)`` does and the window is the same, so a priority policy gives the
same numbers on both routes (bit-identical on the tiny preset; equal to the last few ulps where the
two routes sum the energy integral in a different order); ``tests/evaluation/test_evaluate.py`` checks this.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from serverfarm_gym.baselines.registry import (
    check_policy_name,
    is_builtin_name,
    make_policy,
    policy_names,
    register_policy,
)
from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.scenarios import load_scenario
from serverfarm_gym.envs.server_farm import ServerFarmEnv
from serverfarm_gym.envs.simulator import BUILTIN_POLICIES, FarmSimulator, SimStats

__all__ = [
    "MAX_REPLICATIONS",
    "MAX_WINDOW_EPOCHS",
    "RolloutResult",
    "WorkUnit",
    "cache_policy",
    "check_policy_names",
    "check_run_settings",
    "check_window",
    "is_baseline",
    "policy_route",
    "register_policy_resolver",
    "replication_seeds",
    "resolve_policy",
    "rollout",
    "run_unit",
    "simulate_builtin",
    "valid_policy_names",
]


#: the most replications of one evaluation: beyond a few hundred the Student-t interval only
#: narrows as 1/sqrt(n) and a longer horizon is the cheaper way to tighten it, while the seeds,
#: work units and per-replication records all grow with n (a billion built every seed first)
MAX_REPLICATIONS = 10_000
#: the most decision epochs (warm-up + horizon) of one replication: 10^10 is hours per
#: replication at the compiled simulator's ~2e6 epochs/s (days through the env), and covers a
#: 50-duration warm-up at the farm limit of 1e7 epochs per duration (serverfarm_gym.envs.validation)
MAX_WINDOW_EPOCHS = 10**10


def register_policy_resolver(prefix: str, loader: Any) -> None:
    """Make ``"prefix:ARG"`` a valid policy name everywhere (the one registry,
    ``serverfarm_gym.baselines.registry.POLICIES``; the CLI sees it if the registration happens at import time of
    a module the CLI imports).

    ``loader(arg, config, action_mode, seed)`` (a function, a class with such a ``from_spec``
    classmethod, or ``"module:attr"`` naming one) must return an object with
    ``predict(obs, action_masks=..., deterministic=...)``. It must be a deterministic function of
    its arguments and, for process pools and Ray, importable by name (a module-level function).
    """
    register_policy(prefix, loader, argument="ARG")


def valid_policy_names() -> list[str]:
    """Registered policy names, with the ``prefix:ARG`` forms (``ppo:PATH``)."""
    return policy_names()


def is_baseline(name: str) -> bool:
    """True for a registered name used on its own (a baseline, not ``prefix:ARG``)."""
    return is_builtin_name(name)


def check_policy_names(specs: Any) -> None:
    """Raise ValueError (listing the valid names) if any string in ``specs`` is not a policy name."""
    for spec in specs:
        if isinstance(spec, str):
            check_policy_name(spec)


def resolve_policy(
    spec: str | Any,
    config: FarmConfig,
    action_mode: str = "server",
    seed: int | None = None,
    **kwargs: Any,
) -> Any:
    """Build the policy named ``spec`` for ``config`` (or return ``spec`` if it already has a
    ``predict`` method).

    Names: those of the one registry, ``serverfarm_gym.baselines.registry.POLICIES`` (built by ``make_policy``):
    a baseline, or ``prefix:ARG`` (``ppo:PATH`` loads a trained agent). ``kwargs`` go to the
    baseline's constructor (e.g. ``solution=`` for ``"optimal"``).

    Raises:
        ValueError: unknown name (the message lists the valid ones).
    """
    if not isinstance(spec, str):
        if callable(getattr(spec, "predict", None)):
            return spec
        raise ValueError(
            f"policy: expected a name or an object with a predict() method, got {type(spec).__name__}"
        )
    return make_policy(spec, config, action_mode=action_mode, seed=seed, **kwargs)


def policy_route(policy: Any, use_builtin: bool = True) -> tuple[str | None, np.ndarray | None]:
    """(built-in dispatcher, table) to simulate ``policy`` at compiled speed, or (None, None) to
    roll it out through the env.

    The built-in dispatchers implement the *server-mode* decision rule, so a policy whose
    ``action_mode`` is ``"group"`` is rolled out (its tie-breaking differs, see serverfarm_gym.baselines.priority).
    """
    kind = getattr(policy, "builtin", None)
    if not use_builtin or kind not in BUILTIN_POLICIES:
        return None, None
    if getattr(policy, "action_mode", "server") != "server":
        return None, None
    if kind == "priority":
        return kind, np.array(policy.priority_table(), dtype=np.float64)
    return kind, None


def replication_seeds(seed: int, replications: int) -> list[int]:
    """Seed of each replication: ``SeedSequence(seed, spawn_key=(r,))`` reduced to a 63-bit int.

    Deterministic in (seed, r), independent streams across r (the SeedSequence construction), and
    shared by every policy: common random numbers.
    """
    if isinstance(seed, bool) or int(seed) != seed or seed < 0:
        raise ValueError(f"seed: must be an integer >= 0, got {seed!r}")
    if replications < 1 or replications > MAX_REPLICATIONS:
        raise ValueError(
            f"replications: must be between 1 and {MAX_REPLICATIONS:,} (MAX_REPLICATIONS), got "
            f"{replications:,}; use a longer horizon for a tighter interval"
        )
    out = []
    for r in range(replications):
        w = np.random.SeedSequence(int(seed), spawn_key=(r,)).generate_state(2, dtype=np.uint32)
        out.append(int(w[0]) << 31 | int(w[1]) >> 1)
    return out


def check_run_settings(replications: Any, seed: Any) -> None:
    """``replications`` in 1..MAX_REPLICATIONS and ``seed`` >= 0, as integers; checked before
    anything is built (a billion replications built every seed first)."""
    for name, v, low, high in (
        ("replications", replications, 1, MAX_REPLICATIONS),
        ("seed", seed, 0, None),
    ):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
            raise ValueError(f"{name}: must be an integer >= {low}, got {v!r}")
        if high is not None and v > high:
            raise ValueError(
                f"{name}: at most {high:,} (MAX_REPLICATIONS), got {v:,}; a longer horizon "
                "tightens the interval more cheaply"
            )


def _policy_seed(seed: int) -> int:
    """Seed of the policy's own generator in a replication (randomised predict() policies)."""
    return int(np.random.SeedSequence(int(seed), spawn_key=(1,)).generate_state(1)[0])


@dataclass(frozen=True)
class RolloutResult:
    """Statistics of one measurement window; ``route`` is ``"builtin:<kind>"`` or ``"env"``."""

    stats: SimStats
    route: str
    invalid_actions: int = 0

    def as_dict(self) -> dict[str, Any]:
        st = self.stats
        return {
            "efficiency": st.efficiency,
            "throughput": st.throughput,
            "power": st.power,
            "cost_efficiency": st.cost_efficiency,
            "blocking": st.blocking,
            "blocking_per_type": [float(x) for x in st.blocking_per_type],
            "mean_response_time": st.mean_response_time,
            "time": st.time,
            "epochs": int(st.epochs),
            "arrivals": int(st.arrivals.sum()),
            "route": self.route,
            "invalid_actions": int(self.invalid_actions),
        }


def _is_int(v: Any) -> bool:
    # an integral float (1e5) is accepted as before; bool, NaN and 1.5 are not
    if isinstance(v, bool):
        return False
    return isinstance(v, (int, np.integer)) or (isinstance(v, float) and v.is_integer())


def check_window(horizon: int, warmup: int) -> None:
    """A measurement window: ``horizon`` >= 1 and ``warmup`` >= 0 integer decision epochs, at
    most :data:`MAX_WINDOW_EPOCHS` together (``ValueError`` naming the argument otherwise)."""
    if not _is_int(horizon) or horizon < 1:
        raise ValueError(
            f"horizon: must be a positive integer number of decision epochs, got {horizon!r}"
        )
    if not _is_int(warmup) or warmup < 0:
        raise ValueError(f"warmup: must be an integer >= 0 (decision epochs), got {warmup!r}")
    if horizon + warmup > MAX_WINDOW_EPOCHS:
        raise ValueError(
            f"horizon + warmup: {int(horizon) + int(warmup):,} decision epochs per replication; "
            f"at most {MAX_WINDOW_EPOCHS:,} (MAX_WINDOW_EPOCHS: hours per replication compiled); "
            "use more replications instead"
        )


def simulate_builtin(
    config: FarmConfig,
    builtin: str,
    horizon: int,
    warmup: int = 0,
    seed: int = 0,
    table: np.ndarray | None = None,
) -> RolloutResult:
    """One replication with a built-in dispatcher of the compiled simulator (see module doc)."""
    check_window(horizon, warmup)
    if builtin not in BUILTIN_POLICIES:
        raise ValueError(
            f"builtin: unknown dispatcher {builtin!r}; choose one of {list(BUILTIN_POLICIES)}"
        )
    sim = FarmSimulator(config, seed=int(seed))
    if warmup:
        sim.run(int(warmup), builtin, table)
    # Stop *at* the next arrival so the window starts where the env route's does (the env always
    # sits at a pending decision). That one decision is made here with the built-in's own rule.
    j = sim.next_epoch()
    start = sim.stats()
    mask = sim.server_mask(j)
    if builtin == "priority":
        score = np.where(mask, np.asarray(table)[config.server_group, sim.occ], -np.inf)
        server = int(np.argmax(score))  # first maximum: ties to the smallest server index
    else:
        cand = np.flatnonzero(mask)
        server = int(cand[sim.rng.integers(cand.size)])
    sim.assign(server)
    if horizon > 1:
        sim.run(int(horizon) - 1, builtin, table)
    sim.next_epoch()
    return RolloutResult(sim.stats() - start, f"builtin:{builtin}")


def rollout(
    policy: Any,
    scenario: FarmConfig | str | Any,
    horizon: int,
    warmup: int = 0,
    seed: int = 0,
    action_mode: str | None = None,
    deterministic: bool = True,
    pas_warmup: int = 0,
) -> RolloutResult:
    """One replication of any object with ``predict(obs, action_masks=..., deterministic=...)``
    through :class:`~serverfarm_gym.envs.server_farm.ServerFarmEnv` (see the module doc for the window).

    Args:
        policy: the dispatcher; its ``action_mode`` attribute (if any) picks the env's encoding.
        scenario: FarmConfig, preset name, path or dict.
        horizon, warmup: decision epochs measured, and dispatched before measuring.
        seed: seeds the env (and so the simulator's random stream).
        action_mode: ``"server"``/``"group"``; default the policy's own, else ``"server"``.
        deterministic: passed to ``predict``.
        pas_warmup: epochs PAS dispatches (compiled, in the env's reset) from the empty farm
            before the policy's ``warmup`` (``serverfarm_gym.evaluation.efficiency.Window``).

    Masked actions are not executed: the env sends such a job where PAS would, and the count is
    returned as ``invalid_actions`` (a correct masked policy has 0).
    """
    check_window(horizon, warmup)
    config = load_scenario(scenario)
    mode = action_mode or getattr(policy, "action_mode", None) or "server"
    # fixed eta: the reward is irrelevant here and a running eta costs a probe simulation
    env = ServerFarmEnv(
        config, action_mode=mode, reward_eta=0.0, invalid_action="fallback",
        warmup_epochs=int(pas_warmup),
    )  # fmt: skip
    obs, _ = env.reset(seed=int(seed))
    invalid = 0
    start = None
    for t in range(int(warmup) + int(horizon)):
        if t == warmup:
            start = env.sim.stats()
            invalid = 0
        action, _ = policy.predict(
            obs, action_masks=env.action_masks(), deterministic=deterministic
        )
        action_index = int(np.asarray(action).reshape(-1)[0])
        obs, _, _, _, info = env.step(action_index)  # type: ignore[no-untyped-call, unused-ignore]
        invalid += bool(info["invalid_action"])
    assert start is not None
    return RolloutResult(env.sim.stats() - start, "env", invalid)


# ---------------------------------------------------------------------------------------------
# work units
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WorkUnit:
    """One (policy, replication): a pure function of its fields, whoever runs it.

    ``spec`` is a policy name (rebuilt in the worker, cached per process) or a picklable policy
    object; ``builtin``/``table`` (from :func:`policy_route`, computed once by the planner) select
    the compiled route.
    """

    config: FarmConfig
    label: str
    spec: Any
    replication: int
    seed: int
    horizon: int
    warmup: int
    action_mode: str = "server"
    builtin: str | None = None
    table: np.ndarray | None = None
    deterministic: bool = True

    def lean(self) -> WorkUnit:
        """The same unit with a config stripped of its cached derived arrays (cheaper to pickle;
        the worker recomputes them deterministically)."""
        return dataclasses.replace(self, config=dataclasses.replace(self.config))


# per-process cache: a worker builds each (config, policy, mode) once, not once per replication
_POLICY_CACHE: dict[tuple[Any, ...], Any] = {}


def cache_policy(config: FarmConfig, spec: str, action_mode: str, policy: Any) -> None:
    """Let this process's :func:`run_unit` reuse ``policy`` (built by the planner) for the units
    of ``(config, spec, action_mode)`` instead of building it again."""
    if len(_POLICY_CACHE) > 32:
        _POLICY_CACHE.clear()
    _POLICY_CACHE[(config, spec, action_mode)] = policy


def _cached_policy(unit: WorkUnit) -> Any:
    if not isinstance(unit.spec, str):
        return unit.spec
    key = (unit.config, unit.spec, unit.action_mode)
    if key not in _POLICY_CACHE:
        cache_policy(*key, resolve_policy(unit.spec, unit.config, unit.action_mode))
    return _POLICY_CACHE[key]


def run_unit(unit: WorkUnit) -> dict[str, Any]:
    """Execute one work unit; returns the replication's statistics (plain, JSON-ready values)
    plus ``wall_s`` (the only non-deterministic field)."""
    t0 = time.perf_counter()
    if unit.builtin is not None:
        res = simulate_builtin(
            unit.config, unit.builtin, unit.horizon, unit.warmup, unit.seed, unit.table
        )
    else:
        policy = _cached_policy(unit)
        # a cached policy's own generator is reseeded per replication, so results do not depend
        # on which units a worker happened to run before
        if callable(getattr(policy, "reset", None)) and hasattr(policy, "rng"):
            policy.reset(seed=_policy_seed(unit.seed))
        # a policy that carries its own encoding (a PPO agent, a Policy) is rolled out in it
        mode = getattr(policy, "action_mode", None) or unit.action_mode
        res = rollout(
            policy, unit.config, unit.horizon, unit.warmup, unit.seed,
            action_mode=mode, deterministic=unit.deterministic,
        )  # fmt: skip
    out = {"policy": unit.label, "replication": unit.replication, "seed": unit.seed}
    out.update(res.as_dict())
    if unit.builtin is None and hasattr(policy, "check_cpu_seconds"):
        # a policy that measured itself on this farm before acting (not zero-shot): its reports
        # show that cost next to its result
        out["check_cpu_s"] = float(policy.check_cpu_seconds)
    out["wall_s"] = time.perf_counter() - t0
    return out
