"""The start of a PPO run (``serverfarm_gym.agents.ppo.run``): the teacher that ``--init`` clones
(:func:`strongest_start` on a simulated farm), the clone (:func:`clone_start`, by
``PPO.clone_pas``) and the softening of its logits (:func:`soften`)."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

import torch

from serverfarm_gym.agents.ppo import slo as slo_training
from serverfarm_gym.agents.ppo.losses import masked_logits
from serverfarm_gym.agents.ppo.ppo import PPO
from serverfarm_gym.baselines.best_priority import BestPriorityPolicy
from serverfarm_gym.baselines.priority import PriorityPolicy
from serverfarm_gym.baselines.registry import make_policy
from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.evaluation.paired import PairedEvaluator, compare

if TYPE_CHECKING:  # the resolved arguments of train.py (serverfarm_gym.agents.common.run_args)
    from serverfarm_gym.agents.common.run_args import PPOArgs

__all__ = ["clone_start", "soften", "strongest_start"]


def clone_start(
    trainer: PPO,
    a: PPOArgs,
    config: FarmConfig,
    slo: slo_training.SLORun | None,
    exact: bool,
    evaluator: PairedEvaluator,
) -> str:
    """Fit ``trainer`` to the teacher of ``--init`` (``a.init``, not ``random``): on a farm with
    an SLO a start that meets it, on a simulated farm with ``best-priority`` the stronger of
    the searched table and PAS (:func:`strongest_start`), else the policy named; the clone's
    logits then softened (:func:`soften`) unless the teacher is randomised. Returns the
    teacher's name (the run's ``started_from``)."""
    t0 = time.process_time()
    if slo is not None:  # a start that meets the SLO (PAS misses it)
        teacher, note = slo_training.slo_teacher(trainer, slo.space, a.seed, a.init)
        if note:
            print(note)
    elif a.init == "best-priority" and not exact:  # the stronger of it and PAS
        teacher, line = strongest_start(a, config, trainer, evaluator)
        print(line)
    else:  # PAS, or a searched / pretrained policy
        teacher = trainer.teacher(a.init)
    # a few thousand decisions per env cover the states the teacher visits; on a
    # time-varying farm, a whole cycle of the schedule (the loads and mixes of every
    # interval: a clone fitted on part of the cycle imitates the teacher only there)
    clone_steps = 16_384
    if trainer.config.is_time_varying:
        clone_steps = max(clone_steps, math.ceil(trainer.config.cycle_arrivals))
    # a randomised teacher is cloned by its action probabilities: no label smoothing, no
    # softening (either would change the probabilities, so the E[T] of the start)
    clone = trainer.clone_pas(n_steps=max(64, math.ceil(clone_steps / a.n_envs)),
                              teacher=teacher,
                              smoothing=0.0 if slo is not None else None)  # fmt: skip
    soft = "its probabilities kept (a randomised teacher)"
    if slo is None:
        scale = soften(trainer, a.pas_confidence, teacher=teacher)
        soft = (f"logits scaled by {scale:.3g}: its action sampled {a.pas_confidence:g} of "
                "the way from uniform to certain")  # fmt: skip
    started_from = str(getattr(teacher, "name", a.init))
    print(f"init: {started_from} clone, accuracy {clone['accuracy']:.4f} on "
          f"{clone['samples']:,} decisions; {soft} "
          f"({time.process_time() - t0:.0f} CPU-s)")  # fmt: skip
    return started_from


def strongest_start(
    a: PPOArgs, config: FarmConfig, trainer: PPO, evaluator: PairedEvaluator
) -> tuple[Any, str]:
    """(teacher, line): the policy to clone on a simulated farm with ``init="best-priority"``:
    the searched table, PAS, or (cost objective) price-aware PAS, whichever measures best on
    the evaluator's seeds, paired with PAS. Why: the search measures energy efficiency on its
    own sample path, so on another objective, or by chance, its table can start a run below
    PAS, and the kept model never falls below the start. The table searched on a twin is
    measured on the farm itself (the same groups and levels)."""
    names = ["best-priority", "pas"] + (["pas-price"] if a.objective == "cost" else [])
    # the table is searched on the objective the run measures (a table that is good in energy
    # can be worse than PAS in energy cost, when prices vary across groups and hours)
    searched = BestPriorityPolicy(
        trainer.config, trainer.cfg.action_mode, search_objective=a.objective
    )
    teachers = {n: trainer.teacher(searched if n == "best-priority" else n) for n in names}
    pas_est, scores = evaluator.pas, {}
    for n, t in teachers.items():
        if n == "pas":
            scores[n] = 0.0
            continue
        on_farm = t
        if trainer.config is not config:  # a twin's policy, measured on the farm itself
            # the twin's searched table; a fixed rule (price-aware PAS, which may follow the
            # interval and then has no single table) is built for the farm itself
            on_farm = (
                PriorityPolicy(config, evaluator.action_mode, table=t.priority_table())
                if n == "best-priority"
                else make_policy(n, config, evaluator.action_mode)
            )
        scores[n] = compare(evaluator.measure(on_farm), pas_est).gap_pct
    best = max(names, key=lambda n: (scores[n], n == "pas"))  # ties: PAS
    line = ", ".join(f"{n} {scores[n]:+.3f}%" for n in names if n != "pas")
    return teachers[best], (
        f"start: measured against PAS (paired, {evaluator.replications} replications): {line}; "
        f"cloning {best}"
    )


@torch.no_grad()
def soften(trainer: PPO, confidence: float, n_steps: int = 64, teacher: Any = "pas") -> float:
    """Scale ``trainer``'s policy head (weights and bias, i.e. the logits) so that on states
    visited by ``teacher`` (PAS by default, or the policy it was cloned from: ``PPO.teacher``)
    the sampling policy's probability of its argmax is, on average, ``confidence`` of
    the way from uniform (over the allowed actions) to certain: the mean of ``(p - 1/n) /
    (1 - 1/n)`` over states with ``n >= 2`` allowed actions. Returns the scale (1: already
    at or below ``confidence``).

    Why: the behaviour-cloned policy is nearly deterministic, so PPO samples little else
    and barely moves it (BENCHMARKS.md). Scaling the logits keeps every argmax, so the
    deterministic policy, and its efficiency, stay exactly the clone's, while the
    sampling policy explores the other actions. Normalising per state makes the setting
    mean the same on farms with 2 or 20 allowed actions (a mean probability of 0.4 cannot
    be reached in states with two actions, and drove tiny's scale to 0.013, where the
    trunk got too little gradient to learn)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"pas_confidence: must be in (0, 1), got {confidence}")
    obs, masks_np, _ = trainer.teacher_states(teacher, n_steps)
    masks = torch.from_numpy(masks_np)
    keep = masks.sum(-1) >= 2
    if not bool(keep.any()):
        return 1.0
    logits, _ = trainer.forward(torch.from_numpy(obs)[keep])
    masks = masks[keep]
    uniform = 1.0 / masks.sum(-1).float()

    def certainty(scale: float) -> float:
        p = torch.softmax(masked_logits(logits * scale, masks), -1).max(-1).values
        return float(((p - uniform) / (1.0 - uniform)).mean())

    if certainty(1.0) <= confidence:
        return 1.0
    lo, hi = 1e-4, 1.0  # certainty is increasing in the scale: bisect on a log scale
    for _ in range(50):
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if certainty(mid) > confidence else (mid, hi)
    head = trainer.policy.action_net
    head.weight.mul_(hi)
    head.bias.mul_(hi)
    return hi
