"""Options of ``evaluate.py`` and ``sweep.py`` that ran nothing, ran something else or could never
finish: each is a usage error naming the option (exit 2, one line, no traceback) before anything
is built, and the limits are the documented constants."""

from __future__ import annotations

from pathlib import Path

import pytest

import evaluate as evaluate_cli
import sweep as sweep_cli
from serverfarm_gym.evaluation.rollout import MAX_REPLICATIONS, MAX_WINDOW_EPOCHS
from serverfarm_gym.evaluation.sweep_report import MAX_WORK_UNITS
from tests.helpers.scripts import exit_code


@pytest.fixture
def no_run(monkeypatch):
    """Fail the test if an evaluation starts: every case must be refused before it."""
    import serverfarm_gym.evaluation.policy_report as harness
    import serverfarm_gym.evaluation.sweep_report as sweeps

    def refuse(*a, **k):
        raise AssertionError("the evaluation started")

    for name in ("evaluate", "evaluate_exact", "plan_evaluation"):
        monkeypatch.setattr(harness, name, refuse)
    for name in ("sweep", "plan_evaluation"):
        monkeypatch.setattr(sweeps, name, refuse)


def _refused(capsys, main, argv: list[str], *fragments: str) -> str:
    assert exit_code(lambda: main(argv)) == 2
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.strip()]
    assert "Traceback" not in err and lines, err
    for f in fragments:
        assert f in lines[-1], (f, err)
    return lines[-1]


SWEEP_CASES = [
    # the two that exited 0 with an empty table
    (["--scales", ""], ("--scales", "expected comma-separated integers")),
    (["--seeds", ","], ("--seeds", "expected comma-separated integers")),
    (["--seeds", "0,-1"], ("--seeds", "must be an integer >= 0, got '-1'")),
    (["--scales", "1,0"], ("--scales", "must be an integer >= 1")),
    (["--scales", "1,x"], ("--scales", "expected an integer, got 'x'")),
    (["--policies", ","], ("--policies", "give at least one name")),
    (["--replications", "0"], ("--replications", ">= 1")),
    (["--replications", str(MAX_REPLICATIONS + 1)], ("--replications", "MAX_REPLICATIONS")),
    (["--horizon", "-5"], ("--horizon", ">= 1")),
    (["--horizon", "1" + "0" * 21], ("--horizon", "MAX_WINDOW_EPOCHS")),
    (["--warmup", "-1"], ("--warmup", ">= 0")),
    (["--workers", "0"], ("--workers", ">= 1")),
    (["--optimum-max-variables", "-1"], ("--optimum-max-variables", ">= 1")),
    (["--horizon", "nan"], ("--horizon", "expected an integer, got 'nan'")),
]


@pytest.mark.parametrize(("argv", "fragments"), SWEEP_CASES, ids=lambda v: " ".join(v))
def test_sweep_options_are_refused_by_name(argv, fragments, capsys, no_run):
    _refused(capsys, sweep_cli.main, ["--scenarios", "tiny", *argv], *fragments)


def test_sweep_without_scenarios_is_refused(capsys, no_run):
    _refused(capsys, sweep_cli.main, ["--scenarios", " , "], "--scenarios", "at least one")


EVALUATE_CASES = [
    (["--seed", "-1"], ("--seed", "must be an integer >= 0, got '-1'")),
    (["--optimum-max-variables", "-1"], ("--optimum-max-variables", ">= 1, got '-1'")),
    (["--optimum-max-variables", "0"], ("--optimum-max-variables", ">= 1")),
    (["--replications", "1000000000"], ("--replications", "at most 10,000 (MAX_REPLICATIONS)")),
    (["--replications", "-3"], ("--replications", ">= 1")),
    (["--horizon", "0"], ("--horizon", ">= 1")),
    (["--horizon", str(MAX_WINDOW_EPOCHS + 1)], ("--horizon", "MAX_WINDOW_EPOCHS")),
    (["--warmup", str(10**30)], ("--warmup", "MAX_WINDOW_EPOCHS")),
    (["--scale", "0"], ("--scale", ">= 1")),
    (["--workers", "-2"], ("--workers", ">= 1")),
    (["--policies", ""], ("--policies", "give at least one name")),
    (["--policies", " , "], ("--policies", "give at least one name")),
]


@pytest.mark.parametrize(("argv", "fragments"), EVALUATE_CASES, ids=lambda v: " ".join(v))
def test_evaluate_options_are_refused_by_name(argv, fragments, capsys, no_run):
    _refused(capsys, evaluate_cli.main, ["tiny", *argv], *fragments)


def test_a_window_over_the_limit_in_all_is_refused(capsys):
    # each option within its limit, the two together over it: the harness refuses before the
    # scenario or any policy is built
    half = MAX_WINDOW_EPOCHS // 2 + 1
    _refused(capsys, evaluate_cli.main, ["tiny", "--horizon", str(half), "--warmup", str(half)],
             "horizon + warmup", "MAX_WINDOW_EPOCHS")  # fmt: skip


def test_a_sweep_over_the_work_limit_is_refused_before_planning(capsys, monkeypatch):
    import serverfarm_gym.evaluation.sweep_report as sweeps

    monkeypatch.setattr(sweeps, "plan_evaluation", lambda *a, **k: pytest.fail("planned"))
    seeds = ",".join(str(s) for s in range(100))
    reps = str(MAX_WORK_UNITS // 100 // 4 + 1)
    msg = _refused(capsys, sweep_cli.main,
                   ["--scenarios", "tiny", "--seeds", seeds, "--replications", reps],
                   "work units", "MAX_WORK_UNITS")  # fmt: skip
    assert "1 scenarios x 1 scales x 100 seeds x 4 policies" in msg


@pytest.mark.parametrize("case", ["is-a-directory", "under-a-file"])
@pytest.mark.parametrize("script", ["evaluate.py", "sweep.py"])
def test_output_paths_that_cannot_be_files_are_refused(
    script, case, tmp_path: Path, capsys, no_run
):
    f = tmp_path / "plain"
    f.write_text("x")
    path = {"is-a-directory": tmp_path, "under-a-file": f / "r.json"}[case]
    argv = ["--json", str(path)]
    main = evaluate_cli.main if script == "evaluate.py" else sweep_cli.main
    argv = ["tiny", *argv] if script == "evaluate.py" else ["--scenarios", "tiny", *argv]
    msg = _refused(capsys, main, argv, "output path")
    assert {"is-a-directory": "is a directory", "under-a-file": "is not a directory"}[case] in msg
    assert f.read_text() == "x"


def test_valid_lists_still_run(tmp_path: Path):
    # the checks refuse nothing that ran before: spaces and a trailing comma are fine
    out = tmp_path / "s.json"
    rc = sweep_cli.main(["--scenarios", "tiny, ", "--scales", "1,", "--seeds", " 0 , 1",
                         "--policies", "pas,", "--replications", "2", "--horizon", "200",
                         "--workers", "1", "--no-optimum", "--quiet", "--json", str(out)])  # fmt: skip
    assert rc == 0 and out.is_file()
