"""Statistics of the simulation tests: :func:`batch_run` simulates consecutive batches of a long
run, and :func:`ratio_ci` turns per-batch numerators/denominators into a ratio estimate with a
confidence half-width from the batch-means method (delta method, Student-t quantile). Every
statistical assertion of the suite goes through :func:`assert_within_ci` (or
:func:`assert_same_within_ci`), so no tolerance is ever a hand-picked constant."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.simulator import FarmSimulator, SimStats
from tests.helpers.farms import pas_table

#: two-sided error probability of every statistical check (about a 4-sigma normal tolerance)
ALPHA = 1e-4


@dataclass(frozen=True)
class Batches:
    """Per-batch totals of a simulation run (each array has one entry per batch)."""

    time: np.ndarray
    work: np.ndarray
    energy: np.ndarray
    cost: np.ndarray
    arrivals: np.ndarray  # [n_batches, J]
    accepted: np.ndarray  # [n_batches, J]
    blocked: np.ndarray  # [n_batches, J]
    departures: np.ndarray

    @classmethod
    def from_stats(cls, runs: list[SimStats]) -> Batches:
        return cls(
            time=np.array([r.time for r in runs]),
            work=np.array([r.work for r in runs]),
            energy=np.array([r.energy for r in runs]),
            cost=np.array([r.cost for r in runs]),
            arrivals=np.array([r.arrivals for r in runs], dtype=np.float64),
            accepted=np.array([r.accepted for r in runs], dtype=np.float64),
            blocked=np.array([r.blocked for r in runs], dtype=np.float64),
            departures=np.array([r.departures for r in runs], dtype=np.float64),
        )


def batch_run(
    config: FarmConfig,
    *,
    seed: int,
    policy: str = "priority",
    table: np.ndarray | None = None,
    n_batches: int = 30,
    batch_epochs: int = 20_000,
    warmup_epochs: int = 5_000,
    force_general: bool = False,
) -> Batches:
    """Run ``warmup_epochs`` (discarded; the farm starts empty) then ``n_batches`` consecutive
    batches of ``batch_epochs`` decision epochs. ``policy="pas"`` is the priority dispatcher
    with :func:`pas_table`."""
    if policy == "pas":
        policy, table = "priority", pas_table(config)
    sim = FarmSimulator(config, seed=seed, force_general=force_general)
    if warmup_epochs:
        sim.run(warmup_epochs, policy, table)
    return Batches.from_stats([sim.run(batch_epochs, policy, table) for _ in range(n_batches)])


def ratio_ci(num: np.ndarray, den: np.ndarray, alpha: float = ALPHA) -> tuple[float, float]:
    """Ratio estimate ``sum(num) / sum(den)`` and its two-sided ``1 - alpha`` CI half-width.

    Batch means with the delta method: the residuals ``num_i - r den_i`` are (approximately)
    i.i.d. with mean 0 across long batches, so ``se(r) = sd(residuals) / (sqrt(n) mean(den))``;
    the quantile is Student's t with n - 1 degrees of freedom.
    """
    num, den = np.asarray(num, dtype=np.float64), np.asarray(den, dtype=np.float64)
    n = num.shape[0]
    if n < 2:
        raise ValueError("ratio_ci: need at least two batches")
    r = float(num.sum() / den.sum())
    resid = num - r * den
    se = math.sqrt(float(np.sum(resid**2)) / (n * (n - 1))) / float(den.mean())
    return r, float(sps.t.ppf(1.0 - alpha / 2.0, n - 1)) * se


def mean_ci(x: np.ndarray, alpha: float = ALPHA) -> tuple[float, float]:
    """Sample mean of (approximately) i.i.d. values and its ``1 - alpha`` t half-width."""
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[0]
    se = float(x.std(ddof=1)) / math.sqrt(n)
    return float(x.mean()), float(sps.t.ppf(1.0 - alpha / 2.0, n - 1)) * se


def assert_within_ci(estimate: tuple[float, float], exact: float, what: str) -> None:
    """Assert |estimate - exact| <= half-width, with a message giving the numbers."""
    est, half = estimate
    assert abs(est - exact) <= half, (
        f"{what}: simulated {est:.6g} +- {half:.3g} (CI, alpha={ALPHA}) "
        f"does not contain the exact value {exact:.6g} "
        f"(off by {abs(est - exact) / max(half, 1e-300):.2f} half-widths)"
    )


def assert_same_within_ci(a: tuple[float, float], b: tuple[float, float], what: str) -> None:
    """Two independent estimates agree: |a - b| <= sqrt(ha^2 + hb^2) (same quantile for both)."""
    half = math.hypot(a[1], b[1])
    assert abs(a[0] - b[0]) <= half, (
        f"{what}: {a[0]:.6g} +- {a[1]:.3g} vs {b[0]:.6g} +- {b[1]:.3g} differ by "
        f"{abs(a[0] - b[0]):.3g} > {half:.3g}"
    )
