"""serverfarm_gym.evaluation.paired: paired comparisons on common random numbers and the best-model rule."""

from __future__ import annotations

import numpy as np
import pytest

from serverfarm_gym.baselines.registry import make_policy
from serverfarm_gym.envs.scenarios import load_scenario
from serverfarm_gym.evaluation.efficiency import Estimate
from serverfarm_gym.evaluation.paired import (
    BestModelSelector,
    PairedEvaluator,
    compare,
    estimate_as_dict,
    estimate_from_dict,
)
from serverfarm_gym.evaluation.stats import t_quantile


def _vec(values) -> Estimate:
    v = np.asarray(values, dtype=float)
    return Estimate(float(v.mean()), 0.0, "simulation", 100 * len(v), len(v), v)


def test_paired_difference_matches_the_t_interval_by_hand():
    ref = np.array([0.50, 0.52, 0.48, 0.51, 0.49])
    cand = ref + np.array([0.010, 0.012, 0.008, 0.011, 0.009])
    c = compare(_vec(cand), _vec(ref))
    d = cand - ref
    half = t_quantile(0.95, len(d)) * d.std(ddof=1) / np.sqrt(len(d))
    assert c.diff == pytest.approx(d.mean()) and c.ci95 == pytest.approx(half)
    assert c.gap_pct == pytest.approx(np.mean(100 * d / ref))
    assert c.verdict == "better" and c.n == 5 and c.method == "paired"
    assert compare(_vec(ref), _vec(cand)).verdict == "worse"


def test_pairing_detects_what_separate_intervals_cannot():
    """Replication noise common to both policies (what common random numbers give) cancels in
    the paired difference: separate intervals overlap, the paired one excludes 0."""
    rng = np.random.default_rng(0)
    common = rng.normal(0.5, 0.02, 16)
    ref, cand = common, common + 0.001 + rng.normal(0, 0.0002, 16)
    a, b = _vec(cand), _vec(ref)
    separate = t_quantile(0.95, 16) * common.std(ddof=1) / 4
    assert abs(a.efficiency - b.efficiency) < separate  # overlapping separate intervals
    assert compare(a, b).verdict == "better"


def test_noise_alone_is_not_significantly_different():
    rng = np.random.default_rng(1)
    ref = rng.normal(0.5, 0.01, 32)
    cand = ref + rng.normal(0.0, 0.001, 32)  # no true difference
    c = compare(_vec(cand), _vec(ref))
    assert c.verdict == "not significantly different"
    assert c.diff - c.ci95 < 0 < c.diff + c.ci95


def test_exact_comparison_is_direct():
    a, b = Estimate(0.33, 0.0, "exact"), Estimate(0.32, 0.0, "exact")
    assert compare(a, b).verdict == "better" and compare(a, b).ci95 == 0.0
    assert compare(b, a).verdict == "worse"
    assert compare(a, a).verdict == "equal"
    assert "(exact)" in compare(a, b).describe()


def test_unpaired_estimates_are_refused():
    with pytest.raises(ValueError, match="same seeds"):
        compare(_vec([0.5, 0.6, 0.7]), _vec([0.5, 0.6]))
    with pytest.raises(ValueError, match="per-replication"):
        compare(Estimate(0.5, 0.01, "simulation"), _vec([0.5, 0.6]))


def test_estimates_round_trip_through_json():
    v = _vec([0.1, 0.2, 0.3])
    back = estimate_from_dict(estimate_as_dict(v))
    np.testing.assert_array_equal(back.per_replication, v.per_replication)
    assert back.as_dict() == v.as_dict()
    e = Estimate(0.3, 0.0, "exact")
    back = estimate_from_dict(estimate_as_dict(e))
    assert back.as_dict() == e.as_dict() and len(back.per_replication) == 0


def test_best_model_is_replaced_only_by_a_significantly_better_one():
    ev = PairedEvaluator(load_scenario("tiny"), "server", exact=False, replications=4)
    ev._pas = _vec([0.50, 0.52, 0.48, 0.51])
    sel = BestModelSelector(ev)
    first = _vec([0.50, 0.52, 0.48, 0.51])
    replaced, vs_pas, vs_best = sel.consider(first)
    assert replaced and vs_best is None and vs_pas.verdict == "not significantly different"
    noisy = _vec([0.505, 0.515, 0.485, 0.512])  # higher mean, but not significantly
    assert noisy.efficiency > first.efficiency
    replaced, _, vs_best = sel.consider(noisy)
    assert not replaced and vs_best.verdict == "not significantly different"
    assert sel.best is first
    better = _vec([0.51, 0.53, 0.49, 0.52])
    replaced, vs_pas, _ = sel.consider(better)
    assert replaced and sel.best is better and vs_pas.verdict == "better"


def test_pas_is_measured_on_the_evaluators_seeds():
    """A policy evaluated by the evaluator is paired with PAS on the same streams: PAS compared
    with itself differs by exactly 0 in every replication. PAS is always the per-server PAS
    (its own definition), whatever the candidate's action mode."""
    cfg = load_scenario("small-1")
    kw = {"n_epochs": 500, "replications": 3, "seed": 7, "warmup_epochs": 1000,
          "policy_warmup": 100}  # fmt: skip
    ev = PairedEvaluator(cfg, "server", exact=False, **kw)
    pas_again = ev.measure(make_policy("pas", cfg, "server"))
    c = compare(pas_again, ev.pas)
    assert c.diff == 0.0 and c.ci95 == 0.0
    group = PairedEvaluator(cfg, "group", exact=False, **kw)
    np.testing.assert_array_equal(group.pas.per_replication, ev.pas.per_replication)
    exact = PairedEvaluator(cfg, "group", exact=True)
    assert exact.pas.method == "exact"
    assert exact.pas.efficiency == pytest.approx(0.591035, abs=1e-6)  # docs/training.md
