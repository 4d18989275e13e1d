"""train.py never silently wrong: bad numbers are refused before training, a diverging run stops
by name keeping its last finite checkpoint, one process owns a run directory, ``args.json`` is
the run's identity on ``--resume``, a planted checkpoint runs no code, unusable output paths and
a full disk are named errors, and a run interrupted in its final evaluation resumes to the end.

Small runs (tiny, rollouts of 2 x 64) as in test_train_ppo.py; one base run per trainer is
copied for the tests that change a run directory."""

from __future__ import annotations

import base64
import errno
import json
import os
import pathlib
import pickle
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("sb3_contrib")

import train
from serverfarm_gym.agents.common.checkpoints import list_checkpoints
from serverfarm_gym.agents.common.run_dir import LOCK_FILE, RunDirLock
from tests.helpers.scripts import exit_code, resume_run

FAST = [
    "--n-envs", "2", "--n-steps", "64", "--batch-size", "64", "--n-epochs", "2",
    "--net-arch", "16,16", "--eval-freq", "128", "--no-progress-bar", "--no-tensorboard",
    "--hyperparams", "none", "--seed", "3", "--final-eval-epochs", "500",
]  # fmt: skip
SB3 = ["--trainer", "sb3", *FAST]

FARM = """\
name: two-groups
groups:
  - {name: slow, count: 2, service_rate: 1.0, busy_power: 2.0, idle_power: 1.0, buffer: 3}
  - {name: fast, count: 1, service_rate: 2.0, busy_power: 5.0, idle_power: 1.5, buffer: 3}
job_types:
  - {name: web, arrival_rate: 1.5, groups: [slow, fast]}
"""


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ppo") / "run"
    train.main([*FAST, "--output-dir", str(out), "--total-timesteps", "256"])
    return out


@pytest.fixture(scope="module")
def sb3_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sb3") / "run"
    train.main([*SB3, "--output-dir", str(out), "--total-timesteps", "256",
                "--checkpoint-freq", "128"])  # fmt: skip
    return out


def _copy(run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run, tmp_path / "run"))


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    return err[-1] if err else ""


# ---------------------------------------------------------------------------------------------
# numbers refused before anything starts
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--learning-rate", "inf"), ("--max-grad-norm", "nan"), ("--ent-coef", "nan"),
        ("--vf-coef", "nan"), ("--clip-range", "-1"), ("--eval-freq", "0"),
        ("--checkpoint-freq", "-1"), ("--warmup-epochs", "-5"), ("--seed", "-1"),
        ("--n-envs", "100000000"), ("--gamma", "nan"), ("--target-kl", "-0.1"),
        ("--eval-replications", "0"), ("--seed", "5000000"),
    ],
)  # fmt: skip
def test_bad_numbers_exit_2_naming_the_option(tmp_path, capsys, option, value):
    out = tmp_path / "run"
    assert exit_code(lambda: train.main([*FAST, "--output-dir", str(out), option, value])) == 2
    assert _error(capsys).startswith(f"train.py: error: {option}")
    assert not out.exists(), "nothing is written for refused settings"


def test_rollout_memory_is_a_named_limit(tmp_path, capsys):
    argv = [*FAST, "--output-dir", str(tmp_path / "r"), "--n-envs", "4096", "--n-steps", "10000000"]
    assert exit_code(lambda: train.main(argv)) == 2
    assert "--n-steps x --n-envs: a rollout of" in _error(capsys)


@pytest.mark.parametrize(
    ("line", "message"),
    [("n_envs: true", "n_envs=True is not a valid int"),
     ("learning_rate: .inf", "--learning-rate: must be a finite number"),
     ("clip_range: false", "clip_range=False is not a valid float")],
)  # fmt: skip
def test_hyperparameter_file_values_are_checked_too(tmp_path, capsys, line, message):
    hp = tmp_path / "hp.yml"
    hp.write_text(f"default:\n  {line}\n")
    argv = [*FAST, "--hyperparams", str(hp), "--output-dir", str(tmp_path / "r")]
    assert exit_code(lambda: train.main(argv)) == 2
    assert message in _error(capsys)


@pytest.mark.parametrize("option", ["--args-file", "--hyperparams"])
def test_a_fifo_as_a_settings_file_is_refused_without_blocking(tmp_path, capsys, option):
    fifo = tmp_path / "settings.json"
    os.mkfifo(fifo)
    assert exit_code(lambda: train.main([*FAST, option, str(fifo)])) == 2
    assert "is a FIFO" in _error(capsys)


# ---------------------------------------------------------------------------------------------
# a diverging run stops by name; the last finite checkpoint is kept
# ---------------------------------------------------------------------------------------------
def test_ppo_training_stops_when_the_loss_becomes_nan(tmp_path, capsys, monkeypatch):
    import serverfarm_gym.agents.ppo.ppo as ppo_module

    original, calls = ppo_module.ppo_losses, []

    def losses(*args, **kw):
        terms = original(*args, **kw)
        calls.append(1)
        if len(calls) > 8:  # the third update (4 minibatches each, at 384 steps): NaN
            terms["value"] = terms["value"] * float("nan")  # also in a critic warm-up
        return terms

    monkeypatch.setattr(ppo_module, "ppo_losses", losses)
    out = tmp_path / "run"
    argv = [
        *FAST,
        "--output-dir",
        str(out),
        "--total-timesteps",
        "512",
        "--checkpoint-freq",
        "1024",
    ]
    assert exit_code(lambda: train.main(argv)) == 2
    err = _error(capsys)
    assert err.startswith("train.py: error: training diverged at 384 timesteps: the loss is nan")
    assert "saved checkpoint" in err and "ckpt_256_steps.zip" in err
    assert [s for _, s in list_checkpoints(out / "checkpoints")] == [256, 0]
    assert not (out / "summary.json").exists(), "no report of a diverged run"
    from serverfarm_gym.agents.ppo import PPOAgent
    from serverfarm_gym.agents.ppo.ppo import PPO

    PPO.load(out / "checkpoints" / "ckpt_256_steps.zip")  # finite: it loads
    PPOAgent.load(out / "best_model.zip")


def test_sb3_training_stops_when_the_parameters_become_nan(tmp_path, capsys, monkeypatch):
    import torch
    from sb3_contrib import MaskablePPO

    original = MaskablePPO.train

    def train_then_diverge(self):
        original(self)
        if self.num_timesteps >= 256:
            with torch.no_grad():
                next(self.policy.parameters()).fill_(float("nan"))

    monkeypatch.setattr(MaskablePPO, "train", train_then_diverge)
    out = tmp_path / "run"
    argv = [*SB3, "--output-dir", str(out), "--total-timesteps", "512", "--checkpoint-freq", "128"]
    assert exit_code(lambda: train.main(argv)) == 2
    err = _error(capsys)
    # the update at 256 diverged: the parameters before it are those of the rollout from 128
    assert err.startswith("train.py: error: training diverged at 256 timesteps")
    assert "kept checkpoint" in err and "ckpt_128_steps.zip, the last finite one" in err
    assert [s for _, s in list_checkpoints(out / "checkpoints")] == [128]
    assert not (out / "summary.json").exists()
    from serverfarm_gym.agents.common.artefacts import read_sb3_zip
    from serverfarm_gym.agents.ppo import PPOAgent

    for path, _ in list_checkpoints(out / "checkpoints"):
        read_sb3_zip(path, optimizer=True)  # every checkpoint kept is finite
    PPOAgent.load(out / "best_model.zip")


# ---------------------------------------------------------------------------------------------
# one process per run directory
# ---------------------------------------------------------------------------------------------
def test_a_second_run_into_a_locked_directory_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    with RunDirLock(out):  # stands for a first train.py still running
        argv = [*FAST, "--output-dir", str(out), "--total-timesteps", "128"]
        assert exit_code(lambda: train.main(argv)) == 2
        assert f"is in use by another train.py (pid {os.getpid()}" in _error(capsys)
        assert sorted(p.name for p in out.iterdir()) == [LOCK_FILE]
    assert not (out / LOCK_FILE).exists()


def test_a_stale_lock_of_a_dead_process_is_taken_over(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (out / LOCK_FILE).write_text(f"{dead.pid}\n")
    train.main([*FAST, "--output-dir", str(out), "--total-timesteps", "128"])
    assert f"taking over the lock of pid {dead.pid}" in capsys.readouterr().err
    assert (out / "summary.json").exists() and not (out / LOCK_FILE).exists()


# ---------------------------------------------------------------------------------------------
# args.json is the run's identity
# ---------------------------------------------------------------------------------------------
def test_resume_without_args_json_is_refused(ppo_run, tmp_path, capsys):
    run = _copy(ppo_run, tmp_path)
    (run / "args.json").unlink()
    before = sorted(p.name for p in run.iterdir())
    assert exit_code(lambda: resume_run(train.main, run, 512)) == 2
    err = _error(capsys)
    assert "--resume: " in err and "holds a run (checkpoints" in err and "no args.json" in err
    assert sorted(p.name for p in run.iterdir()) == before


@pytest.mark.parametrize(
    ("edit", "what"),
    [(("arrival_rate: 1.5", "arrival_rate: 1.2"), "same shape"),
     (("count: 2", "count: 3"), "another shape")],
)  # fmt: skip
def test_resume_on_an_edited_farm_is_refused_before_anything_is_written(
    tmp_path, capsys, edit, what
):
    farm = tmp_path / "farm.yaml"
    farm.write_text(FARM)
    out = tmp_path / "run"
    train.main([*FAST, "--scenario", str(farm), "--output-dir", str(out),
                "--total-timesteps", "128"])  # fmt: skip
    snapshot = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    farm.write_text(FARM.replace(*edit))
    assert exit_code(lambda: resume_run(train.main, out, 256)) == 2, what
    assert "is not the farm the run in" in _error(capsys)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == snapshot


# ---------------------------------------------------------------------------------------------
# planted checkpoints run no code
# ---------------------------------------------------------------------------------------------
class _WriteMarker:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.write_text, (pathlib.Path(self.marker), "code ran"))


def _plant(src: Path, dst: Path, marker: Path, steps: int) -> None:
    """``src`` rewritten to ``dst`` with ``steps`` timesteps and a cloudpickled payload in
    every serialised field of its ``data`` entry (what SB3's loader would decode)."""
    data = json.loads(zipfile.ZipFile(src).read("data"))
    payload = base64.b64encode(pickle.dumps(_WriteMarker(marker))).decode()
    for k, v in data.items():
        if isinstance(v, dict) and ":serialized:" in v:
            data[k] = {":type:": v[":type:"], ":serialized:": payload}
    data["num_timesteps"] = steps
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            raw = json.dumps(data).encode() if item.filename == "data" else zin.read(item)
            zout.writestr(item, raw)
    if src.with_suffix(".json").exists():
        meta = json.loads(src.with_suffix(".json").read_text())
        dst.with_suffix(".json").write_text(json.dumps(meta | {"timesteps": steps}))


@pytest.mark.parametrize("trainer", ["ppo", "sb3"])
def test_resume_from_a_planted_checkpoint_runs_no_code(ppo_run, sb3_run, tmp_path, trainer):
    run = _copy(ppo_run if trainer == "ppo" else sb3_run, tmp_path)
    marker = tmp_path / "marker.txt"
    newest = list_checkpoints(run / "checkpoints")[0][0]
    _plant(newest, run / "checkpoints" / "ckpt_384_steps.zip", marker, 384)
    summary = resume_run(train.main, run, 512)
    assert not marker.exists(), "code from the checkpoint ran"
    assert summary["resumed_from"] == 384 and summary["timesteps"] == 512


# ---------------------------------------------------------------------------------------------
# output directories and full disks
# ---------------------------------------------------------------------------------------------
def test_unusable_output_dirs_are_named(tmp_path, capsys, monkeypatch):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    for out, message in ((a_file, "is a file, not a directory"),
                         (a_file / "run", f"cannot be created, {a_file} is a file")):  # fmt: skip
        assert exit_code(lambda o=out: train.main([*FAST, "--output-dir", str(o)])) == 2
        assert (
            _error(capsys) == f"train.py: error: --output-dir {out}: {message}; choose another path"
        )
    # not writable (root ignores permission bits: the refusal of the lock file is simulated)
    import serverfarm_gym.agents.common.run_dir as run_dir

    real_open = os.open

    def refuse(path, *args, **kw):
        if str(path).endswith(LOCK_FILE):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, *args, **kw)

    monkeypatch.setattr(run_dir.os, "open", refuse)
    assert exit_code(lambda: train.main([*FAST, "--output-dir", str(tmp_path / "ro")])) == 2
    assert "cannot create files there (Permission denied)" in _error(capsys)


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EFBIG])
def test_a_full_disk_is_named_and_leaves_no_temporary_file(tmp_path, capsys, monkeypatch, code):
    from stable_baselines3.common.base_class import BaseAlgorithm

    original, saves = BaseAlgorithm.save, []

    def save(self, path, *args, **kw):
        saves.append(path)
        if len(saves) == 4:  # a checkpoint during training: half a file, then the error
            Path(path).write_bytes(b"PK\x03\x04 half")
            raise OSError(code, os.strerror(code))
        return original(self, path, *args, **kw)

    monkeypatch.setattr(BaseAlgorithm, "save", save)
    out = tmp_path / "run"
    argv = [*FAST, "--output-dir", str(out), "--total-timesteps", "512", "--checkpoint-freq", "128"]
    assert exit_code(lambda: train.main(argv)) == 1
    err = _error(capsys)
    assert err.startswith("train.py: error: cannot write ")
    assert {errno.ENOSPC: "no space left", errno.EFBIG: "file too large"}[code] in err
    assert not [p for p in out.rglob("*") if ".tmp" in p.name], "a temporary file was left"
    for path, _ in list_checkpoints(out / "checkpoints"):  # the ones before it are whole
        from serverfarm_gym.agents.ppo.ppo import PPO

        PPO.load(path)


# ---------------------------------------------------------------------------------------------
# interrupted in the final evaluation
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("trainer", ["ppo", "sb3"])
def test_ctrl_c_in_the_final_evaluation_resumes_to_the_end(tmp_path, capsys, monkeypatch, trainer):
    """500 steps run as 512 (whole rollouts of 128): the checkpoint at 512 is above the total,
    and --resume with the run's own total finishes the report without any guess."""

    def interrupt(*args, **kw):
        raise KeyboardInterrupt

    if trainer == "ppo":  # the final window's evaluator
        monkeypatch.setattr("serverfarm_gym.agents.ppo.run.final_window", interrupt)
    else:  # the best model's final load
        monkeypatch.setattr("serverfarm_gym.agents.ppo_sb3.train.PPOAgent.load", interrupt)
    out = tmp_path / "run"
    argv = [*(FAST if trainer == "ppo" else SB3), "--output-dir", str(out),
            "--total-timesteps", "500", "--checkpoint-freq", "256"]  # fmt: skip
    assert exit_code(lambda: train.main(argv)) == 130
    assert list_checkpoints(out / "checkpoints")[0][1] == 512
    assert not (out / LOCK_FILE).exists(), "the lock is released on Ctrl-C"
    monkeypatch.undo()
    summary = train.main(["--output-dir", str(out), "--resume", "--no-progress-bar"])
    assert summary["timesteps"] == 512 and summary["resumed_from"] == 512
