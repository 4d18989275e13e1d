"""experiments/studies/policy_gap.py on a short run: the report's states are the largest terms of
the exact decomposition, its shares are consistent, and the critic columns appear exactly when
the trainer has an afterstate critic."""

from __future__ import annotations

import json

import numpy as np
import pytest

from experiments.studies import policy_gap


@pytest.mark.parametrize("advantage", ["average", "afterstate"])
def test_the_report_decomposes_the_final_policy(tmp_path, advantage) -> None:
    out = tmp_path / "gap.json"
    rep = policy_gap.main(["--scenario", "tiny", "--seed", "0", "--steps", "2048", "--top", "3",
                           "--set", json.dumps({"advantage": advantage}), "--out", str(out)])  # fmt: skip
    assert json.loads(out.read_text())["gap_per_decision"] == pytest.approx(rep["gap_per_decision"])
    assert 0.0 < rep["final_share"] <= 1.0 + 1e-9 and rep["best_share"] >= rep["final_share"]
    states = rep["states"]
    assert len(states) == 3 and 0 <= rep["wrong_states"] <= rep["decision_states"]
    shares = [s["share_of_loss"] for s in states]
    assert shares == sorted(shares, reverse=True)
    assert sum(shares) == pytest.approx(rep["top_share_of_loss"])
    for s in states:
        assert max(s["exact_q_minus_best"]) == 0.0
        assert np.sum(s["policy_probs"]) == pytest.approx(1.0, abs=5e-3)
        assert (s["critic_minus_best"] is None) == (advantage != "afterstate")
