"""Where a policy trained from scratch loses against the exact optimum, state by state.

Trains one PPO run as ``experiments/studies/from_scratch.py`` does (random start, the settings
``train.py`` derives, ``--set`` overrides; group actions), then decomposes the gap of its final
deterministic policy exactly (``serverfarm_gym.agents.ppo.criterion.loss_by_state``: the
average-reward performance difference, one term per decision state, the terms summing to the
gap in average reward per decision). For the states that carry most of it the report prints
each action's exact value against the optimum's best, the network's probabilities and, with
``advantage="afterstate"``, the critic's values of the afterstates: whether the policy is wrong
because its critic is wrong, or in spite of a critic that orders the actions right.

    python -m experiments.studies.policy_gap --scenario pas-gap --seed 2 --steps 196608 \\
        --set '{"advantage": "afterstate", "gae_lambda": 0.8, "net_arch": [128, 128]}'
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np

from experiments.studies import from_scratch as fs
from serverfarm_gym.evaluation.outputs import atomic_write, to_json


def state_report(trainer: Any, mdp: Any, opt: Any, top: int = 8) -> dict[str, Any]:
    """The decomposition of ``trainer``'s deterministic policy against the optimum ``opt`` of
    its farm's decision process ``mdp`` (module doc): the gap, the share of the loss in the
    ``top`` states that carry most of it, and per such state its occupancy, job type, share of
    decisions, exact ``q - max q``, the policy's probabilities and (afterstate critic)
    ``U - max U``, each over the state's actions."""
    import torch

    from serverfarm_gym.agents.ppo.afterstate import AfterstateMap
    from serverfarm_gym.agents.ppo.criterion import loss_by_state
    from serverfarm_gym.agents.ppo.losses import masked_logits
    from serverfarm_gym.envs.observation import encode_occupancy, group_action

    config = trainer.config
    # the value net is a critic of afterstates only with advantage="afterstate"
    after = AfterstateMap(config, fs.ACTION_MODE) if trainer.cfg.advantage == "afterstate" else None
    occ = mdp.states.astype(np.int64)
    sg = config.server_group
    choice = np.zeros(len(mdp.post), dtype=np.int64)
    probs, crit = [], []
    for d, servers in enumerate(mdp.servers):
        z, j = occ[mdp.dec_z[d]], int(mdp.dec_j[d])
        obs, masks = encode_occupancy(config, fs.ACTION_MODE, z[None], j)
        # the MDP's actions are servers (a group's first at each level); the net's (group, level)
        acts = [group_action(config, int(sg[s]), int(z[s])) for s in servers]
        with torch.no_grad():
            o = torch.from_numpy(obs)
            logits = masked_logits(trainer.logits_of(o), torch.from_numpy(masks))
            p = torch.softmax(logits, -1)[0].numpy()[acts]
            if after is not None:
                u = trainer.value_of(after.after(o)[0]).numpy()[acts]
                crit.append(u - u.max())
        choice[d] = int(np.argmax(p))
        probs.append(p)
    out = loss_by_state(mdp, choice, opt)
    loss, total = out["loss"], float(out["loss"].sum())
    order = np.argsort(-loss)[:top]
    states = []
    for d in order:
        q = out["q"][d]
        states.append({
            "occupancy": occ[mdp.dec_z[d]].tolist(), "job_type": int(mdp.dec_j[d]),
            "share_of_decisions": float(out["mu"][d]),
            "share_of_loss": float(loss[d] / total) if total > 0 else 0.0,
            "exact_q_minus_best": np.round(q - q.max(), 4).tolist(),
            "policy_probs": np.round(probs[d].astype(float), 3).tolist(),
            "critic_minus_best": np.round(crit[d].astype(float), 4).tolist() if crit else None,
            "critic_orders_right": bool(np.argmax(crit[d]) == np.argmax(q)) if crit else None,
        })  # fmt: skip
    return {
        "gap_per_decision": total, "wrong_states": int((loss > 0).sum()),
        "decision_states": len(loss), "top_share_of_loss": float(loss[order].sum() / total)
        if total > 0 else 0.0, "states": states,
    }  # fmt: skip


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="pas-gap")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=196_608)
    ap.add_argument("--set", default="{}", help="PPOConfig fields as JSON (as from_scratch --set)")
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--out", default="", help="also write the report here (JSON, atomically)")
    a = ap.parse_args(argv)
    import torch

    from serverfarm_gym.agents.ppo.criterion import best_policy, decision_mdp
    from serverfarm_gym.envs.scenarios import load_scenario

    torch.set_num_threads(1)
    overrides = json.loads(a.set)
    if "net_arch" in overrides:
        overrides["net_arch"] = tuple(overrides["net_arch"])
    config = load_scenario(a.scenario)
    # the optimum over every deterministic policy (the LP's on these farms: docs/learning.md)
    mdp = decision_mdp(config, fs.ACTION_MODE)
    opt = best_policy(mdp)
    optimum = opt.efficiency
    trainer = fs.ppo_trainer(config, a.seed, **overrides)
    curve = fs.Curve(fs.exact_efficiency(config, lambda: trainer.predict_batch))
    curve.evaluate(0)
    trainer.learn(a.steps, callback=lambda t: curve.evaluate(t.num_timesteps))
    share = [p[2] / optimum for p in curve.points]
    report = {"scenario": a.scenario, "seed": a.seed, "steps": a.steps, "set": a.set,
              "best_share": max(share), "final_share": share[-1],
              **state_report(trainer, mdp, opt, a.top)}  # fmt: skip
    print(f"{a.scenario} seed {a.seed}: final {100 * share[-1]:.3f}% of the optimum (best "
          f"{100 * max(share):.3f}%); {report['wrong_states']} of {report['decision_states']} "
          f"decision states wrong, the top {a.top} carry {100 * report['top_share_of_loss']:.0f}%"
          " of the loss")  # fmt: skip
    for s in report["states"]:
        print(f"  occupancy {s['occupancy']} type {s['job_type']}: "
              f"{100 * s['share_of_decisions']:.2f}% of decisions, {100 * s['share_of_loss']:.0f}%"
              f" of the loss\n    exact q - best {s['exact_q_minus_best']}\n"
              f"    policy         {s['policy_probs']}")  # fmt: skip
        if s["critic_minus_best"] is not None:
            print(
                f"    critic U - best {s['critic_minus_best']} (orders right: "
                f"{s['critic_orders_right']})"
            )
    if a.out:
        atomic_write(Path(a.out), to_json(report))
    return report


if __name__ == "__main__":
    main()
