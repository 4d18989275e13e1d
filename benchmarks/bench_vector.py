"""Vector env speed: decision epochs per second of the native batched env
(``gymnasium.make_vec("ServerFarm-v0", num_envs=64, vectorization_mode="vector_entry_point")``,
paper-100), against Gymnasium's ``SyncVectorEnv`` of the same envs and the single env, in the
same run.

Actions are uniform per env (often masked out and replaced by the PAS fallback), drawn ahead
from ``action_space.sample()`` into a pool the loops cycle through, so the rates are the envs'
(one row adds the cost of calling ``venv.action_space.sample()`` every step, as the CartPole
comparison of ``bench_env_step.py`` does). Rates are decision epochs (env steps summed over
envs) per second; the serial kernel is timed in thread CPU time, the ``parallel=True`` one
(numba threads) in wall time and process CPU time. The SB3 adapter
(``serverfarm_gym.envs.vector.SB3VecEnvAdapter``, which builds a Python info dict per env per step) is timed too.

``python -m benchmarks.bench_vector`` or ``--quick``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gymnasium as gym

from benchmarks.common import Rate, command_line, machine, measure, print_header, table, write_json
from serverfarm_gym import envs  # noqa: F401  (registers the env ids)


def pool(space: gym.Space, size: int = 64) -> list:
    return [space.sample() for _ in range(size)]


def vec_loop(venv: gym.vector.VectorEnv, steps: int, actions: list | None = None) -> float:
    step = venv.step
    if actions is None:  # sample every step
        sample = venv.action_space.sample
        for _ in range(steps):
            step(sample())
    else:
        m = len(actions)
        for i in range(steps):
            step(actions[i % m])
    return float(steps * venv.num_envs)


def single_loop(env: gym.Env, steps: int, actions: list) -> float:
    step, m = env.step, len(actions)
    for i in range(steps):
        _, _, term, trunc, _ = step(actions[i % m])
        if term or trunc:
            env.reset()
    return float(steps)


def sb3_loop(venv, steps: int, actions: list) -> float:
    m = len(actions)
    for i in range(steps):
        venv.step(actions[i % m])
    return float(steps * venv.num_envs)


def measure_parallel(fn) -> tuple[float, float, float]:
    """(units, wall, process CPU) for multi-threaded work."""
    c0, w0 = time.process_time(), time.perf_counter()
    units = fn()
    return units, time.perf_counter() - w0, time.process_time() - c0


KEYS = ("native", "native parallel", "native + sample()", "group", "sync", "single", "sb3")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; ``--quick`` replaces the sizes by tiny ones."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--scenario", default="paper-100")
    p.add_argument("--steps", type=int, default=2_000, help="vector steps per round")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json")
    a = p.parse_args(argv)
    if a.quick:
        a.num_envs, a.steps, a.rounds = 8, 50, 2
    return a


def make_envs(n: int, scenario: str) -> dict[str, Any]:
    """The envs compared, by role: native, par, group, sync (vector envs), single and sb3."""
    kw = {"scenario": scenario}
    from serverfarm_gym.envs.vector import SB3VecEnvAdapter

    return {
        "native": gym.make_vec(
            "ServerFarm-v0", num_envs=n, vectorization_mode="vector_entry_point", **kw
        ),
        "par": gym.make_vec(
            "ServerFarm-v0",
            num_envs=n,
            vectorization_mode="vector_entry_point",
            parallel=True,
            **kw,
        ),
        "group": gym.make_vec(
            "ServerFarmGroup-v0", num_envs=n, vectorization_mode="vector_entry_point", **kw
        ),
        "sync": gym.make_vec("ServerFarm-v0", num_envs=n, vectorization_mode="sync", **kw),
        "single": gym.make("ServerFarm-v0", **kw),
        "sb3": SB3VecEnvAdapter(num_envs=n, **kw),
    }


def warm_up(e: dict[str, Any]) -> dict[str, list]:
    """Seed every env, draw its action pool and run a few steps (compiles the kernels)."""
    acts = {}
    for i, k in enumerate(("native", "par", "group", "sync")):
        v = e[k]
        v.reset(seed=100 * i)
        v.action_space.seed(i)
        acts[k] = pool(v.action_space)
        vec_loop(v, 20, acts[k])  # compile, warm up
    single = e["single"]
    single.reset(seed=7)
    single.action_space.seed(7)
    acts["single"] = pool(single.action_space, 1024)
    single_loop(single, 200, acts["single"])
    e["sb3"].seed(3)
    e["sb3"].reset()
    acts["sb3"] = pool(e["native"].action_space)
    sb3_loop(e["sb3"], 20, acts["sb3"])
    return acts


def time_rounds(
    e: dict[str, Any], acts: dict[str, list], n: int, steps: int, rounds: int
) -> dict[str, Rate]:
    """Rate per row of :data:`KEYS`, the rows interleaved round by round."""
    rates = {k: Rate(k) for k in KEYS}
    for _ in range(rounds):
        rates["native"].add(*measure(lambda: vec_loop(e["native"], steps, acts["native"])))
        rates["native parallel"].add(
            *measure_parallel(lambda: vec_loop(e["par"], steps, acts["par"]))
        )
        rates["native + sample()"].add(*measure(lambda: vec_loop(e["native"], steps)))
        rates["group"].add(*measure(lambda: vec_loop(e["group"], steps, acts["group"])))
        rates["sync"].add(*measure(lambda: vec_loop(e["sync"], max(steps // 10, 5), acts["sync"])))
        rates["single"].add(
            *measure(lambda: single_loop(e["single"], steps * n // 10, acts["single"]))
        )
        rates["sb3"].add(*measure(lambda: sb3_loop(e["sb3"], max(steps // 4, 5), acts["sb3"])))
    return rates


def print_rates(rates: dict[str, Rate], n: int) -> None:
    """The table: each row's rates and how much faster the serial native env is."""
    nat = rates["native"].per_cpu_second
    labels = {
        "native": f"native vector env, {n} envs, serial kernel",
        "native parallel": f"native vector env, {n} envs, parallel=True (numba threads)",
        "native + sample()": f"native vector env, {n} envs, + action_space.sample() each step",
        "group": f"native vector env, {n} envs, ServerFarmGroup-v0 (group actions)",
        "sync": f"gymnasium SyncVectorEnv, {n} envs",
        "single": "single env (gymnasium.make), one step at a time",
        "sb3": f"SB3VecEnvAdapter, {n} envs (per-env info dicts)",
    }
    rows = [
        [labels[k], r.per_cpu_second / 1e6, r.per_wall_second / 1e6, nat / r.per_cpu_second]
        for k, r in rates.items()
    ]
    print_header("bench_vector")
    print(
        table(
            ["env", "M epochs / CPU s", "M epochs / wall s", "native serial is x faster (CPU)"],
            rows,
        )
    )
    print(
        "\n(parallel row: CPU s = process CPU time of all threads; its wall rate is what the "
        "threads buy on the machine in the header)"
    )


def main(argv: list[str] | None = None) -> dict:
    a = parse_args(argv)
    n = a.num_envs
    t0 = time.perf_counter()
    e = make_envs(n, a.scenario)
    acts = warm_up(e)
    rates = time_rounds(e, acts, n, a.steps, a.rounds)
    print_rates(rates, n)
    print(f"\n(took {time.perf_counter() - t0:.0f} s)")
    result = {
        "command": command_line(),
        "machine": machine(),
        "num_envs": n,
        "rates": {k: r.as_dict() for k, r in rates.items()},
    }
    write_json(a.json, result)
    for k in ("native", "par", "group", "sync"):
        e[k].close()
    return result


if __name__ == "__main__":
    main()
