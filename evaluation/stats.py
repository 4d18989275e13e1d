"""Replication statistics: means, Student-t confidence intervals, gaps between policies.

Every quantity is estimated from R independent replications (different seeds, same horizon). The
replication values are i.i.d., and for horizons much longer than the farm's relaxation time they
are close to normal (central limit theorem for regenerative processes), so the Student-t interval

    mean +- t_{(1+c)/2, R-1} * s / sqrt(R),      s = sample standard deviation (ddof=1),

has coverage close to ``c``. Each replication's efficiency is a ratio work/energy over its window;
its bias is O(1/horizon), negligible next to the interval for the horizons the CLI uses.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats as sps  # type: ignore[import-untyped, unused-ignore]

__all__ = [
    "gap_pct",
    "gaps",
    "mean_ci",
    "paired_gap_pct",
    "shortfall_pct",
    "summarize",
    "t_quantile",
]


def t_quantile(confidence: float, n: int) -> float:
    """Two-sided Student-t quantile ``t_{(1+confidence)/2, n-1}`` for ``n`` replications."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence: must be in (0, 1), got {confidence}")
    if n < 2:
        raise ValueError(f"n: a t interval needs at least 2 replications, got {n}")
    return float(sps.t.ppf(0.5 + confidence / 2.0, n - 1))


def mean_ci(
    values: Sequence[float] | np.ndarray, confidence: float = 0.95
) -> tuple[float, float | None]:
    """(mean, half-width of the ``confidence`` Student-t interval); half-width None when n < 2.

    With a single replication there is no variance estimate: the half-width is reported as None
    (``null`` in JSON) rather than a misleading 0.
    """
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"values: expected a non-empty 1-d sequence, got shape {x.shape}")
    mean = float(x.mean())
    if x.size < 2:
        return mean, None
    half = t_quantile(confidence, x.size) * float(x.std(ddof=1)) / math.sqrt(x.size)
    return mean, half


def summarize(values: Sequence[float] | np.ndarray) -> dict[str, float | int | None]:
    """``{"mean", "ci95", "std", "n"}`` of replication values (the JSON shape of every metric)."""
    x = np.asarray(values, dtype=np.float64)
    mean, half = mean_ci(x, 0.95)
    std = float(x.std(ddof=1)) if x.size > 1 else None
    return {"mean": mean, "ci95": half, "std": std, "n": int(x.size)}


def gap_pct(value: float, reference: float) -> float | None:
    """``100 (value - reference) / reference``: positive when ``value`` beats the reference
    (used for the gap to PAS). None when the reference is 0 (undefined)."""
    if reference == 0:
        return None
    return 100.0 * (value - reference) / reference


def shortfall_pct(value: float, target: float | None) -> float | None:
    """``100 (target - value) / target``: how far below ``target`` (the optimum or an upper bound)
    ``value`` is, in percent; None when there is no target."""
    if target is None or target == 0:
        return None
    return 100.0 * (target - value) / target


def paired_gap_pct(
    values: Sequence[float] | np.ndarray, reference: Sequence[float] | np.ndarray
) -> dict[str, float | int | None]:
    """Mean and t interval of the per-replication gaps ``100 (v_r - ref_r) / ref_r``.

    With common random numbers, replication r of every policy sees the same seed, so v_r and ref_r
    are positively correlated and the paired interval is usually much narrower than the two
    separate intervals: it is the right one to decide whether a policy beats the reference.
    """
    v = np.asarray(values, dtype=np.float64)
    r = np.asarray(reference, dtype=np.float64)
    if v.shape != r.shape:
        raise ValueError(
            f"values/reference: paired samples need equal shapes, got {v.shape} and {r.shape}"
        )
    with np.errstate(divide="ignore", invalid="ignore"):
        g = 100.0 * (v - r) / r
    if not np.all(np.isfinite(g)):
        return {"mean": None, "ci95": None, "std": None, "n": int(v.size)}
    return summarize(g)


def gaps(
    value: float, pas: float | None, optimum: float | None, bound: float | None = None
) -> dict[str, float | None]:
    """The gaps of one efficiency with the harness's conventions: ``gap_to_pas_pct`` (:func:`gap_pct`,
    positive: better than PAS), ``gap_to_optimum_pct`` and ``gap_to_bound_pct``
    (:func:`shortfall_pct`), and ``pas_gap_closed``, the share of PAS's shortfall to the optimum
    that ``value`` recovers."""
    out: dict[str, float | None] = {
        "gap_to_pas_pct": gap_pct(value, pas) if pas else None,
        "gap_to_optimum_pct": shortfall_pct(value, optimum),
        "gap_to_bound_pct": shortfall_pct(value, bound),
        "pas_gap_closed": None,
    }
    if pas is not None and optimum is not None and optimum - pas > 1e-12 * optimum:
        out["pas_gap_closed"] = (value - pas) / (optimum - pas)
    return out
