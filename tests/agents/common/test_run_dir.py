"""serverfarm_gym.agents.common.run_dir (a run directory's lock and identity), serverfarm_gym.agents.common.run_checks (train.py's number
checks) and serverfarm_gym.agents.common.checkpoints.save_model_atomic under a full disk."""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from serverfarm_gym.agents.common.checkpoints import DiskWriteError, save_model_atomic
from serverfarm_gym.agents.common.run_checks import MAX_SEED, check_numbers
from serverfarm_gym.agents.common.run_dir import (
    LOCK_FILE,
    RunDirBusy,
    RunDirLock,
    scenario_identity,
)
from serverfarm_gym.envs.scenarios import load_scenario


def test_one_lock_per_directory_and_it_is_released(tmp_path):
    with RunDirLock(tmp_path):
        assert (tmp_path / LOCK_FILE).read_text().strip() == str(os.getpid())
        with pytest.raises(RunDirBusy, match=rf"in use by another train.py \(pid {os.getpid()}"):
            RunDirLock(tmp_path).acquire()
    assert not (tmp_path / LOCK_FILE).exists()
    with RunDirLock(tmp_path):  # free again
        pass


def test_a_lock_left_by_a_dead_process_is_taken_over_with_a_warning(tmp_path, capsys):
    (tmp_path / LOCK_FILE).write_text("999999999\n")  # above any pid_max: never a live process
    with RunDirLock(tmp_path):
        assert (tmp_path / LOCK_FILE).read_text().strip() == str(os.getpid())
    assert "taking over the lock of pid 999999999 (no longer running" in capsys.readouterr().err


def test_scenario_identity_tells_farms_apart():
    tiny = load_scenario("tiny")
    assert scenario_identity(tiny) == scenario_identity(load_scenario("tiny"))
    assert scenario_identity(tiny) != scenario_identity(load_scenario("small-2"))


@dataclass
class _Args:
    """The numeric options of train.py (serverfarm_gym.agents.common.run_args) at their defaults (check_numbers reads them by name)."""

    scenario: str = "tiny"
    trainer: str = "ppo"
    action_mode: str = "server"
    server_network: str = "tied"
    learning_rate: float = 3e-4
    clip_range: float = 0.2
    max_grad_norm: float = 0.5
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    target_kl: float = 0.0
    eta_tau: float = 1e4
    gamma: float = 0.9
    gae_lambda: float = 0.95
    pas_confidence: float = 0.2
    total_timesteps: int = 1000
    n_envs: int = 4
    n_steps: int = 64
    batch_size: int = 64
    n_epochs: int = 2
    eval_freq: int = 100
    checkpoint_freq: int = 100
    eval_epochs: int = 100
    eval_replications: int = 2
    final_eval_epochs: int = 100
    episode_steps: int = 0
    torch_threads: int = 1
    verbose: int = 0
    train_scale: int = 1
    seed: int = 0
    warmup_epochs: int = -1


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("learning_rate", float("inf"), "--learning-rate: must be a finite number > 0"),
        ("vf_coef", float("nan"), "--vf-coef: must be a finite number >= 0"),
        ("gae_lambda", 1.5, "--gae-lambda: must be a finite number >= 0 and <= 1"),
        ("n_envs", True, "--n-envs: must be an integer >= 1"),
        ("warmup_epochs", -5, r"--warmup-epochs: must be an integer >= -1 \(-1: derived"),
        ("seed", MAX_SEED + 1, "--seed: at most"),
    ],
)
def test_check_numbers_names_the_option(field, value, message):
    check_numbers(_Args())
    with pytest.raises(ValueError, match=message):
        check_numbers(_Args(**{field: value}))


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EFBIG])
def test_save_model_atomic_on_a_full_disk(tmp_path, code):
    """The write fails half way: a named error, no temporary file, the old file untouched."""
    target = tmp_path / "best_model.zip"
    target.write_bytes(b"the previous model")

    class Model:
        def save(self, path: Path) -> None:
            Path(path).write_bytes(b"half")
            raise OSError(code, os.strerror(code))

    with pytest.raises(DiskWriteError, match=rf"^cannot write {target}: (no space|file too large)"):
        save_model_atomic(Model(), target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best_model.zip"]
    assert target.read_bytes() == b"the previous model"
