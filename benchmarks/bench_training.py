"""End-to-end training speed: env steps per CPU second of masked PPO, train.py's sb3 trainer against
the fast path, measured in the same run (group actions, paper-100 and large-10k).

Three trainers, each for a fixed number of env steps (whole rollouts, so every step is both
collected and learnt from):

* ``sb3``: sb3-contrib ``MaskablePPO`` on train.py's env stack (``DummyVecEnv`` of 4
  ``TrainingWrapper(ServerFarmEnv)``), n_steps 1024, batch 64, 10 epochs, 64x64 MLP.
* ``sb3-vec``: the same ``MaskablePPO`` on the native vector env through
  ``serverfarm_gym.envs.vector.SB3VecEnvAdapter`` with the fast settings (64 envs x 256 steps, batch 4096,
  4 epochs): what SB3 itself can do.
* ``ppo``: ``serverfarm_gym.agents.ppo.ppo.PPO`` with the fast settings (same network, same data).

Evaluation is part of a training run's cost. Each trainer's evaluator is timed once on the
model it trained: ``sb3`` with ``serverfarm_gym.evaluation.efficiency.measure``'s ``env`` route (single envs, one decision
at a time) at train.py's settings, the fast path with its ``vector`` route (all
replications in one vector env, one forward pass per epoch, the policy head in numpy:
``serverfarm_gym.agents.ppo.agent.numpy_predictor``) with the same number of measured epochs, spread over
as many replications as keep each one's policy warm-up a quarter of its window (paper-100: 33, large-10k: 4). To keep the benchmark short the evaluation is
timed with ``--eval-scale`` (default 0.1) and twice that of its measured window and extrapolated
linearly to the full window (the warm-ups, the same in both, are counted once). The
"schedule" rate is then ``total_timesteps / (steps x CPU-s per step + evaluations + final
evaluation)`` for train.py's schedule of the scenario (hyperparams/ppo.yml: paper-100 600k
steps, evaluation every 50k; large-10k 1M steps, every 250k; the final evaluation of the best
and the final model at final_eval_epochs).

CPU time is the process's (``time.process_time``: all threads, torch's included); torch runs on
one thread (``torch.set_num_threads(1)``: small MLPs, shared 2-core machine). Wall time is
reported too (on a loaded machine it includes waiting for a core). The load average is printed
with the results.

``python -m benchmarks.bench_training`` (about 3-5 CPU minutes), ``--quick`` (fewer steps),
``--profile`` (cProfile of the sb3-vec and PPO runs: where the time goes).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import math
import pstats
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch

from benchmarks.common import command_line, machine, table, write_json

#: train.py's evaluation schedule per scenario (hyperparams/ppo.yml)
SCHEDULE = {
    "paper-100": {"total": 600_000, "eval_freq": 50_000, "eval_epochs": 20_000, "reps": 8,
                  "final_epochs": 100_000},
    "large-10k": {"total": 1_000_000, "eval_freq": 250_000, "eval_epochs": 200_000, "reps": 4,
                  "final_epochs": 1_200_000},
}  # fmt: skip

FAST = {"n_envs": 64, "n_steps": 256, "batch_size": 4096, "n_epochs": 4}


class Clock:
    def __enter__(self) -> Clock:
        self.c0, self.w0 = time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.cpu = time.process_time() - self.c0
        self.wall = time.perf_counter() - self.w0


def _profile(fn: Any, enabled: bool, label: str) -> Any:
    if not enabled:
        return fn()
    prof = cProfile.Profile()
    out = prof.runcall(fn)
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(14)
    print(f"\n--- cProfile {label} (by own time) ---\n" + s.getvalue()[-3500:])
    return out


def run_sb3(scenario: str, steps: int) -> tuple[Any, Clock, Clock]:
    """MaskablePPO with train.py's env stack and its settings; (model, setup, learn)."""
    from serverfarm_gym.agents.common.run_args import Sb3Args
    from serverfarm_gym.agents.ppo_sb3.train import make_vec_env, new_model
    from serverfarm_gym.envs.scenarios import load_scenario

    a = Sb3Args(
        scenario=scenario, action_mode="group", n_envs=4, n_steps=1024, batch_size=64,
        n_epochs=10, gamma=0.999, tensorboard=False, progress_bar=False,
    )  # fmt: skip
    config = load_scenario(scenario)
    with Clock() as setup:
        venv = make_vec_env(config, a)
        model = new_model(a, venv, None)
        model.learn(64)  # the first reset (PAS warm-up of every env) is setup, not learning
    n0 = model.num_timesteps
    with Clock() as learn:
        model.learn(steps, reset_num_timesteps=False)
    learn.steps = model.num_timesteps - n0  # whole rollouts
    return model, setup, learn


def run_sb3_vec(scenario: str, steps: int, profile: bool) -> tuple[Any, Clock, Clock]:
    from sb3_contrib import MaskablePPO

    from serverfarm_gym.agents.ppo.config import auto_gamma
    from serverfarm_gym.envs.scenarios import load_scenario
    from serverfarm_gym.envs.vector import make_sb3_vec_env

    config = load_scenario(scenario)
    per = config.total_arrival_rate / float(min(max(g.service_rate) for g in config.groups))
    with Clock() as setup:
        venv = make_sb3_vec_env(
            FAST["n_envs"], config, action_mode="group", warmup_epochs=max(1000, math.ceil(50 * per)),
            max_episode_steps=None,
        )  # fmt: skip
        model = MaskablePPO(
            "MlpPolicy", venv, n_steps=FAST["n_steps"], batch_size=FAST["batch_size"],
            n_epochs=FAST["n_epochs"], gamma=auto_gamma(config), seed=0, device="cpu",
            policy_kwargs={"net_arch": {"pi": [64, 64], "vf": [64, 64]},
                           "activation_fn": torch.nn.Tanh},
        )  # fmt: skip
        model.learn(64)
    n0 = model.num_timesteps
    with Clock() as learn:
        _profile(lambda: model.learn(steps, reset_num_timesteps=False), profile, "sb3-vec")
    learn.steps = model.num_timesteps - n0
    return model, setup, learn


def run_ppo(scenario: str, steps: int, profile: bool) -> tuple[Any, Clock, Clock]:
    from serverfarm_gym.agents.ppo.ppo import PPO

    with Clock() as setup:
        trainer = PPO(scenario, action_mode="group", **FAST)
        trainer._start()  # PAS warm-up of every env: setup, not learning
    with Clock() as learn:
        _profile(lambda: trainer.learn(steps), profile, "ppo")
    learn.steps = trainer.num_timesteps
    return trainer, setup, learn


def time_eval(kind: str, predict: Any, config: Any, sched: dict[str, Any], scale: float) -> float:
    """CPU seconds of one evaluation at train.py's size. Timed at ``scale`` and ``2 scale`` of
    its measured window (the warm-ups are the same in both) and extrapolated linearly."""
    from serverfarm_gym.evaluation.efficiency import (
        Window,
        consecutive_seeds,
        measure,
        replication_seeds,
    )

    total = sched["eval_epochs"] * sched["reps"]
    # as many replications as keep each one's policy warm-up at most a quarter of its window
    pw = Window.for_farm(config, total, pas_warmup=True).warmup
    reps = int(min(64, max(4, total // (4 * pw))))
    cost = []
    for s in (scale, 2 * scale):
        with Clock() as c:
            if kind == "sb3":
                n = int(sched["eval_epochs"] * s)
                seeds = replication_seeds(10_000, sched["reps"])
                est = measure(predict, config, n, seeds, action_mode="group", method="env")
            else:  # the same number of measured epochs over fewer, batched replications
                n = int(total / reps * s)
                win = Window.for_farm(config, n, pas_warmup=True)
                est = measure(predict, config, win, consecutive_seeds(10_000, reps),
                              action_mode="group", method="vector")  # fmt: skip
        cost.append(c.cpu)
        print(f"    {kind} evaluation ({est.replications} x {n} epochs): {est.efficiency:.5f} "
              f"+- {est.ci95:.5f}, {c.cpu:.1f} CPU-s", flush=True)  # fmt: skip
    slope = (cost[1] - cost[0]) / scale
    return max(cost[1], cost[0] + slope * (1 - scale))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenarios", default="paper-100,large-10k")
    p.add_argument("--quick", action="store_true", help="fewer steps (a smoke run)")
    p.add_argument("--profile", action="store_true", help="cProfile the sb3-vec and PPO runs")
    p.add_argument("--eval-scale", type=float, default=0.1)
    p.add_argument("--json", default=None, help="write the results to this file")
    ns = p.parse_args(argv)
    from serverfarm_gym.agents.ppo import model_predictor
    from serverfarm_gym.agents.ppo.agent import numpy_predictor
    from serverfarm_gym.envs.scenarios import load_scenario

    torch.set_num_threads(1)
    q = 4 if ns.quick else 1
    steps = {"sb3": 8192 // q, "sb3-vec": 32768 // q, "ppo": 4 * 16384 // q}
    rows, results = [], {}
    for scenario in ns.scenarios.split(","):
        config = load_scenario(scenario)
        sched = SCHEDULE.get(scenario, SCHEDULE["paper-100"])
        print(f"{scenario}: training ...", flush=True)
        sb3_model, _, t_learn = run_sb3(scenario, steps["sb3"])
        _, _, s_learn = run_sb3_vec(scenario, steps["sb3-vec"], ns.profile)
        ppo, _, l_learn = run_ppo(scenario, steps["ppo"], ns.profile)
        e_sb3 = time_eval("sb3", model_predictor(sb3_model), config, sched, ns.eval_scale)
        e_fast = time_eval("fast", numpy_predictor(ppo.policy), config, sched, ns.eval_scale)
        n_evals = sched["total"] // sched["eval_freq"]
        final_x = 2 * sched["final_epochs"] / sched["eval_epochs"]  # best + final model
        res = {}
        for name, clock, n, ev in (
            ("sb3", t_learn, t_learn.steps, e_sb3),
            ("sb3-vec", s_learn, s_learn.steps, e_fast),
            ("ppo", l_learn, l_learn.steps, e_fast),
        ):
            per_step = clock.cpu / n
            run_cpu = sched["total"] * per_step + ev * (n_evals + final_x)
            res[name] = {
                "steps": n, "cpu_s": clock.cpu, "wall_s": clock.wall,
                "train_per_cpu_s": n / clock.cpu, "train_per_wall_s": n / clock.wall,
                "eval_cpu_s": ev, "schedule_per_cpu_s": sched["total"] / run_cpu,
                "schedule_cpu_s": run_cpu,
            }  # fmt: skip
        base = res["sb3"]
        for name, r in res.items():
            rows.append([
                scenario, name, r["steps"], r["train_per_cpu_s"], r["train_per_wall_s"],
                r["train_per_cpu_s"] / base["train_per_cpu_s"], r["eval_cpu_s"],
                r["schedule_per_cpu_s"], r["schedule_per_cpu_s"] / base["schedule_per_cpu_s"],
            ])  # fmt: skip
        results[scenario] = res
    mach = machine()
    print(
        f"\n{command_line()}\nload average {mach['load_average_1_5_15']} on {mach['cores']} cores"
    )
    print(table(
        ["scenario", "trainer", "steps", "train steps/CPU-s", "train steps/wall-s", "x sb3",
         "1 eval CPU-s", "schedule steps/CPU-s", "x sb3"], rows,
    ))  # fmt: skip
    payload = {"machine": mach, "command": command_line(), "results": results}
    write_json(ns.json, payload)
    return payload


if __name__ == "__main__":
    np.set_printoptions(precision=4)
    main()
