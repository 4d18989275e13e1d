"""The Lagrangian reward of a mean-response-time SLO (``slo: {mean_response_time: D}``).

The constrained problem is max E[W]/E[P] subject to E[T] <= D, i.e. (Little's law)
E[N] <= D * (accepted rate). With a multiplier beta >= 0 on the constraint, the env's reward of
a step becomes::

    (integral of W(t) - eta P(t)  -  beta * integral of N(t)) dt / reward_scale

over the time from the decision to the next one (N: jobs in the system, those in setup
included). The constant ``beta * D * accepted rate`` of the Lagrangian is left out: it does not
depend on where a job goes, only on whether it is accepted, and admissible dispatchers never
refuse a job that has a server with room.

beta is held fixed within a rollout and updated between rollouts by projected dual ascent on the
measured constraint (:func:`update_multiplier`): raised while the measured E[T] exceeds D,
lowered (not below 0) while it is below. Its default, :func:`default_multiplier` = 1/D, prices a
job's stay of D time units at one mean job of work: at E[T] = D the penalty rate equals the
accepted throughput, so the term starts on the scale of the reward itself.
"""

from __future__ import annotations

from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.validation import real_argument

__all__ = ["default_multiplier", "update_multiplier"]


def default_multiplier(config: FarmConfig) -> float:
    """The starting multiplier of ``config``'s SLO: 1/D (0.0 without an ``slo:``)."""
    if config.slo is None:
        return 0.0
    return 1.0 / float(config.slo.mean_response_time)


def update_multiplier(
    beta: float, measured_response_time: float, target: float, step_size: float
) -> float:
    """One projected dual-ascent step: ``max(0, beta + step_size * (E[T] - D) / D)``.

    ``measured_response_time`` is the rollout's mean response time (``info
    ["mean_response_time"]``), ``target`` the SLO's D; the slack is relative to D, so
    ``step_size`` is in units of beta per relative violation (e.g. 0.1/D moves beta by a tenth of
    its default for a 100% violation). Bad arguments raise ``ValueError`` naming them."""
    b = real_argument(beta, "beta", minimum=0.0, strict=False)
    et = real_argument(measured_response_time, "measured_response_time", minimum=0.0, strict=False)
    d = real_argument(target, "target (the SLO's D)", minimum=0.0, strict=True)
    step = real_argument(step_size, "step_size", minimum=0.0, strict=True)
    return max(0.0, b + step * (et - d) / d)
