"""The state of one lean training run (:class:`LeanRun`), shared by the steps of
:func:`serverfarm_gym.agents.ppo.train.train_lean`: build, learn with evaluation, verdict."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from serverfarm_gym.agents.ppo import slo as slo_training
from serverfarm_gym.agents.ppo.trainer import LeanTrainer
from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.symmetry import GroupView
from serverfarm_gym.evaluation.efficiency import References
from serverfarm_gym.evaluation.paired import BestModelSelector, PairedEvaluator

if TYPE_CHECKING:  # the resolved arguments of train.py (serverfarm_gym.agents.common.run_args)
    from serverfarm_gym.agents.common.run_args import LeanArgs

__all__ = ["LeanRun"]


@dataclass
class LeanRun:
    """The state of one lean run, shared by its steps (:func:`train_lean`): what the build sets
    up once and what learning changes (the history, the last evaluation and checkpoint)."""

    a: LeanArgs  # train.py's resolved arguments
    config: FarmConfig
    out: Path
    side: dict[str, Any]  # every saved model's sidecar entries
    view: GroupView | None  # a tied network's server view (None: the network acts itself)
    exact: bool
    warm: int  # unmeasured policy epochs of each simulated replication
    evaluator: PairedEvaluator
    end: int  # the run's last step (whole rollouts)
    trainer: LeanTrainer | None = None
    start: int = 0  # the step the run (or this resume) starts at
    resumed: bool = False
    started_from: str | None = "random"
    refs: References | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    selector: BestModelSelector | None = None
    writer: Any = None  # the TensorBoard writer (None: off)
    last_eval: int = -1
    last_ckpt: int = 0
    learn_s: float = 0.0
    learn_cpu_s: float = 0.0
    slo: slo_training.SLORun | None = (
        None  # training to the farm's SLO (serverfarm_gym.agents.ppo.slo)
    )

    @property
    def ckpt_dir(self) -> Path:
        return self.out / "checkpoints"

    @property
    def best_path(self) -> Path:
        return self.out / "best_model.zip"

    @property
    def eval_log(self) -> Path:
        return self.out / "evaluations.jsonl"

    @property
    def model(self) -> LeanTrainer:
        if self.trainer is None:  # the build always sets one
            raise RuntimeError("the run has no trainer yet")
        return self.trainer
