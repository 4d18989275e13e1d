"""train.py --resume and interruptions: the evaluation history and the best
model survive a resume, a damaged checkpoint falls back to the previous one, a total below the
checkpoint is refused, and Ctrl-C saves the checkpoint of the latest rollout start (exit 130).

One small base run (tiny, 512 timesteps, rollouts of 2 x 64) is copied for each test.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("sb3_contrib")

import train
from serverfarm_gym.agents.common.checkpoints import list_checkpoints, read_evaluations
from tests.helpers.scripts import best_sidecar, exit_code, resume_run

FAST = [
    "--trainer", "sb3",
    "--n-envs", "2", "--n-steps", "64", "--batch-size", "64", "--n-epochs", "2",
    "--net-arch", "16,16", "--eval-freq", "128", "--final-eval-epochs", "500",
    "--no-progress-bar", "--no-tensorboard", "--hyperparams", "none", "--seed", "3",
]  # fmt: skip


@pytest.fixture(scope="module")
def base_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("base") / "run"
    train.main([*FAST, "--output-dir", str(out), "--total-timesteps", "512",
                "--checkpoint-freq", "256"])  # fmt: skip
    return out


@pytest.fixture
def run_copy(base_run, tmp_path) -> Path:
    return Path(shutil.copytree(base_run, tmp_path / "run"))


def test_base_run_history(base_run):
    steps = [h["timesteps"] for h in read_evaluations(base_run / "evaluations.jsonl")]
    assert steps == [0, 128, 256, 384, 512]
    assert [s for _, s in list_checkpoints(base_run / "checkpoints")] == [512, 256]


def test_resume_keeps_the_evaluation_history_and_the_best_model(run_copy):
    before = read_evaluations(run_copy / "evaluations.jsonl")
    best_before = best_sidecar(run_copy)["eval_efficiency"]
    assert best_before == max(h["efficiency"] for h in before)
    summary = resume_run(train.main, run_copy, 768)
    after = read_evaluations(run_copy / "evaluations.jsonl")
    assert after[: len(before)] == before, "evaluations up to the checkpoint are kept as they were"
    assert [h["timesteps"] for h in after] == [0, 128, 256, 384, 512, 640, 768]
    best = best_sidecar(run_copy)
    # the best model is the best ever measured: replaced only by a better one
    assert best["eval_efficiency"] == max(h["efficiency"] for h in after) >= best_before
    best_entry = max(after, key=lambda h: h["efficiency"])
    assert best["timesteps"] == best_entry["timesteps"]
    assert summary["resumed_from"] == 512 and summary["n_evaluations"] == 7
    assert not (run_copy / "evaluations_superseded.jsonl").exists()


def test_evaluations_after_the_checkpoint_are_superseded_not_lost(run_copy):
    """A kill after the evaluation at 512 but before its checkpoint: the resumed run measures
    384 and 512 again; the first measurements move to evaluations_superseded.jsonl, and the best
    model (perhaps from one of them) is only replaced by a better one."""
    before = read_evaluations(run_copy / "evaluations.jsonl")
    best_before = best_sidecar(run_copy)["eval_efficiency"]
    (run_copy / "checkpoints" / "ckpt_512_steps.zip").unlink()
    summary = resume_run(train.main, run_copy, 640)
    assert summary["resumed_from"] == 256
    after = read_evaluations(run_copy / "evaluations.jsonl")
    superseded = read_evaluations(run_copy / "evaluations_superseded.jsonl")
    assert [h["timesteps"] for h in after] == [0, 128, 256, 384, 512, 640]
    assert after[:3] == before[:3] and superseded == before[3:]
    best = best_sidecar(run_copy)["eval_efficiency"]
    assert best == max(h["efficiency"] for h in after + superseded) >= best_before


def test_resume_below_the_checkpoint_is_refused(run_copy, capsys):
    args_before = (run_copy / "args.json").read_text()
    summary_before = (run_copy / "summary.json").read_text()
    assert exit_code(lambda: resume_run(train.main, run_copy, 256)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("train.py: error: --resume: --total-timesteps 256 is below the 512")
    assert "\n" not in err
    assert (run_copy / "args.json").read_text() == args_before
    assert (run_copy / "summary.json").read_text() == summary_before
    # the same total is allowed: it finishes a run killed during its final evaluation
    assert resume_run(train.main, run_copy, 512)["timesteps"] == 512


def test_a_damaged_checkpoint_falls_back_to_the_previous_one(run_copy, capsys):
    newest = run_copy / "checkpoints" / "ckpt_512_steps.zip"
    newest.write_bytes(newest.read_bytes()[:1000])  # cut short
    summary = resume_run(train.main, run_copy, 640)
    err = capsys.readouterr().err
    assert f"warning: checkpoint {newest} cannot be loaded" in err
    assert summary["resumed_from"] == 256 and summary["timesteps"] == 640


def test_no_loadable_checkpoint_is_an_error(run_copy, capsys):
    for path, _ in list_checkpoints(run_copy / "checkpoints"):
        path.write_bytes(b"not a zip")
    assert exit_code(lambda: resume_run(train.main, run_copy, 640)) == 2
    assert "no checkpoint in" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["rollout", "update"])
def test_ctrl_c_saves_the_latest_rollout_start_and_exits_130(where, base_run, tmp_path, capsys,
                                                             monkeypatch):  # fmt: skip
    """Interrupted in the rollout after 256 timesteps or in the update that follows it, the run
    saves exactly the model of its rollout start at 256: the same parameters as the uninterrupted
    base run's checkpoint at 256 (same seed, deterministic CPU training)."""
    from sb3_contrib import MaskablePPO

    from serverfarm_gym.agents.ppo_sb3.callbacks import RolloutStatsCallback

    if where == "rollout":
        original = RolloutStatsCallback._on_step

        def step(self):
            if self.num_timesteps >= 300:
                raise KeyboardInterrupt
            return original(self)

        monkeypatch.setattr(RolloutStatsCallback, "_on_step", step)
    else:
        original_train = MaskablePPO.train

        def update(self):
            original_train(self)
            if self.num_timesteps >= 384:  # at the end of the update of the rollout 256 -> 384:
                raise KeyboardInterrupt  # the parameters have moved on from those at 256

        monkeypatch.setattr(MaskablePPO, "train", update)
    out = tmp_path / "run"
    argv = [*FAST, "--output-dir", str(out), "--total-timesteps", "512",
            "--checkpoint-freq", "1024", "--progress-bar"]  # fmt: skip
    assert exit_code(lambda: train.main(argv)) == 130
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("train.py: interrupted; saved checkpoint") and "--resume" in err
    assert [s for _, s in list_checkpoints(out / "checkpoints")] == [256]
    saved = MaskablePPO.load(out / "checkpoints" / "ckpt_256_steps.zip")
    ref = MaskablePPO.load(base_run / "checkpoints" / "ckpt_256_steps.zip")
    assert saved.num_timesteps == 256
    for (k, a), (_, b) in zip(saved.policy.state_dict().items(), ref.policy.state_dict().items(),
                              strict=True):  # fmt: skip
        assert (a == b).all(), k
    monkeypatch.undo()
    summary = resume_run(train.main, out, 384)
    assert summary["resumed_from"] == 256 and summary["timesteps"] == 384
