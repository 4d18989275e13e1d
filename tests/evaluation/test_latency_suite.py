"""The latency suite (scenarios/suites/latency.yaml) and SLO fields of suites."""

from __future__ import annotations

import pytest

from baselines.slo_optimum import solve_slo
from evaluation.leaderboard import format_markdown, leaderboard_csv
from evaluation.suite import available_suites, load_suite, run_suite


def test_latency_suite_parses_with_binding_slos():
    suite = load_suite("latency")
    assert "latency" in available_suites() and suite.version == "1"
    assert [s.farm.n_servers for s in suite.scenarios][-2:] == [100, 10_000]
    for sc in suite.scenarios:
        assert sc.farm.slo is not None
        if sc.reference == "slo-optimum":
            sol = solve_slo(sc.farm)
            assert sol.info["binding"], sc.name  # the SLO binds on every small farm


def test_core_suite_is_unchanged():
    assert [s.name for s in load_suite("core").scenarios] == [
        "tiny", "small-1", "pas-gap", "speed-scaling", "paper-100-lognormal", "paper-100",
        "large-10k",
    ]  # fmt: skip
    assert all(s.farm.slo is None for s in load_suite("core").scenarios)


@pytest.mark.parametrize(
    ("entry", "match"),
    [
        ({"slo": {"mean_response_time": -1}}, r"slo\.mean_response_time: must be > 0"),
        ({"reference": "slo-optimum"}, r"'slo-optimum' needs a farm with an slo: block"),
    ],
)
def test_bad_slo_entries_are_refused(entry, match):
    sc = {"name": "t", "farm": "tiny", "reference": "bound", "seed": 1, **entry}
    data = {"suite": "x", "suite_version": "0", "defaults": {"replications": 2, "horizon": 10,
            "warmup": 0}, "scenarios": [sc]}  # fmt: skip
    with pytest.raises(ValueError, match=match):
        load_suite(data)


def test_small_latency_run_scores_against_the_slo_optimum():
    full = load_suite("latency")
    data = {
        "suite": "latency-test",
        "suite_version": "0-test",
        "defaults": {"replications": 4, "horizon": 4000, "warmup": 400},
        "scenarios": [
            {"name": "tiny-slo", "farm": "tiny", "slo": {"mean_response_time": 0.9},
             "reference": "slo-optimum", "seed": 7},
        ],
    }  # fmt: skip
    assert full.scenarios[0].farm.slo.mean_response_time == 0.9
    board, details = run_suite(data, ["pas", "slo-priority", "slo-optimal"], workers=1,
                               progress=False)  # fmt: skip
    sc = board["scenarios"]["tiny-slo"]
    assert sc["slo"] == 0.9 and sc["reference"]["kind"] == "slo-optimum"
    assert sc["reference"]["efficiency"] == pytest.approx(solve_slo(full.scenarios[0].farm).value)
    pol = sc["policies"]
    assert pol["pas"]["slo_met"] is False  # PAS: E[T] ~1.53 > 0.9
    assert pol["slo-priority"]["slo_met"] is True
    for name in ("pas", "slo-priority", "slo-optimal"):
        assert pol[name]["mean_response_time"]["mean"] > 0
    md = format_markdown(board, details)
    assert "mean response time" in md and "1.5" in md
    assert "mean_response_time_mean" in leaderboard_csv(board).splitlines()[0]
