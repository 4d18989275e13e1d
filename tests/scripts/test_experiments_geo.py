"""experiments/geo_day.py --quick writes well-formed JSON, markdown and PNG (a CI-sized run)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from experiments import geo_day


def test_quick_day_outputs(tmp_path: Path) -> None:
    out = tmp_path / "geo"
    # PPO with a token budget: this checks the plumbing (train, save, load, roll out), not learning
    # and days of 24 short intervals (~940 arrivals): seconds of CPU, most of it importing torch
    geo_day.main(
        ["--quick", "--out", str(out), "--interval-length", "0.25", "--ppo-steps", "128",
         "--policies", "pas,pas-price,pdr-pas,ppo"]
    )  # fmt: skip
    report = json.loads((out / "geo_day.json").read_text())  # strict JSON (no NaN / inf)
    s = report["settings"]
    assert s["replications"] == 2 and s["n_intervals"] == 24 and s["quick"]
    assert list(report["policies"]) == ["pas", "pas-price", "pdr-pas", "ppo"]
    for name, e in report["policies"].items():
        for key in (
            "energy_cost",
            "energy",
            "throughput",
            "blocking",
            "network_latency",
            "sojourn",
        ):
            assert e[key]["n"] == 2 and math.isfinite(e[key]["mean"]), (name, key)
            assert e[key]["ci95"] is not None and e[key]["ci95"] >= 0
        assert 0 <= e["blocking"]["mean"] <= 1
        assert e["energy_cost"]["mean"] > 0 and e["energy"]["mean"] > 0
        assert e["invalid_actions"] == 0
        assert len(e["per_interval"]["energy_cost"]) == 24
        assert abs(sum(e["cluster_share"]) - 1) < 1e-9
        assert len(e["replications"]) == 2
        # the per-interval energy costs add up to the day's (replication means)
        assert np.isclose(sum(e["per_interval"]["energy_cost"]), e["energy_cost"]["mean"])
    # the same seeds for every policy (common random numbers); the PDR plan is recorded
    seeds = {tuple(r["seed"] for r in e["replications"]) for e in report["policies"].values()}
    assert len(seeds) == 1
    assert len(report["pdr_plan"]["latency"]) == 24
    # PDR+PAS keeps close to its plan's network latency; PAS, latency blind, is far above it
    pdr, pas = report["policies"]["pdr-pas"], report["policies"]["pas"]
    assert pdr["network_latency"]["mean"] < pas["network_latency"]["mean"]
    md = (out / "geo_day.md").read_text()
    assert md.startswith("| policy |") and "| pdr-pas |" in md and "| ppo |" in md
    png = (out / "geo_day.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5_000
    assert (out / "ppo_model.zip").exists() and (out / "ppo_model.json").exists()


def test_frontier_figure(tmp_path: Path) -> None:
    path = tmp_path / "f.png"
    geo_day.main(["--frontier", str(path), "--frontier-only"])
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
