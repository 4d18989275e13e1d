"""The paper-reproduction experiments: each script's ``--quick`` run writes well-formed
JSON / CSV / PNG with the expected fields, and the experiment-specific computations (the
free-blocking optimum, the decay fits) are right on cases with known answers."""

from __future__ import annotations

import csv
import itertools
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from experiments import (
    blocking_constraint,
    common,
    deviation_vs_size,
    job_size_robustness,
    pas_vs_optimum,
)
from serverfarm_gym.baselines.solvers.ctmc import GeneratorSolver
from serverfarm_gym.baselines.solvers.efficiency_optimum import AggregatedSpace, solve_pi
from serverfarm_gym.envs.config import farm_from_dict
from serverfarm_gym.envs.scenarios import load_preset

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _outputs(out: Path, name: str) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """Parse ``<name>.json`` (strict: no NaN) and ``<name>.csv``; check the PNG's signature."""
    report = json.loads((out / f"{name}.json").read_text(), parse_constant=_no_nan)
    with (out / f"{name}.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    png = (out / f"{name}.png").read_bytes()
    assert png[:8] == PNG_MAGIC and 5_000 < len(png) < 400_000
    assert not list(out.glob(".*.tmp")), "a temporary file was left behind"
    for key in ("argv", "settings", "versions", "created", "wall_time_s", "experiment"):
        assert key in report, key
    assert report["settings"]["quick"] is True
    return report, rows


def _no_nan(name: str) -> None:
    raise AssertionError(f"JSON contains {name}")


# ---------------------------------------------------------------------------------------------
# quick runs (CI)
# ---------------------------------------------------------------------------------------------
def test_pas_vs_optimum_quick(tmp_path: Path) -> None:
    pas_vs_optimum.main(["--quick", "--out", str(tmp_path)])
    report, rows = _outputs(tmp_path, "pas_vs_optimum")
    st = report["settings"]
    assert report["seeds"] == list(range(st["n_farms"])) and len(rows) == st["n_farms"]
    counts = report["summary"]["counts"]
    assert counts["solved"] + counts["skipped_optimum"] == st["n_farms"]
    assert counts["solved"] >= 3 and counts["exact_ctmc"] >= 1
    for name in pas_vs_optimum.POLICIES:
        s = report["summary"]["per_policy"][name]
        assert s["n"] == counts["solved"]
        assert s["min"] <= s["median"] <= s["p90"] <= s["max"]
        assert s["exact_negative"] == 0  # an exactly evaluated policy never beats the optimum
    for farm in report["farms"]:
        if "optimum" not in farm:
            assert "skipped" in farm
            continue
        assert farm["method"] in ("ctmc", "simulation")
        for name in pas_vs_optimum.POLICIES:
            gap, opt = farm[f"{name}_gap_pct"], farm["optimum"]
            assert math.isclose(gap, 100 * (opt - farm[f"{name}_efficiency"]) / opt, rel_tol=1e-9)
            if farm["method"] == "simulation":
                # a simulated policy may only beat the optimum by noise (~5 half-widths)
                assert gap > -5 * farm[f"{name}_gap_ci95"]
        # PAS and Whittle coincide on on/off farms (same decisions)
        assert math.isclose(farm["pas_efficiency"], farm["whittle_efficiency"], rel_tol=1e-9)
    assert {"seed", "load", "optimum", "pas_gap_pct", "jsq_gap_pct"} <= set(rows[0])


def test_deviation_vs_size_quick(tmp_path: Path) -> None:
    deviation_vs_size.main(["--quick", "--out", str(tmp_path)])
    report, rows = _outputs(tmp_path, "deviation_vs_size")
    pts = report["points"]
    assert {p["base"] for p in pts} == {"tiny", "small-3"}
    for p in pts:
        assert p["pas_ci95"] is not None and p["pas_ci95"] > 0
        assert p["window_warnings"] == []  # windows set in model time
        if p["bound"] is not None:
            assert p["deviation_pct"] > -5 * p["deviation_ci95"]
        if p["optimum"] is not None:
            assert p["gap_to_opt_pct"] > -5 * p["gap_to_opt_ci95"]
    # the exact optimum of the base presets (f = 1) is the reference value
    tiny1 = next(p for p in pts if p["base"] == "tiny" and p["scale"] == 1)
    assert math.isclose(tiny1["optimum"], 0.3289309341181227, rel_tol=1e-7)
    assert tiny1["n_servers"] == 4
    assert {"base", "scale", "n_servers", "pas_efficiency", "deviation_pct"} <= set(rows[0])
    assert set(report["summary"]) == {"tiny", "small-3"}


def test_job_size_robustness_quick(tmp_path: Path) -> None:
    job_size_robustness.main(["--quick", "--out", str(tmp_path)])
    report, rows = _outputs(tmp_path, "job_size_robustness")
    pts = report["points"]
    assert len(pts) == 2 * 3 and len(rows) == len(pts)
    for p in pts:
        assert p["pas_ci95"] > 0 and math.isfinite(p["change_ci95"])
        if p["size"] == "exponential":
            assert p["change_vs_exponential_pct"] == 0.0
            # the simulated reference agrees with the exact CTMC value (a 95% interval: allow
            # 2 half-widths so that this check fails with probability ~1e-3, not 5%)
            assert abs(p["exact_exponential"] - p["pas_efficiency"]) <= 2 * p["pas_ci95"]
    assert set(report["summary"]["per_size"]) == {"deterministic", "pareto-1.5"}
    assert {"farm", "size", "pas_efficiency", "change_vs_exponential_pct"} <= set(rows[0])


def test_blocking_constraint_quick(tmp_path: Path) -> None:
    blocking_constraint.main(["--quick", "--out", str(tmp_path)])
    report, rows = _outputs(tmp_path, "blocking_constraint")
    for p in report["points"]:
        tol = 1e-9 * p["opt_free"]
        # blocking allowed >= admissible optimum >= PAS; "never use bad" is one blocking policy
        assert p["opt_free"] >= p["opt_admissible"] - tol
        assert p["opt_admissible"] >= p["pas"] - tol - 5 * p["pas_ci95"]
        assert p["opt_free"] >= p["never_bad"] - tol
        if p["bound"] is not None:
            # the (tight) relaxation bound holds for admissible policies only: its blocking cuts
            # use the no-blocking rule, so it may lie below the blocking-allowed optimum
            assert p["bound"] >= p["opt_admissible"] - 1e-7 * p["bound"]
    low = next(p for p in report["points"] if p["sweep"] == "e_bad" and p["e_bad"] == 0.1)
    high = next(p for p in report["points"] if p["sweep"] == "e_bad" and p["e_bad"] == 1.0)
    # a very inefficient group: the rule costs a lot; an efficient one: nothing
    assert low["cost_of_no_blocking_pct"] > 10 and low["free_voluntary_blocking"] > 0
    assert abs(high["cost_of_no_blocking_pct"]) < 1e-6
    assert {"sweep", "e_bad", "rho", "opt_admissible", "opt_free", "pas"} <= set(rows[0])


# ---------------------------------------------------------------------------------------------
# the free-blocking optimum
# ---------------------------------------------------------------------------------------------
def _small_farm() -> Any:
    return farm_from_dict({
        "name": "fb",
        "groups": [
            {"name": "good", "count": 1, "service_rate": 2.0, "busy_power": 3.0,
             "idle_power": 1.0, "buffer": 2},
            {"name": "bad", "count": 1, "service_rate": 1.0, "busy_power": 6.0,
             "idle_power": 1.0, "buffer": 1},
        ],
        "job_types": [{"name": "j", "arrival_rate": 2.5, "groups": ["good", "bad"]}],
    })  # fmt: skip


def test_free_blocking_matches_brute_force() -> None:
    """Exhaustive search over every deterministic policy with blocking allowed everywhere."""
    c = _small_farm()
    space = AggregatedSpace(c)
    states = np.nonzero(space.has_vacancy[:, 0])[0]
    choices = [[-1, *np.nonzero(space.valid[s, 0])[0].tolist()] for s in states]
    best = -np.inf
    act = np.full((space.n_states, 1), -1, dtype=np.int64)
    for combo in itertools.product(*choices):
        act[states, 0] = combo
        pi = GeneratorSolver(space.generator(act)).stationary()
        best = max(best, float(pi @ space.W) / float(pi @ space.P))
    value, actions, _ = blocking_constraint.solve_free_blocking(c)
    assert math.isclose(value, best, rel_tol=1e-10)
    adm = solve_pi(c).value
    assert value > adm * (1 + 1e-3)  # blocking pays on this farm (bad efficiency 0.2)
    assert np.any(actions[states, 0] == -1)


def test_free_blocking_equals_admissible_when_blocking_never_pays() -> None:
    """With one efficient group only, blocking never helps: both optima coincide."""
    c = load_preset("tiny")
    value, _, _ = blocking_constraint.solve_free_blocking(c)
    assert math.isclose(value, 0.3289309341181227, rel_tol=1e-9)


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------
def test_fit_decay_recovers_the_model() -> None:
    n = np.array([10, 30, 100, 300, 1000])
    exp_fit = deviation_vs_size.fit_decay(n, 2.0 * np.exp(-0.01 * n))
    assert exp_fit["better"] == "exponential"
    assert math.isclose(exp_fit["exponential"]["rate"], 0.01, rel_tol=1e-9)
    pow_fit = deviation_vs_size.fit_decay(n, 5.0 * n**-0.5)
    assert pow_fit["better"] == "power"
    assert math.isclose(pow_fit["power"]["exponent"], 0.5, rel_tol=1e-9)
    assert math.isclose(pow_fit["power"]["prefactor_pct"], 5.0, rel_tol=1e-9)
    assert deviation_vs_size.fit_decay([10, 20], [1.0, 0.5])["better"] is None


def test_scale_factors() -> None:
    assert deviation_vs_size.scale_factors(4, (10, 30, 100)) == [1, 2, 8, 25]
    assert deviation_vs_size.scale_factors(100, (10, 100, 1000)) == [1, 10]


def test_gap_summary() -> None:
    s = pas_vs_optimum.gap_summary([0.0, 0.5, 2.0, 4.0])
    assert s["n"] == 4 and s["max"] == 4.0 and s["median"] == 1.25
    assert s["share_within_1pct"] == 0.5 and s["share_within_3pct"] == 0.75
    assert pas_vs_optimum.gap_summary([]) == {"n": 0}


def test_window_in_model_time() -> None:
    c = load_preset("tiny")  # arrival rate 2.5, slowest group mu = 1
    assert c.epochs_per_duration == 2.5
    assert common.durations_to_epochs(c, 100) == 250
    assert common.durations_to_epochs(c, 100, minimum=1000) == 1000
    assert common.durations_to_epochs(c.scaled(10), 100) == 2500


def test_write_outputs_atomic(tmp_path: Path) -> None:
    from matplotlib.figure import Figure

    def plot(path: Any) -> None:
        fig = Figure(figsize=(2, 2))
        fig.add_subplot().plot([0, 1], [0, 1])
        common.save_figure(fig, path)

    rows = [{"a": 1, "b": None}, {"a": 2.5, "c": float("nan")}]
    paths = common.write_outputs(tmp_path / "o", "x", {"v": float("inf")}, rows, plot,
                                 figure_dir=tmp_path / "fig")  # fmt: skip
    assert json.loads(Path(paths["json"]).read_text()) == {"v": None}
    assert Path(paths["csv"]).read_text() == "a,b,c\n1,,\n2.5,,\n"
    assert Path(paths["figure"]).read_bytes() == Path(paths["png"]).read_bytes()


def test_parallel_map_in_order() -> None:
    assert common.parallel_map(abs, [-3, 2, -1], workers=1) == [3, 2, 1]


@pytest.mark.slow
def test_parallel_map_pool() -> None:
    assert common.parallel_map(abs, list(range(-5, 5)), workers=2) == [abs(x) for x in range(-5, 5)]
