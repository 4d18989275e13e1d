"""serverfarm_gym.agents.common.run_report.format_report: the lines .ci/run greps, pinned for both outcomes of a run
(the start kept: PPO found no improvement; PPO's model kept, with its change from the start),
and a model that measures at the optimum (its exact efficiency can exceed the optimum's by
float rounding)."""

from __future__ import annotations

import json
import re

import pytest

from serverfarm_gym.agents.common.run_report import (
    MIN_SHARE,
    check_against_start,
    check_learning,
    describe_learning,
    format_report,
    learning_progress,
    main,
)

# the patterns .ci/run greps (the exact line formats of the report)
START_LINE = r"^  start \([a-z-]+ (clone|init)\) +efficiency [0-9.]+ \(exact\)$"
KEPT_START_LINE = r"^  kept: the start \([a-z-]+ (clone|init)\); PPO found no improvement$"
PPO_LINE = r"^  PPO \(best model, [0-9,]+ steps\) +efficiency [0-9.]+ \(exact\)$"
CHANGE_LINE = r"^  PPO's change from the start: [+-][0-9.]+(, i\.e\.| \+- [0-9.]+, i\.e\.) "
GAP_LINE = r"^  (PPO|start) vs PAS: [+-][0-9.]+%   gap to optimum: [0-9.]+%"


def _summary(gap_to_optimum: float, best_steps: int = 4096, kept: str = "ppo") -> dict:
    est = {"efficiency": 0.328931, "method": "exact", "ci95": 0.0}
    start = {
        "teacher": "best-priority",
        "timesteps": 0,
        "efficiency": 0.327338,
        "ci95": 0.0,
        "method": "exact",
        "measured_on": "exact",
    }
    change = {
        "candidate": 0.328931,
        "reference": 0.327338,
        "diff": 0.001593,
        "ci95": 0.0,
        "gap_pct": 0.48666,
        "gap_pct_ci95": 0.0,
        "n": 0,
        "method": "exact",
        "verdict": "better",
    }
    return {
        "scenario": "tiny", "action_mode": "server", "seed": 0, "timesteps": 4096,
        "learn_wall_s": 1.0, "total_wall_s": 2.0, "total_cpu_s": 2.0,
        "started_from": "best-priority", "start": start, "kept": kept,
        "ppo_change": change if kept == "ppo" else None,
        "references": {"pas": est | {"efficiency": 0.327338}, "optimum": 0.328931,
                       "upper_bound": None},
        "best": est | {"timesteps": best_steps, "gap_to_pas_pct": 0.487,
                       "gap_to_optimum_pct": gap_to_optimum, "pas_gap_closed": 1.0,
                       "gap_to_bound_pct": None, "path": "runs/x/best_model.zip"},
        "final": est | {"path": "runs/x/final_model.zip"},
        "verdict": "+0.487% (exact): better than PAS",
        "paths": {"tensorboard": None, "evaluations": "e.jsonl", "run_dir": "runs/x"},
    }  # fmt: skip


def _kept_start() -> dict:
    s = _summary(0.484, best_steps=0, kept="start")
    s["best"] |= {"efficiency": 0.327338, "gap_to_pas_pct": 0.0, "pas_gap_closed": 0.0}
    s["start"] |= {"measured_on": "final window"}
    s["verdict"] = "+0.000% (exact): equal to PAS"
    return s


def _matches(pattern: str, text: str) -> list[str]:
    return [line for line in text.splitlines() if re.search(pattern, line)]


def test_a_kept_start_is_reported_as_the_start_never_as_ppo() -> None:
    text = format_report(_kept_start())
    assert _matches(START_LINE, text) == [
        "  start (best-priority clone)    efficiency 0.327338 (exact)"
    ]
    assert _matches(KEPT_START_LINE, text) == [
        "  kept: the start (best-priority clone); PPO found no improvement"
    ]
    assert _matches(GAP_LINE, text) == [
        "  start vs PAS: +0.000%   gap to optimum: 0.484%   share of PAS's gap closed: 0%"
    ]
    assert "  verdict: the start (best-priority clone) vs PAS +0.000% (exact): equal to PAS" in (
        text.splitlines()
    )
    assert not _matches(PPO_LINE, text) and not _matches(CHANGE_LINE, text)
    assert "PPO (best model" not in text and "PPO vs PAS" not in text


def test_an_improving_ppo_model_is_reported_with_its_change_from_the_start() -> None:
    text = format_report(_summary(0.0))
    assert _matches(START_LINE, text) == [
        "  start (best-priority clone)    efficiency 0.327338 (exact)"
    ]
    assert _matches(PPO_LINE, text) == [
        "  PPO (best model, 4,096 steps)  efficiency 0.328931 (exact)"
    ]
    assert _matches(CHANGE_LINE, text) == [
        "  PPO's change from the start: +0.001593, i.e. +0.487% (exact): better than the start"
    ]
    assert _matches(GAP_LINE, text) == [
        "  PPO vs PAS: +0.487%   gap to optimum: 0.000%   share of PAS's gap closed: 100%"
    ]
    assert not _matches(KEPT_START_LINE, text)


def test_a_simulated_change_carries_its_paired_interval() -> None:
    s = _summary(0.0)
    s["ppo_change"] |= {"method": "paired", "ci95": 0.0004, "gap_pct_ci95": 0.12, "n": 32,
                        "diff": 0.001593}  # fmt: skip
    (line,) = _matches(CHANGE_LINE, format_report(s))
    assert line == (
        "  PPO's change from the start: +0.001593 +- 0.000400, i.e. +0.487% +- 0.120% "
        "(paired 95% CI, 32 replications): significantly better than the start"
    )


def test_an_sb3_summary_without_provenance_infers_a_random_start() -> None:
    s = _summary(0.0, best_steps=0)
    for key in ("started_from", "start", "kept", "ppo_change"):
        del s[key]
    s["trainer"] = "sb3"
    text = format_report(s)
    assert _matches(KEPT_START_LINE, text) == [
        "  kept: the start (random init); PPO found no improvement"
    ]


def test_a_model_at_the_optimum_prints_a_zero_gap() -> None:
    text = format_report(_summary(-1.7e-13))
    assert "gap to optimum: 0.000%" in text and "-0.000" not in text
    assert _matches(GAP_LINE, text)


def test_a_positive_gap_is_printed_as_measured() -> None:
    assert "gap to optimum: 0.191%" in format_report(_summary(0.19149))


def test_the_check_passes_a_result_at_or_above_its_start() -> None:
    assert check_against_start(_kept_start(), final_too=True) == []
    assert check_against_start(_summary(0.0), final_too=True) == []


def test_the_check_fails_a_result_below_its_start() -> None:
    s = _summary(0.0)
    s["ppo_change"] |= {"diff": -0.0002, "gap_pct": -0.06, "verdict": "worse"}
    (msg,) = check_against_start(s)
    assert msg.startswith("the kept model is below its start: -0.000200")
    s = _kept_start()
    s["final"] |= {"efficiency": 0.3270}
    assert check_against_start(s) == []  # the final model only with final_too
    (msg,) = check_against_start(s, final_too=True)
    assert msg == "the final model (0.327000) is below its start (0.327338)"


def test_the_check_command_exits_1_below_the_start(tmp_path, capsys) -> None:
    s = _kept_start()
    s["final"] |= {"efficiency": 0.3270}
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(s))
    assert main(["--check", str(path)]) == 0
    assert main(["--check", str(path), "--final-too"]) == 1
    assert "is below its start" in capsys.readouterr().err


def _slo_summary(kept_steps: int = 0, kept_eff: float = 0.319982, met: bool = True) -> dict:
    """A tiny-slo summary (its numbers from ``train.py --scenario tiny-slo``): the SLO block,
    the argmax lines measured against the unconstrained references."""
    s = _kept_start() if kept_steps == 0 else _summary(2.3, best_steps=kept_steps)
    s |= {"scenario": "tiny-slo", "started_from": "slo-optimal", "verdict": "-1.863% (exact)"}
    s["start"] |= {"teacher": "slo-optimal"}
    s["best"] |= {"gap_to_optimum_pct": 2.338, "gap_to_pas_pct": -1.863}

    def est(eff: float, et: float, ok: bool) -> dict:
        return {"efficiency": eff, "ci95": 0.0, "mean_response_time": et,
                "mean_response_time_ci95": 0.0, "method": "exact", "slo": 0.9, "slo_met": ok}  # fmt: skip

    start = est(0.319982, 0.8964, True)
    kept = start if kept_steps == 0 else est(kept_eff, 0.8991 if met else 0.95, met)
    s["slo"] = {
        "mean_response_time_bound": 0.9, "start": start,
        "kept": kept | {"timesteps": kept_steps}, "kept_is_start": kept_steps == 0,
        "optimum": {"efficiency": 0.320270, "mean_response_time": 0.9, "source": "exact"},
        "gap_to_optimum_pct": 100 * (0.320270 - kept["efficiency"]) / 0.320270,
        "multiplier": {"step_size": 1.111, "final": 1.0855, "rollouts": [[4096, 0.88, 1.09]] * 2},
    }  # fmt: skip
    return s


def test_an_slo_run_leads_with_its_slo_block_and_names_the_unconstrained_references() -> None:
    lines = format_report(_slo_summary()).splitlines()
    assert lines[2:8] == [
        "  SLO E[T] <= 0.9: the sampling policies (the network's, not its argmax)",
        "    start                        efficiency 0.319982 at E[T] 0.8964 (exact; meets the SLO)",
        "    kept: the start; PPO found no improvement that meets the SLO",
        "    SLO-constrained optimum      efficiency 0.320270 at E[T] 0.9000 (exact)",
        "    gap of the kept model to the SLO-constrained optimum: 0.090%",
        "    multiplier beta: final 1.085 after 2 rollouts (dual ascent step 1.111)",
    ]
    text = "\n".join(lines)
    # the unconstrained optimum's gap is never the headline: not the CI's gap line, and named
    assert not _matches(GAP_LINE, text)
    assert "  start vs PAS (no SLO): -1.863%   gap to the optimum without the SLO: 2.338%" in text
    assert "  optimum (no SLO)               efficiency 0.328931 (exact)" in lines


def test_an_slo_run_keeping_a_ppo_model_reports_its_measure() -> None:
    text = format_report(_slo_summary(kept_steps=8192, kept_eff=0.320100))
    assert (
        "    kept (8,192 steps)           efficiency 0.320100 at E[T] 0.8991 (exact; meets the SLO)"
        in text.splitlines()
    )
    assert "gap of the kept model to the SLO-constrained optimum: 0.053%" in text


def test_the_check_of_an_slo_run_judges_its_slo_block(tmp_path, capsys) -> None:
    assert check_against_start(_slo_summary()) == []
    # a deterministic policy below the start's is no failure where the SLO selection kept it
    ok = _slo_summary(kept_steps=8192, kept_eff=0.320100)
    ok["ppo_change"] |= {"diff": -0.0002, "gap_pct": -0.06, "verdict": "worse"}
    assert check_against_start(ok) == []
    (msg,) = check_against_start(_slo_summary(kept_steps=8192, kept_eff=0.3199))
    assert msg == (
        "the kept model's sampling policy (0.319900) is below its start's (0.319982), which "
        "meets the SLO"
    )
    (msg,) = check_against_start(_slo_summary(kept_steps=8192, kept_eff=0.3201, met=False))
    assert msg == "the kept model misses the SLO: E[T] 0.9500 > 0.9"
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(_slo_summary()))
    assert main(["--check", str(path)]) == 0
    assert "meets the SLO E[T] <= 0.9 (E[T] 0.8964, exact)" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:  # the final model's sampling policy is not measured
        main(["--check", str(path), "--final-too"])
    assert exc.value.code == 2 and "--final-too: an SLO run" in capsys.readouterr().err


# the learning lines (a farm with an exact optimum), new in the report
LEARNING_LINE = (
    r"^  learning: share of the optimum at the first evaluations \(steps\) [0-9.]+% \(0\)"
    r"(, [0-9.]+% \([0-9,]+\))*; at the end [0-9.]+% \([0-9,]+\)$"
)
STEPS_TO_LINE = (
    r"^  steps to the optimum's share \(first evaluation there\) to 99%: ([0-9,]+ steps|not "
    r"reached in [0-9,]+ steps); to 99\.9%: ([0-9,]+ steps|not reached in [0-9,]+ steps)$"
)
SHARES_LINE = r"^  kept model [0-9.]+% of the optimum, final model [0-9.]+%$"


def _history(shares: list[float], every: int = 2048) -> list[dict]:
    return [{"timesteps": i * every, "efficiency": sh * 0.328931} for i, sh in enumerate(shares)]


def test_the_learning_block_names_the_first_shares_and_the_steps_to_each_threshold() -> None:
    s = _summary(0.0)
    block = learning_progress(s, _history([0.92, 0.995, 0.9992, 0.998, 1.0]))
    assert block["first"] == [(0, pytest.approx(0.92)), (2048, pytest.approx(0.995)),
                              (4096, pytest.approx(0.9992))]  # fmt: skip
    assert block["steps_to"] == {"0.99": 2048, "0.999": 4096}
    assert block["kept_share"] == pytest.approx(1.0) and block["min_share"] == MIN_SHARE
    s["learning"] = block
    text = format_report(s)
    for pattern in (LEARNING_LINE, STEPS_TO_LINE, SHARES_LINE):
        assert len(_matches(pattern, text)) == 1, pattern
    never = learning_progress(s, _history([0.9, 0.95]))
    assert never["steps_to"] == {"0.99": None, "0.999": None}
    assert "to 99%: not reached in 2,048 steps" in "\n".join(describe_learning(never))
    # no optimum (a simulated farm), or an SLO run: no block
    assert learning_progress(s | {"references": s["references"] | {"optimum": None}}, []) is None


def test_the_check_fails_a_kept_or_final_model_below_99_percent_of_the_optimum(
    tmp_path, capsys
) -> None:
    s = _summary(0.0)
    s["learning"] = learning_progress(s, _history([0.92, 1.0]))
    assert check_learning(s) == []
    s["final"] |= {"efficiency": 0.985 * 0.328931}
    s["learning"] = learning_progress(s, _history([0.92, 1.0]))
    (msg,) = check_learning(s)
    assert msg == "the final model has 98.500% of the exact optimum, below 99%"
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(s))
    assert main(["--check", str(path)]) == 1
    assert "below 99%" in capsys.readouterr().err
