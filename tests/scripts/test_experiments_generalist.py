"""experiments/generalist_eval.py on a small PAS-cloned generalist: exact rows that are
consistent with the optimum, a paired preset row, the outputs written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from experiments import generalist_eval


@pytest.fixture
def model(small_generalist: Path) -> Path:
    return small_generalist


def test_quick_run_is_exact_and_consistent(model: Path, tmp_path: Path) -> None:
    report = generalist_eval.main(["--quick", "--out", str(tmp_path), "--model", str(model)])
    rows = [r for r in report["rows"] if r["kind"] == "random" and "skipped" not in r]
    assert rows
    for r in rows:  # nothing beats the exact optimum; the gaps are what the values say
        assert r["optimum"] >= max(r["pas"], r["raw"], r["generalist"]) - 1e-9
        for who in ("raw", "generalist"):
            assert r[f"{who}_gap_pct"] == pytest.approx(
                100 * (r["optimum"] - r[who]) / r["optimum"]
            )
        assert r["generalist"] >= r["pas"] - 1e-9 and r["generalist_at_least_pas"]  # the guard
    (preset,) = [r for r in report["rows"] if r["kind"] == "preset"]
    assert preset["farm"] == "tiny" and preset["method"] == "exact"
    saved = json.loads((tmp_path / "generalist_eval.json").read_text())
    assert saved["summary"]["random_farms"] == len(rows)
    assert (tmp_path / "generalist_eval.png").stat().st_size > 0


def test_missing_model_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"nope\.pt and its sidecar"):
        generalist_eval.main(
            ["--quick", "--out", str(tmp_path), "--model", str(tmp_path / "nope.pt")]
        )
