"""Gymnasium step speed: ``gymnasium.make`` with its default wrappers (TimeLimit, order
enforcing, passive checker), random actions from ``action_space.sample()``, resets when an
episode ends, against CartPole-v1 driven the same way in the same run.

Envs: ``CartPole-v1``; ``ServerFarm-v0`` on paper-100 (100 servers, server action mode);
``ServerFarmGroup-v0`` (size-independent mode) on paper-100 and on paper-100 scaled to 100,000
servers. Random server-mode actions are often masked out (a type's unavailable groups), which
exercises the PAS fallback too.

``--profile`` adds where the time of one ``ServerFarm-v0`` step goes (each part timed on its
own, in nanoseconds per step).

``python -m benchmarks.bench_env_step`` or ``--quick``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gymnasium as gym

from benchmarks.common import Rate, command_line, machine, measure, print_header, table, write_json
from serverfarm_gym import envs  # noqa: F401  (registers the env ids)
from serverfarm_gym.envs import kernels as kn
from serverfarm_gym.envs.scenarios import load_scenario


def make_envs(big: int) -> dict[str, gym.Env]:
    base = load_scenario("paper-100")
    out = {
        "CartPole-v1": gym.make("CartPole-v1"),
        "ServerFarm-v0 paper-100": gym.make("ServerFarm-v0", scenario=base),
        "ServerFarmGroup-v0 paper-100": gym.make("ServerFarmGroup-v0", scenario=base),
        f"ServerFarmGroup-v0 x{big} ({100 * big:,} servers)": gym.make(
            "ServerFarmGroup-v0", scenario=base.scaled(big)
        ),
    }
    for i, env in enumerate(out.values()):
        env.reset(seed=i)
        env.action_space.seed(i)
    return out


def loop(env: gym.Env, n: int) -> float:
    """n steps with random actions (the measured work)."""
    step, sample = env.step, env.action_space.sample
    for _ in range(n):
        _, _, term, trunc, _ = step(sample())
        if term or trunc:
            env.reset()
    return float(n)


def per_call(fn: Callable[[], object], n: int) -> float:
    """Thread-CPU nanoseconds per call of fn."""
    c0 = time.thread_time()
    for _ in range(n):
        fn()
    return (time.thread_time() - c0) / n * 1e9


def profile(n: int) -> list[list[object]]:
    """Where the time of one ServerFarm-v0 (paper-100) step goes."""
    env = gym.make("ServerFarm-v0", scenario="paper-100")
    env.reset(seed=0)
    u = env.unwrapped
    env.action_space.seed(0)
    acts = [int(env.action_space.sample()) for _ in range(n)]
    it = iter(acts * 3)

    total = per_call(lambda: env.step(next(it)), n)
    bare = per_call(lambda: u.step(next(it)), n)
    sample = per_call(env.action_space.sample, n)
    it2 = iter(acts)

    def kernel() -> None:
        u._act[0] = next(it2)
        kn.vec_step(u._IB, u._FB, u._OBS, u._MASK, u._act, u._codes, u.sim._tag)

    k = per_call(kernel, n)
    info = per_call(lambda: u._get_info(u._out.tolist()), n)
    obs = per_call(u._obs.copy, n)
    rows = [
        ["action_space.sample()", sample],
        ["gymnasium.make's wrappers (wrapped step - env.step)", total - bare],
        ["compiled call: assign, simulate to the next epoch, reward, mask, obs", k],
        ["info dict (floats from one tolist(), mask and blocking copies)", info],
        ["observation copy", obs],
        ["rest of ServerFarmEnv.step (argument, checks, return tuple)", bare - k - info - obs],
        ["total per step, with sample()", total + sample],
    ]
    return rows


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--steps", type=int, default=50_000, help="steps per round")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--big", type=int, default=1000, help="scale of the large group-mode farm")
    p.add_argument("--profile", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--json")
    a = p.parse_args(argv)
    if a.quick:
        a.steps, a.rounds, a.big = 2_000, 2, 10
    do_profile = (not a.quick) if a.profile is None else a.profile
    t0 = time.perf_counter()
    envs_ = make_envs(a.big)
    for env in envs_.values():
        loop(env, min(a.steps, 2_000))  # compile, warm up
    rates = {name: Rate(name) for name in envs_}
    for _ in range(a.rounds):  # interleaved: the machine's state affects all alike
        for name, env in envs_.items():
            rates[name].add(*measure(lambda env=env: loop(env, a.steps)))
    names = list(envs_)
    cart = rates[names[0]].per_cpu_second
    g100 = rates[names[2]].per_cpu_second
    rows = [
        [n, r.per_cpu_second, r.per_wall_second, 1e6 / r.per_cpu_second, r.per_cpu_second / cart]
        for n, r in rates.items()
    ]
    print_header("bench_env_step")
    print(table(["env", "steps / CPU s", "steps / wall s", "us / step", "vs CartPole"], rows))
    server_ratio = rates[names[1]].per_cpu_second / cart
    big_ratio = rates[names[3]].per_cpu_second / g100
    print(f"\nServerFarm-v0 (paper-100) / CartPole-v1: {server_ratio:.2f}")
    print(f"ServerFarmGroup-v0: {names[3].split(' ', 1)[1]} / paper-100: {big_ratio:.2f}")
    result = {
        "command": command_line(),
        "machine": machine(),
        "rates": {n: r.as_dict() for n, r in rates.items()},
        "server_vs_cartpole": server_ratio,
        "group_big_vs_100": big_ratio,
    }
    if do_profile:
        prof = profile(max(a.steps, 20_000))
        print("\nwhere one ServerFarm-v0 (paper-100) step goes (thread CPU ns per step):\n")
        print(table(["part", "ns"], prof))
        result["profile_ns"] = {str(k): v for k, v in prof}
    print(f"\n(took {time.perf_counter() - t0:.0f} s)")
    write_json(a.json, result)
    return result


if __name__ == "__main__":
    main()
