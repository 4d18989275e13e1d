"""Benchmark suites (evaluation/suite.py, evaluation/leaderboard.py, ``evaluate.py --suite``)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import yaml

import evaluate
from serverfarm_gym.envs.scenarios import load_scenario
from serverfarm_gym.evaluation.stats import t_quantile
from serverfarm_gym.evaluation.suite import (
    load_suite,
    mean_of_scores,
    normalized_score,
    parse_suite,
    ppo_applicability,
)

# Two small farms with exact optima, short windows: the smoke run goes through the CLI's code path.
TINY_SUITE = {
    "suite": "test-tiny",
    "suite_version": "0-test",
    "defaults": {"replications": 5, "horizon": 2000, "warmup": 200},
    "scenarios": [
        {"name": "tiny", "farm": "tiny", "reference": "optimum", "seed": 11},
        {"name": "pas-gap", "farm": "pas-gap", "reference": "optimum", "seed": 12},
    ],
}


def _check_stat(s, allow_none=False):
    assert set(s) == {"mean", "ci95"}
    if allow_none and s["mean"] is None:
        return
    assert isinstance(s["mean"], float) and isinstance(s["ci95"], float) and s["ci95"] >= 0


def test_suite_smoke_cli_schema_scores_and_files(tmp_path):
    suite_file = tmp_path / "suite.yaml"
    suite_file.write_text(yaml.safe_dump(TINY_SUITE))
    out = tmp_path / "board"
    rc = evaluate.main(
        ["--suite", str(suite_file), "--policies", "pas,optimal,random", "--out", str(out),
         "--workers", "1", "--quiet"]
    )  # fmt: skip
    assert rc == 0
    for ext in ("json", "md", "csv", "png"):
        assert (out / f"leaderboard.{ext}").stat().st_size > 0
    assert (out / "leaderboard.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    board = json.loads((out / "leaderboard.json").read_text())

    # the documented shape, exactly
    assert set(board) == {"suite", "suite_version", "scenarios", "mean_score"}
    assert board["suite"] == "test-tiny" and board["suite_version"] == "0-test"
    assert list(board["scenarios"]) == ["tiny", "pas-gap"]
    policies = ["pas", "optimal", "random"]
    for name, sc in board["scenarios"].items():
        assert set(sc) == {"n_servers", "reference", "policies"}
        assert sc["n_servers"] == load_scenario(name).n_servers
        assert set(sc["reference"]) == {"kind", "efficiency"}
        assert sc["reference"]["kind"] == "optimum"
        assert list(sc["policies"]) == policies
        for entry in sc["policies"].values():
            assert set(entry) == {"efficiency", "score", "mean_response_time"}
            _check_stat(entry["mean_response_time"])
            _check_stat(entry["efficiency"])
            _check_stat(entry["score"])
        # random scores 0 by construction (paired with itself: every difference is 0)
        assert sc["policies"]["random"]["score"] == {"mean": 0.0, "ci95": 0.0}
        # the exact optimal policy scores 100 within its interval (two scenarios: each checked
        # at 99%, the same interval widened by the ratio of the t quantiles)
        opt = sc["policies"]["optimal"]["score"]
        widen = t_quantile(0.99, 5) / t_quantile(0.95, 5)
        assert abs(opt["mean"] - 100.0) <= widen * opt["ci95"], (name, opt)
    assert list(board["mean_score"]) == policies
    for s in board["mean_score"].values():
        _check_stat(s)
    md = (out / "leaderboard.md").read_text()
    assert (
        "| tiny | 4 | optimum |" in md and "| pas-gap | 6 | optimum |" in md and "mean score" in md
    )
    csv_lines = (out / "leaderboard.csv").read_text().splitlines()
    assert len(csv_lines) == 1 + 2 * 3 + 3


def test_shipped_core_suite_loads_and_validates():
    suite = load_suite("core")
    assert suite.name == "core" and suite.version
    names = suite.scenario_names()
    assert len(names) >= 6
    for required in ("tiny", "pas-gap", "speed-scaling", "paper-100", "large-10k"):
        assert required in names
    by = {s.name: s for s in suite.scenarios}
    assert by["large-10k"].farm.n_servers == 10_000
    assert any(not s.farm.all_exponential for s in suite.scenarios)  # general job sizes
    assert {s.reference for s in suite.scenarios} == {"optimum", "bound"}
    assert len({s.seed for s in suite.scenarios}) == len(names)
    for s in suite.scenarios:
        assert s.replications >= 2 and s.horizon > s.warmup >= 0


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"suite_version": None}, "suite_version"),
        ({"bogus": 1}, "unknown key"),
        ({"scenarios": []}, "non-empty list"),
        ({"scenarios": [{"name": "a", "farm": "tiny", "reference": "optimum"}]}, "seed"),
        ({"scenarios": [{"name": "a", "farm": "nope", "reference": "bound", "seed": 1}]}, "preset"),
        ({"scenarios": [{"name": "a", "farm": "tiny", "reference": "exact", "seed": 1}]}, "reference"),
        ({"scenarios": [{"name": "a", "farm": "tiny", "reference": "bound", "seed": 1},
                        {"name": "a", "farm": "tiny", "reference": "bound", "seed": 2}]}, "twice"),
        ({"scenarios": [{"name": "a", "farm": "tiny", "reference": "bound", "seed": 1},
                        {"name": "b", "farm": "tiny", "reference": "bound", "seed": 1}]}, "seeds"),
        ({"scenarios": [{"name": "a", "farm": "tiny", "reference": "optimum", "seed": 1,
                         "job_size": {"distribution": "lognormal", "scv": 4}}]}, "exponential"),
        ({"defaults": {"replications": 5, "horizon": 0, "warmup": 0}}, "horizon"),
    ],
)  # fmt: skip
def test_suite_file_errors_name_the_field(patch, message):
    data = {**TINY_SUITE, **patch}
    if data.get("suite_version") is None:
        data.pop("suite_version")
    with pytest.raises(ValueError, match=message):
        parse_suite(data, "s.yaml")


def test_normalized_score_formula_and_random_zero():
    rng = np.random.default_rng(0)
    r = 0.30 + 0.002 * rng.standard_normal(8)
    v = r + 0.02 + 0.001 * rng.standard_normal(8)
    s = normalized_score(v, r, 0.33)
    assert s["mean"] == pytest.approx(100 * (v.mean() - r.mean()) / (0.33 - r.mean()))
    assert normalized_score(r, r, 0.33) == {"mean": 0.0, "ci95": 0.0}
    with pytest.raises(ValueError, match="reference"):
        normalized_score(v, r, 0.29)


def test_normalized_score_interval_covers_at_the_nominal_rate():
    # synthetic paired replications with a known true score; the delta-method t interval should
    # cover it in 95% of 2000 experiments, within 3 binomial standard errors
    rng = np.random.default_rng(1)
    ref, m_r, m_v, n, trials = 0.33, 0.30, 0.32, 10, 2000
    true = 100 * (m_v - m_r) / (ref - m_r)
    cov = np.array([[4e-6, 1e-6], [1e-6, 2e-6]])
    draws = rng.multivariate_normal([m_v, m_r], cov, size=(trials, n))
    hits = 0
    for x in draws:
        s = normalized_score(x[:, 0], x[:, 1], ref)
        hits += abs(s["mean"] - true) <= s["ci95"]
    se = np.sqrt(0.95 * 0.05 / trials)
    assert abs(hits / trials - 0.95) <= 3 * se


def test_mean_of_scores_combines_in_quadrature():
    scores = [{"mean": 10.0, "ci95": 2.0}, {"mean": 50.0, "ci95": 4.0}]
    out = mean_of_scores(scores, [10, 5])
    se = np.hypot(2.0 / t_quantile(0.95, 10), 4.0 / t_quantile(0.95, 5)) / 2
    assert out["mean"] == 30.0 and out["ci95"] == pytest.approx(1.959963984540054 * se)
    assert mean_of_scores([scores[0], {"mean": None, "ci95": None}], [10, 10])["mean"] is None


def _fake_model(folder, scenario):
    # the suite decides applicability from the sidecar alone; the zip is never opened here
    folder.mkdir(parents=True)
    (folder / "best_model.zip").write_bytes(b"")
    cfg = load_scenario(scenario).to_dict()
    (folder / "best_model.json").write_text(json.dumps({"scenario": cfg, "action_mode": "server"}))


def test_ppo_applies_only_to_its_own_farm(tmp_path):
    suite = parse_suite(TINY_SUITE)
    _fake_model(tmp_path / "run", "tiny")
    for arg in (tmp_path / "run", tmp_path / "run" / "best_model.zip"):
        app = ppo_applicability(str(arg), suite)
        assert app["tiny"] == (f"ppo:{tmp_path / 'run' / 'best_model.zip'}", None)
        assert app["pas-gap"][0] is None and "another farm" in app["pas-gap"][1]
    # a directory of runs named after the scenarios
    _fake_model(tmp_path / "runs" / "pas-gap", "pas-gap")
    app = ppo_applicability(str(tmp_path / "runs"), suite)
    assert app["tiny"][0] is None and app["pas-gap"][0].endswith("pas-gap/best_model.zip")
    _fake_model(tmp_path / "other", "small-2")
    with pytest.raises(ValueError, match="none of suite"):
        ppo_applicability(str(tmp_path / "other"), suite)
    (tmp_path / "other" / "best_model.json").unlink()
    with pytest.raises(ValueError, match="sidecar"):
        ppo_applicability(str(tmp_path / "other"), suite)
    with pytest.raises(ValueError, match="no such file"):
        ppo_applicability(str(tmp_path / "missing"), suite)


def test_cli_refuses_fixed_options_and_unwritable_outputs_before_running(tmp_path, capsys):
    assert evaluate.main(["--suite", "core", "--horizon", "10", "--quiet"]) == 2
    assert "--horizon: fixed by the suite" in capsys.readouterr().err
    assert evaluate.main(["tiny", "--suite", "core", "--quiet"]) == 2
    assert evaluate.main(["--suite", "nope", "--quiet"]) == 2
    assert "neither a shipped suite" in capsys.readouterr().err
    (tmp_path / "afile").write_text("")
    assert evaluate.main(["--suite", "core", "--out", str(tmp_path / "afile" / "sub")]) == 2
    assert "--out" in capsys.readouterr().err
    assert evaluate.main(["--suite", "core", "--json", str(tmp_path / "no" / "x.json")]) == 2
    assert "does not exist" in capsys.readouterr().err
    locked = tmp_path / "locked"
    locked.mkdir()
    os.chmod(locked, 0o500)
    try:
        if os.access(locked, os.W_OK):  # root ignores permissions
            pytest.skip("running as root")
        assert evaluate.main(["--suite", "core", "--out", str(locked), "--quiet"]) == 2
        assert "not writable" in capsys.readouterr().err
    finally:
        os.chmod(locked, 0o700)
