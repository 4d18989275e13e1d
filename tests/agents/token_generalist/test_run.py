"""train.py token-generalist's run (agents/token_generalist/run.py): validation farms, options, the run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from serverfarm_gym.agents.token_generalist import run as generalist_run


def test_bad_options_exit_2(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        generalist_run.parse(["--eval-every", "0"])
    assert e.value.code == 2 and "--eval-every: must be >= 1" in capsys.readouterr().err


@pytest.mark.slow
def test_a_short_run_writes_its_files(tmp_path: Path) -> None:
    out = generalist_run.main(["--total-timesteps", "8192", "--eval-every", "1",
                               "--n-eval-farms", "2", "--output-dir", str(tmp_path)])  # fmt: skip
    assert [p["timesteps"] for p in out["curve"]] == [0, 8192]
    for name in ("generalist.pt", "generalist.json", "checkpoint.pt", "best.pt", "curve.jsonl",
                 "history.jsonl", "curve.png"):  # fmt: skip
        assert (tmp_path / name).stat().st_size > 0
    meta = json.loads((tmp_path / "generalist.json").read_text())
    assert meta["command"].startswith("python train.py token-generalist --total-timesteps 8192")
    # the untrained anchored network is PAS: the start's validation point is exactly 0
    assert out["curve"][0]["mean_vs_pas_pct"] == 0.0 and meta["net"]["anchor"] == 4.0


def test_init_model_starts_from_its_weights_under_the_run_anchor(tmp_path: Path) -> None:
    from serverfarm_gym.agents.token_generalist import (
        TOKEN_MODEL,
        GeneralistConfig,
        GeneralistTrainer,
        TokenGeneralistPolicy,
    )

    tr = GeneralistTrainer(GeneralistConfig(anchor=1.5))
    generalist_run.load_weights(tr, TOKEN_MODEL)
    shipped, _ = TokenGeneralistPolicy.load_net(TOKEN_MODEL)
    for k, v in shipped.state_dict().items():
        assert bool((tr.net.state_dict()[k] == v).all()), k
    assert tr.net.cfg.anchor == 1.5
    small = GeneralistTrainer(GeneralistConfig(d_model=32, n_heads=4))
    with pytest.raises(ValueError, match=r"init_model: .* has network sizes"):
        generalist_run.load_weights(small, TOKEN_MODEL)


def test_train_py_delegates_generalist_runs(capsys) -> None:
    import train

    with pytest.raises(SystemExit) as e:
        train.main(["token-generalist", "--n-eval-farms", "0"])
    assert e.value.code == 2
    assert (
        "train.py token-generalist: error: --n-eval-farms: must be >= 1" in capsys.readouterr().err
    )


def test_bad_selection_options_exit_2(capsys) -> None:
    for bad in (["--select-anchors", "3,x"], ["--select-anchors", "-1"],
                ["--select-min-share", "1.5"]):  # fmt: skip
        with pytest.raises(SystemExit) as e:
            generalist_run.parse(bad)
        assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--select-min-share: must be in [0, 1]" in err


def test_a_negative_anchor_exits_2(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        generalist_run.parse(["--anchor", "-1"])
    assert e.value.code == 2 and "--anchor: must be >= 0" in capsys.readouterr().err
