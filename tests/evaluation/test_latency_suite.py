"""The latency suite (scenarios/suites/latency.yaml) and SLO fields of suites."""

from __future__ import annotations

from pathlib import Path

import pytest

from serverfarm_gym.baselines.solvers.sleep_chain import SleepSpace
from serverfarm_gym.baselines.solvers.sleep_chain import solve_optimum as solve_sleep_optimum
from serverfarm_gym.baselines.solvers.slo_optimum import solve_slo
from serverfarm_gym.envs.scenarios import load_scenario
from serverfarm_gym.evaluation.leaderboard import format_markdown, leaderboard_csv
from serverfarm_gym.evaluation.suite import available_suites, load_suite, run_suite

_ROOT = Path(__file__).resolve().parents[2]


def test_latency_suite_parses_with_binding_slos():
    suite = load_suite("latency")
    assert "latency" in available_suites() and suite.version == "2"
    slo = [sc for sc in suite.scenarios if not sc.farm.has_sleep]
    assert [s.farm.n_servers for s in slo][-2:] == [100, 10_000]
    for sc in slo:
        assert sc.farm.slo is not None
        if sc.reference == "slo-optimum":
            sol = solve_slo(sc.farm)
            assert sol.info["binding"], sc.name  # the SLO binds on every small farm


def test_latency_suite_right_sizing_farms_are_the_presets():
    by_name = {sc.name: sc for sc in load_suite("latency").scenarios}
    for name, ref in (("sleep-tiny", "sleep-optimum"), ("sleep-100", "best-known")):
        sc = by_name[name]
        preset = load_scenario(_ROOT / "scenarios" / f"{name}.yaml").to_dict()
        preset.pop("description")
        assert sc.reference == ref and sc.farm.slo is None
        assert sc.farm.to_dict() == preset
    assert by_name["sleep-100"].reference_efficiency > 0


def test_core_suite_is_unchanged():
    assert [s.name for s in load_suite("core").scenarios] == [
        "tiny", "small-1", "pas-gap", "speed-scaling", "paper-100-lognormal", "paper-100",
        "large-10k",
    ]  # fmt: skip
    assert all(s.farm.slo is None for s in load_suite("core").scenarios)


_SLEEP_TINY = {
    "name": "st",
    "groups": [
        {"name": "a", "count": 1, "service_rate": 1.0, "busy_power": 2.0, "idle_power": 1.0,
         "buffer": 2, "sleep": {"power": 0.1, "setup_rate": 1.0, "setup_power": 2.0,
                                "idle_timeout_rate": 1.0}},
        {"name": "b", "count": 1, "service_rate": 2.0, "busy_power": 5.0, "idle_power": 1.0,
         "buffer": 2},
    ],
    "job_types": [{"name": "j", "arrival_rate": 1.0, "groups": ["a", "b"]}],
    "job_size": {"distribution": "exponential"},
}  # fmt: skip


@pytest.mark.parametrize(
    ("entry", "match"),
    [
        ({"slo": {"mean_response_time": -1}}, r"slo\.mean_response_time: must be > 0"),
        ({"reference": "slo-optimum"}, r"'slo-optimum' needs a farm with an slo: block"),
        ({"reference": "sleep-optimum"}, r"'sleep-optimum' needs a farm with sleep: groups"),
        ({"reference": "best-known"}, r"reference_efficiency: 'best-known' needs"),
        ({"reference_efficiency": 0.3}, r"reference_efficiency: only with reference: best-known"),
        ({"farm": _SLEEP_TINY}, r"'bound' ignores right-sizing"),
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


def test_small_right_sizing_run_scores_against_the_sleep_optimum():
    data = {
        "suite": "sleep-test",
        "suite_version": "0-test",
        "defaults": {"replications": 3, "horizon": 3000, "warmup": 300},
        "scenarios": [
            {"name": "st", "farm": _SLEEP_TINY, "reference": "sleep-optimum", "seed": 7},
            {"name": "st-known", "farm": _SLEEP_TINY, "reference": "best-known",
             "reference_efficiency": 0.5, "seed": 8},
        ],
    }  # fmt: skip
    board, _ = run_suite(data, ["pas", "optimal"], workers=1, progress=False)
    farm = load_suite(data).scenarios[0].farm
    exact, _ = solve_sleep_optimum(SleepSpace(farm))
    sc = board["scenarios"]["st"]
    assert sc["reference"] == {"kind": "sleep-optimum", "efficiency": pytest.approx(exact)}
    # the base model's optimal policy ignores sleep modes: n/a, not a wrong "optimum"
    assert sc["policies"]["optimal"]["score"] is None
    assert sc["policies"]["pas"]["score"]["mean"] is not None
    known = board["scenarios"]["st-known"]["reference"]
    assert known == {"kind": "best-known", "efficiency": 0.5}
