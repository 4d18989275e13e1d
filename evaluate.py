#!/usr/bin/env python
"""Evaluate dispatching policies on a server-farm scenario (see docs/evaluation.md).

    python evaluate.py tiny --policies pas,whittle,random,jsq,optimal \\
        --replications 10 --horizon 100000 --seed 0 --json out.json --csv out.csv --plot out.png
"""

from __future__ import annotations

import argparse
import sys

from serverfarm_gym.evaluation.cli import add_run_options, int_at_least, name_list, run_cli
from serverfarm_gym.evaluation.frontier import DEFAULT_FRONTIER_POLICIES, frontier_and_write
from serverfarm_gym.evaluation.leaderboard import suite_cli
from serverfarm_gym.evaluation.outputs import check_output_paths
from serverfarm_gym.evaluation.policy_report import DEFAULT_POLICIES, evaluate_and_write
from serverfarm_gym.evaluation.rollout import MAX_REPLICATIONS


def _add_suite_options(p: argparse.ArgumentParser) -> None:
    """``--suite`` and the options that only go with it."""
    p.add_argument(
        "--suite",
        metavar="NAME",
        help="run a benchmark suite instead (shipped: core; or a suite YAML path) and write its "
        "leaderboard with normalised scores (docs/evaluation.md)",
    )
    p.add_argument(
        "--out", metavar="DIR", help="with --suite: write leaderboard.{json,md,csv,png} here"
    )
    p.add_argument(
        "--learned",
        metavar="PATH[,PATH]",
        help="with --suite: add the learned rows of these files (experiments/from_scratch.py's "
        "leaderboard_rows.json), one column per label (docs/evaluation.md, 'Learned rows')",
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="evaluate.py",
        description="Long-run energy efficiency of dispatching policies, with 95%% Student-t "
        "intervals over independent replications (common random numbers across policies) and "
        "gaps to PAS, the exact optimum and the relaxation upper bound.",
    )
    p.add_argument(
        "scenario",
        nargs="?",
        help="preset name (tiny, small-1, paper-100, large-10k, ...) or YAML/JSON path",
    )
    _add_suite_options(p)
    p.add_argument(
        "--policies",
        default=",".join(DEFAULT_POLICIES),
        help="comma-separated policy names (serverfarm_gym.baselines.registry names, ppo:PATH); PAS is always "
        "added. Default: %(default)s",
    )
    p.add_argument(
        "--replications",
        type=int_at_least(1, MAX_REPLICATIONS, "MAX_REPLICATIONS"),
        default=10,
        help=f"independent replications (default 10, at most {MAX_REPLICATIONS:,})",
    )
    p.add_argument(
        "--seed",
        type=int_at_least(0),
        default=0,
        help="base seed; replication r uses the same derived seed for every policy (default 0)",
    )
    p.add_argument(
        "--scale",
        type=int_at_least(1),
        default=1,
        help="evaluate the farm scaled by this integer factor (R_k and lambda_j)",
    )
    p.add_argument(
        "--no-builtin",
        action="store_true",
        help="roll every policy out through the env (cross-check; slow)",
    )
    p.add_argument(
        "--exact",
        action="store_true",
        help="report each policy's exact efficiency (stationary distribution of its per-server "
        "CTMC: no sampling error, ci95 0) instead of simulating; small farms with exponential "
        "sizes and constant rates only (otherwise exits 2 saying why)",
    )
    p.add_argument(
        "--plot", dest="plot_path", metavar="PATH", help="write a bar plot (PNG/PDF/SVG)"
    )
    p.add_argument(
        "--frontier",
        action="store_true",
        help="compute the efficiency / mean-response-time frontier instead (exact SLO optimum, "
        "static orders, mixes; --policies as points, default "
        f"{','.join(DEFAULT_FRONTIER_POLICIES)}); --json and --plot write it (docs/latency.md)",
    )
    p.add_argument(
        "--frontier-points",
        type=int,
        default=15,
        metavar="N",
        help="with --frontier: SLO bounds swept by the exact optimum (default 15)",
    )
    add_run_options(p)
    return p


def _frontier(parser: argparse.ArgumentParser, a: argparse.Namespace, policies: list[str]) -> int:
    if a.scenario is None or a.suite is not None or a.csv_path or a.exact or a.learned:
        parser.error(
            "--frontier: give a SCENARIO, with --json/--plot (not --suite, --csv, --exact)"
        )
    if a.frontier_points < 2:
        parser.error(f"--frontier-points: must be >= 2, got {a.frontier_points}")
    if a.policies == parser.get_default("policies"):
        policies = list(DEFAULT_FRONTIER_POLICIES)

    def run() -> None:
        check_output_paths(a.json_path, figures=[a.plot_path])
        frontier_and_write(
            a.scenario, policies, json_path=a.json_path, plot_path=a.plot_path, quiet=a.quiet,
            n_points=a.frontier_points, replications=a.replications, horizon=a.horizon,
            seed=a.seed, workers=a.workers,
        )  # fmt: skip

    return run_cli(parser, run)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    a = parser.parse_args(argv)
    try:
        policies = name_list("--policies", a.policies)
    except ValueError as err:
        parser.error(str(err))
    if a.frontier:
        return _frontier(parser, a, policies)
    if a.suite is not None:
        return run_cli(parser, lambda: suite_cli(parser, a, policies))
    if a.scenario is None or a.out is not None or a.learned is not None:
        parser.error("give a SCENARIO (or --suite NAME); --out and --learned are for --suite")

    def run() -> None:
        # every output is checked before the run, which may take hours
        check_output_paths(a.json_path, a.csv_path, figures=[a.plot_path])
        evaluate_and_write(
            a.scenario, policies, json_path=a.json_path, csv_path=a.csv_path, plot_path=a.plot_path,
            quiet=a.quiet, replications=a.replications, horizon=a.horizon, warmup=a.warmup,
            seed=a.seed, workers=a.workers, use_ray=a.ray is not None, ray_address=a.ray or None,
            action_mode=a.action_mode, use_builtin=not a.no_builtin,
            compute_optimum=not a.no_optimum,
            optimum_max_variables=a.optimum_max_variables, scale=a.scale, exact=a.exact, progress=False if a.quiet else None,
        )  # fmt: skip

    return run_cli(parser, run)


if __name__ == "__main__":
    sys.exit(main())
