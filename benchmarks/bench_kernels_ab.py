"""Same-window A/B comparison of two checkouts of the project (e.g. main and a branch that changes
the kernels): short measurements in fresh processes, alternating A, B, A, B, ... so that the
load of a shared machine falls on both alike.

Each process imports ``envs`` from its checkout and measures (thread CPU time): ns per event of
``FarmSimulator.run`` (PAS) on tiny, paper-100 and paper-100 x100; the compiled env step alone
(``kernels.vec_step`` on a batch of one, as in ``bench_env_step``'s profile) and the whole
``ServerFarmEnv.step`` in both action modes; decision epochs per CPU second of the native vector
env (64 x paper-100, uniform actions) in both modes. Prints per metric the median and range of
each checkout and the medians' ratio to the first.

``python -m benchmarks.bench_kernels_ab /path/to/main /path/to/branch --rounds 5`` (the checkouts
must have compiled their kernels once: the first round of each is a warm-up when they have not).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

_ONE = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np
from serverfarm_gym import envs
assert envs.__file__.startswith(sys.argv[1]), envs.__file__
from serverfarm_gym.envs import kernels as kn
from serverfarm_gym.envs.scenarios import load_scenario
from serverfarm_gym.envs.server_farm import ServerFarmEnv
from serverfarm_gym.envs.simulator import FarmSimulator
from serverfarm_gym.envs.vector import ServerFarmVectorEnv

cpu = time.thread_time
out = {}


def sim_ns(c, n):
    t = np.repeat(c.group_efficiency[:, None], c.max_buffer + 1, axis=1)
    sim = FarmSimulator(c, seed=0)
    sim.run(20 * c.n_servers + 50_000, table=t)
    r = []
    for _ in range(3):
        s0, c0 = sim.stats(), cpu()
        sim.run(n, table=t)
        d, s = cpu() - c0, sim.stats() - s0
        r.append(d * 1e9 / (int(s.arrivals.sum()) + s.departures))
    return float(np.median(r))


out["sim tiny ns/event"] = sim_ns(load_scenario("tiny"), 1_000_000)
out["sim paper-100 ns/event"] = sim_ns(load_scenario("paper-100"), 1_000_000)
out["sim paper-100 x100 ns/event"] = sim_ns(load_scenario("paper-100").scaled(100), 1_000_000)
for mode in ("server", "group"):
    u = ServerFarmEnv("paper-100", action_mode=mode)
    u.reset(seed=0)
    acts = np.random.default_rng(0).integers(0, u.action_space.n, 60_000)

    def kernel(a):
        u._act[0] = a
        kn.vec_step(u._IB, u._FB, u._OBS, u._MASK, u._act, u._codes, u.sim._tag)

    for a in acts[:5000]:
        kernel(a)
    r = []
    for _ in range(3):
        c0 = cpu()
        for a in acts[5000:]:
            kernel(a)
        r.append((cpu() - c0) * 1e9 / 55_000)
    out[f"env {mode} compiled call ns"] = float(np.median(r))
    c0 = cpu()
    for a in acts[:20000]:
        u.step(int(a))
    out[f"env {mode} step us"] = (cpu() - c0) * 1e6 / 20000
for mode in ("server", "group"):
    v = ServerFarmVectorEnv(64, "paper-100", action_mode=mode, max_episode_steps=1000)
    v.reset(seed=0)
    pool = np.random.default_rng(1).integers(0, v.single_action_space.n, (256, 64))
    for i in range(200):
        v.step(pool[i % 256])
    r = []
    for _ in range(3):
        c0 = cpu()
        for i in range(1000):
            v.step(pool[i % 256])
        r.append(64 * 1000 / (cpu() - c0) / 1e6)
    out[f"vec64 {mode} M epochs/CPU-s"] = float(np.median(r))
print(json.dumps(out))
"""


def main(argv: list[str] | None = None) -> dict[str, dict[str, list[float]]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkouts", nargs="+", help="repository roots, the first is the reference")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json", help="also write every measurement here")
    a = p.parse_args(argv)
    dirs = [str(Path(d).resolve()) for d in a.checkouts]
    res: dict[str, dict[str, list[float]]] = {}
    t0 = time.perf_counter()
    for r in range(a.rounds):
        for d in dirs:
            out = subprocess.run([sys.executable, "-c", _ONE, d], capture_output=True, text=True,
                                 check=True, cwd="/")  # fmt: skip
            for k, v in json.loads(out.stdout.strip().splitlines()[-1]).items():
                res.setdefault(k, {}).setdefault(d, []).append(v)
        print(f"round {r + 1}/{a.rounds} done ({time.perf_counter() - t0:.0f} s)", flush=True)
    names = [Path(d).name for d in dirs]
    print(f"{'metric':32s}" + "".join(f"{n:>26s}" for n in names) + "   median / first")
    for k, per in res.items():
        base = statistics.median(per[dirs[0]])
        cells = "".join(
            f"{statistics.median(per[d]):.4g} [{min(per[d]):.4g}-{max(per[d]):.4g}]".rjust(26)
            for d in dirs
        )
        ratios = " ".join(f"{statistics.median(per[d]) / base:.3f}" for d in dirs)
        print(f"{k:32s}{cells}   {ratios}")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    return res


if __name__ == "__main__":
    main()
