"""Response time in evaluate.py's exact table, JSON and CSV."""

from __future__ import annotations

import csv

import pytest

import evaluate
from serverfarm_gym.baselines.solvers.ctmc import evaluate_policy
from serverfarm_gym.envs.scenarios import load_scenario
from serverfarm_gym.evaluation.outputs import csv_rows, format_table
from serverfarm_gym.evaluation.policy_report import evaluate_exact


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


def test_exact_report_of_the_randomised_slo_policies():
    """slo-optimal and slo-mix randomise: exact on the aggregated chain, with their own values."""
    from serverfarm_gym.baselines.registry import make_policy
    from serverfarm_gym.envs.config import farm_from_dict

    d = load_scenario("tiny").to_dict()
    d["slo"] = {"mean_response_time": 0.9}
    cfg = farm_from_dict(d)
    rep = evaluate_exact(cfg, ["pas", "slo-priority", "slo-mix", "slo-optimal"])
    pol = rep["policies"]
    assert not rep["skipped"]
    opt, mix = make_policy("slo-optimal", cfg), make_policy("slo-mix", cfg)
    assert pol["slo-optimal"]["route"] == "exact (aggregated chain)"
    assert pol["slo-optimal"]["efficiency"]["mean"] == pytest.approx(opt.value, rel=1e-8)
    assert pol["slo-optimal"]["mean_response_time"]["mean"] == pytest.approx(0.9, rel=1e-7)
    assert pol["slo-mix"]["efficiency"]["mean"] == pytest.approx(mix.efficiency, rel=1e-10)
    assert pol["slo-mix"]["mean_response_time"]["mean"] <= 0.9
    assert pol["slo-priority"]["route"] == "exact"  # a deterministic priority table
    assert pol["slo-priority"]["mean_response_time"]["mean"] <= 0.9
    eff = pol["slo-optimal"]["efficiency"]["mean"]
    assert pol["slo-priority"]["efficiency"]["mean"] <= pol["slo-mix"]["efficiency"]["mean"] <= eff
