"""``python train.py token-generalist``: train the token network of
``make_policy("generalist-checked", config)`` (the shipped weights: ``models/generalist.pt``)
and write its run.

    python train.py token-generalist --total-timesteps 50000 --output-dir /tmp/g --eval-every 2  # smoke

Steps: PPO over farms drawn per rollout, from a network anchored on PAS (``--anchor``: the
untrained network is PAS; ``--anchor 0`` instead clones PAS on ``clone_farms`` sampled farms). Every
``eval_every`` rollouts the network is measured on validation farms (``n_eval_farms`` draws of
``serverfarm_gym.envs.farm_sampler`` from the held-out range that are small enough for an exact evaluation):
its exact efficiency (server mode, as shipped) against PAS's on each, so the curve has no
sampling noise. The run directory
holds ``generalist.pt`` / ``generalist.json`` (the final network, weights only), ``curve.jsonl``
(the validation points), ``history.jsonl`` (PPO's statistics per rollout), ``curve.png``,
``checkpoint.pt`` (the latest network, every evaluation) and ``best.pt`` (the network of the best
validation point: the highest mean gain over PAS). ``--init-model`` starts from a saved network
(e.g. the shipped one) instead of PAS; ``--oracle-farms N`` first fits the network to the exact
optimum of N solvable sampled farms (``serverfarm_gym.agents.token_generalist.oracle``); ``--total-timesteps 0``
skips PPO; ``--select-anchors 3,5,8`` finally sets the network's PAS anchor to the one with the
highest mean gain on ``select_farms`` validation farms among those that keep
``select_min_share`` of them at PAS or above.

The shipped weights come from three runs, each starting from the previous network
(docs/generalist.md):

    python train.py token-generalist --anchor 0 --output-dir runs/generalist-ppo-s0
    python train.py token-generalist --init-model runs/generalist-ppo-s0/generalist.pt --anchor 3 \
        --oracle-farms 1200 --oracle-steps 64 --oracle-epochs 4 --total-timesteps 0 \
        --n-eval-farms 32 --output-dir runs/gen-oracle
    python train.py token-generalist --init-model runs/gen-oracle/generalist.pt --anchor 3 \
        --oracle-farms 800 --oracle-family mixed --oracle-steps 64 --oracle-epochs 4 \
        --total-timesteps 0 --n-eval-farms 32 --select-anchors 3,5,6,7,8,10,12 \
        --output-dir runs/gen-oracle-mixed

``python -m serverfarm_gym.agents.token_generalist.run`` is the same command.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from serverfarm_gym.agents.token_generalist.oracle import ORACLE_FAMILIES, distill_optimum
from serverfarm_gym.agents.token_generalist.token_policy import TokenGeneralistPolicy
from serverfarm_gym.agents.token_generalist.train import GeneralistConfig, GeneralistTrainer
from serverfarm_gym.agents.token_generalist.validate import (
    select_anchor,
    validate,
    validation_farms,
    with_anchor,
)

__all__ = ["PROG", "GeneralistArgs", "build_parser", "load_weights", "main"]

#: the command's name in its messages and in the sidecar's ``command``
PROG = "train.py token-generalist"


@dataclass
class GeneralistArgs:
    """The run's options (``--name-with-dashes`` on the command line)."""

    total_timesteps: int = 2_500_000  # the shipped model: ~30 CPU minutes
    seed: int = 0
    output_dir: str = "runs/generalist-s0"
    eval_every: int = 40  # rollouts between validation points
    n_eval_farms: int = 8
    torch_threads: int = 1
    anchor: float = 4.0  # logit bonus at PAS's action; 0: clone PAS instead
    init_model: str = ""  # a generalist .pt to start from (same network sizes) instead of PAS
    oracle_farms: int = 0  # fit to the exact optimum of this many solvable farms before PPO
    oracle_steps: int = 128  # decisions per env on each of them
    oracle_epochs: int = 8
    oracle_family: str = "sampler"  # or "mixed": half of the farms from random_farm's family
    select_anchors: str = ""  # e.g. "3,5,8,12": pick the final anchor on validation farms
    select_farms: int = 64  # validation farms for that choice
    select_min_share: float = 0.95  # ... the anchor must keep this share of them >= PAS


def load_weights(trainer: GeneralistTrainer, path: str | Path) -> None:
    """Start ``trainer`` from the weights of a saved generalist (its own anchor is kept)."""
    net, _ = TokenGeneralistPolicy.load_net(path)
    mine = {k: v for k, v in asdict(trainer.net.cfg).items() if k != "anchor"}
    theirs = {k: v for k, v in asdict(net.cfg).items() if k != "anchor"}
    if mine != theirs:
        raise ValueError(
            f"init_model: {path} has network sizes {theirs}, the run's are {mine}; start from a "
            "model of the same sizes"
        )
    trainer.net.load_state_dict(net.state_dict())


def plot_curve(points: Sequence[dict[str, float]], path: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 3.5))
    ax = fig.subplots()
    x = [p["timesteps"] for p in points]
    ax.plot(x, [p["mean_vs_pas_pct"] for p in points], marker="o", label="mean")
    ax.plot(x, [p["worst_vs_pas_pct"] for p in points], marker=".", label="worst farm")
    ax.axhline(0.0, color="grey", lw=0.8)
    ax.set_xlabel("training steps (decisions)")
    ax.set_ylabel("exact efficiency vs PAS (%)")
    ax.set_title("generalist on held-out validation farms")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def build_parser() -> argparse.ArgumentParser:
    """The options of ``train.py token-generalist`` (the fields of :class:`GeneralistArgs`)."""
    p = argparse.ArgumentParser(
        prog="train.py token-generalist", description=__doc__.split("\n")[0]
    )
    for f in fields(GeneralistArgs):
        p.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default)
    return p


def parse(argv: Sequence[str] | None) -> GeneralistArgs:
    p = build_parser()
    a = GeneralistArgs(**vars(p.parse_args(argv)))
    for name in ("eval_every", "n_eval_farms", "torch_threads", "oracle_steps", "oracle_epochs",
                 "select_farms"):  # fmt: skip
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')}: must be >= 1, got {getattr(a, name)}")
    for name in ("total_timesteps", "oracle_farms"):
        if getattr(a, name) < 0:
            p.error(f"--{name.replace('_', '-')}: must be >= 0, got {getattr(a, name)}")
    if not a.anchor >= 0.0:
        p.error(f"--anchor: must be >= 0, got {a.anchor}")
    if a.oracle_family not in ORACLE_FAMILIES:
        p.error(f"--oracle-family: one of {ORACLE_FAMILIES}, got {a.oracle_family!r}")
    if not 0.0 <= a.select_min_share <= 1.0:
        p.error(f"--select-min-share: must be in [0, 1], got {a.select_min_share}")
    text = a.select_anchors
    try:
        bad = [x for x in text.split(",") if text and not 0 <= float(x) < float("inf")]
    except ValueError:
        bad = [text]
    if bad:
        p.error(f"--select-anchors: comma-separated finite numbers >= 0, got {text!r}")
    return a


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    argv = sys.argv[1:] if argv is None else list(argv)
    a = parse(argv)
    out = Path(a.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0, c0 = time.time(), time.process_time()
    gcfg = GeneralistConfig(seed=a.seed, torch_threads=a.torch_threads, anchor=a.anchor,
                            clone_farms=0 if a.anchor > 0 else 32)  # fmt: skip
    trainer = GeneralistTrainer(gcfg)
    farms = validation_farms(a.n_eval_farms)
    clone: dict[str, Any] = {}
    if a.init_model:
        start = f"{a.init_model} with a PAS anchor of {a.anchor}"
        load_weights(trainer, a.init_model)
    elif gcfg.clone_farms > 0:
        clone = trainer.clone_pas()
        start = f"PAS clone {clone}"
    else:
        start = f"PAS anchor {a.anchor}"
    points = [{"timesteps": 0, **validate(trainer, farms), "cpu_s": time.process_time() - c0}]
    print(f"start ({start}): validation {points[0]}", flush=True)
    oracle: dict[str, Any] = {}
    if a.oracle_farms:
        oracle = distill_optimum(trainer, a.oracle_farms, epochs=a.oracle_epochs,
                                 steps=a.oracle_steps, family=a.oracle_family)  # fmt: skip
        points.append({"timesteps": 0, **validate(trainer, farms), "phase": "oracle",
                       "cpu_s": time.process_time() - c0})  # fmt: skip
        print(f"fitted to the optimum ({oracle}): validation {points[-1]}", flush=True)
    trainer.save(out / "best", timesteps_done=0, validation=points[-1])
    best = points[-1]["mean_vs_pas_pct"]
    with open(out / "history.jsonl", "w") as hist, open(out / "curve.jsonl", "w") as curve:
        curve.write(json.dumps(points[0]) + "\n")

        def callback(t: GeneralistTrainer) -> None:
            hist.write(json.dumps(t.history[-1]) + "\n")
            hist.flush()
            if len(t.history) % a.eval_every == 0:
                pt = {"timesteps": t.num_timesteps, **validate(t, farms),
                      "cpu_s": time.process_time() - c0}  # fmt: skip
                points.append(pt)
                curve.write(json.dumps(pt) + "\n")
                curve.flush()
                t.save(out / "checkpoint", timesteps_done=t.num_timesteps)
                nonlocal best
                if pt["mean_vs_pas_pct"] > best:  # the best validated network so far
                    best = pt["mean_vs_pas_pct"]
                    t.save(out / "best", timesteps_done=t.num_timesteps, validation=pt)
                print(f"{t.num_timesteps:>10,} steps  vs PAS: mean {pt['mean_vs_pas_pct']:+.3f}% "
                      f"worst {pt['worst_vs_pas_pct']:+.3f}%", flush=True)  # fmt: skip

        if a.total_timesteps:
            trainer.learn(a.total_timesteps, callback=callback)
        if points[-1]["timesteps"] != trainer.num_timesteps:  # the final network's point
            pt = {"timesteps": trainer.num_timesteps, **validate(trainer, farms),
                  "cpu_s": time.process_time() - c0}  # fmt: skip
            points.append(pt)
            curve.write(json.dumps(pt) + "\n")
    selection: list[dict[str, float]] = []
    if a.select_anchors:
        anchors = [float(x) for x in a.select_anchors.split(",")]
        chosen, selection = select_anchor(trainer, validation_farms(a.select_farms), anchors,
                                          a.select_min_share)  # fmt: skip
        trainer.net = with_anchor(trainer.net, chosen)
        for r in selection:
            print(f"anchor {r['anchor']:g}: mean {r['mean_vs_pas_pct']:+.3f}% worst "
                  f"{r['worst_vs_pas_pct']:+.3f}% >= PAS on {100 * r['share_at_least_pas']:.0f}%")  # fmt: skip
        print(f"anchor chosen: {chosen:g}", flush=True)
    path = trainer.save(
        out / "generalist", command=" ".join(["python", PROG, *argv]),
        run_args=asdict(a), wall_s=time.time() - t0, cpu_s=time.process_time() - c0,
        oracle=oracle, validation=points[-1], anchor_selection=selection,
    )  # fmt: skip
    plot_curve(points, out / "curve.png")
    print(f"model: {path} ({trainer.num_timesteps:,} steps, {time.process_time() - c0:.0f} CPU-s)")
    return {"model": str(path), "curve": points, "clone": clone, "oracle": oracle}


if __name__ == "__main__":
    main()
