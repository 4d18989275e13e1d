"""Reference values of a scenario: the exact optimum (``serverfarm_gym.baselines.solvers.efficiency_optimum``, memoised per
process so the reference value and the ``optimal`` policy share one solve) and the relaxation
upper bound (``serverfarm_gym.baselines.solvers.bounds``), each None with the reason when not computable."""

from __future__ import annotations

from typing import Any

from serverfarm_gym.baselines.solvers.bounds import relaxation_bound
from serverfarm_gym.baselines.solvers.efficiency_optimum import solve as solve_optimum
from serverfarm_gym.envs.config import FarmConfig

__all__ = ["optimum_solution", "reference_values"]

# ---------------------------------------------------------------------------------------------
# references: exact optimum, relaxation bound
# ---------------------------------------------------------------------------------------------
_OPTIMUM_CACHE: dict[tuple[FarmConfig, int | None], tuple[Any, str | None]] = {}


def optimum_solution(
    config: FarmConfig, max_variables: int | None = None
) -> tuple[Any, str | None]:
    """(``serverfarm_gym.baselines.solvers.efficiency_optimum.OptimumSolution``, None) or (None, why not); memoised per process so
    the reference value and the ``optimal`` policy share one solve. ``max_variables`` lowers (or
    raises) the LP solver's size limit (None: the solver's default)."""
    if config.has_sleep:
        # the base model's chain has no sleep modes: its optimum is another farm's
        return (
            None,
            "exact solver refused: it ignores right-sizing (sleep:); see serverfarm_gym.baselines.solvers.sleep_chain",
        )
    key = (config, max_variables)
    if key in _OPTIMUM_CACHE:
        return _OPTIMUM_CACHE[key]
    try:
        kw = {} if max_variables is None else {"max_variables": int(max_variables)}
        out: tuple[Any, str | None] = (solve_optimum(config, "lp", **kw), None)
    except (ValueError, MemoryError) as err:
        # the solver's documented refusal: beyond its size limit, general job sizes, ...
        out = (None, f"exact solver refused: {err}")
    if len(_OPTIMUM_CACHE) > 16:
        _OPTIMUM_CACHE.clear()
    _OPTIMUM_CACHE[key] = out
    return out


def _optimum(
    config: FarmConfig, max_variables: int | None = None
) -> tuple[dict[str, Any] | None, str | None]:
    sol, why = optimum_solution(config, max_variables)
    if sol is None:
        return None, why
    return {
        "efficiency": float(sol.value),
        "mean_response_time": float(sol.mean_response_time),
        "method": str(sol.method),
        "n_states": int(sol.space.n_states),
        "solve_s": float(sol.seconds),
        "source": "serverfarm_gym.baselines.solvers.efficiency_optimum.solve",
    }, None


def _bound(config: FarmConfig) -> tuple[dict[str, Any] | None, str | None]:
    if config.has_sleep:
        # sleeping servers draw less than idle ones: the always-on relaxation bounds nothing here
        return None, "relaxation bound refused: it ignores right-sizing (sleep:), not a bound"
    try:
        res = relaxation_bound(config)
    except (ValueError, MemoryError) as err:
        return None, f"relaxation bound refused: {err}"
    # a number, or a result object (its field name is not fixed yet: efficiency/value/bound)
    val = res if isinstance(res, (int, float)) else None
    for attr in ("efficiency", "value", "bound"):
        if val is None:
            val = getattr(res, attr, None)
    if val is None:
        return None, f"relaxation_bound returned {type(res).__name__} without an efficiency"
    return {
        "efficiency": float(val),
        "source": "serverfarm_gym.baselines.solvers.bounds.relaxation_bound",
    }, None


def reference_values(
    config: FarmConfig, compute_optimum: bool = True, optimum_max_variables: int | None = None
) -> dict[str, Any]:
    """``{"optimum", "optimum_reason", "upper_bound", "upper_bound_reason"}`` for ``config``.

    The optimum is None (with the reason) when the exact solver is missing, refuses the instance
    (LP larger than its limit, ``optimum_max_variables`` if given: it raises ValueError), or
    ``compute_optimum`` is False.
    """
    if compute_optimum:
        opt, why = _optimum(config, optimum_max_variables)
    else:
        opt, why = None, "not computed (compute_optimum=False / --no-optimum)"
    bnd, bwhy = _bound(config)
    return {"optimum": opt, "optimum_reason": why, "upper_bound": bnd, "upper_bound_reason": bwhy}
