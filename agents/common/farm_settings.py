"""Training settings derived from the farm, by rules.

A user brings a farm file with no hyperparameter entry; ``train.py`` must still pick what used
to be hand-set per preset. :func:`derive_settings` turns a :class:`~serverfarm_gym.envs.config.FarmConfig` into
a :class:`FarmSettings`: every setting with a one-line reason (printed at the start of a run and
stored in its ``args.json`` / ``summary.json``). Entries of ``hyperparams/ppo.yml`` and options
on the command line override them (train.py's precedence).

All rule constants live in :data:`RULES` (one frozen :class:`Rules`), so they can be retuned
from measurements without touching the rules themselves. The measurements behind each constant
are in docs/training.md ("Settings derived from the farm").

Units. A decision epoch is an arrival, so one epoch covers ``1 / epochs_per_duration`` of a mean
job duration (``serverfarm_gym.evaluation.policy_report.epochs_per_duration``: tiny 2.5 epochs per duration, paper-100
120, large-10k 12,000). Horizons, evaluation windows and warm-ups are set in mean job durations
(model time) and converted to epochs per farm, so a 10,000-server farm gets the same model-time
horizon as a 4-server one.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from serverfarm_gym.baselines.solvers.ctmc import n_full_states
from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.observation import check_action_mode, n_actions, obs_size
from serverfarm_gym.evaluation.exact import EXACT_MAX_STATES, exact_unsupported_reason
from serverfarm_gym.evaluation.policy_report import epochs_per_duration

__all__ = [
    "INITS",
    "RULES",
    "SLO_INITS",
    "FarmSettings",
    "Rules",
    "derive_action_mode",
    "derive_settings",
    "policy_warmup",
    "slo_init",
    "train_scale",
]


@dataclass(frozen=True)
class Rules:
    """The constants of the rules (see docs/training.md for the measurements behind them)."""

    #: per-server actions up to this many servers, the size-independent group actions above
    server_actions_max_servers: int = 5
    #: discount horizon in mean job durations: gamma = 1 - 1 / (horizon x epochs per duration)
    horizon_durations: float = 4.0
    #: "discounted" (GAE with the horizon's gamma) or "average" (differential, no discount) on
    #: exactly evaluated farms without an SLO: the average reward per decision of W - eta P is
    #: Dinkelbach's criterion, whose best policy is the most efficient one; a discount ranks
    #: others best (tiny, gamma 0.9: a policy 1.1% below the optimum; serverfarm_gym.agents.ppo.criterion)
    advantage: str = "average"
    #: ... on the other farms: simulated ones, where it is not measured, and those with an SLO,
    #: where from scratch it ends further from the SLO optimum on three of the four small SLO
    #: farms (experiments/README.md)
    advantage_other: str = "discounted"
    gae_lambda: float = 0.95
    #: rollout: envs x steps per env, minibatch, epochs per rollout
    n_envs: int = 16
    n_steps: int = 256
    batch_size: int = 256
    n_epochs: int = 10
    learning_rate: float = 3e-4
    #: exactly evaluated farms without an SLO: 16 x 128 steps per rollout, minibatches of 128
    #: (160 Adam steps per 2,048 samples: the signal per decision is strong on a small farm)
    exact_n_steps: int = 128
    exact_batch_size: int = 128
    #: ... and their budget: 96 rollouts, within which the from-scratch study reaches 99.9% of
    #: the optimum (docs/learning.md)
    exact_total_timesteps: int = 196_608
    #: total steps = this many discount horizons of decisions, within [min, max]
    total_horizons: float = 15_000.0
    min_total_timesteps: int = 150_000
    max_total_timesteps: int = 1_000_000
    #: the policy cloned first (the selection's floor) on exactly evaluated farms: "pas",
    #: "best-priority", "generalist" or "random" (from a random network the average-reward
    #: trainer reaches 99.9% of the optimum on every exact farm of the study, docs/learning.md,
    #: so the run shows what PPO learns rather than a clone's value)
    init: str = "random"
    #: ... and on farms evaluated by simulation, where PPO's signal per decision is weak
    #: (from a PAS clone PPO may never get above PAS there; docs/training.md)
    init_simulated: str = "best-priority"
    #: after cloning, PAS's action sampled this far from uniform (0) to certain (1), on average
    pas_confidence: float = 0.2
    #: exact evaluation up to this many per-server CTMC states
    exact_max_states: int = EXACT_MAX_STATES
    #: simulated evaluation: windows in mean job durations, capped in epochs per replication
    eval_durations: float = 20.0
    eval_max_epochs: int = 20_000
    eval_min_epochs: int = 2_000
    eval_replications: int = 16
    #: ... fewer (at least 4) when one evaluation would exceed this many policy epochs in all
    eval_epoch_budget: int = 1_000_000
    #: no window (evaluation, final, policy warm-up) shorter than this many mean job durations:
    #: a policy evaluated in its transient after PAS's warm-up can look better than any steady
    #: state (large-10k with 1.7-duration windows: above the relaxation upper bound)
    min_window_durations: float = 10.0
    final_eval_durations: float = 100.0
    #: ... capped here, which bounds the final measurement's cost on 10,000-server farms (100
    #: durations there are up to about a million epochs); a window much shorter than 100
    #: durations can still carry the transient after PAS's warm-up
    final_eval_max_epochs: int = 1_000_000
    #: evaluations per run (simulated; exact farms are evaluated after every rollout)
    evaluations_per_run: int = 8
    #: unmeasured policy epochs per evaluation replication, in durations, at most half the window
    policy_warmup_durations: float = 10.0
    #: PAS warm-up of every env (training and evaluation) in mean job durations, capped
    warmup_durations: float = 50.0
    warmup_min_epochs: int = 1_000
    warmup_max_epochs: int = 1_000_000
    #: checkpoints per run
    checkpoints_per_run: int = 6
    #: a group network reads fractions and acts on (group, level) pairs, so it fits every size
    #: of a farm: a farm with more decisions per mean job duration than this trains on its
    #: scaled-down twin (FarmConfig.scaled_down), where one decision's effect is a larger share
    #: of the reward that follows; it is evaluated (and its best model kept) on the farm itself
    twin_above_epochs_per_duration: float = 480.0
    #: ... scaled down to about this many decisions per mean job duration (paper-100's 120)
    twin_epochs_per_duration: float = 120.0


RULES = Rules()


@dataclass
class FarmSettings:
    """Every derived setting (names as the fields of ``serverfarm_gym.agents.common.run_args.PPOArgs``) and why (``reasons[name]``)."""

    action_mode: str
    advantage: str
    gamma: float
    gae_lambda: float
    n_envs: int
    n_steps: int
    batch_size: int
    n_epochs: int
    learning_rate: float
    total_timesteps: int
    init: str
    pas_confidence: float
    eval_exact: bool
    eval_freq: int
    eval_epochs: int
    eval_replications: int
    final_eval_epochs: int
    warmup_epochs: int
    checkpoint_freq: int
    train_scale: int
    epochs_per_duration: float
    reasons: dict[str, str] = field(default_factory=dict)

    def as_args(self) -> dict[str, Any]:
        """The settings that are ``PPOArgs`` fields (what train.py merges)."""
        d = asdict(self)
        d.pop("reasons")
        d.pop("epochs_per_duration")
        return d

    def describe(self, overridden: dict[str, Any] | None = None) -> list[str]:
        """One line per setting: ``name = value  (reason)``; ``overridden`` maps names to the
        value and source (file or command line) that replaced the derived one."""
        overridden = overridden or {}
        lines = []
        for k, v in self.as_args().items():
            if k in overridden:
                val, src = overridden[k]
                lines.append(f"  {k} = {val}  ({src}; derived {v})")
            else:
                lines.append(f"  {k} = {v}  ({self.reasons.get(k, '')})")
        return lines


#: the starts of a farm with an SLO (serverfarm_gym.agents.ppo.slo.slo_teacher): policies that meet it
SLO_INITS = ("slo-optimal", "slo-mix")
#: the policies a run may clone first (train.py --init)
INITS = ("pas", "pas-price", "best-priority", "generalist", "random", *SLO_INITS)


def policy_warmup(config: FarmConfig, rules: Rules = RULES) -> int:
    """Unmeasured policy epochs before an evaluation window: the policy's own transient after
    PAS's warm-up, ``policy_warmup_durations`` mean job durations (on a 10,000-server farm
    120,000 epochs), at least 100. Never shortened to save time: the transient is what a
    policy that differs from PAS could exploit in a short window."""
    return int(max(100, math.ceil(rules.policy_warmup_durations * epochs_per_duration(config))))


def train_scale(config: FarmConfig, action_mode: str, rules: Rules = RULES) -> tuple[int, str]:
    """(factor, reason): train on ``config.scaled_down(factor)`` (1: on the farm itself).

    Group actions only (the per-server network's size is the farm's). The factor brings the
    farm to about ``twin_epochs_per_duration`` decisions per mean job duration; among the
    factors from half that ideal up to it, the largest that divides every group's count is
    preferred (an exact twin: large-10k -> paper-100), else the ideal one (counts rounded)."""
    epd = float(epochs_per_duration(config))
    if action_mode != "group":
        return 1, "server actions: trains on the farm itself"
    if epd <= rules.twin_above_epochs_per_duration:
        return 1, (
            f"{epd:.3g} decisions per mean job duration <= "
            f"{rules.twin_above_epochs_per_duration:g}: trains on the farm itself"
        )
    ideal = max(1, math.floor(epd / rules.twin_epochs_per_duration))
    g = 0
    for grp in config.groups:
        g = math.gcd(g, grp.count)
    exact = [f for f in range(max(1, ideal // 2), ideal + 1) if g % f == 0]
    factor = exact[-1] if exact else ideal
    twin = config.scaled_down(factor)
    return factor, (
        f"{epd:.3g} decisions per mean job duration > {rules.twin_above_epochs_per_duration:g}: "
        f"trains on the farm scaled down {factor}x ({twin.n_servers:,} servers, "
        f"{epochs_per_duration(twin):.3g} decisions per duration, "
        f"{'exact' if exact else 'counts rounded'}), evaluated on the farm itself"
    )


def _clamp(x: float, lo: float, hi: float) -> float:
    return min(hi, max(lo, x))


def _whole_rollouts(steps: float, per: int) -> int:
    return max(1, math.ceil(steps / per)) * per


def derive_action_mode(config: FarmConfig, rules: Rules = RULES) -> tuple[str, str]:
    """(action mode, reason) derived from the farm: the per-server encoding makes the network
    tell exchangeable servers apart by their occupancy, which costs samples as the farm grows;
    the group encoding is exact for exchangeable servers and independent of the farm's size."""
    n = config.n_servers
    mode = "server" if n <= rules.server_actions_max_servers else "group"
    return mode, (
        f"{n} servers {'<=' if mode == 'server' else '>'} "
        f"{rules.server_actions_max_servers}: {mode} actions "
        f"({n_actions(config, mode)} actions, {obs_size(config, mode)} inputs)"
    )


def _discount(
    config: FarmConfig, action_mode: str, rules: Rules, why: dict[str, str], small: bool
) -> tuple[int, float, float, str]:
    """(train_scale, gamma, horizon in decisions, advantage): training settings follow the farm
    trained on (the twin, for a large farm), evaluation windows and warm-ups the farm itself;
    ``small``: exactly evaluated, no SLO (``rules.advantage``, else ``rules.advantage_other``)."""
    epd = float(epochs_per_duration(config))
    scale, why["train_scale"] = train_scale(config, action_mode, rules)
    tepd = epd if scale == 1 else float(epochs_per_duration(config.scaled_down(scale)))
    horizon = rules.horizon_durations * tepd
    gamma = 1.0 - 1.0 / max(1.0 + 1e-9, horizon)
    advantage = rules.advantage if small else rules.advantage_other
    if advantage == "average":
        why["advantage"] = (
            "average reward (differential GAE, no discount): on an exactly evaluated farm the "
            "average of W - eta P per decision at eta = the policy's efficiency ranks the most "
            "efficient policy best (Dinkelbach); a discount ranks others best "
            "(serverfarm_gym.agents.ppo.criterion)"
        )
        why["gamma"] = "unused by the average-reward advantage (stored for reference)"
    else:
        why["advantage"] = (
            "discounted GAE (simulated farm: the average-reward advantage is measured on the "
            "exact farms only; SLO: it learns worse there, experiments/README.md)"
        )
        why["gamma"] = (
            f"1 - 1/({rules.horizon_durations:g} durations x {tepd:.3g} epochs per duration): "
            f"a horizon of {rules.horizon_durations:g} mean job durations"
        )
    why["gae_lambda"] = "fixed (RULES)"
    return scale, gamma, horizon, advantage


def _rollouts(horizon: float, rules: Rules, why: dict[str, str],
              small: bool) -> tuple[int, int, int, int]:  # fmt: skip
    """(steps per rollout, total timesteps in whole rollouts, n_steps, batch_size); ``small``:
    an exactly evaluated farm without an SLO (its own rollout and budget)."""
    n_steps = rules.exact_n_steps if small else rules.n_steps
    batch = rules.exact_batch_size if small else rules.batch_size
    per = rules.n_envs * n_steps
    rollout = (
        f"fixed (RULES{', exact farm' if small else ''}): {rules.n_envs} x {n_steps} = {per:,} "
        f"steps per rollout, {per // batch} minibatches x {rules.n_epochs} epochs"
    )
    for k in ("n_envs", "n_steps", "batch_size", "n_epochs"):
        why[k] = rollout
    why["learning_rate"] = "fixed (RULES), decaying linearly to 0 over the run"
    if small:
        why["total_timesteps"] = (
            f"exact farm: {rules.exact_total_timesteps:,} steps ({rules.exact_total_timesteps // per}"
            " rollouts), within which the from-scratch study reaches 99.9% of the optimum "
            "(docs/learning.md)"
        )
        return per, _whole_rollouts(rules.exact_total_timesteps, per), n_steps, batch
    total = _whole_rollouts(
        _clamp(
            rules.total_horizons * horizon, rules.min_total_timesteps, rules.max_total_timesteps
        ),
        per,
    )
    why["total_timesteps"] = (
        f"{rules.total_horizons:g} horizons of {horizon:.3g} decisions, within "
        f"[{rules.min_total_timesteps:,}, {rules.max_total_timesteps:,}], whole rollouts"
    )
    return per, total, n_steps, batch


#: why each --init policy is cloned first (the reason printed with a derived init)
INIT_REASONS = {
    "pas": "behaviour cloning on PAS's decisions: training starts at PAS, the step-0 model "
    "is the floor of the best-model selection",
    "best-priority": "behaviour cloning on the best static priority table searched against "
    "the farm trained on (PAS's table is a candidate; on a simulated farm the stronger of it "
    "and PAS, measured): the selection's floor is the strongest baseline, and PPO improves "
    "on it where a table cannot",
    "generalist": "behaviour cloning on the shipped generalist network's decisions (alone)",
    "pas-price": "behaviour cloning on price-aware PAS's decisions",
    "random": "uniform (orthogonal initialisation)",
    "slo-optimal": "the farm has an SLO and training meets it (serverfarm_gym.agents.ppo.slo): the start is "
    "the exact SLO-constrained optimum (a randomised policy, cloned by its probabilities), "
    "where the aggregated chain measures the network exactly (a group or tied network on an "
    "exactly solvable farm without sleep; otherwise slo-mix); PAS and the priority tables "
    "may miss the SLO",
    "slo-mix": "the farm has an SLO and training meets it (serverfarm_gym.agents.ppo.slo): the start is the "
    "searched mix of two orders that meets it (cloned by its probabilities); the exact "
    "SLO-constrained optimum needs an exactly solvable farm without sleep",
}


def slo_init(config: FarmConfig, action_mode: str) -> str:
    """The start of training to ``config``'s SLO, as ``serverfarm_gym.agents.ppo.slo.slo_teacher`` picks it
    for the default network (server actions train the tied group network): ``slo-optimal``
    where the aggregated chain is solved, else ``slo-mix``."""
    group_net = action_mode in ("group", "server")  # server: tied (PPOArgs.server_network)
    chain = group_net and exact_unsupported_reason(config) is None and not config.has_sleep
    return "slo-optimal" if chain else "slo-mix"


def _init(config: FarmConfig, action_mode: str, exact: bool, rules: Rules,
          why: dict[str, str]) -> str:  # fmt: skip
    """The policy cloned first: a farm with an SLO starts from a policy that meets it
    (:func:`slo_init`); otherwise ``rules.init`` on exactly evaluated farms, else
    ``rules.init_simulated``."""
    for name, value in (("init", rules.init), ("init_simulated", rules.init_simulated)):
        if value not in INITS:
            raise ValueError(f"rules.{name}: choose one of {', '.join(INITS)}, got {value!r}")
    if config.slo is not None:
        init = slo_init(config, action_mode)
        why["init"] = INIT_REASONS[init]
    else:
        init = rules.init if exact else rules.init_simulated
        why["init"] = INIT_REASONS[init] + (
            " (exactly evaluated farm)" if exact else " (simulated farm)"
        )
    why["pas_confidence"] = (
        "the clone's logits scaled until its action is sampled this far from uniform to "
        "certain: the deterministic policy stays the clone's, the sampling policy explores"
        if config.slo is None
        else "unused with an SLO: its start is cloned by its probabilities (softening them "
        "would change its E[T])"
    )
    return init


def _windows(config: FarmConfig, rules: Rules) -> tuple[int, int, int]:
    """(evaluation window, final window, replications) of a simulated evaluation, in epochs."""
    epd = float(epochs_per_duration(config))
    floor = math.ceil(rules.min_window_durations * epd)
    # a time-varying farm is measured over whole cycles of its schedule: a shorter window
    # compares policies on one part of the day only
    if config.is_time_varying:
        floor = max(floor, math.ceil(config.cycle_arrivals))
    ev = max(floor, int(_clamp(math.ceil(rules.eval_durations * epd), rules.eval_min_epochs,
                               rules.eval_max_epochs)))  # fmt: skip
    final = max(floor, int(_clamp(math.ceil(rules.final_eval_durations * epd),
                                  rules.eval_min_epochs, rules.final_eval_max_epochs)))  # fmt: skip
    pw = policy_warmup(config, rules)
    reps = int(_clamp(rules.eval_epoch_budget // (ev + pw), 4, rules.eval_replications))
    return ev, final, reps


def _evaluation(
    config: FarmConfig, rules: Rules, reason: str | None, total: int, per: int,
    why: dict[str, str],
) -> dict[str, Any]:  # fmt: skip
    """The evaluation settings: exact (every rollout) where the CTMC is small enough
    (``reason`` None), else simulated windows about ``evaluations_per_run`` times a run."""
    ev, final, reps = _windows(config, rules)
    if reason is None:
        why["eval_exact"] = (
            f"the per-server CTMC has {n_full_states(config):,} states "
            f"(<= {rules.exact_max_states:,}): exact, no noise"
        )
        why["eval_freq"] = "every rollout (an exact evaluation is cheap)"
        why["eval_epochs"] = why["final_eval_epochs"] = "unused (exact)"
        why["eval_replications"] = "unused (exact)"
        return {"eval_exact": True, "eval_freq": per, "eval_epochs": ev,
                "eval_replications": rules.eval_replications, "final_eval_epochs": final}  # fmt: skip
    why["eval_exact"] = f"{reason}: simulated, paired with PAS on common random numbers"
    why["eval_freq"] = f"about {rules.evaluations_per_run} evaluations per run"
    why["eval_epochs"] = (
        f"{rules.eval_durations:g} mean job durations per replication, within "
        f"[{rules.eval_min_epochs:,}, {rules.eval_max_epochs:,}] epochs, never below "
        f"{rules.min_window_durations:g} durations"
    )
    why["final_eval_epochs"] = (
        f"{rules.final_eval_durations:g} mean job durations per replication, at most "
        f"{rules.final_eval_max_epochs:,} epochs, never below {rules.min_window_durations:g} "
        "durations (fresh seeds, twice the replications)"
    )
    if config.is_time_varying:
        cyc = f", nor below one cycle of the schedule ({math.ceil(config.cycle_arrivals):,} epochs)"
        why["eval_epochs"] += cyc
        why["final_eval_epochs"] += cyc
    why["eval_replications"] = (
        f"in lockstep in one vector env: {rules.eval_replications}, fewer (>= 4) to keep an "
        f"evaluation within {rules.eval_epoch_budget:,} policy epochs"
    )
    return {"eval_exact": False, "eval_freq": _whole_rollouts(total / rules.evaluations_per_run, per),
            "eval_epochs": ev, "eval_replications": reps, "final_eval_epochs": final}  # fmt: skip


def derive_settings(
    config: FarmConfig, action_mode: str | None = None, rules: Rules = RULES
) -> FarmSettings:
    """The training settings of ``config`` by the rules of ``rules`` (see the module docstring);
    ``action_mode`` given (by a file or the command line) is kept and the rest follows from it
    (its reason is the derived one where it is the mode the rules would choose)."""
    epd = float(epochs_per_duration(config))
    why: dict[str, str] = {}
    auto, auto_reason = derive_action_mode(config, rules)
    if action_mode is None or action_mode == auto:
        action_mode, why["action_mode"] = auto, auto_reason
    else:
        check_action_mode(action_mode)
        why["action_mode"] = "given"
    reason = exact_unsupported_reason(config, rules.exact_max_states)
    small = reason is None and config.slo is None
    scale, gamma, horizon, advantage = _discount(config, action_mode, rules, why, small)
    per, total, n_steps, batch = _rollouts(horizon, rules, why, small)
    init = _init(config, action_mode, reason is None, rules, why)
    evaluation = _evaluation(config, rules, reason, total, per, why)
    warmup = int(_clamp(math.ceil(rules.warmup_durations * epd), rules.warmup_min_epochs,
                        rules.warmup_max_epochs))  # fmt: skip
    why["warmup_epochs"] = (
        f"PAS warm-up from the empty farm: {rules.warmup_durations:g} mean job durations, "
        f"within [{rules.warmup_min_epochs:,}, {rules.warmup_max_epochs:,}] epochs"
    )
    why["checkpoint_freq"] = f"about {rules.checkpoints_per_run} checkpoints per run"
    return FarmSettings(
        action_mode=action_mode,
        advantage=advantage,
        gamma=gamma,
        gae_lambda=rules.gae_lambda,
        n_envs=rules.n_envs,
        n_steps=n_steps,
        batch_size=batch,
        n_epochs=rules.n_epochs,
        learning_rate=rules.learning_rate,
        total_timesteps=total,
        init=init,
        pas_confidence=rules.pas_confidence,
        eval_freq=evaluation.pop("eval_freq"),
        warmup_epochs=warmup,
        checkpoint_freq=_whole_rollouts(total / rules.checkpoints_per_run, per),
        train_scale=scale,
        epochs_per_duration=epd,
        reasons=why,
        **evaluation,
    )
