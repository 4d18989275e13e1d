"""Exact evaluation: one stationary solve of a priority table's per-server CTMC
(``serverfarm_gym.baselines.solvers.ctmc.evaluate_policy``, what ``best-priority``'s exact search and the
generalist's exact labels call hundreds of times a farm), by chain size.

Reference, measured in the same run on the same chains: the same evaluation with SuperLU's
default factorisation options (COLAMD column order, strict partial pivoting) in place of the
direct method's :data:`serverfarm_gym.baselines.solvers.ctmc.DIRECT_LU_OPTIONS`. Both must give the same
efficiency (the largest relative difference is printed).

Chains above ``DIRECT_MAX_STATES`` (3,000) are solved by the iterative method, which the options
do not touch: the last band shows the switch (the two columns agree there).

Farms: the first draws of the small-farm stream ``serverfarm_gym.envs.farm_sampler.SMALL_FARMS`` (the
generalist's exact labels are drawn from it) whose chain falls in each size band; the table is
PAS's.

``python -m benchmarks.bench_exact`` (5 rounds a farm) or ``--quick``.
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import report
from serverfarm_gym.baselines.pas import pas_table
from serverfarm_gym.baselines.solvers import ctmc
from serverfarm_gym.envs.farm_sampler import SMALL_FARMS, sample_farm

#: chain-size bands (states), one farm each
BANDS = ((300, 800), (1_200, 2_000), (2_000, 3_500), (3_500, 5_000))
#: SuperLU's own defaults: the reference factorisation
REFERENCE_OPTIONS: dict[str, object] = {"permc_spec": "COLAMD", "diag_pivot_thresh": 1.0}


@contextmanager
def lu_options(options: dict[str, object]):
    """The direct method's SuperLU options set to ``options`` inside the block."""
    saved = dict(ctmc.DIRECT_LU_OPTIONS)
    ctmc.DIRECT_LU_OPTIONS.clear()
    ctmc.DIRECT_LU_OPTIONS.update(options)
    try:
        yield
    finally:
        ctmc.DIRECT_LU_OPTIONS.clear()
        ctmc.DIRECT_LU_OPTIONS.update(saved)


def farms(bands: tuple[tuple[int, int], ...]) -> list[Any]:
    """The first farm of the small-farm stream in each band (exponential sizes)."""
    out, seed = {}, 0
    while len(out) < len(bands) and seed < 100_000:
        c = sample_farm(seed, SMALL_FARMS)
        n = ctmc.n_full_states(c)
        for i, (lo, hi) in enumerate(bands):
            if i not in out and lo <= n < hi:
                out[i] = c
        seed += 1
    return [out[i] for i in sorted(out)]


def time_solve(config: Any, rounds: int) -> tuple[float, float]:
    """(median CPU seconds of one evaluation, its efficiency)."""
    t = pas_table(config)
    times, eff = [], 0.0
    for _ in range(rounds):
        c0 = time.thread_time()
        eff = ctmc.evaluate_policy(config, t, max_states=5_000).efficiency
        times.append(time.thread_time() - c0)
    return sorted(times)[len(times) // 2], eff


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="two bands, 2 rounds")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json")
    a = p.parse_args(argv)
    if a.rounds < 1:
        p.error("--rounds: must be >= 1")
    bands, rounds = (BANDS[:2], 2) if a.quick else (BANDS, a.rounds)
    t0 = time.perf_counter()
    rows, runs = [], []
    for c in farms(bands):
        new, e_new = time_solve(c, rounds)
        with lu_options(REFERENCE_OPTIONS):
            ref, e_ref = time_solve(c, rounds)
        diff = abs(e_new - e_ref) / e_ref
        runs.append({"farm": c.name, "states": ctmc.n_full_states(c), "servers": c.n_servers,
                     "cpu_s": new, "reference_cpu_s": ref, "speedup": ref / new,
                     "efficiency_rel_diff": diff})  # fmt: skip
        rows.append([c.name, ctmc.n_full_states(c), 1e3 * new, 1e3 * ref, ref / new, f"{diff:.1e}"])
    headers = ["farm", "states", "ms (DIRECT_LU_OPTIONS)", "ms (SuperLU defaults)", "speed-up",
               "efficiency rel. diff."]  # fmt: skip
    return report("bench_exact", headers, rows, runs, a.json, t0)


if __name__ == "__main__":
    main()
