"""experiments/studies/from_scratch_slo.py: the milestones of a curve under an SLO (a policy counts only
where its exact E[T] meets D), the learned rows with their E[T] through the leaderboard's reader,
option errors, and one update of each trainer end to end (a few seconds once numba's kernels
are cached)."""

from __future__ import annotations

import json
from functools import partial

import numpy as np
import pytest

from experiments.studies import from_scratch as fs
from experiments.studies import from_scratch_slo as slo

REF = {"slo": 1.0, "optimum": 1.0}


def test_milestones_count_only_policies_that_meet_the_slo() -> None:
    cell = {"curve": [
        (0, 0.0, 0.9990, 1.20, 0.1),  # above 99.9% but misses the SLO: not counted
        (2048, 1.0, 0.9850, 0.95, 0.2),  # meets the SLO first, below 99%
        (4096, 2.0, 0.9950, 1.0, 0.2),  # exactly on D: meets it, 99% reached here
        (6144, 3.0, 0.9995, 1.0 + 2e-9, 0.3),  # above D by more than 1e-9 relative: misses
        (8192, 4.0, 0.9920, 0.90, 0.1),  # the final policy
    ]}  # fmt: skip
    m = slo.milestones(cell, REF)
    assert m["steps_slo"] == 2048 and m["met_any"]
    assert (m["steps_99"], m["cpu_99"]) == (4096, 2.0)
    assert m["steps_99.9"] is None and m["cpu_99.9"] is None
    assert m["best_share"] == pytest.approx(0.995)  # the best policy that met the SLO
    assert m["final_gap_pct"] == pytest.approx(0.8) and m["final_slo_met"]
    assert m["final_rt_ratio"] == pytest.approx(0.9) and m["final_beta"] == pytest.approx(0.1)
    never = slo.milestones({"curve": [(0, 0.0, 1.01, 1.5, 0.0), (2048, 1.0, 1.02, 1.1, 0.5)]}, REF)
    assert never["steps_slo"] is None and not never["met_any"] and not never["final_slo_met"]
    assert never["best_share"] == 0.0 and never["steps_99"] is None
    assert never["final_gap_pct"] == pytest.approx(-2.0)  # above the constrained optimum


@pytest.fixture
def few_resamples(monkeypatch):
    """The bootstrap with 50 resamples: these tests check what is aggregated, not the interval."""
    monkeypatch.setattr(fs, "stratified_bootstrap", partial(fs.stratified_bootstrap, reps=50))


def test_the_kept_policys_gap_is_over_the_runs_that_met_the_slo(few_resamples) -> None:
    def cell(seed, eff, et):
        return {"scenario": "tiny-slo", "trainer": "ppo", "seed": seed, "steps": 2048,
                "curve": [(0, 0.0, 0.5, 1.5, 0.1), (2048, 1.0, eff, et, 0.2)]}  # fmt: skip

    cells = [cell(0, 0.98, 0.9), cell(1, 0.96, 1.0), cell(2, 1.01, 1.2)]
    (row,) = slo.aggregate(cells, {"tiny-slo": REF})["rows"]
    assert (row["met_any"], row["final_slo_met"]) == (2, 2)
    assert row["best_gap_pct"][0] == pytest.approx(3.0)  # mean of 2% and 4%, the third left out
    assert row["reached_99"] == 0 and row["steps_99"][0] == 2048  # censored at the budget
    (none,) = slo.aggregate([cell(3, 1.01, 1.2)], {"tiny-slo": REF})["rows"]
    assert none["best_gap_pct"] is None and "n/a (0 of 1)" in slo.markdown_table({"rows": [none]})


def _fake(finals):
    it = iter(finals)

    def run(config, seed, steps):
        eff, et = next(it)
        return [(0, 0.0, 0.30, 1.3, 0.1), (2048, 0.5, eff, et, 0.2)]

    return run


def test_rows_file_carries_the_response_time_to_the_leaderboard(
    tmp_path, monkeypatch, few_resamples
) -> None:
    from serverfarm_gym.evaluation.leaderboard import load_learned_rows, merge_learned
    from serverfarm_gym.evaluation.suite import load_suite

    finals = [(0.3190, 0.89), (0.3200, 0.90), (0.3170, 0.88)]
    monkeypatch.setitem(slo.RUNNERS, "ppo", _fake(finals))
    argv = ["--scenarios", "tiny-slo", "--trainers", "ppo", "--seeds", "3", "--steps", "2048",
            "--out", str(tmp_path), "--min-seeds", "3"]  # fmt: skip
    agg = slo.main(argv)
    (row,) = agg["rows"]
    assert (row["n"], row["met_any"], row["final_slo_met"]) == (3, 3, 3)
    monkeypatch.setitem(slo.RUNNERS, "ppo", _fake([]))  # a rerun trains nothing
    slo.main(argv)
    data = json.loads((tmp_path / "leaderboard_rows.json").read_text())
    assert (data["suite"], data["rows"][0]["reference"]["kind"]) == ("latency", "slo-optimum")
    assert data["rows"][0]["slo_met_seeds"] == 3
    (learned,) = load_learned_rows([tmp_path / "leaderboard_rows.json"], load_suite("latency"))
    iqm, lo, hi = learned["mean_response_time"]
    assert 0.88 <= lo <= iqm <= hi <= 0.90
    D = 0.9
    board = {"mean_score": {}, "scenarios": {"tiny-slo": {
        "slo": D, "reference": {"efficiency": learned["reference"]},
        "policies": {"random": {"efficiency": {"mean": 0.1}}}}}}  # fmt: skip
    merge_learned(board, {}, [learned])
    entry = board["scenarios"]["tiny-slo"]["policies"][learned["label"]]
    assert entry["mean_response_time"] == {"mean": iqm, "ci95": None, "ci95_low": lo,
                                           "ci95_high": hi}  # fmt: skip
    assert entry["slo_met"] is True  # the interval's low end within D, the suite's rule
    learned["mean_response_time"] = (0.95, 0.91, 0.99)
    merge_learned(board, {}, [learned | {"label": "missed"}])
    assert board["scenarios"]["tiny-slo"]["policies"]["missed"]["slo_met"] is False


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["--scenarios", "tiny"], "--scenarios"),
        (["--trainers", "dqn"], "--trainers"),
        (["--steps", "100"], "--steps"),
        (["--seeds", "0"], "--seeds"),
    ],
)
def test_bad_options_exit_2_naming_them(argv, option, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        slo.main(argv)
    assert e.value.code == 2 and option in capsys.readouterr().err


@pytest.mark.parametrize("trainer", ["ppo", "sb3"])
def test_one_update_of_each_trainer_end_to_end(tmp_path, trainer) -> None:
    from serverfarm_gym.agents.ppo.slo import exact_space, lp_multiplier
    from serverfarm_gym.baselines.solvers.slo_optimum import min_response_time

    cell = slo.run_cell(tmp_path, "tiny-slo", trainer, 0, 2048)
    saved = json.loads((tmp_path / "cells" / f"tiny-slo-{trainer}-s0.json").read_text())
    assert saved["slo"] == 0.9 and len(saved["curve"]) == 2 == len(cell["curve"])
    farm = slo.suite_farm("tiny-slo")
    curve = np.asarray(saved["curve"])
    assert curve[0, 4] == pytest.approx(lp_multiplier(exact_space(farm, "group")), rel=1e-12)
    assert np.all(curve[:, 4] >= 0.0) and curve[1, 4] != curve[0, 4]  # one dual step taken
    # an exact E[T] of a randomised policy: at least the fastest policy's
    assert np.all(curve[:, 3] >= min_response_time(farm) * (1 - 1e-9))
    assert np.all((curve[:, 2] > 0) & (curve[:, 2] <= slo.references(["tiny-slo"])["tiny-slo"][
        "optimum_without_slo"] * (1 + 1e-9)))  # fmt: skip


def test_set_replaces_the_ppo_runs_settings(tmp_path, monkeypatch) -> None:
    seen: dict = {}

    def fake_trainer(config, seed, **kw):
        seen.update(kw)
        raise RuntimeError("stop here")

    monkeypatch.setattr(slo.fs, "ppo_trainer", fake_trainer)
    with pytest.raises(RuntimeError, match="stop here"):
        slo.main(["--scenarios", "tiny-slo", "--trainers", "ppo", "--seeds", "1", "--steps",
                  "2048", "--out", str(tmp_path), "--set", '{"advantage": "average"}'])  # fmt: skip
    assert seen == {"advantage": "average"}
    seen.clear()
    with pytest.raises(RuntimeError, match="stop here"):
        slo.run_ppo(slo.suite_farm("tiny-slo"), 0, 2048)
    assert seen == {"advantage": "discounted"}  # train.py's on a farm with an SLO
