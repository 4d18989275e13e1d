"""``python train.py table-generalist STAGE``: train the table network of
``make_policy("generalist", config)`` (the shipped weights: ``models/generalist_table.npz``)
by distillation of ``best-priority``.

One model file (``--out``: ``NAME.npz`` + ``NAME.json``) holds two experts, trained in stages:

* ``main-network`` (:mod:`serverfarm_gym.agents.table_generalist.table_train`): the main
  network, which reads every farm beyond the small-farm expert's range, fitted to
  ``best-priority``'s tables on sampled farms (simulated labels; large farms through their twin);
* ``small-expert`` (:mod:`serverfarm_gym.agents.table_generalist.exact_expert`): the small-farm
  expert, fitted to exact labels on the farms whose per-server chain has at most 5,000 states,
  optionally from tables polished on each farm (``--polish-from``).

The shipped model is written by three commands (docs/generalist.md): the expert's first five
networks (distilled from ``best-priority``, added to a file holding a main network), the main
network beside it, then five networks distilled from that file's own polished tables:

    python train.py table-generalist small-expert --farms 6000 --epochs 60 --members 5 \\
        --workers 2 --cache runs/table-labels \\
        --base agents/table_generalist/models/generalist_table.npz \\
        --out agents/table_generalist/models/generalist_table
    python train.py table-generalist main-network --farms 1000 --small-farms 183 --epochs 60 \\
        --layers 2 --width 64 --batch-size 16 --pair-floor 0.1 --members 4 --workers 2 \\
        --cache runs/table-labels \\
        --keep-expert agents/table_generalist/models/generalist_table.npz \\
        --out agents/table_generalist/models/generalist_table
    python train.py table-generalist small-expert --farms 6000 --epochs 60 --members 5 \\
        --workers 2 --cache runs/table-labels \\
        --polish-from agents/table_generalist/models/generalist_table.npz --polish-steps 20 \\
        --keep-base-expert --base agents/table_generalist/models/generalist_table.npz \\
        --out agents/table_generalist/models/generalist_table

``python -m serverfarm_gym.agents.table_generalist.run STAGE ...`` is the same command;
``STAGE -h`` lists a stage's options.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from serverfarm_gym.agents.table_generalist import exact_expert, table_train

__all__ = ["PROG", "STAGES", "build_parser", "main"]

#: the command's name in its messages
PROG = "train.py table-generalist"
#: stage -> (its command line, what it trains)
STAGES: dict[str, tuple[Callable[..., dict[str, Any]], str]] = {
    "main-network": (table_train.main, "the main network (every farm beyond the expert's)"),
    "small-expert": (exact_expert.main, "the small-farm expert (exact labels)"),
}


def build_parser() -> argparse.ArgumentParser:
    """``STAGE [options]``: the stage, then its own options (``STAGE -h``)."""
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument(
        "stage",
        choices=list(STAGES),
        help="; ".join(f"{k}: {what}" for k, (_, what) in STAGES.items()),
    )
    p.add_argument("options", nargs=argparse.REMAINDER, help="the stage's options (STAGE -h)")
    return p


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run one stage from the command line ``argv``; returns the written model's sidecar."""
    a = build_parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    train_stage = STAGES[a.stage][0]
    return train_stage(a.options, prog=f"{PROG} {a.stage}")


if __name__ == "__main__":
    main()
