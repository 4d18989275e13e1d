"""experiments/studies/generalist_eval.py's pieces: exact rows consistent with the optimum, the summary,
a missing model named (the full --quick run simulates paper-100: run it by hand)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from experiments.studies import generalist_eval as ge
from experiments.studies.exact_tune import random_seeds, sampled_seeds
from serverfarm_gym.agents.table_generalist.policy import SHIPPED_MODEL
from serverfarm_gym.agents.table_generalist.table_net import SMALL_EXPERT, load_weights
from serverfarm_gym.agents.token_generalist.oracle import RANDOM_FARM_TRAIN_SEEDS


def test_exact_rows_are_consistent_with_the_optimum() -> None:
    farms = ge.exact_farms(2, "sampled")
    rows = [ge.exact_task((c, "sampled", str(ge.SHIPPED_MODEL), 20, None)) for c in farms]
    rows = [r for r in rows if "skipped" not in r]
    assert rows
    for r in rows:  # nothing beats the exact optimum; the gaps are what the values say
        assert r["optimum"] >= max(r[w] for w in (*ge.POLICIES, "polished")) - 1e-9
        # the polish keeps the best table it has seen, the generalist's among them
        assert r["polished"] >= r["generalist"] * (1 - 1e-9) and r["polish_cpu_s"] >= 0
        for who in (*ge.POLICIES, "polished"):
            assert r[f"{who}_gap_pct"] == pytest.approx(
                100 * (r["optimum"] - r[who]) / r["optimum"]
            )
    s = ge.summarize(rows)["sampled"]
    assert s["farms"] == len(rows)
    assert s["generalist"]["worst_gap_pct"] == max(r["generalist_gap_pct"] for r in rows)
    assert s["polished"]["worst_gap_pct"] == max(r["polished_gap_pct"] for r in rows)
    assert ge.summarize([{k: v for k, v in r.items() if not k.startswith("polish")} for r in rows])[
        "sampled"
    ].keys() == {"farms", "skipped (no optimum)", *ge.POLICIES}


def test_scaled_presets_and_their_search_farm() -> None:
    farm, search_on = ge.preset_farm("overlap-100@100")
    assert farm.n_servers == 100 * search_on.n_servers


def test_missing_model_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"nope\.npz and its sidecar"):
        ge.main(["--quick", "--out", str(tmp_path), "--model", str(tmp_path / "nope.npz")])


def test_mid_farms_are_held_out_and_mid_sized() -> None:
    farms = ge.mid_farms(3)
    assert len(farms) == 3
    assert all(ge.MID_SERVERS[0] <= c.n_servers <= ge.MID_SERVERS[1] for c in farms)
    assert ge.MID_SEEDS.start >= ge.EVAL_SEEDS.stop  # apart from the exact evaluation's seeds


def test_mid_rows_are_paired_differences_and_summarised() -> None:
    st = {"mid_epochs": 5_000, "mid_replications": 3, "seed": 0}
    rows = [ge.mid_task((c, str(ge.SHIPPED_MODEL), st)) for c in ge.mid_farms(2)]
    for r in rows:
        assert r["kind"] == "mid" and r["vs_pas_ci95_pct"] >= 0
        # the paired mean difference is the difference of the means (same replications)
        assert r["vs_pas_pct"] == pytest.approx(100 * (r["generalist"] - r["pas"]) / r["pas"])
    s = ge.summarize(rows)["mid"]
    assert s["farms"] == 2 and s["below_pas"] + round(2 * s["share_not_below_pas"]) == 2
    assert s["worst_vs_pas_pct"] == min(r["vs_pas_pct"] for r in rows)


def test_presets_none_scores_the_mid_size_farms_alone(tmp_path: Path) -> None:
    out = ge.main(["--quick", "--n-farms", "0", "--presets", "none", "--out", str(tmp_path)])
    kinds = {r["kind"] for r in out["rows"]}
    assert kinds == {"mid"} and out["settings"]["presets"] == []


def test_validation_mid_farms_are_apart_from_the_evaluations(tmp_path: Path) -> None:
    assert ge.MID_VALIDATION_SEEDS.start >= ge.MID_SEEDS.stop
    out = ge.main(["--quick", "--n-farms", "0", "--presets", "none", "--mid-seeds",
                   "validation", "--out", str(tmp_path)])  # fmt: skip
    names = {r["farm"] for r in out["rows"]}
    assert names == {c.name for c in ge.mid_farms(2, ge.MID_VALIDATION_SEEDS)}
    assert names.isdisjoint(c.name for c in ge.mid_farms(2))
    assert out["settings"]["mid_seeds"] == "validation"


def test_validation_exact_farms_are_apart_from_the_evaluations(tmp_path: Path) -> None:
    assert ge.EXACT_VALIDATION_SEEDS.stop == ge.EVAL_SEEDS.start
    assert ge.EXACT_VALIDATION_SEEDS.start == ge.HELD_OUT_SEEDS.start
    assert ge.RANDOM_VALIDATION_SEEDS.start >= RANDOM_FARM_TRAIN_SEEDS.stop
    out = ge.main(["--quick", "--n-farms", "1", "--n-mid", "0", "--presets", "none",
                   "--exact-seeds", "validation", "--out", str(tmp_path)])  # fmt: skip
    got = {r["kind"]: r["farm"] for r in out["rows"]}
    assert got == {f: ge.exact_farms(1, f, "validation")[0].name for f in ("sampled", "random")}
    assert got["sampled"] != ge.exact_farms(1, "sampled")[0].name
    assert got["random"] == "random-2000000"
    assert out["settings"]["exact_seeds"] == "validation"


def test_training_exact_farms_are_the_tuning_farms() -> None:
    # --exact-seeds training measures the expert's fit: the farms exact_tune reads first
    w, _ = load_weights(SHIPPED_MODEL)
    cap = int(np.asarray(w[SMALL_EXPERT + "max_states"]).reshape(-1)[0])  # the tuning's limit
    assert cap == ge.MAX_STATES  # else the two would read different farms of the same seeds
    got = {f: [c.name for c in ge.exact_farms(3, f, "training")] for f in ("sampled", "random")}
    assert got["sampled"] == [f"sampled-{s}" for s in sampled_seeds(3, cap)]
    assert got["random"] == [f"random-{s}" for s in random_seeds(3, cap)]
    with pytest.raises(ValueError, match="seeds"):
        ge.exact_farms(1, "sampled", "train")


def test_against_pairs_two_models_farm_by_farm(tmp_path: Path) -> None:
    out = ge.main(["--quick", "--n-farms", "2", "--n-mid", "0", "--presets", "none",
                   "--against", str(ge.SHIPPED_MODEL), "--out", str(tmp_path)])  # fmt: skip
    for fam in ("sampled", "random"):
        s = out["summary"][fam]
        # the same model on both sides: every farm the same, to the last bit
        assert s["against"]["mean_gap_pct"] == s["generalist"]["mean_gap_pct"]
        assert s["against"]["share_at_least_pas"] == s["generalist"]["share_at_least_pas"]
        d = s["generalist_minus_against"]
        assert d["mean_pct_points"] == 0.0 and d["better"] == d["worse"] == 0
    rows = [r for r in out["rows"] if "skipped" not in r]
    got = ge.paired_gaps([r | {"against_gap_pct": r["generalist_gap_pct"] + 0.5} for r in rows])
    assert np.isclose(got["mean_pct_points"], -0.5) and got["better"] == len(rows)
    with pytest.raises(ValueError, match=r"nope\.npz and its sidecar"):
        ge.main(["--quick", "--n-farms", "1", "--against", str(tmp_path / "nope.npz"),
                 "--out", str(tmp_path)])  # fmt: skip
