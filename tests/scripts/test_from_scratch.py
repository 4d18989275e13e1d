"""experiments/studies/from_scratch.py without training: the milestones of a curve (first step at or
above each share of the optimum, censored runs), the stratified bootstrap, and that a rerun
skips the cells already written (resumable) and reports only rows with enough seeds."""

from __future__ import annotations

import json

import numpy as np
import pytest

from experiments.studies import from_scratch as fs


def test_milestones_are_the_first_evaluation_at_or_above_each_share() -> None:
    cell = {"curve": [(0, 0.0, 0.90), (2048, 1.0, 0.991), (4096, 2.0, 0.9995), (6144, 3.0, 0.98)]}
    m = fs.milestones(cell, optimum=1.0)
    assert (m["steps_99"], m["cpu_99"]) == (2048, 1.0)
    assert (m["steps_99.9"], m["cpu_99.9"]) == (4096, 2.0)
    assert m["final_gap_pct"] == pytest.approx(2.0) and m["best_share"] == pytest.approx(0.9995)
    never = fs.milestones({"curve": [(0, 0.0, 0.5), (2048, 1.0, 0.95)]}, optimum=1.0)
    assert never["steps_99"] is None and never["cpu_99.9"] is None


def test_the_bootstrap_resamples_runs_within_each_task() -> None:
    scores = np.array([[0.0, 10.0], [1.0, 11.0], [2.0, 12.0]])  # runs x tasks
    boots = fs.stratified_bootstrap(scores, lambda x: (x[:, 0].max(), x[:, 1].min()), reps=200)
    assert set(boots[:, 0]) <= {0.0, 1.0, 2.0} and set(boots[:, 1]) <= {10.0, 11.0, 12.0}
    p, lo, hi = fs.iqm_ci(np.arange(10.0)[:, None])
    assert p == pytest.approx(4.5) and lo <= p <= hi


def test_a_rerun_skips_finished_cells_and_reports_full_rows(tmp_path, monkeypatch, capsys) -> None:
    calls = []

    def fake(config, seed, steps):
        calls.append(seed)
        return [(0, 0.0, 0.30), (2048, 0.5, 0.3289)]

    monkeypatch.setitem(fs.RUNNERS, "ppo", fake)
    monkeypatch.setitem(fs.RUNNERS, "sb3", fake)
    argv = ["--scenarios", "tiny", "--trainers", "ppo", "--seeds", "3", "--steps", "2048",
            "--out", str(tmp_path), "--min-seeds", "3"]  # fmt: skip
    agg = fs.main(argv)
    assert calls == [0, 1, 2] and agg["rows"][0]["n"] == 3
    assert json.loads(fs.cell_path(tmp_path, "tiny", "ppo", 1).read_text())["seed"] == 1
    fs.main([*argv[:-2], "--min-seeds", "3", "--seeds", "4"])  # one more seed: only it runs
    assert calls == [0, 1, 2, 3]
    fs.main([*argv[:3], "sb3", "--seeds", "2", *argv[6:-2], "--min-seeds", "2"])
    agg = fs.main([*argv[:-1], "4", "--report"])
    assert [(r["trainer"], r["n"]) for r in agg["rows"]] == [("ppo", 4)]
    assert "not reported (fewer than 4 seeds): tiny/sb3 (2 seeds)" in capsys.readouterr().out


def test_the_rows_file_is_what_the_suite_leaderboard_takes(tmp_path, monkeypatch) -> None:
    from serverfarm_gym.evaluation.leaderboard import load_learned_rows
    from serverfarm_gym.evaluation.suite import load_suite

    finals = iter([0.3289, 0.3250, 0.3270])

    def fake(config, seed, steps):
        return [(0, 0.0, 0.30), (2048, 0.5, next(finals))]

    monkeypatch.setitem(fs.RUNNERS, "ppo", fake)
    argv = ["--scenarios", "tiny", "--trainers", "ppo", "--seeds", "3", "--steps", "2048",
            "--out", str(tmp_path), "--min-seeds", "3"]  # fmt: skip
    fs.main(argv)
    data = json.loads((tmp_path / fs.ROWS_FILE).read_text())
    assert (data["schema"], data["suite"]) == (fs.ROWS_SCHEMA, "core")
    (row,) = load_learned_rows([tmp_path / fs.ROWS_FILE], load_suite("core"))
    assert row["label"] == "ppo (from scratch, 3 seeds, 2,048 steps)"
    assert (row["scenario"], row["seeds"], row["steps"]) == ("tiny", [0, 1, 2], 2048)
    iqm, lo, hi = row["efficiency"]
    # three seeds: the IQM (rliable) of 0.325, 0.327, 0.3289 weights the middle one fully
    assert lo <= iqm <= hi and 0.325 <= iqm <= 0.3289
    assert row["reference"] == pytest.approx(json.loads(
        (tmp_path / "from_scratch.json").read_text())["references"]["tiny"]["optimum"])  # fmt: skip
