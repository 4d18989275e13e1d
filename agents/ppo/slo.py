"""Training the PPO to a mean-response-time SLO (``slo: {mean_response_time: D}``).

Three parts, used by :func:`serverfarm_gym.agents.ppo.run.train_ppo` when the farm has an SLO:

* **The Lagrangian reward with dual ascent** (:class:`DualAscent`): the env's reward is
  ``(W - eta P - beta N) dt`` (``serverfarm_gym.envs.slo``); beta starts at the exact LP's dual price of the
  SLO row, in the reward's units (:func:`lp_multiplier`), where the aggregated chain is solved,
  else at 1/D; between rollouts it moves by projected dual ascent on the rollout's own mean
  response time (``serverfarm_gym.envs.slo.update_multiplier``), measured by Little's law over the rollout
  (``ServerFarmVectorEnv.job_area`` over the jobs accepted, ``PPO.collect``). Step size
  (``--slo-step``): by default 1/D, so a rollout 10% above D raises beta by 0.1/D.
* **Measuring the sampling policy** (:func:`measure_slo`): under a binding SLO the optimum
  randomises, so the model is the network's *sampling* policy, not its argmax. Exactly on the
  aggregated chain (``serverfarm_gym.baselines.solvers.aggregated``; a group-action network is symmetric over a
  group's servers, so its action probabilities in a histogram state are a randomised policy of
  that chain): efficiency and E[T] with no noise. Otherwise simulated: independent envs with
  sampled actions, Student-t 95% intervals over them.
* **Constrained selection** (:class:`SLOSelector`): among the evaluated models keep the most
  efficient one that meets the SLO: exactly E[T] <= D (1e-9 relative), simulated E[T] minus its
  95% half-width <= D (the suites' ``slo_met``). A model that misses it is never kept, however
  efficient.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np
import torch

from serverfarm_gym.agents.ppo.losses import masked_logits
from serverfarm_gym.baselines.registry import make_policy
from serverfarm_gym.baselines.solvers.aggregated import (
    AggregatedSpace,
    aggregated_efficiency,
    aggregated_response_time,
)
from serverfarm_gym.baselines.solvers.ctmc import GeneratorSolver
from serverfarm_gym.baselines.solvers.slo_optimum import solve_slo
from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.observation import encode_occupancy
from serverfarm_gym.envs.slo import default_multiplier, update_multiplier
from serverfarm_gym.envs.vector import ServerFarmVectorEnv
from serverfarm_gym.evaluation.exact import exact_solvable
from serverfarm_gym.evaluation.stats import mean_ci

__all__ = [
    "DualAscent",
    "SLOEstimate",
    "SLOSelector",
    "lp_multiplier",
    "measure_slo",
    "slo_teacher",
]

#: relative tolerance of an exact E[T] against D (the chain solve's precision)
EXACT_RTOL = 1e-9


@dataclass(frozen=True)
class SLOEstimate:
    """The sampling policy's efficiency and mean response time (95% half-widths; 0 exact)."""

    efficiency: float
    ci95: float
    mean_response_time: float
    mean_response_time_ci95: float
    method: str  # "exact" (aggregated chain) or "simulation"
    slo: float

    @property
    def slo_met(self) -> bool:
        if self.method == "exact":
            return self.mean_response_time <= self.slo * (1.0 + EXACT_RTOL)
        return self.mean_response_time - self.mean_response_time_ci95 <= self.slo

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"slo_met": self.slo_met}


def lp_multiplier(space: AggregatedSpace) -> float:
    """beta from the exact LP's dual price mu of the SLO row (``solve_slo``'s
    ``info["dual_price"]``). The LP's optimum maximises ``E[(1 + mu D) W - mu N] / E[P]``
    (admitted and served work are equal in the long run); divided by ``1 + mu D`` that is the
    env's Lagrangian ``W - eta P - beta N`` with ``beta = mu / (1 + mu D)``."""
    opt = solve_slo(space.config)
    mu, D = float(opt.info["dual_price"]), float(opt.info["slo"])
    return mu / (1.0 + mu * D)


class DualAscent:
    """beta of the env's Lagrangian reward, from ``start`` (default 1/D), moved after every
    rollout by ``update_multiplier(beta, E[T] of the rollout, D, step)``; ``history`` keeps
    (steps, measured E[T], beta after the step)."""

    def __init__(self, venv: Any, config: FarmConfig, step: float, start: float | None = None):
        self.venv, self.slo = venv, float(config.slo.mean_response_time)
        if not (step == -1 or (math.isfinite(step) and step >= 0)):
            raise ValueError(f"--slo-step: must be -1 (the default, 1/D) or >= 0, got {step}")
        self.start = default_multiplier(config) if start is None else float(start)
        self.step = default_multiplier(config) if step == -1 else float(step)
        self.history: list[tuple[int, float, float]] = []
        venv.slo_multiplier = self.start

    def after_rollout(self, steps: int, measured: float) -> float:
        beta = float(self.venv.slo_multiplier)
        if self.step > 0 and math.isfinite(measured):
            beta = update_multiplier(beta, measured, self.slo, self.step)
            self.venv.slo_multiplier = beta
        self.history.append((steps, measured, beta))
        return beta


def _probabilities(policy: Any, obs: np.ndarray, masks: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        p = policy
        logits = p.action_net(p.mlp_extractor.forward_actor(p.features_extractor(
            torch.as_tensor(obs, dtype=torch.float32))))  # fmt: skip
        m = torch.as_tensor(masks, dtype=torch.bool)
        return torch.softmax(masked_logits(logits, m), -1).double().numpy()


def exact_slo(policy: Any, config: FarmConfig, space: AggregatedSpace) -> tuple[float, float]:
    """(efficiency, E[T]) of a group-action network's sampling policy on the aggregated chain:
    each histogram state is shown to the network as one of its occupancies (the group-mode
    observation depends on the histogram only)."""
    N, J = space.n_states, config.n_job_types
    occ = np.zeros((N, config.n_servers), dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum([g.count for g in config.groups])])
    for s in range(N):
        c = space.counts_of(s)
        for k in range(config.n_groups):
            occ[s, starts[k] : starts[k + 1]] = np.repeat(np.arange(c.shape[1]), c[k])
    probs = np.zeros((N, J, space.n_actions))
    for j in range(J):
        obs, masks = encode_occupancy(config, "group", occ, j)
        rows = space.has_vacancy[:, j]
        probs[rows, j] = _probabilities(policy, obs[rows], masks[rows])
    pi = GeneratorSolver(space.generator(probs)).stationary()
    return float(aggregated_efficiency(space, pi)), float(aggregated_response_time(space, pi)[2])


def simulated_slo(
    policy: Any, config: FarmConfig, action_mode: str, n_epochs: int, replications: int,
    seed: int, warmup_epochs: int,
) -> tuple[float, float, float, float]:  # fmt: skip
    """(efficiency, its 95% half-width, E[T], its half-width) of the sampling policy over
    ``replications`` independent envs of ``n_epochs`` decisions after the PAS warm-up."""
    venv = ServerFarmVectorEnv(replications, config, action_mode=action_mode,
                               warmup_epochs=warmup_epochs, max_episode_steps=None)  # fmt: skip
    obs, _ = venv.reset(seed=seed)
    gen = torch.Generator().manual_seed(seed)
    info: dict[str, Any] = {}
    for _ in range(n_epochs):
        p = torch.from_numpy(_probabilities(policy, obs, venv.action_masks()))
        a = torch.multinomial(p.clamp_min(0.0) + 1e-300, 1, generator=gen).squeeze(1)
        obs, _, _, _, info = venv.step(a.numpy())
    eff, e_half = mean_ci(np.asarray(info["efficiency"]), 0.95)
    et, t_half = mean_ci(np.asarray(info["mean_response_time"]), 0.95)
    inf = math.inf
    return (
        float(eff),
        inf if e_half is None else e_half,
        float(et),
        inf if t_half is None else t_half,
    )


def measure_slo(trainer: Any, evaluator: Any, space: AggregatedSpace | None) -> SLOEstimate:
    """The sampling policy of ``trainer``'s network on the evaluator's farm: exact on
    ``space`` (given for a group network on a small farm), else simulated on its window."""
    config = evaluator.config
    D = float(config.slo.mean_response_time)
    if space is not None:
        eff, et = exact_slo(trainer.policy, config, space)
        return SLOEstimate(eff, 0.0, et, 0.0, "exact", D)
    warm = (
        evaluator.warmup_epochs if evaluator.warmup_epochs and evaluator.warmup_epochs > 0 else 1000
    )
    vals = simulated_slo(trainer.policy, config, evaluator.action_mode,
                         evaluator.n_epochs + (evaluator.policy_warmup or 0),
                         max(2, evaluator.replications), evaluator.seed, warm)  # fmt: skip
    return SLOEstimate(vals[0], vals[1], vals[2], vals[3], "simulation", D)


def exact_space(config: FarmConfig, network_mode: str) -> AggregatedSpace | None:
    """The aggregated chain the sampling policy is measured on, or None (simulated)."""
    if network_mode != "group" or not exact_solvable(config) or config.has_sleep:
        return None
    return AggregatedSpace(config)


class SLOSelector:
    """Keep the most efficient model that meets the SLO (exact: strictly more efficient;
    simulated: a higher mean). ``consider`` returns whether the candidate replaced the best."""

    def __init__(self, best: SLOEstimate | None = None):
        self.best = best

    def consider(self, est: SLOEstimate) -> bool:
        if not est.slo_met:
            return False
        if self.best is None or est.efficiency > self.best.efficiency * (1.0 + EXACT_RTOL):
            self.best = est
            return True
        return False


def slo_teacher(
    trainer: Any, space: AggregatedSpace | None, seed: int, init: str = "slo-optimal"
) -> tuple[Any, str | None]:
    """The start that meets the SLO, in the network's action mode, and a note where it is not
    ``init``: the exact constrained optimum (``slo-optimal``, a randomised policy) where the
    chain is solved, else the searched mix of two orders (``slo-mix``, also on request); its
    draws seeded by ``seed`` (the clone is reproducible).

    Raises:
        ValueError: ``init`` neither of them (PAS and the tables may miss the SLO).
    """
    if init not in ("slo-optimal", "slo-mix"):
        raise ValueError(
            f"--init {init}: training to the farm's SLO starts from a policy that meets it: "
            "--init slo-optimal or slo-mix (the derived setting), or random; or train "
            "without the SLO (--objective cost, or a farm without slo:)"
        )
    name, note = init, None
    if init == "slo-optimal" and space is None:
        name = "slo-mix"
        note = ("init: slo-optimal needs the exactly solved chain (a group or tied network on "
                "an exactly solvable farm without sleep); cloning slo-mix")  # fmt: skip
    return make_policy(name, trainer.config, trainer.cfg.action_mode, seed=seed), note


@dataclass
class SLORun:
    """The SLO part of a PPO run's state: the chain it is measured on (None: simulated), the
    dual ascent (set once the trainer's envs exist) and the constrained selection."""

    space: AggregatedSpace | None
    dual: DualAscent | None = None
    selector: SLOSelector = field(default_factory=SLOSelector)

    def entry(self, est: SLOEstimate | None) -> dict[str, Any]:
        """An evaluation's ``slo`` entry: the measure and the multiplier beta at the time."""
        beta = None if self.dual is None else float(self.dual.venv.slo_multiplier)
        return ({} if est is None else est.as_dict()) | {"multiplier": beta}

    def resume(self, history: list[dict[str, Any]]) -> None:
        """Continue a run from its log: the kept model's measure (the last one that replaced
        the best and met the SLO) and beta of its last evaluation."""
        names = [f.name for f in fields(SLOEstimate)]
        for h in history:
            e = h.get("slo") or {}
            if h.get("replaced_best") and e.get("slo_met"):
                self.selector.best = SLOEstimate(**{k: e[k] for k in names})
            if self.dual is not None and e.get("multiplier") is not None:
                self.dual.venv.slo_multiplier = float(e["multiplier"])


def slo_summary(slo: SLORun, history: list[dict[str, Any]], kept_steps: int) -> dict[str, Any]:
    """The summary's ``slo`` block: D, the start's and the kept model's sampling policy
    (efficiency, E[T], slo_met), the exact SLO-constrained optimum and the gap to it, the
    multiplier's path."""
    by_step = {h["timesteps"]: h.get("slo") for h in history}
    kept, start = by_step.get(kept_steps), by_step.get(0)
    D = float(slo.dual.slo) if slo.dual is not None else (kept or {}).get("slo")
    out: dict[str, Any] = {"mean_response_time_bound": D, "start": start,
                           "kept": None if kept is None else kept | {"timesteps": kept_steps},
                           "kept_is_start": kept_steps == 0}  # fmt: skip
    if slo.space is not None:
        opt = solve_slo(slo.space.config)
        out["optimum"] = {"efficiency": opt.value,
                          "mean_response_time": float(opt.info["mean_response_time"]),
                          "source": "exact (serverfarm_gym.baselines.solvers.slo_optimum.solve_slo)"}  # fmt: skip
        if kept is not None:
            out["gap_to_optimum_pct"] = 100.0 * (opt.value - kept["efficiency"]) / opt.value
    if slo.dual is not None:
        hist = slo.dual.history
        out["multiplier"] = {"step_size": slo.dual.step, "final": hist[-1][2] if hist else None,
                             "rollouts": [list(h) for h in hist]}  # fmt: skip
    return out
