"""A training run directory's ownership and identity (used by ``train.py`` and both trainers).

* :class:`RunDirLock`: one process owns a run directory. ``train.lock`` holds the owner's pid
  and an exclusive ``fcntl.flock`` (released by the kernel when the process dies, so a lock left
  by a killed run is taken over, with a warning naming its pid); a second ``train.py`` into the
  same ``--output-dir`` is refused with :class:`RunDirBusy`. Why: two runs writing one directory
  both exited 0 with mixed files (one's summary, the other's best model, interleaved logs).
* ``args.json`` is the run's identity: the resolved arguments plus ``scenario_sha256``, a hash
  of the validated farm (:func:`scenario_identity`). ``--resume`` compares the farm it would
  train on with it before anything is written (:func:`check_resume_identity`): a scenario file
  edited since, of another shape or the same shape, is refused rather than mixed into the run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from serverfarm_gym.agents.common.artefacts import read_json_object, read_model_sidecar
from serverfarm_gym.agents.common.checkpoints import atomic_write_json
from serverfarm_gym.envs.config import FarmConfig, farm_from_dict

__all__ = [
    "ARGS_FILE",
    "LOCK_FILE",
    "RunDirBusy",
    "RunDirLock",
    "check_resume_identity",
    "scenario_identity",
    "write_run_args",
]

ARGS_FILE = "args.json"
LOCK_FILE = "train.lock"


class RunDirBusy(ValueError):
    """Another live process owns the run directory."""


def scenario_identity(config: FarmConfig) -> str:
    """sha256 of the validated farm's canonical JSON (``FarmConfig.to_dict``)."""
    text = json.dumps(config.to_dict(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def write_run_args(out: Path, a: Any, config: FarmConfig) -> None:
    """Write ``args.json``: the run's resolved arguments and its farm's identity."""
    data = dataclasses.asdict(a) | {"resume": False, "scenario_sha256": scenario_identity(config)}
    atomic_write_json(out / ARGS_FILE, data)


def _recorded_farm(out: Path) -> tuple[str, str] | None:
    """(identity, where) of the farm the run in ``out`` trained on: ``args.json``'s
    ``scenario_sha256``, else (runs that predate it) the farm in its best model's sidecar."""
    args = out / ARGS_FILE
    if args.exists():
        saved = read_json_object(args, "a run's args.json").get("scenario_sha256")
        if isinstance(saved, str):
            return saved, str(args)
    for name in ("best_model.zip", "final_model.zip"):
        if (out / name).exists():
            meta = read_model_sidecar(out / name)
            return scenario_identity(farm_from_dict(meta["scenario"])), str(out / name)
    return None


def check_resume_identity(out: Path, config: FarmConfig, scenario: str) -> None:
    """Refuse to resume the run in ``out`` on a farm other than the one it trained on."""
    recorded = _recorded_farm(out)
    if recorded is None:
        print(
            f"warning: --resume: {out} records no farm identity (a run from before "
            "scenario_sha256); the farm cannot be compared",
            file=sys.stderr,
        )
        return
    if recorded[0] != scenario_identity(config):
        raise ValueError(
            f"--resume: the scenario {scenario} is not the farm the run in {out} trained on "
            f"(its identity differs from the one recorded in {recorded[1]}: the file was edited "
            "since); resume with the farm unchanged, or start a new run in another --output-dir"
        )


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


class RunDirLock:
    """Exclusive ownership of a run directory for one process (a context manager).

    Raises:
        RunDirBusy: another live process holds the directory's lock.
        ValueError: the lock file cannot be created (the directory is not writable).
    """

    def __init__(self, out: str | Path):
        self.path = Path(out) / LOCK_FILE
        self._fd: int | None = None

    def __enter__(self) -> RunDirLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def acquire(self) -> None:
        import fcntl

        for _ in range(10):  # retried if the file was replaced between open and flock
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
            except OSError as err:
                raise ValueError(
                    f"--output-dir {self.path.parent}: cannot create files there ({err.strerror});"
                    " choose a writable directory"
                ) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = os.read(fd, 64).decode(errors="replace").strip()
                os.close(fd)
                raise RunDirBusy(
                    f"--output-dir {self.path.parent} is in use by another train.py (pid "
                    f"{owner or '?'}, lock file {self.path}); wait for it to finish, or choose "
                    "another --output-dir"
                ) from None
            except OSError as err:  # a file system without locks (some network mounts)
                os.close(fd)
                raise ValueError(
                    f"--output-dir {self.path.parent}: cannot lock {self.path} ({err.strerror}); "
                    "use a directory on a local file system"
                ) from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        else:
            raise RunDirBusy(f"{self.path}: the lock file keeps changing; another run is starting")
        old = os.read(fd, 64).decode(errors="replace").strip()
        if old.isdigit() and int(old) != os.getpid():
            state = "no longer running" if not _pid_alive(int(old)) else "not holding it"
            print(
                f"warning: {self.path}: taking over the lock of pid {old} ({state}: a run that "
                "was killed)",
                file=sys.stderr,
            )
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        self.path.unlink(missing_ok=True)  # before unlocking: a waiting run makes a new file
        os.close(self._fd)
        self._fd = None
