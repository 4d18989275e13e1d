"""Paired comparisons on common random numbers, and which model to keep (training's model
selection, built on :func:`serverfarm_gym.evaluation.efficiency.measure`).

Two estimates made with the *same* replication seeds are positively correlated, so the right test
of "is the candidate better?" is on the per-replication differences: their mean and Student-t 95%
interval (:func:`compare`), usually far narrower than the two separate intervals. Where the chain
is small the efficiencies are exact (``serverfarm_gym.evaluation.exact``): no noise, the comparison is direct.

:class:`PairedEvaluator` measures a predictor exactly or in the vector env on fixed seeds
(replication ``i``: stream ``seed + i``) and holds PAS's estimate on the same seeds;
:class:`BestModelSelector` keeps the best model: a candidate replaces it only when it is better
(exact: strictly; simulated: the paired interval of the difference lies above 0), so the first
model (the PAS clone, with ``--init pas``) is a floor that noise cannot push the kept model below.

Selecting the maximum of many noisy evaluations on the same seeds is biased upwards on those
seeds, so a final verdict re-measures the kept model and PAS on fresh seeds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from serverfarm_gym.baselines.registry import make_policy
from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.evaluation.efficiency import Estimate, Window, consecutive_seeds, measure
from serverfarm_gym.evaluation.stats import mean_ci

__all__ = [
    "EXACT_RTOL",
    "BestModelSelector",
    "PairedComparison",
    "PairedEvaluator",
    "compare",
    "estimate_as_dict",
    "estimate_from_dict",
]

#: relative tolerance below which two exact efficiencies are equal (the CTMC solve's precision)
EXACT_RTOL = 1e-9


@dataclass(frozen=True)
class PairedComparison:
    """candidate - reference: the mean difference, its 95% half-width (0 when exact), the same in
    percent of the reference, and the verdict."""

    candidate: float
    reference: float
    diff: float
    ci95: float
    gap_pct: float
    gap_pct_ci95: float
    n: int  # replications (0: exact)
    method: str  # "exact" or "paired"

    @property
    def verdict(self) -> str:
        """``better``, ``worse``, ``equal`` (exact) or ``not significantly different``."""
        if self.method == "exact":
            tol = EXACT_RTOL * abs(self.reference)
            return "better" if self.diff > tol else "worse" if self.diff < -tol else "equal"
        if not math.isfinite(self.ci95):
            return "not significantly different"
        if self.diff - self.ci95 > 0:
            return "better"
        if self.diff + self.ci95 < 0:
            return "worse"
        return "not significantly different"

    def as_dict(self) -> dict[str, Any]:
        return {
            "candidate": self.candidate,
            "reference": self.reference,
            "diff": self.diff,
            "ci95": self.ci95,
            "gap_pct": self.gap_pct,
            "gap_pct_ci95": self.gap_pct_ci95,
            "n": self.n,
            "method": self.method,
            "verdict": self.verdict,
        }

    def describe(self, what: str = "PAS") -> str:
        """``+0.123% +- 0.045% (paired, 32 replications): significantly better than PAS``."""
        v = self.verdict
        text = {
            "better": f"significantly better than {what}",
            "worse": f"significantly below {what}",
            "not significantly different": f"not significantly different from {what}",
            "equal": f"equal to {what}",
        }[v]
        if self.method == "exact":
            if v == "better":
                text = f"better than {what}"
            elif v == "worse":
                text = f"below {what}"
            return f"{self.gap_pct:+.3f}% (exact): {text}"
        return (
            f"{self.gap_pct:+.3f}% +- {self.gap_pct_ci95:.3f}% (paired 95% CI, {self.n} "
            f"replications): {text}"
        )


def _per_replication(est: Estimate) -> np.ndarray | None:
    values = est.per_replication
    return None if len(values) == 0 else np.asarray(values, dtype=np.float64)


def compare(candidate: Estimate, reference: Estimate) -> PairedComparison:
    """Paired comparison of two estimates of the same method: exact (direct difference) or
    simulated on the same seeds (per-replication differences; ValueError if the estimates have
    no per-replication values or not the same number of them)."""
    c, r = float(candidate.efficiency), float(reference.efficiency)
    if candidate.method == "exact" and reference.method == "exact":
        d = c - r
        return PairedComparison(c, r, d, 0.0, 100.0 * d / r, 0.0, 0, "exact")
    cv, rv = _per_replication(candidate), _per_replication(reference)
    if cv is None or rv is None or cv.shape != rv.shape:
        raise ValueError(
            "candidate/reference: a paired comparison needs per-replication values of both, "
            "measured on the same seeds (serverfarm_gym.evaluation.efficiency.measure)"
        )
    diff = cv - rv
    mean, half = mean_ci(diff, 0.95)
    gap = 100.0 * diff / rv
    gmean, ghalf = mean_ci(gap, 0.95)
    inf = math.inf
    return PairedComparison(
        float(cv.mean()), float(rv.mean()), float(mean), inf if half is None else float(half),
        float(gmean), inf if ghalf is None else float(ghalf), len(cv), "paired",
    )  # fmt: skip


def estimate_from_dict(d: Mapping[str, Any]) -> Estimate:
    """Rebuild an estimate saved with :func:`estimate_as_dict` (e.g. from a best model's
    sidecar on ``--resume``)."""
    return Estimate.from_dict(d)


def estimate_as_dict(est: Estimate) -> dict[str, Any]:
    """An estimate as JSON, with its per-replication values when it has them."""
    return est.as_dict()


class PairedEvaluator:
    """Measure predictors exactly (``exact``) or in the vector env on fixed seeds, and PAS on the
    same seeds (:attr:`pas`, computed once), so every comparison is paired.

    Args:
        config, action_mode: the farm and the policy's action encoding.
        exact: solve the per-server CTMC (the farm must be solvable).
        n_epochs, replications, seed: the simulated window (measured epochs per replication),
            the replications and the first seed (replication ``i``: ``seed + i``).
        warmup_epochs: PAS warm-up of each replication (the farm starts empty).
        policy_warmup: unmeasured epochs of the policy after it.
        objective: ``"energy"`` (work / energy) or ``"cost"`` (work / energy cost; simulated
            only: the exact solver measures energy).
    """

    def __init__(
        self,
        config: FarmConfig,
        action_mode: str,
        exact: bool,
        n_epochs: int = 20_000,
        replications: int = 16,
        seed: int = 1_000_000,
        warmup_epochs: int | None = None,
        policy_warmup: int | None = None,
        objective: str = "energy",
    ):
        if exact and objective != "energy":
            raise ValueError("objective: the exact evaluation measures energy; simulate 'cost'")
        if not exact and replications < 2:
            raise ValueError(
                f"replications: a paired interval needs at least 2, got {replications}"
            )
        self.config, self.action_mode, self.exact = config, action_mode, bool(exact)
        self.n_epochs, self.replications, self.seed = int(n_epochs), int(replications), int(seed)
        self.warmup_epochs, self.policy_warmup = warmup_epochs, policy_warmup
        self.objective = objective
        self._pas: Estimate | None = None

    def window(self) -> Window:
        """The simulated window: PAS warms up the empty farm, the policy runs its transient,
        then ``n_epochs`` are measured (``Window.for_farm`` fills in what is None)."""
        pas = True if self.warmup_epochs is None else int(self.warmup_epochs)
        return Window.for_farm(self.config, self.n_epochs, self.policy_warmup, pas)

    def measure(self, policy: Any) -> Estimate:
        """The efficiency of a deterministic predictor (or policy with ``predict``)."""
        if self.exact:
            return measure(policy, self.config, action_mode=self.action_mode, method="exact")
        return measure(
            policy, self.config, self.window(), consecutive_seeds(self.seed, self.replications),
            action_mode=self.action_mode, method="vector", objective=self.objective,
        )  # fmt: skip

    @property
    def pas(self) -> Estimate:
        """PAS on the same seeds (or exactly), always with per-server actions: PAS's own
        definition. Its group-action form can differ (pas-gap: 0.648090 against 0.648423,
        exact), and the reference must not be the weaker one. The seeds drive the same arrivals
        and sizes in either action mode, so the pairing holds. Simulated, it is the compiled
        simulator's own PAS on the vector env's sample path, without a policy call per step."""
        if self._pas is None:
            pas = make_policy("pas", self.config, "server")
            if self.exact:
                self._pas = measure(pas, self.config, method="exact")
            else:
                self._pas = measure(
                    pas, self.config, self.window(),
                    consecutive_seeds(self.seed, self.replications), method="builtin",
                    objective=self.objective,
                )  # fmt: skip
        return self._pas


class BestModelSelector:
    """Keep the best model seen: ``consider(estimate)`` returns the comparisons of the candidate
    with PAS and with the current best, and whether it replaced the best.

    ``best`` restores the best of a resumed run (its estimate, with per-replication values)."""

    def __init__(self, evaluator: PairedEvaluator, best: Estimate | None = None):
        self.evaluator = evaluator
        self.best = best

    def consider(self, est: Estimate) -> tuple[bool, PairedComparison, PairedComparison | None]:
        vs_pas = compare(est, self.evaluator.pas)
        if self.best is None:
            self.best = est
            return True, vs_pas, None
        try:
            vs_best = compare(est, self.best)
        except ValueError:  # a best measured otherwise (e.g. before a settings change)
            vs_best = None
        better = vs_best.verdict == "better" if vs_best is not None else (
            est.efficiency > self.best.efficiency
        )  # fmt: skip
        if better:
            self.best = est
        return better, vs_pas, vs_best
