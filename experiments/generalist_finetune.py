"""Fine-tuning the generalist on one farm, three ways, measured exactly.

    OMP_NUM_THREADS=1 python experiments/generalist_finetune.py          # 10 farms, ~10 CPU-min
    python experiments/generalist_finetune.py --quick --out /tmp/f          # CI-sized

The target: fine-tuning from the generalist reaches the per-farm PPO result of docs/training.md
in at most 1/5 of its steps. ``train.py --init generalist`` (a behaviour clone of the generalist
into the farm's own network, then the per-farm PPO) does not (docs/generalist.md). This probe
asks whether the generalist holds what a faster route would need, on farms small enough that
every candidate is evaluated exactly (no sampling error, so no selection bias):

* **with its check**: the checked generalist (``make_policy("generalist-checked")``), PAS, the optimum.
* **output biases** (a farm-specific output layer, BitFit's idea searched instead of trained):
  the network's logits at the guard's anchor plus one bias per (group, level) token, chosen by
  coordinate search (steps of +-0.5..4 nats, first improvement, until a sweep finds none) with an
  exact evaluation per candidate (milliseconds on these chains). Then the same search started
  from ``best-priority``'s searched table written as biases, with the network's logits scaled
  by ``s`` (also searched; ``s = 0`` is the table alone): does the network add anything that
  the farm's own table does not have?
* **token PPO**: PPO on the token network's own weights, pinned to the farm
  (:class:`serverfarm_gym.agents.generalist.GeneralistTrainer`, 16 envs x 256 steps a rollout, the trainer's
  defaults otherwise), exact evaluation of its deterministic policy after every rollout, for
  ``--ppo-steps`` (default 40,960: 1/5 of pas-gap's per-farm 204,800).

Farms: preset names, or ``random:SEED`` for ``serverfarm_gym.envs.scenarios.random_farm(SEED)`` (the user farms
of docs/training.md are seeds 2000, 2001, 2003, 2010). Outputs: ``generalist_finetune.json`` /
``.csv`` / ``.png`` (token PPO's share of PAS's gap closed against steps).
"""

from __future__ import annotations

import hashlib
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # runnable as a script from anywhere
    sys.path.insert(0, str(ROOT))

from experiments.common import (  # noqa: E402
    base_parser,
    metadata,
    parallel_map,
    resolve_workers,
    save_figure,
    write_outputs,
)
from serverfarm_gym.agents.generalist.guard import GuardedGeneralistPolicy  # noqa: E402
from serverfarm_gym.agents.generalist.network import TokenPolicyNet  # noqa: E402
from serverfarm_gym.agents.generalist.token_policy import (  # noqa: E402
    TOKEN_MODEL,
    TokenGeneralistPolicy,
    token_tensors,
)
from serverfarm_gym.agents.generalist.train import GeneralistTrainer  # noqa: E402
from serverfarm_gym.baselines.best_priority import BestPriorityPolicy  # noqa: E402
from serverfarm_gym.baselines.pas import PASPolicy  # noqa: E402
from serverfarm_gym.envs.config import FarmConfig  # noqa: E402
from serverfarm_gym.envs.scenarios import load_scenario, random_farm  # noqa: E402
from serverfarm_gym.evaluation.efficiency import measure as measure_policy  # noqa: E402
from serverfarm_gym.evaluation.exact import exact_evaluation, exact_solvable  # noqa: E402
from serverfarm_gym.evaluation.references import optimum_solution  # noqa: E402

NAME = "generalist_finetune"
FARMS = ("pas-gap", "tiny", "small-1", "small-2", "small-3", "speed-scaling",
         "random:2000", "random:2001", "random:2003", "random:2010")  # fmt: skip
FULL = {"farms": FARMS, "ppo_steps": 40_960, "sweeps": 8}
QUICK = {"farms": ("tiny",), "ppo_steps": 4_096, "sweeps": 1}
#: bias steps of the coordinate search (nats) and the table's scales / network scales tried
STEPS = (-4.0, -2.0, -1.0, -0.5, 0.5, 1.0, 2.0, 4.0)
TABLE_SCALES = (0.5, 1.0, 2.0, 4.0)
NET_SCALES = (0.0, 0.25, 0.5, 1.0, 2.0)


def farm_from_name(name: str) -> FarmConfig:
    """A preset, or ``random:SEED`` (``serverfarm_gym.envs.scenarios.random_farm``)."""
    if name.startswith("random:"):
        return random_farm(int(name.split(":", 1)[1]))
    return load_scenario(name)


class BiasedLogits:
    """The group-mode predictor ``argmax(s * logits + bias)`` over the valid tokens, for
    ``serverfarm_gym.evaluation.exact``; the network's logits are computed once per batch of observations
    (the exact evaluator asks for the same states on every candidate)."""

    def __init__(self, config: FarmConfig, net: TokenPolicyNet, max_groups: int) -> None:
        self.policy = TokenGeneralistPolicy(config, "group", net=net, max_groups=max_groups,
                                       max_levels=net.cfg.max_levels)  # fmt: skip
        self.enc = self.policy.encoding
        self.size = self.enc.max_groups * self.enc.max_levels
        self._cache: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}

    def _logits(self, obs: np.ndarray, masks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        key = hashlib.sha1(obs.tobytes() + masks.tobytes()).digest()
        if key not in self._cache:
            tok, tm = self.enc.encode(obs), self.enc.masks(masks)
            with torch.no_grad():
                lg, _ = self.policy.net(*token_tensors(tok), torch.as_tensor(tm, dtype=torch.bool))
            self._cache[key] = (lg.numpy().astype(np.float64), tm)
        return self._cache[key]

    def efficiency(self, bias: np.ndarray, scale: float = 1.0) -> float:
        def predict(obs: np.ndarray, masks: np.ndarray) -> np.ndarray:
            lg, tm = self._logits(obs, masks)
            z = np.where(tm, scale * lg + bias[None, :], -np.inf)
            return np.asarray(self.enc.to_group_actions(z.argmax(1)), dtype=np.int64).reshape(-1)

        return float(exact_evaluation(predict, self.policy.config, "group").efficiency)


def coordinate_search(
    f: Callable[[np.ndarray, float], float],
    bias: np.ndarray,
    scale: float,
    coords: np.ndarray,
    sweeps: int,
    search_scale: bool,
) -> tuple[float, np.ndarray, float, int]:
    """First-improvement coordinate search of ``f(bias, scale)``: (best, bias, scale, evals)."""
    best, evals = f(bias, scale), 1
    for _ in range(sweeps):
        improved = False
        for i in [*coords, -1] if search_scale else coords:
            for d in STEPS:
                if i == -1:  # the network's scale, multiplicatively (0 -> 0.25 upwards)
                    s = scale * 1.5 if d > 0 else scale / 1.5
                    s = 0.25 if scale == 0 and d > 0 else (0.0 if s < 0.05 else s)
                    b = bias
                else:
                    b, s = bias.copy(), scale
                    b[i] += d
                e = f(b, s)
                evals += 1
                if e > best + 1e-12:
                    best, bias, scale, improved = e, b, s, True
        if not improved:
            break
    return best, bias, scale, evals


class _PinnedTrainer(GeneralistTrainer):
    """PPO on one farm: every 'draw' is ``self.farm`` (its replications on the run's seeds)."""

    farm: FarmConfig

    def _draw_farm(self, n_envs: int) -> Any:
        return self._draw_farm_for(self.farm, n_envs, self.next_farm_seed())


def token_ppo(config: FarmConfig, net: TokenPolicyNet, max_groups: int, steps: int,
              seed: int) -> list[tuple[int, float]]:  # fmt: skip
    """(timesteps, exact efficiency) of PPO on the token network, after every rollout."""
    tr = _PinnedTrainer(farms=1, envs_per_farm=16, n_steps=256, rotate_every=10**9,
                        batch_size=512, anchor=net.cfg.anchor, max_groups=max_groups,
                        max_levels=net.cfg.max_levels, seed=seed)  # fmt: skip
    tr.farm = config
    tr.net.load_state_dict(net.state_dict())  # in place: the trainer's optimizer holds it

    def measure(t: GeneralistTrainer) -> float:
        t.net.eval()
        e = measure_policy(
            t.policy(config, "group"), config, action_mode="group", method="exact"
        ).efficiency
        t.net.train()
        return float(e)

    curve = [(0, measure(tr))]
    tr.learn(steps, lambda t: curve.append((t.num_timesteps, measure(t))))
    return curve


def farm_task(task: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    torch.set_num_threads(1)  # small batches; two processes with default threads crawl
    name, st = task
    t0 = time.process_time()
    config = farm_from_name(name)
    row: dict[str, Any] = {"farm": name, "n_servers": config.n_servers}
    sol, why = optimum_solution(config)
    if sol is None or not exact_solvable(config):
        return row | {"skipped": why or "per-server chain too large"}
    pas = measure_policy(PASPolicy(config), config, action_mode="server", method="exact").efficiency
    opt = float(sol.value)
    gap = opt - pas

    def share(e: float) -> float:
        return 100.0 * (e - pas) / gap if gap > 1e-12 else 100.0

    guarded = GuardedGeneralistPolicy(config, "group", model=st["model"])
    zero = measure_policy(guarded, config, action_mode="group", method="exact").efficiency
    net, max_groups = guarded.net, guarded.encoding.max_groups  # the guard's anchor
    row |= {"pas": pas, "optimum": opt, "guard": guarded.guard_report["chosen"],
            "zero_shot": zero, "zero_shot_share": share(zero)}  # fmt: skip

    probe = BiasedLogits(config, net, max_groups)
    L = probe.enc.max_levels
    coords = np.array([k * L + b for k, g in enumerate(config.groups) for b in range(g.buffer)])
    raw = probe.efficiency(np.zeros(probe.size))
    best, _, _, n1 = coordinate_search(probe.efficiency, np.zeros(probe.size), 1.0, coords,
                                       st["sweeps"], search_scale=False)  # fmt: skip
    row |= {"network": raw, "network_share": share(raw), "bias": best, "bias_share": share(best),
            "bias_evals": n1}  # fmt: skip

    table = BestPriorityPolicy(config, "group").priority_table()
    as_bias = np.zeros(probe.size)
    as_bias[coords] = [table[k, b] for k, g in enumerate(config.groups) for b in range(g.buffer)]
    tab = probe.efficiency(as_bias, 0.0)
    start = max(((d, s) for d in TABLE_SCALES for s in NET_SCALES),
                key=lambda ds: probe.efficiency(as_bias * ds[0], ds[1]))  # fmt: skip
    both, _, s, n2 = coordinate_search(probe.efficiency, as_bias * start[0], start[1], coords,
                                       st["sweeps"], search_scale=True)  # fmt: skip
    row |= {"table": tab, "table_share": share(tab), "table_bias": both,
            "table_bias_share": share(both), "table_bias_net_scale": s,
            "table_bias_evals": n2 + len(TABLE_SCALES) * len(NET_SCALES)}  # fmt: skip

    curve = token_ppo(config, net, max_groups, st["ppo_steps"], st["seed"])
    row |= {"ppo_curve": [(t, share(e)) for t, e in curve],
            "ppo_best_share": max(share(e) for _, e in curve),
            "ppo_final_share": share(curve[-1][1]), "cpu_s": time.process_time() - t0}  # fmt: skip
    return row


def plot(rows: Sequence[dict[str, Any]], path: str | Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4))
    ax = fig.add_subplot()
    for r in rows:
        if "ppo_curve" in r:
            t, s = zip(*r["ppo_curve"], strict=True)
            ax.plot(t, s, marker=".", label=r["farm"])
    ax.set_xlabel("token PPO steps on the farm")
    ax.set_ylabel("share of PAS's gap to the optimum closed (%)")
    ax.set_title("Fine-tuning the generalist's own weights (exact, after each rollout)")
    ax.legend(fontsize=7)
    save_figure(fig, path)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = base_parser(NAME, "Fine-tuning the generalist on one farm: output biases, token PPO")
    p.add_argument("--model", default=str(TOKEN_MODEL), help="generalist .pt file")
    p.add_argument("--farms", default=None, help="comma-separated presets or random:SEED")
    p.add_argument("--ppo-steps", type=int, default=None, help="token PPO steps (40,960)")
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    d = QUICK if a.quick else FULL
    st = {"model": a.model, "farms": a.farms.split(",") if a.farms else list(d["farms"]),
          "ppo_steps": a.ppo_steps if a.ppo_steps is not None else d["ppo_steps"],
          "sweeps": d["sweeps"], "seed": a.seed, "quick": bool(a.quick),
          "workers": resolve_workers(a.workers, a.quick)}  # fmt: skip
    if st["ppo_steps"] < 0:
        raise SystemExit(f"--ppo-steps: must be >= 0, got {st['ppo_steps']}")
    TokenGeneralistPolicy.load_net(a.model)  # fail now, with the file named, not in a worker
    rows = parallel_map(farm_task, [(f, st) for f in st["farms"]], st["workers"])
    report = {"experiment": NAME, "rows": rows, **metadata(argv, st, t0)}
    flat = [{k: v for k, v in r.items() if k != "ppo_curve"} for r in rows]
    write_outputs(a.out, NAME, report, flat, lambda path: plot(rows, path), a.figure_dir)
    print(
        "farm            zero-shot  network  +biases   table  table+net+biases  "
        "token PPO best / final (share of PAS's gap closed, %)"
    )
    for r in rows:
        if "skipped" in r:
            print(f"{r['farm']:15s} skipped: {r['skipped']}")
            continue
        print(f"{r['farm']:15s} {r['zero_shot_share']:8.1f} {r['network_share']:8.1f} "
              f"{r['bias_share']:8.1f} {r['table_share']:7.1f} {r['table_bias_share']:17.1f}  "
              f"{r['ppo_best_share']:6.1f} / {r['ppo_final_share']:.1f}")  # fmt: skip
    return report


if __name__ == "__main__":
    main()
