"""Execute work units in-process, on a local process pool, or on a Ray cluster.

Every unit is a pure function of its fields (scenario, policy, replication seed, window), so the
backend only changes *where* it runs: results are returned in the order of the input list and are
identical for ``workers=1``, ``workers=N`` and Ray (tested). Only ``wall_s`` differs.

Local pools use the ``spawn`` start method: forked children of a process that already holds
threads (tqdm's monitor, torch, numba's thread pool) can deadlock, and spawn behaves the same on
every platform. Workers load the compiled kernels from numba's on-disk cache.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from serverfarm_gym.evaluation.rollout import WorkUnit, run_unit

__all__ = ["default_workers", "parallel_map", "run_units"]


def default_workers(n_units: int) -> int:
    """``min(cpu_count, n_units)`` (at least 1)."""
    return max(1, min(os.cpu_count() or 1, n_units))


def _progress(total: int, enabled: bool | None, desc: str) -> Any:
    from tqdm.auto import tqdm  # type: ignore[import-untyped, unused-ignore]

    # default: a bar only on an interactive terminal (keeps logs and CI output clean)
    disable = (not sys.stderr.isatty()) if enabled is None else (not enabled)
    return tqdm(total=total, desc=desc, unit="run", disable=disable, leave=False)


def run_units(
    units: Sequence[WorkUnit],
    workers: int | None = None,
    ray_address: str | None = None,
    use_ray: bool = False,
    progress: bool | None = None,
) -> list[dict[str, Any]]:
    """Run ``units``; returns their results in input order.

    Args:
        units: the work units (see :class:`serverfarm_gym.evaluation.rollout.WorkUnit`).
        workers: local processes; ``None`` = :func:`default_workers`, ``1`` = in this process.
            With Ray and no address, the CPUs given to the local Ray instance.
        ray_address: Ray cluster address (``"auto"``, ``"ray://host:10001"``, ...); with
            ``use_ray`` and no address a local Ray instance is started (and shut down after).
        use_ray: run on Ray.
        progress: show a tqdm bar (``None``: only on a terminal).
    """
    units = list(units)
    if not units:
        return []
    if workers is not None and (int(workers) != workers or workers < 1):
        raise ValueError(f"workers: must be a positive integer, got {workers}")
    if use_ray or ray_address:
        return _run_ray(units, workers, ray_address, progress)
    n = default_workers(len(units)) if workers is None else min(int(workers), len(units))
    if n == 1:
        out = []
        with _progress(len(units), progress, "evaluating") as bar:
            for u in units:
                out.append(run_unit(u))
                bar.update()
        return out
    return _run_pool(units, n, progress)


def _run_pool(units: list[WorkUnit], n: int, progress: bool | None) -> list[dict[str, Any]]:
    with _progress(len(units), progress, f"evaluating ({n} processes)") as bar:
        return parallel_map(run_unit, [u.lean() for u in units], n, lambda *_: bar.update())


def parallel_map(
    fn: Callable[[Any], Any],
    items: Sequence[Any],
    workers: int,
    progress: Callable[[int, int, Any], None] | None = None,
) -> list[Any]:
    """``[fn(x) for x in items]`` on ``workers`` spawned processes (in this process when
    ``workers <= 1``), results in input order; ``progress(done, total, result)`` is called as
    results arrive. ``fn`` must be a module-level function (it is pickled to the workers).

    ``multiprocessing.Pool`` rather than ``ProcessPoolExecutor``: on Ctrl-C or a failing item the
    workers must stop now, and ``Pool.terminate()`` does (an executor keeps running queued items).
    """
    items = list(items)
    n = len(items)
    if workers <= 1 or n <= 1:
        out = []
        for i, x in enumerate(items):
            out.append(fn(x))
            if progress:
                progress(i + 1, n, out[-1])
        return out
    results: list[Any] = [None] * n
    pool = mp.get_context("spawn").Pool(min(workers, n))
    try:
        tasks = [(fn, i, x) for i, x in enumerate(items)]
        for done, (i, res) in enumerate(pool.imap_unordered(_indexed, tasks), start=1):
            results[i] = res
            if progress:
                progress(done, n, res)
        pool.close()
    except BaseException:
        pool.terminate()
        raise
    finally:
        pool.join()
    return results


def _indexed(task: tuple[Callable[[Any], Any], int, Any]) -> tuple[int, Any]:
    fn, i, x = task
    return i, fn(x)


def _run_ray(
    units: list[WorkUnit], workers: int | None, address: str | None, progress: bool | None
) -> list[dict[str, Any]]:
    try:
        import ray
    except ImportError as err:
        raise ValueError(
            f'--ray: Ray is not installed ({err}); pip install "ray[default]" or run without --ray'
        ) from err
    started = False
    if not ray.is_initialized():
        kw: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        if address:
            kw["address"] = address
        elif workers is not None:
            kw["num_cpus"] = int(workers)
        ray.init(**kw)
        started = True
    refs: list[Any] = []
    try:
        task = ray.remote(num_cpus=1)(run_unit)
        refs = [task.remote(u.lean()) for u in units]
        index = {r: i for i, r in enumerate(refs)}
        results: list[dict[str, Any] | None] = [None] * len(units)
        remaining = list(refs)
        with _progress(len(units), progress, "evaluating (ray)") as bar:
            while remaining:
                done, remaining = ray.wait(remaining, num_returns=1)
                for r in done:
                    results[index[r]] = ray.get(r)
                    bar.update()
        return results  # type: ignore[return-value]
    except BaseException:
        for r in refs:
            ray.cancel(r, force=True)
        raise
    finally:
        if started:
            ray.shutdown()
