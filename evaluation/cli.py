"""Command-line options shared by ``evaluate.py`` and ``sweep.py`` (one definition, same meaning)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from serverfarm_gym.evaluation.rollout import MAX_WINDOW_EPOCHS


def int_at_least(low: int, high: int | None = None, limit: str = "") -> Callable[[str], int]:
    """An argparse ``type``: an integer in ``[low, high]`` (a usage error, exit 2, naming the
    option otherwise: ``--seed -1`` and ``--optimum-max-variables -1`` are refused, not passed
    on). ``limit`` names the constant behind ``high`` in the message."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if v < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text!r}")
        if high is not None and v > high:
            raise argparse.ArgumentTypeError(
                f"at most {high:,}{f' ({limit})' if limit else ''}, got {v:,}"
            )
        return v

    return parse


def int_list(low: int) -> Callable[[str], list[int]]:
    """An argparse ``type``: a non-empty comma-separated list of integers >= ``low``
    (``--scales ""`` or ``--seeds ,`` ran nothing and printed an empty table)."""
    one = int_at_least(low)

    def parse(text: str) -> list[int]:
        items = [x.strip() for x in text.split(",") if x.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
        return [one(x) for x in items]

    return parse


def name_list(option: str, text: str) -> list[str]:
    """The non-empty comma-separated names of ``option`` (``ValueError`` naming it if empty)."""
    names = [x.strip() for x in text.split(",") if x.strip()]
    if not names:
        raise ValueError(f"{option}: give at least one name, got {text!r}")
    return names


def add_run_options(p: argparse.ArgumentParser) -> None:
    """Measurement window, exact-solver, execution and output options of an evaluation run."""
    p.add_argument(
        "--horizon",
        type=int_at_least(1, MAX_WINDOW_EPOCHS, "MAX_WINDOW_EPOCHS"),
        default=100_000,
        help="decision epochs measured per replication (default 100000)",
    )
    p.add_argument(
        "--warmup",
        type=int_at_least(0, MAX_WINDOW_EPOCHS, "MAX_WINDOW_EPOCHS"),
        default=None,
        help="decision epochs discarded before measuring (default: 50 mean job durations, at least 10%% of the horizon)",
    )
    p.add_argument(
        "--action-mode",
        choices=("server", "group"),
        default="server",
        help="encoding for policies rolled out through the env",
    )
    p.add_argument("--no-optimum", action="store_true", help="do not call the exact solver")
    p.add_argument(
        "--optimum-max-variables",
        type=int_at_least(1),
        default=None,
        metavar="N",
        help="size limit for the exact LP (default: the solver's); larger farms get optimum null",
    )
    p.add_argument(
        "--workers",
        type=int_at_least(1),
        default=None,
        help="local worker processes (default min(cpu_count, runs); 1 = in-process)",
    )
    p.add_argument(
        "--ray",
        nargs="?",
        const="",
        default=None,
        metavar="ADDRESS",
        help="run on Ray: a cluster address, or none for a local instance",
    )
    p.add_argument(
        "--json", dest="json_path", metavar="PATH", help="write the JSON report (atomically)"
    )
    p.add_argument("--csv", dest="csv_path", metavar="PATH", help="write the CSV rows")
    p.add_argument("--quiet", action="store_true", help="no table, no progress bar")


def run_cli(
    parser: argparse.ArgumentParser,
    run: Callable[[], object],
    interrupted: str = "interrupted; no output file was written or modified",
) -> int:
    """Call ``run`` with the exit codes the scripts (``evaluate.py``, ``sweep.py``, ``train.py``)
    promise: 0; 2 with a one-line message on stderr and no traceback for bad input (a bad
    scenario, file, policy name or option value: any ``ValueError``, which includes
    ``serverfarm_gym.envs.config.ConfigError`` and ``serverfarm_gym.envs.mapping_files.FileFormatError``); 130 on Ctrl-C, with the
    one-line message ``interrupted`` (by default: no output file was written or modified, true of
    the evaluation scripts, whose reports are written atomically at the end)."""
    try:
        run()
    except ValueError as err:
        print(f"{parser.prog}: error: {_one_line(err)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{parser.prog}: {interrupted}", file=sys.stderr)
        return 130
    return 0


def _one_line(err: BaseException) -> str:
    # a multi-line message (a YAML parser's caret diagram, a wrapped solver error) stays one line
    return " ".join(str(err).split()) or type(err).__name__
