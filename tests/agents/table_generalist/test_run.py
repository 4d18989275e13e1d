"""train.py table-generalist's stages (agents/table_generalist/run.py): each stage is its module's
command line under the stage's name, and a stage must be named."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from serverfarm_gym.agents.table_generalist import exact_expert, table_train
from serverfarm_gym.agents.table_generalist import run as table_run


def test_each_stage_is_its_modules_command_line() -> None:
    assert {k: f for k, (f, _) in table_run.STAGES.items()} == {
        "main-network": table_train.main,
        "small-expert": exact_expert.main,
    }


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["main-network", "--members", "0"], "main-network: error: --members/--workers"),
        (["small-expert", "--farms", "0"], "small-expert: error: --farms/--epochs"),
    ],
)
def test_train_py_delegates_each_stage(argv: list[str], message: str, capsys) -> None:
    import train

    with pytest.raises(SystemExit) as e:
        train.main(["table-generalist", *argv])
    assert e.value.code == 2
    assert f"train.py table-generalist {message}" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [[], ["no-such-stage"]])
def test_a_stage_must_be_named(argv: list[str], capsys) -> None:
    with pytest.raises(SystemExit) as e:
        table_run.main(argv)
    assert e.value.code == 2 and "train.py table-generalist: error:" in capsys.readouterr().err
