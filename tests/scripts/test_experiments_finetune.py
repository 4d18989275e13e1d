"""experiments/generalist_finetune.py on tiny with a PAS-cloned generalist: every searched value
is an exact efficiency between PAS-or-below and the optimum, the searches never lose their
start, the outputs are written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from experiments import generalist_finetune as ft


@pytest.fixture
def model(small_generalist: Path) -> Path:
    return small_generalist


def test_quick_run(model: Path, tmp_path: Path) -> None:
    report = ft.main(["--quick", "--out", str(tmp_path), "--model", str(model),
                      "--ppo-steps", "4096"])  # fmt: skip
    (row,) = report["rows"]
    assert row["farm"] == "tiny"
    for k in ("zero_shot", "network", "bias", "table", "table_bias"):
        assert row[k] <= row["optimum"] + 1e-9
    # a search keeps its start: biases from zero never below the network, the table-started
    # search never below the table (s = 0 and the table's scale are among its starts)
    assert row["bias"] >= row["network"] - 1e-12
    assert row["table_bias"] >= row["table"] - 1e-12
    steps = [t for t, _ in row["ppo_curve"]]
    assert steps == [0, 4096]
    saved = json.loads((tmp_path / "generalist_finetune.json").read_text())
    assert saved["rows"][0]["farm"] == "tiny"
    assert (tmp_path / "generalist_finetune.png").stat().st_size > 0


def test_zero_bias_is_the_network(model: Path) -> None:
    """The predictor with zero biases and scale 1 decides as the network's policy does."""
    from serverfarm_gym.agents.generalist import TokenGeneralistPolicy
    from serverfarm_gym.evaluation.efficiency import measure

    config = ft.farm_from_name("random:2001")
    net, meta = TokenGeneralistPolicy.load_net(model)
    probe = ft.BiasedLogits(config, net, meta["max_groups"])
    policy = TokenGeneralistPolicy(config, "group", model=model)
    assert probe.efficiency(np.zeros(probe.size)) == pytest.approx(
        measure(policy, config, action_mode="group", method="exact").efficiency, abs=1e-12
    )


def test_bad_steps_refused(model: Path, tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="--ppo-steps"):
        ft.main(["--quick", "--out", str(tmp_path), "--model", str(model), "--ppo-steps", "-1"])
