"""Cost of dynamic right-sizing in the simulator: ns per event of ``FarmSimulator.run`` (PAS's
table) on the same farms without and with a ``sleep`` mapping on every group, rounds interleaved.

An event here is an arrival (blocked ones included) or a departure in both columns; the
right-sizing loop also processes setup completions and idle timeouts, which are not counted, so
its column is the whole cost of the extension per base-model event.

``python -m benchmarks.bench_sleep`` (about a minute) or ``--quick``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from benchmarks.common import Rate, measure, print_header, table
from serverfarm_gym.envs.config import FarmConfig, farm_from_dict
from serverfarm_gym.envs.scenarios import load_scenario
from serverfarm_gym.envs.simulator import FarmSimulator


def with_sleep(c: FarmConfig) -> FarmConfig:
    """Every group sleeps: off at 10% of idle power, setup at busy power with a mean of one mean
    job, an idle server switches off after a mean of one mean job."""
    d = c.to_dict()
    for g in d["groups"]:
        busy = g["busy_power"] if not isinstance(g["busy_power"], list) else g["busy_power"][-1]
        g["sleep"] = {"power": 0.1 * g["idle_power"], "setup_rate": 1.0, "setup_power": busy,
                      "idle_timeout_rate": 1.0}  # fmt: skip
    d["name"] = f"{c.name}+sleep"
    return farm_from_dict(d)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--epochs", type=int, default=500_000)
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args(argv)
    if a.quick:
        a.epochs, a.rounds = 20_000, 2
    farms = []
    for name, c in (("tiny", load_scenario("tiny")), ("paper-100", load_scenario("paper-100"))):
        farms += [(name, c), (f"{name} + sleep", with_sleep(c))]
    runs = {}
    for name, c in farms:
        tab = np.repeat(c.group_efficiency[:, None], c.max_buffer + 1, axis=1)
        sim = FarmSimulator(c, seed=1)
        sim.run(max(20 * c.n_servers, 20_000), "priority", tab)  # warm-up (and compile)
        runs[name] = (Rate(name), sim, tab, c)
    for _ in range(a.rounds):
        for rate, sim, tab, _ in runs.values():

            def run(sim=sim, tab=tab) -> float:
                st = sim.run(a.epochs, "priority", tab)
                return float(st.arrivals.sum() + st.departures)

            rate.add(*measure(run))
    print_header("bench_sleep")
    rows = []
    for name, (rate, sim, tab, c) in runs.items():
        base = runs[name.replace(" + sleep", "")][0].per_cpu_second
        st = sim.run(a.epochs // 5, "priority", tab)
        ns = 1e9 / rate.per_cpu_second
        rows.append([name, c.n_servers, ns, base / rate.per_cpu_second, st.efficiency,
                     st.mean_response_time])  # fmt: skip
    print(table(["farm", "servers", "ns / event", "vs without sleep", "PAS efficiency",
                 "mean response time"], rows))  # fmt: skip


if __name__ == "__main__":
    main()
