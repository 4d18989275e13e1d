"""Train a masked PPO dispatcher on a server-farm scenario and compare it with PAS and the optimum.

    python train.py                                   # the default job: preset "tiny", ~1 min
    python train.py --scenario small-2 --seed 1
    python train.py --scenario my_farm.yaml           # settings derived from the farm
    python train.py --scenario paper-100 --init random --total-timesteps 1000000
    python train.py --trainer sb3                     # the reference: sb3-contrib MaskablePPO
    python train.py --output-dir runs/tiny-server-s0 --resume   # continue after a kill
    python train.py token-generalist                  # generalist-checked's token network
    python train.py table-generalist main-network     # generalist's table network (docs/generalist.md)

Four routes, each with its own arguments (the PPO trainers' typed in
``serverfarm_gym.agents.common.run_args``):

* ``--trainer ppo`` (the default; :class:`~serverfarm_gym.agents.common.run_args.PPOArgs`,
  ``serverfarm_gym.agents.ppo.run``): the CleanRL-style masked PPO of ``serverfarm_gym.agents.ppo.ppo`` on the
  compiled vector env, many times the steps per CPU second (BENCHMARKS.md). Its settings are
  derived from the farm (``serverfarm_gym.agents.common.farm_settings``, printed with their reasons).
* ``--trainer sb3`` (:class:`~serverfarm_gym.agents.common.run_args.Sb3Args`, ``serverfarm_gym.agents.ppo_sb3.train``):
  sb3-contrib ``MaskablePPO`` on a ``DummyVecEnv``, the reference.
* ``token-generalist`` as the first argument (``serverfarm_gym.agents.token_generalist.run``, its
  own options): the token network of ``generalist-checked``, by PPO and optimum distillation.
* ``table-generalist main-network|small-expert`` (``serverfarm_gym.agents.table_generalist.run``,
  each stage its own options): the table network of ``generalist``, by distillation of
  ``best-priority``.

Precedence: the trainer's defaults < the settings derived from the farm (ppo) < the
hyperparameter file's entries for the scenario and action mode (ppo: ``default``,
``<scenario>``, ``<scenario>:<mode>``; sb3: ``sb3``, ``sb3:<scenario>``, ``sb3:<scenario>:<mode>``)
< options given on the command line (``serverfarm_gym.agents.common.run_args.resolve_args``).

A run directory (``--output-dir``, default ``runs/<scenario>-<mode>-s<seed>``) receives
``args.json`` (the resolved arguments: replay a run with ``--args-file``), ``checkpoints/``,
``evaluations.jsonl``, TensorBoard logs in ``tb/``, ``best_model.zip`` and ``final_model.zip``
(each with its JSON sidecar for ``serverfarm_gym.agents.ppo.PPOAgent.load``) and ``summary.json``; while a run
is going, ``train.lock`` (its pid: a second run into the directory is refused, see
``serverfarm_gym.agents.common.run_dir``). ``--resume`` needs ``args.json`` and the farm it records, unchanged.
See docs/training.md.
"""

from __future__ import annotations

import errno
import sys
import time
from pathlib import Path
from typing import Any

from serverfarm_gym.agents.common.checkpoints import atomic_write_json, read_evaluations
from serverfarm_gym.agents.common.run_args import (
    DEFAULT_HYPERPARAMS,
    PPOArgs,
    ResolvedRun,
    Sb3Args,
    build_parser,
    resolve_args,
)
from serverfarm_gym.agents.common.run_checks import (
    check_output_dir,
    check_resumable,
    make_output_dir,
)
from serverfarm_gym.agents.common.run_dir import RunDirLock, check_resume_identity
from serverfarm_gym.agents.common.run_report import (
    format_report,
    learning_progress,
    plot_learning_curves,
)
from serverfarm_gym.agents.ppo.run import train_ppo
from serverfarm_gym.agents.ppo_sb3.train import train_sb3
from serverfarm_gym.agents.table_generalist import run as table_generalist
from serverfarm_gym.agents.token_generalist import run as token_generalist
from serverfarm_gym.evaluation.cli import run_cli

__all__ = [
    "DEFAULT_HYPERPARAMS",
    "GENERALIST_ROUTES",
    "PPOArgs",
    "Sb3Args",
    "main",
    "resolve_args",
    "train",
]

#: first argument -> the generalist's command line (a module with ``build_parser`` and ``main``)
GENERALIST_ROUTES = {"token-generalist": token_generalist, "table-generalist": table_generalist}

#: write errors that mean the disk (or the file system's file size, or a quota) is full
DISK_FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)


def print_derived(name: str, derived: dict[str, Any]) -> None:
    """The settings derived from the farm, each with its reason or the value that replaced it."""
    print(f"{name}: settings derived from the farm (agents/common/farm_settings.py), "
          "replaced where the hyperparameter file or the command line set them:")  # fmt: skip
    for k, v in derived["values"].items():
        if k in derived["overridden"]:
            print(
                f"  {k} = {derived['overridden'][k]}  (set; derived {v}: {derived['reasons'][k]})"
            )
        else:
            print(f"  {k} = {v}  ({derived['reasons'][k]})")


def train(run: ResolvedRun) -> dict[str, Any]:
    """Run (or resume) one training job; writes ``summary.json``, prints the report and returns
    the summary."""
    out = make_output_dir(run.args.output_dir)
    with RunDirLock(out):  # one process per run directory (serverfarm_gym.agents.common.run_dir)
        return _train_locked(run)


def _train_locked(run: ResolvedRun) -> dict[str, Any]:
    t_start, cpu_start = time.perf_counter(), time.process_time()
    a, out = run.args, Path(run.args.output_dir)
    check_output_dir(a.output_dir, a.resume)
    if a.resume:  # before anything is written: the farm must be the run's
        check_resumable(out)
        check_resume_identity(out, run.config, a.scenario)
    if isinstance(a, PPOArgs):
        print_derived(run.config.name, run.derived)
        summary = train_ppo(a, run.config, run.derived)
    else:
        summary = train_sb3(a, run.config)
    plot_learning_curves([out], out / "learning_curve.png")
    summary["learning"] = learning_progress(summary, read_evaluations(out / "evaluations.jsonl"))
    summary["paths"]["learning_curve"] = str(out / "learning_curve.png")
    summary["total_wall_s"] = time.perf_counter() - t_start
    summary["total_cpu_s"] = time.process_time() - cpu_start
    atomic_write_json(out / "summary.json", summary)
    print(format_report(summary))
    return summary


def _train_route(argv: list[str] | None, result: dict[str, Any]) -> None:
    """``--trainer ppo|sb3``: resolve the arguments (the farm loaded once), then train."""
    run = resolve_args(argv)
    check_output_dir(run.args.output_dir, run.args.resume)
    try:
        result.update(train(run))
    except OSError as err:
        if err.errno not in DISK_FULL:
            raise
        # not bad input (exit 2) but no traceback either: the file and the cause, exit 1
        where = f"cannot write {err.filename}: " if err.filename else ""
        print(f"train.py: error: {where}{' '.join(str(err).split())}", file=sys.stderr)
        raise SystemExit(1) from None


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Command-line entry point; returns the run's summary. Bad settings or files exit with status
    2 and a one-line message (``serverfarm_gym.evaluation.cli.run_cli``, as evaluate.py and sweep.py), Ctrl-C
    with 130 after saving a checkpoint."""
    result: dict[str, Any] = {}
    rest = sys.argv[1:] if argv is None else list(argv)
    route = GENERALIST_ROUTES.get(rest[0]) if rest else None
    if route is not None:  # a generalist's route: its own options
        code = run_cli(route.build_parser(), lambda: result.update(route.main(rest[1:])))
    else:
        # Ctrl-C inside learn() is handled by the trainer (it saves a checkpoint); elsewhere
        # (references, final evaluation) every checkpoint saved so far is complete
        code = run_cli(
            build_parser(),
            lambda: _train_route(argv, result),
            interrupted="interrupted; the checkpoints saved so far are kept (--resume continues "
            "from the newest)",
        )
    if code:
        raise SystemExit(code)
    return result


if __name__ == "__main__":
    main()
