"""The efficiency / response-time frontier (evaluation/frontier.py, evaluate.py --frontier)."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

import evaluate
from serverfarm_gym.baselines.solvers.efficiency_optimum import solve_lp
from serverfarm_gym.evaluation.frontier import frontier
from tests.helpers.exact import reference_farm

TINY_OPTIMUM = 0.3289309341181227  # shared reference data


@pytest.fixture(scope="module")
def tiny_frontier():
    return frontier(reference_farm("tiny"), ["pas", "best-priority"], n_points=6)


def test_exact_frontier_orders_the_curves(tiny_frontier):
    rep = tiny_frontier
    assert rep["method"] == "exact" and rep["n_orders"] == 720
    opt, static, mix = (rep["curves"][k] for k in ("optimum", "static", "mix"))
    assert len(opt) == 6
    # the optimum curve rises to the unconstrained optimum at its E[T]
    effs = [r["efficiency"] for r in opt]
    assert np.all(np.diff(effs) >= -1e-12)
    assert effs[-1] == pytest.approx(TINY_OPTIMUM, rel=1e-9)
    assert opt[-1]["mean_response_time"] == pytest.approx(
        solve_lp(reference_farm("tiny")).mean_response_time, rel=1e-9
    )
    for r in opt:
        assert r["mean_response_time"] <= r["slo"] * (1 + 1e-7)
    # static front: increasing in both coordinates, below the optimum at every D
    assert all(
        a["mean_response_time"] < b["mean_response_time"] and a["efficiency"] < b["efficiency"]
        for a, b in itertools.pairwise(static)
    )
    for r, m in zip(opt, mix, strict=True):
        meets = [s["efficiency"] for s in static if s["mean_response_time"] <= r["slo"]]
        assert max(meets) <= m["efficiency"] + 1e-12 <= r["efficiency"] + 2e-12
    # the policies are exact points
    assert rep["points"]["best-priority"]["route"] == "exact"
    assert rep["points"]["pas"]["mean_response_time"] > 0


def test_cli_writes_json_and_png(tmp_path):
    js, png = tmp_path / "f.json", tmp_path / "f.png"
    rc = evaluate.main(["small-1", "--frontier", "--frontier-points", "3", "--policies", "pas",
                        "--json", str(js), "--plot", str(png), "--quiet"])  # fmt: skip
    assert rc == 0
    rep = json.loads(js.read_text())
    assert rep["scenario"] == "small-1" and list(rep["points"]) == ["pas"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "args",
    [
        ["--frontier"],
        ["tiny", "--frontier", "--exact"],
        ["tiny", "--frontier", "--frontier-points", "1"],
    ],
)
def test_cli_usage_errors_exit_2(args, capsys):
    with pytest.raises(SystemExit) as e:
        evaluate.main(args)
    assert e.value.code == 2
    assert "--frontier" in capsys.readouterr().err
