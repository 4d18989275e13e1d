#!/usr/bin/env python
"""Sweep scenarios x farm sizes x seeds x policies in one process pool or on Ray (docs/evaluation.md).

    python sweep.py --scenarios paper-100 --scales 1,10,100 --policies pas,whittle,jsq,random \\
        --replications 5 --horizon 100000 --scale-horizon --json sweep.json --csv sweep.csv --plot sweep.png
"""

from __future__ import annotations

import argparse
import sys

from serverfarm_gym.evaluation.cli import (
    add_run_options,
    int_at_least,
    int_list,
    name_list,
    run_cli,
)
from serverfarm_gym.evaluation.outputs import check_output_paths
from serverfarm_gym.evaluation.rollout import MAX_REPLICATIONS
from serverfarm_gym.evaluation.sweep_report import sweep_and_write


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="sweep.py",
        description="Evaluate policies over scenarios, farm sizes (FarmConfig.scaled) and seeds; "
        "every (policy, replication) of every combination is one work unit of a shared pool.",
    )
    p.add_argument("--scenarios", required=True, help="comma-separated presets or YAML/JSON paths")
    p.add_argument(
        "--policies",
        default="pas,whittle,jsq,random",
        help="comma-separated policy names (default %(default)s); PAS is always added",
    )
    p.add_argument(
        "--scales",
        type=int_list(1),
        default=[1],
        help="comma-separated integer scale factors (R_k and lambda_j multiplied), default 1",
    )
    p.add_argument(
        "--seeds",
        type=int_list(0),
        default=[0],
        help="comma-separated base seeds, one independent evaluation each (default 0)",
    )
    p.add_argument(
        "--replications",
        type=int_at_least(1, MAX_REPLICATIONS, "MAX_REPLICATIONS"),
        default=5,
        help=f"replications per evaluation (default 5, at most {MAX_REPLICATIONS:,})",
    )
    p.add_argument(
        "--scale-horizon",
        action="store_true",
        help="multiply horizon and warm-up by the scale factor (same model time for every size)",
    )
    p.add_argument("--plot", dest="plot_path", metavar="PATH", help="efficiency against farm size")
    add_run_options(p)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    a = parser.parse_args(argv)
    try:
        scenarios = name_list("--scenarios", a.scenarios)
        policies = name_list("--policies", a.policies)
    except ValueError as err:
        parser.error(str(err))

    def run() -> None:
        # every output is checked before the run, which may take hours
        check_output_paths(a.json_path, a.csv_path, figures=[a.plot_path])
        sweep_and_write(
            scenarios, json_path=a.json_path, csv_path=a.csv_path, plot_path=a.plot_path,
            quiet=a.quiet, policies=policies, seeds=a.seeds, scales=a.scales,
            replications=a.replications, horizon=a.horizon, warmup=a.warmup,
            scale_horizon=a.scale_horizon, workers=a.workers, use_ray=a.ray is not None,
            ray_address=a.ray or None, action_mode=a.action_mode,
            compute_optimum=not a.no_optimum,
            optimum_max_variables=a.optimum_max_variables, progress=False if a.quiet else None,
        )  # fmt: skip

    return run_cli(parser, run)


if __name__ == "__main__":
    sys.exit(main())
