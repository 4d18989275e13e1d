"""experiments/from_scratch_scale.py: the table's counting on hand-made cells, and one short run
end to end (a cell with its curve, its final measurement against PAS and its decisions)."""

from __future__ import annotations

import json

import pytest

from experiments import from_scratch_scale as fss


def _cell(seed: int, gaps: list[tuple[float, float]]) -> dict:
    finals = [
        {"steps": 2_000_000 * (i + 1), "train_cpu_s": 10.0 * (i + 1), "efficiency": 0.38,
         "paired_gap_to_pas_pct": {"mean": m, "ci95": h},
         "paired_gap_to_best_priority_pct": {"mean": m - 0.3, "ci95": h},
         "gap_to_bound_pct": 1.0 - m}
        for i, (m, h) in enumerate(gaps)
    ]  # fmt: skip
    return {"scenario": "paper-100", "seed": seed, "bound": 0.4,
            "final_refs": {"pas": 0.39, "best-priority": 0.391}, "finals": finals,
            "points": [{"steps": 0, "efficiency": 0.37, "train_cpu_s": 0.0}],
            "curve_refs": {"pas": 0.39, "best-priority": 0.391}}  # fmt: skip


def test_table_counts_seeds_at_pas_by_the_paired_interval() -> None:
    # seed 0: below PAS (interval below 0); seed 1: interval covers 0; seed 2: above
    cells = [_cell(0, [(-0.5, 0.1)]), _cell(1, [(-0.05, 0.1)]), _cell(2, [(0.3, 0.1)])]
    row = fss.markdown_table(cells).splitlines()[2]
    assert row.startswith("| paper-100 | 2,000,000 | 3 |")
    assert "| 2/3 (1) |" in row  # at PAS or above: seeds 1 and 2; strictly above: seed 2
    assert "-0.50 +- 0.10; -0.05 +- 0.10; +0.30 +- 0.10" in row
    assert f"| {100 * (0.4 - 0.39) / 0.4:.2f} |" in row  # PAS's own gap to the bound


def test_one_budget_row_per_mark() -> None:
    rows = fss.markdown_table([_cell(0, [(-1.0, 0.1), (-0.5, 0.1)])]).splitlines()[2:]
    assert [r.split(" | ")[1] for r in rows] == ["2,000,000", "4,000,000"]


@pytest.mark.slow
def test_short_run_writes_a_cell(tmp_path) -> None:
    fss.main(["--scenarios", "paper-100", "--seeds", "1", "--marks", "16384",
              "--eval-first", "16384", "--curve-durations", "2", "--curve-reps", "2",
              "--final-durations", "2", "--final-reps", "2", "--out", str(tmp_path)])  # fmt: skip
    cell = json.loads((tmp_path / "cells" / "paper-100-s0.json").read_text())
    assert cell["settings"]["pas_anchor"] == 0.0 and cell["finals"][0]["steps"] == 16_384
    assert cell["points"][0]["steps"] == 0 and cell["points"][-1]["steps"] == 16_384
    assert 0.0 <= cell["decisions"]["same_group_share"] <= 1.0
    assert (tmp_path / "scale_curves.png").exists()
