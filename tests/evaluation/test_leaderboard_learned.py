"""Learned rows on the suite leaderboard (``evaluate.py --suite S --learned PATH``): a rows file
merged into a small suite run, scored like the other columns, and bad files refused by name."""

from __future__ import annotations

import copy
import csv
import json
import re

import pytest
import yaml

import evaluate
from serverfarm_gym.evaluation.leaderboard import LEARNED_SCHEMA, load_learned_rows
from serverfarm_gym.evaluation.suite import parse_suite

# two small farms, short windows (as tests/evaluation/test_suite.py's smoke run)
SUITE = {
    "suite": "test-learned",
    "suite_version": "0-test",
    "defaults": {"replications": 3, "horizon": 2000, "warmup": 200},
    "scenarios": [
        {"name": "tiny", "farm": "tiny", "reference": "optimum", "seed": 21},
        {"name": "pas-gap", "farm": "pas-gap", "reference": "optimum", "seed": 22},
    ],
}
LABEL = "ppo (from scratch, 3 seeds, 2,048 steps)"
ROWS = {
    "schema": LEARNED_SCHEMA,
    "suite": "test-learned",
    "suite_version": "0-test",
    "rows": [
        {"label": LABEL, "scenario": "tiny", "seeds": [0, 1, 2], "steps": 2048,
         "efficiency": {"iqm": 0.3, "ci95_low": 0.29, "ci95_high": 0.305}},
    ],
}  # fmt: skip


def _files(tmp_path, rows=ROWS):
    suite_file, rows_file = tmp_path / "suite.yaml", tmp_path / "rows.json"
    suite_file.write_text(yaml.safe_dump(SUITE))
    rows_file.write_text(json.dumps(rows))
    return suite_file, rows_file


def test_learned_rows_become_a_scored_column(tmp_path):
    suite_file, rows_file = _files(tmp_path)
    out = tmp_path / "board"
    rc = evaluate.main(
        ["--suite", str(suite_file), "--policies", "pas,random", "--learned", str(rows_file),
         "--out", str(out), "--workers", "1", "--quiet"]
    )  # fmt: skip
    assert rc == 0
    board = json.loads((out / "leaderboard.json").read_text())
    tiny, gap = board["scenarios"]["tiny"], board["scenarios"]["pas-gap"]
    assert list(tiny["policies"]) == ["pas", "random", LABEL]
    entry = tiny["policies"][LABEL]
    rand = tiny["policies"]["random"]["efficiency"]["mean"]
    ref = tiny["reference"]["efficiency"]

    def score(x):  # the suite's formula, with this run's random mean and reference
        return 100.0 * (x - rand) / (ref - rand)

    assert entry["efficiency"] == {"mean": 0.3, "ci95": None, "ci95_low": 0.29, "ci95_high": 0.305}
    assert entry["score"]["mean"] == pytest.approx(score(0.3))
    assert entry["score"]["ci95_low"] == pytest.approx(score(0.29))
    assert entry["score"]["ci95_high"] == pytest.approx(score(0.305))
    assert entry["seeds"] == [0, 1, 2] and entry["steps"] == 2048
    assert gap["policies"][LABEL]["score"] is None  # not in the file: n/a
    assert board["mean_score"][LABEL] == {"mean": None, "ci95": None}
    assert board["learned"][LABEL] == {"sources": [str(rows_file)], "scenarios": ["tiny"]}
    md = (out / "leaderboard.md").read_text()
    assert LABEL in md and f"n/a: {LABEL} on pas-gap: no row for this scenario" in md
    assert f"{score(0.3):.1f} [{score(0.29):.1f}, {score(0.305):.1f}]" in md
    rows = list(csv.DictReader((out / "leaderboard.csv").open()))
    mine = [r for r in rows if r["policy"] == LABEL]
    assert [r["scenario"] for r in mine] == ["tiny", "pas-gap", "mean"]
    assert float(mine[0]["score_ci95_low"]) == pytest.approx(score(0.29))
    assert mine[0]["source"] == str(rows_file) and mine[1]["score_mean"] == ""
    assert (out / "leaderboard.png").read_bytes()[:4] == b"\x89PNG"


def _patched(change):
    rows = copy.deepcopy(ROWS)
    change(rows)
    return rows


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.pop("schema"), "schema must be"),
        (lambda d: d.update(suite="core"), "rows for suite 'core'"),
        (lambda d: d.update(suite_version="9"), "rows for suite_version '9'"),
        (lambda d: d.update(rows=[]), "'rows' must be a non-empty list"),
        (lambda d: d["rows"][0].pop("steps"), "rows[0]: missing keys ['steps']"),
        (lambda d: d["rows"][0].update(scenario="paper-100"), "rows[0].scenario: 'paper-100'"),
        (lambda d: d["rows"][0]["efficiency"].update(iqm=float("nan")), "efficiency.iqm: expected a finite"),
        (lambda d: d["rows"][0]["efficiency"].update(ci95_high=0.1), "ci95_low <= iqm <= ci95_high"),
        (lambda d: d["rows"][0].update(seeds=[]), "rows[0].seeds"),
        (lambda d: d["rows"][0].update(mean_response_time={"iqm": 1.0}), "mean_response_time: needs keys"),
        (lambda d: d["rows"][0].update(mean_response_time={"iqm": 1.0, "ci95_low": 1.1, "ci95_high": 1.2}),
         "mean_response_time: needs ci95_low <= iqm"),
        (lambda d: d["rows"][0].update(label=""), "rows[0].label"),
        (lambda d: d["rows"].append(d["rows"][0]), f"a second row for {LABEL!r} on tiny"),
    ],
)  # fmt: skip
def test_bad_rows_files_name_the_field(tmp_path, change, message):
    _, rows_file = _files(tmp_path, _patched(change))
    with pytest.raises(ValueError, match="--learned .*" + re.escape(message)):
        load_learned_rows([rows_file], parse_suite(SUITE, "suite.yaml"))


def test_cli_refuses_bad_files_before_running(tmp_path, capsys):
    suite_file, rows_file = _files(tmp_path, _patched(lambda d: d["rows"][0].pop("label")))
    argv = ["--suite", str(suite_file), "--policies", "pas", "--workers", "1", "--quiet"]
    assert evaluate.main([*argv, "--learned", str(rows_file)]) == 2
    assert "missing keys ['label']" in capsys.readouterr().err
    assert evaluate.main([*argv, "--learned", str(tmp_path / "absent.json")]) == 2
    assert "cannot read the file" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("{not json")
    assert evaluate.main([*argv, "--learned", str(tmp_path / "bad.json")]) == 2
    assert "not JSON" in capsys.readouterr().err
    _, rows_file = _files(tmp_path, _patched(lambda d: d["rows"][0].update(label="pas")))
    assert evaluate.main([*argv, "--learned", str(rows_file)]) == 2
    assert "already name a policy" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # --learned without --suite: a usage error
        evaluate.main(["tiny", "--learned", str(rows_file)])
    assert e.value.code == 2
