"""experiments/studies/slo_headroom.py in its CI-sized form."""

from __future__ import annotations

import json

from experiments.studies import slo_headroom


def test_quick_run_writes_headroom_summary(tmp_path):
    report = slo_headroom.main(["--quick", "--out", str(tmp_path)])
    saved = json.loads((tmp_path / "slo_headroom.json").read_text())
    assert saved["summary"] == json.loads(json.dumps(report["summary"]))
    rows = [r for r in report["rows"] if r["binding"]]
    assert rows
    for r in rows:
        # the optimum is an upper bound of every fair baseline; mixes only add candidates
        assert r["optimum"] >= r["best_with_mix"] * (1 - 1e-9)
        assert r["best_with_mix"] >= r["best_static"]
        assert r["min_response_time"] < r["slo"] < r["optimum_response_time"]
    assert (tmp_path / "slo_headroom.png").read_bytes()[:4] == b"\x89PNG"
