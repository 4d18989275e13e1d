"""experiments/studies/geo_day.py --quick writes well-formed JSON, markdown and PNG (a CI-sized run);
bad options fail at once with a one-line error naming the option (exit 2)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from experiments.studies import geo_day
from experiments.studies.geo_farm import ms_per_time_unit
from serverfarm_gym.envs.scenarios import load_geo_scenario

POLICIES = ["pas", "pas-price", "pdr-pas", "pdr-pas-cost", "ppo"]


def test_quick_day_outputs(tmp_path: Path) -> None:
    out = tmp_path / "geo"
    # PPO with a token budget: this checks the plumbing (train, save, load, roll out), not learning
    # and days of 24 short intervals (~940 arrivals): seconds of CPU, most of it importing torch
    geo_day.main(
        ["--quick", "--out", str(out), "--interval-length", "0.25", "--ppo-steps", "128",
         "--policies", ",".join(POLICIES)]
    )  # fmt: skip
    report = json.loads((out / "geo_day.json").read_text())  # strict JSON (no NaN / inf)
    s = report["settings"]
    assert s["replications"] == 2 and s["n_intervals"] == 24 and s["quick"]
    assert list(report["policies"]) == POLICIES
    for name, e in report["policies"].items():
        for key in (
            "energy_cost",
            "energy",
            "throughput",
            "blocking",
            "network_latency",
            "network_cost",
            "total_cost",
            "jobs_per_money",
            "latency",
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
        assert np.isclose(sum(e["per_interval"]["network_cost"]), e["network_cost"]["mean"])
        scale = report["settings"]["ms_per_time_unit"]
        for r in e["replications"]:
            # jobs per total money and per energy money describe the same work
            work = r["jobs_per_energy_money"] * r["energy_cost"]
            assert np.isclose(r["jobs_per_money"] * r["total_cost"], work)
            assert np.isclose(r["total_cost"], r["energy_cost"] + r["network_cost"])
            # simulated latency = network + sojourn in ms: between the sojourn at the smallest
            # and at the largest ms-per-time-unit factor of the clusters
            proc = r["latency"] - r["network_latency"]
            assert min(scale) * r["sojourn"] * (1 - 1e-9) <= proc
            assert proc <= max(scale) * r["sojourn"] * (1 + 1e-9)
            assert 0 <= r["over_dmax"] <= 24
    # the same seeds for every policy (common random numbers); the PDR plan is recorded
    seeds = {tuple(r["seed"] for r in e["replications"]) for e in report["policies"].values()}
    assert len(seeds) == 1
    plans = report["pdr_plans"]
    assert len(plans["pdr-pas"]["latency"]) == 24
    # the cost-oriented plan keeps its latency margin and is cheaper in the LP model
    d_max = report["settings"]["d_max_ms"]
    bound = d_max * (1 - report["settings"]["cost_margin"])
    assert max(plans["pdr-pas-cost"]["latency"]) <= bound * (1 + 1e-6)
    cost = {k: p["energy_cost_day"] + p["network_cost_day"] for k, p in plans.items()}
    assert cost["pdr-pas-cost"] < cost["pdr-pas"]
    # PDR+PAS keeps close to its plan's network latency; PAS, latency blind, is far above it
    pdr, pas = report["policies"]["pdr-pas"], report["policies"]["pas"]
    assert pdr["network_latency"]["mean"] < pas["network_latency"]["mean"]
    md = (out / "geo_day.md").read_text()
    assert md.startswith("| policy |") and "| pdr-pas-cost |" in md and "| ppo |" in md
    png = (out / "geo_day.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5_000
    assert (out / "ppo_model.zip").exists() and (out / "ppo_model.json").exists()


def test_frontier_figure(tmp_path: Path) -> None:
    path = tmp_path / "f.png"
    geo_day.main(["--frontier", str(path), "--frontier-only"])
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_ms_per_time_unit_is_base_delay_times_fastest_rate() -> None:
    geo = load_geo_scenario("geo-us-eu")
    want = [12 * 2.0, 15 * 1.0, 12 * 2.0, 10 * 2.0, 12 * 1.5]  # scenarios/geo-us-eu.yaml
    assert np.allclose(ms_per_time_unit(geo), want)


def _usage_error(capsys: pytest.CaptureFixture[str], argv: list[str], option: str) -> str:
    with pytest.raises(SystemExit) as exc:
        geo_day.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("experiments/studies/geo_day.py: error: ") and option in err, err
    return err


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["--interval-length", "0"], "--interval-length"),
        (["--interval-length", "nan"], "--interval-length"),
        (["--ppo-interval-length", "-1"], "--ppo-interval-length"),
        (["--frontier-interval", "99"], "--frontier-interval"),
        (["--frontier-interval", "-1", "--frontier", "f.png"], "--frontier-interval"),
        (["--replications", "1"], "--replications"),
        (["--cost-margin", "1"], "--cost-margin"),
        (["--policies", "pas,nope"], "--policies"),
        (["--frontier-only"], "--frontier-only"),
        (["--workers", "0"], "--workers"),
    ],
)
def test_bad_options_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], option: str
) -> None:
    out = tmp_path / "out"
    _usage_error(capsys, [*argv, "--out", str(out)], option)
    assert not out.exists() or not any(out.iterdir())  # nothing was run


def test_unwritable_out_is_refused_before_running(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    _usage_error(capsys, ["--quick", "--out", str(blocker / "sub")], "--out")
    _usage_error(capsys, ["--frontier", str(blocker / "f.png"), "--frontier-only"], "--frontier")


def test_missing_ppo_model(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    err = _usage_error(
        capsys,
        ["--quick", "--out", str(tmp_path / "o"), "--ppo", str(tmp_path / "none.zip")],
        "--ppo",
    )
    assert "none.zip" in err


def test_ppo_model_for_another_farm(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # an untrained model of the preset "tiny" with its sidecar: loads fine, wrong farm
    from sb3_contrib import MaskablePPO

    from serverfarm_gym.agents.ppo import write_sidecar
    from serverfarm_gym.envs.scenarios import load_scenario
    from serverfarm_gym.envs.server_farm import ServerFarmEnv

    tiny = load_scenario("tiny")
    model = MaskablePPO("MlpPolicy", ServerFarmEnv(tiny, action_mode="group"), device="cpu")
    path = tmp_path / "tiny.zip"
    model.save(path)
    write_sidecar(path, tiny, "group")
    err = _usage_error(
        capsys, ["--quick", "--out", str(tmp_path / "o"), "--ppo", str(path)], "--ppo"
    )
    assert "'tiny'" in err and "geo-us-eu" in err
