"""Response time in evaluate.py's exact table, JSON and CSV."""

from __future__ import annotations

import csv

import pytest

import evaluate
from baselines.ctmc import evaluate_policy
from envs.scenarios import load_scenario
from evaluation.harness import evaluate_exact
from evaluation.report import csv_rows, format_table


def test_exact_report_has_response_time():
    rep = evaluate_exact("tiny", ["pas", "optimal"])
    et = evaluate_policy(load_scenario("tiny"), "pas").mean_response_time
    assert rep["policies"]["pas"]["mean_response_time"]["mean"] == pytest.approx(et, rel=1e-12)
    assert rep["optimum"]["mean_response_time"] > 0
    assert "E[T]" in format_table(rep)
    row = {r["policy"]: r for r in csv_rows(rep)}["pas"]
    assert row["mean_response_time_mean"] == pytest.approx(et, rel=1e-12)


def test_exact_cli_writes_response_time_column(tmp_path):
    out = tmp_path / "t.csv"
    assert (
        evaluate.main(["tiny", "--exact", "--policies", "pas", "--csv", str(out), "--quiet"]) == 0
    )
    rows = list(csv.DictReader(out.open()))
    assert float(rows[0]["mean_response_time_mean"]) > 0
