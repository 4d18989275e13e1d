"""agents.run_report.format_report: the comparison lines .ci/run greps hold for a model that
measures at the optimum (its exact efficiency can exceed the optimum's by float rounding)."""

from __future__ import annotations

import re

from agents.run_report import format_report

GAP_LINE = r"^  PPO vs PAS: [+-][0-9.]*%   gap to optimum: [0-9.]*%"  # as in .ci/run


def _summary(gap_to_optimum: float) -> dict:
    est = {"efficiency": 0.328931, "method": "exact", "ci95": 0.0}
    return {
        "scenario": "tiny", "action_mode": "server", "seed": 0, "timesteps": 4096,
        "learn_wall_s": 1.0, "total_wall_s": 2.0, "total_cpu_s": 2.0,
        "references": {"pas": est | {"efficiency": 0.327338}, "optimum": 0.328931,
                       "upper_bound": None},
        "best": est | {"timesteps": 4096, "gap_to_pas_pct": 0.487,
                       "gap_to_optimum_pct": gap_to_optimum, "pas_gap_closed": 1.0,
                       "gap_to_bound_pct": None, "path": "runs/x/best_model.zip"},
        "final": est | {"path": "runs/x/final_model.zip"},
        "paths": {"tensorboard": None, "evaluations": "e.jsonl", "run_dir": "runs/x"},
    }  # fmt: skip


def test_a_model_at_the_optimum_prints_a_zero_gap() -> None:
    text = format_report(_summary(-1.7e-13))
    assert "gap to optimum: 0.000%" in text and "-0.000" not in text
    assert any(re.search(GAP_LINE, line) for line in text.splitlines())


def test_a_positive_gap_is_printed_as_measured() -> None:
    assert "gap to optimum: 0.191%" in format_report(_summary(0.19149))
