"""Memory: peak resident set size of a process that builds and simulates a very large farm.

Each measurement runs in a fresh subprocess and reports ``resource.getrusage(RUSAGE_SELF)
.ru_maxrss`` (peak RSS, KiB on Linux) at its end:

* baseline: the interpreter with ``envs`` imported and the kernels loaded (a 4-server run);
* ``FarmSimulator``: paper-100 scaled to 10^6 servers (``FarmConfig.scaled(10_000)``), warmed up
  and run under PAS;
* ``ServerFarmGroup-v0`` (size-independent env) on the same farm: reset and steps.

``python -m benchmarks.bench_memory`` (10^6 servers) or ``--quick`` (10^4).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import report

_SCRIPT = r"""
import resource, sys, time
import numpy as np
import gymnasium as gym
from serverfarm_gym import envs
from serverfarm_gym.envs.scenarios import load_scenario
from serverfarm_gym.envs.simulator import FarmSimulator
what, scale, epochs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t0 = time.perf_counter()
tiny = load_scenario("tiny")
FarmSimulator(tiny, seed=0).run(10, "priority", np.ones((2, 4)))  # load the kernels
c = load_scenario("paper-100").scaled(scale) if scale > 1 else load_scenario("paper-100")
events = 0
if what == "sim":
    sim = FarmSimulator(c, seed=0)
    table = np.repeat(c.group_efficiency[:, None], c.max_buffer + 1, axis=1)
    st = sim.run(epochs, "priority", table)
    events = int(st.arrivals.sum() + st.departures)
elif what == "group-env":
    env = gym.make("ServerFarmGroup-v0", scenario=c, warmup_epochs=epochs)
    env.reset(seed=0)
    for _ in range(1000):
        env.step(env.action_space.sample())
    events = epochs
peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(repr({"peak_mib": peak_kib / 1024, "servers": c.n_servers, "events": events,
            "seconds": time.perf_counter() - t0}))
"""


def run(what: str, scale: int, epochs: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT, what, str(scale), str(epochs)],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    return eval(out.stdout.strip().splitlines()[-1])  # our own repr of a dict of numbers


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--scale", type=int, default=10_000, help="paper-100 scale (10,000: 10^6)")
    p.add_argument("--epochs", type=int, default=30_000_000, help="PAS epochs simulated")
    p.add_argument("--json")
    a = p.parse_args(argv)
    if a.quick:
        a.scale, a.epochs = 100, 200_000
    t0 = time.perf_counter()
    res = {
        "baseline (imports + kernels, 4 servers)": run("baseline", 1, 0),
        "FarmSimulator.run (PAS)": run("sim", a.scale, a.epochs),
        "ServerFarmGroup-v0 (warm-up + 1,000 steps)": run("group-env", a.scale, a.epochs // 10),
    }
    rows = [
        [k, v["servers"] if "baseline" not in k else 4, v["events"], v["peak_mib"], v["seconds"]]
        for k, v in res.items()
    ]
    headers = ["process", "servers", "events / epochs", "peak RSS MiB", "seconds"]
    return report("bench_memory", headers, rows, res, a.json, t0)


if __name__ == "__main__":
    main()
