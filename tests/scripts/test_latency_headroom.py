"""experiments/studies/latency_headroom.py --quick, and the sampler's right-sizing draws."""

from __future__ import annotations

import json

import pytest

from experiments.studies import latency_headroom
from serverfarm_gym.envs.farm_sampler import FarmDistribution, sample_farm
from serverfarm_gym.envs.validation import ConfigError


def test_quick_run_writes_its_outputs(tmp_path) -> None:
    report = latency_headroom.main(["--quick", "--out", str(tmp_path)])
    data = json.loads((tmp_path / "latency_headroom.json").read_text())
    assert len(data["farms"]) == 4 == len(report["farms"])
    for row in data["farms"]:
        assert row["gap_pct"] >= -1e-6 and row["gap_pas_pct"] >= row["gap_pct"] - 1e-9
        assert row["base_gap_pct"] >= -1e-6
    assert (tmp_path / "latency_headroom.csv").exists()
    assert "best fair baseline" in data["table"]


def test_sampler_sleep_draws() -> None:
    d = FarmDistribution(sleep_share=1.0, general_size_share=1.0)
    c = sample_farm(7, d)
    assert all(g.sleep is not None for g in c.groups) and c.all_exponential
    # without right-sizing the farms are the ones drawn before it existed
    assert sample_farm(7, FarmDistribution(sleep_share=0.0)) == sample_farm(7)
    plain = sample_farm(7, FarmDistribution(general_size_share=0.0))
    slept = sample_farm(7, FarmDistribution(general_size_share=0.0, sleep_share=1.0))
    assert [g.count for g in plain.groups] == [g.count for g in slept.groups]
    with pytest.raises(ConfigError, match="sleep_share"):
        FarmDistribution(sleep_share=1.5)
