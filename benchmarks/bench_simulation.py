"""Raw simulation speed: events per second of ``FarmSimulator.run`` with the built-in PAS
dispatcher (no Python per event), exponential job sizes.

Measures, in one run:

* events (arrivals, blocked ones included, plus departures) per CPU second for ``tiny`` and for
  ``paper-100`` scaled by ``FarmConfig.scaled`` to 100 ... 100,000 servers (1,000,000 with
  ``--scales 1,10,100,1000,10000``), after a warm-up to steady state, and the growth of the cost
  per event from 100 servers to the largest farm;
* the floor: an empty compiled loop drawing the same random numbers per event (an exponential
  and two uniforms) from the same kind of Generator;
* the SimPy reference (``benchmarks/simpy_reference.py``, per-job processor sharing and the
  O(S) dispatcher scan a first SimPy model has) on the same farms, its efficiency next to the
  compiled simulator's, and the speed ratio;
* (``--compile``, default in full runs) the first-call compile time of the kernels in a fresh
  process with an empty numba cache, and the same with the cache filled.

``python -m benchmarks.bench_simulation`` (full, a few minutes) or ``--quick`` (seconds).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
from numba import njit

from benchmarks.common import Rate, command_line, machine, measure, print_header, table, write_json
from benchmarks.simpy_reference import SimpyFarm
from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.scenarios import load_scenario
from serverfarm_gym.envs.simulator import FarmSimulator


@njit(cache=False)
def _rng_floor(rng: np.random.Generator, n: int, lam: float, w: float) -> float:
    """The random numbers the exponential kernel draws per event, and nothing else."""
    t = 0.0
    acc = 0.0
    total = lam + w
    for _ in range(n):
        t += rng.standard_exponential() / total
        u = rng.random() * total
        if u < lam:
            acc += rng.random()  # the job type
        else:
            acc -= rng.random()  # the departing server
    return t + acc


def pas_table(c: FarmConfig) -> np.ndarray:
    return np.repeat(c.group_efficiency[:, None], c.max_buffer + 1, axis=1)


def farms(scales: list[int]) -> list[tuple[str, FarmConfig]]:
    base = load_scenario("paper-100")
    out = [("tiny", load_scenario("tiny"))]
    out += [(f"paper-100 x{f}", base.scaled(f) if f > 1 else base) for f in scales]
    return out


def bench_compiled(
    named: list[tuple[str, FarmConfig]], epochs: int, rounds: int
) -> dict[str, tuple[Rate, float, FarmSimulator]]:
    """Events per second of sim.run with PAS, rounds interleaved across farms."""
    sims = {}
    for name, c in named:
        sim = FarmSimulator(c, seed=1)
        sim.run(
            max(20 * c.n_servers, 200_000 if epochs > 50_000 else 5_000), "priority", pas_table(c)
        )  # warm-up to steady state
        sims[name] = (Rate(name), sim, pas_table(c))
    effs: dict[str, list[float]] = {name: [] for name in sims}
    for _ in range(rounds):
        for name, (rate, sim, tab) in sims.items():
            box = {}

            def run(sim=sim, tab=tab, box=box) -> float:
                box["st"] = st = sim.run(epochs, "priority", tab)
                return float(st.arrivals.sum() + st.departures)

            rate.add(*measure(run))
            effs[name].append(box["st"].efficiency)
    return {n: (r, float(np.mean(effs[n])), s) for n, (r, s, _) in sims.items()}


def bench_floor(events: int, rounds: int) -> Rate:
    rng = np.random.default_rng(0)
    _rng_floor(rng, 10, 1.0, 1.0)  # compile
    rate = Rate("RNG floor")
    for _ in range(rounds):
        rate.add(*measure(lambda: (_rng_floor(rng, events, 95.7, 90.0), float(events))[1]))
    return rate


def bench_simpy(c: FarmConfig, epochs: int) -> tuple[Rate, float, float]:
    """SimPy events per CPU second, efficiency and the half-width of its 95% interval."""
    farm = SimpyFarm(c, seed=2)
    farm.run(max(epochs // 5, 4 * c.n_servers))  # warm-up
    box = {}

    def run() -> float:
        box["r"] = r = farm.run(epochs, n_batches=20)
        return float(r.events)

    rate = Rate("simpy")
    rate.add(*measure(run))
    r = box["r"]
    half = 1.96 * r.batch_efficiency.std(ddof=1) / np.sqrt(len(r.batch_efficiency))
    return rate, r.efficiency, half


_COMPILE_SCRIPT = r"""
import time
c0, w0 = time.process_time(), time.perf_counter()
import numpy as np, gymnasium as gym, envs
from serverfarm_gym.envs.scenarios import load_scenario
from serverfarm_gym.envs.simulator import FarmSimulator
out = {"import": (time.process_time() - c0, time.perf_counter() - w0)}
def lap(name, fn):
    c, w = time.process_time(), time.perf_counter()
    fn()
    out[name] = (time.process_time() - c, time.perf_counter() - w)
c = load_scenario("paper-100")
t = np.repeat(c.group_efficiency[:, None], c.max_buffer + 1, axis=1)
lap("sim.run (first call)", lambda: FarmSimulator(c, seed=0).run(10, "priority", t))
env = gym.make("ServerFarm-v0", scenario="paper-100")
lap("env reset + step (first call)", lambda: (env.reset(seed=0), env.step(0)))
v = gym.make_vec("ServerFarm-v0", num_envs=4, scenario="paper-100")
lap("vector env reset + step (first call)", lambda: (v.reset(seed=0), v.step(np.zeros(4, int))))
print(repr(out))
"""


def bench_compile() -> dict[str, dict[str, tuple[float, float]]]:
    """First-call times in fresh processes: empty numba cache, then the cache it filled."""
    res = {}
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        for label in ("cold cache", "warm cache"):
            out = subprocess.run(
                [sys.executable, "-c", _COMPILE_SCRIPT],
                env=env,
                capture_output=True,
                text=True,
                check=True,
                cwd=Path(__file__).resolve().parents[1],
            )
            res[label] = eval(out.stdout.strip().splitlines()[-1])  # our own repr of floats
    return res


HEADERS = [
    "farm",
    "servers",
    "M events / CPU s",
    "M events / wall s",
    "ns / event",
    "cost / event vs 100 servers",
    "PAS efficiency",
    "SimPy events / CPU s",
    "compiled / SimPy",
    "SimPy efficiency (95%)",
]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; ``--quick`` replaces the sizes by tiny ones."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes: checks the script works")
    p.add_argument("--scales", default="1,10,100,1000", help="paper-100 scale factors")
    p.add_argument("--epochs", type=int, default=2_000_000, help="epochs per round")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--simpy-epochs", type=int, default=30_000)
    p.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="measure first-call compile time (default: on unless --quick)",
    )
    p.add_argument("--json", help="also write the results here")
    a = p.parse_args(argv)
    if a.quick:
        a.scales, a.epochs, a.rounds, a.simpy_epochs = "1,10", 20_000, 2, 1_000
    return a


def result_rows(
    named: list[tuple[str, FarmConfig]],
    compiled: dict[str, tuple[Rate, float, FarmSimulator]],
    simpy: dict[str, tuple[Rate, float, float]],
    floor: Rate,
    ref: float,
) -> list[list]:
    """The table's rows (columns of :data:`HEADERS`): one per farm, then the RNG floor."""
    rows = []
    for name, c in named:
        rate, eff, _ = compiled[name]
        ev = rate.per_cpu_second
        row = [name, c.n_servers, ev / 1e6, rate.per_wall_second / 1e6, 1e9 / ev, ref / ev, eff]
        if name in simpy:
            srate, seff, shalf = simpy[name]
            row += [srate.per_cpu_second, ev / srate.per_cpu_second, f"{seff:.4f} +- {shalf:.4f}"]
        else:
            row += ["", "", ""]
        rows.append(row)
    floor_row = ["RNG floor (same draws, empty loop)", "", floor.per_cpu_second / 1e6]
    floor_row += [floor.per_wall_second / 1e6, 1e9 / floor.per_cpu_second, "", "", "", "", ""]
    rows.append(floor_row)
    return rows


def print_compile(comp: dict[str, dict[str, tuple[float, float]]]) -> None:
    """The first-call times of :func:`bench_compile`, one row per step, one column per cache."""
    print("\nfirst-call times in a fresh process (CPU s / wall s):\n")
    keys = list(next(iter(comp.values())))
    print(
        table(
            ["step", *comp],
            [[k, *[f"{comp[c][k][0]:.1f} / {comp[c][k][1]:.1f}" for c in comp]] for k in keys],
        )
    )


def main(argv: list[str] | None = None) -> dict:
    a = parse_args(argv)
    do_compile = (not a.quick) if a.compile is None else a.compile
    scales = [int(x) for x in a.scales.split(",")]
    named = farms(scales)

    t0 = time.perf_counter()
    floor = bench_floor(max(a.epochs, 100_000), a.rounds)
    compiled = bench_compiled(named, a.epochs, a.rounds)
    simpy = {name: bench_simpy(c, a.simpy_epochs) for name, c in named if c.n_servers <= 100}
    ref = compiled.get("paper-100 x1", compiled["tiny"])[0].per_cpu_second
    rows = result_rows(named, compiled, simpy, floor, ref)
    largest = named[-1][0]
    growth = ref / compiled[largest][0].per_cpu_second

    print_header("bench_simulation")
    print(table(HEADERS, rows))
    print(f"\ncost per event, {largest} vs paper-100: {growth:.2f}x")
    result = {
        "command": command_line(),
        "machine": machine(),
        "floor": floor.as_dict(),
        "compiled": {
            n: {**r.as_dict(), "efficiency": e, "servers": s.config.n_servers}
            for n, (r, e, s) in compiled.items()
        },
        "simpy": {n: {**r.as_dict(), "efficiency": e, "ci95": h} for n, (r, e, h) in simpy.items()},
        "growth_largest_vs_100": growth,
    }
    if do_compile:
        comp = bench_compile()
        print_compile(comp)
        result["compile"] = comp
    print(f"\n(took {time.perf_counter() - t0:.0f} s)")
    write_json(a.json, result)
    return result


if __name__ == "__main__":
    main()
