"""Training callbacks for MaskablePPO on the server farm (used by ``train.py``).

* :class:`RolloutStatsCallback`: efficiency actually achieved while training (from ``info``),
  the running eta, and masked actions that hit the env's fallback (should stay 0).
* :class:`EfficiencyEvalCallback`: the masked-evaluation callback of this project. sb3-contrib's
  ``MaskableEvalCallback`` ranks models by episode *return*, which with a running eta is not the
  efficiency; this one measures the deterministic masked policy's efficiency (exactly on small
  farms, by independent rollouts otherwise), logs it with its gaps to PAS and the optimum, keeps
  a history (``evaluations.jsonl``) and saves the best model.
* :class:`AtomicCheckpointCallback`: periodic checkpoints (model + VecNormalize statistics) written
  atomically, so a kill at any moment leaves the latest complete checkpoint to ``--resume`` from.
"""

from __future__ import annotations

import copy
import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

from serverfarm_gym.agents.common.artefacts import (
    ArtefactError,
    read_json_object,
    read_model_sidecar,
    read_sb3_zip,
)
from serverfarm_gym.agents.common.checkpoints import (
    CKPT_RE,
    check_finite_params,
    diverged,
    newest_loadable,
    save_model_atomic,
    write_error,
)
from serverfarm_gym.agents.ppo.agent import model_predictor
from serverfarm_gym.evaluation.efficiency import Estimate, References
from serverfarm_gym.evaluation.stats import gaps

__all__ = [
    "AtomicCheckpointCallback",
    "EfficiencyEvalCallback",
    "FiniteGuardCallback",
    "RolloutStatsCallback",
    "load_checkpoint",
    "load_vecnormalize",
    "save_vecnormalize",
    "saved_best_efficiency",
    "vecnormalize_path",
]

T = TypeVar("T")


def save_vecnormalize(venv: Any, path: Path) -> None:
    """The reward-normalisation statistics of a ``VecNormalize(norm_obs=False)`` as JSON,
    atomically (SB3's own ``save`` pickles the wrapper, and loading a pickle runs code)."""
    rms = venv.ret_rms
    stats = {"ret_rms": {"mean": float(rms.mean), "var": float(rms.var), "count": float(rms.count)},
             "clip_reward": float(venv.clip_reward), "epsilon": float(venv.epsilon)}  # fmt: skip
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(json.dumps(stats))
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise write_error(path, err) from err
    os.replace(tmp, path)


def load_vecnormalize(path: Path, venv: Any, gamma: float) -> Any:
    """``VecNormalize(venv, norm_obs=False, norm_reward=True)`` with the statistics saved by
    :func:`save_vecnormalize` (fresh ones if there is no file)."""
    from stable_baselines3.common.vec_env import VecNormalize

    env = VecNormalize(venv, norm_obs=False, norm_reward=True, gamma=gamma)
    old = path.with_suffix(".pkl")
    if not path.exists() and old.exists():
        raise ArtefactError(
            f"{old}: VecNormalize statistics as a pickle, which is not loaded (unpickling runs "
            "code); this checkpoint cannot be resumed with --normalize-reward"
        )
    if path.exists():
        stats = read_json_object(path, "a VecNormalize statistics file")
        try:
            rms = stats["ret_rms"]
            env.ret_rms.mean, env.ret_rms.var = float(rms["mean"]), float(rms["var"])
            env.ret_rms.count = float(rms["count"])
            env.clip_reward, env.epsilon = float(stats["clip_reward"]), float(stats["epsilon"])
        except (KeyError, TypeError, ValueError) as err:
            raise ArtefactError(f"{path}: not VecNormalize statistics ({err})") from err
        values = (env.ret_rms.mean, env.ret_rms.var, env.ret_rms.count)
        if not all(math.isfinite(float(v)) for v in values) or env.ret_rms.var < 0:
            raise ArtefactError(f"{path}: VecNormalize statistics not finite or negative")
    return env


def vecnormalize_path(model_path: str | Path) -> Path:
    """Where the VecNormalize statistics matching a checkpoint are stored."""
    p = Path(model_path)
    return p.with_name(p.stem + "_vecnormalize.json")


class FiniteGuardCallback(BaseCallback):
    """Stop MaskablePPO the moment its loss or parameters are non-finite: checked after every
    update (at the next rollout start) and at the end of training. Listed first, so that no
    later callback evaluates or saves a diverged model."""

    def _check(self) -> None:
        steps = int(self.model.num_timesteps)
        loss = self.model.logger.name_to_value.get("train/loss")
        if loss is not None and not np.isfinite(loss):
            raise diverged(steps, f"the loss is {loss}")
        check_finite_params(self.model.policy.parameters(), steps)

    def _on_rollout_start(self) -> None:
        self._check()

    def _on_step(self) -> bool:
        return True

    def _on_training_end(self) -> None:
        self._check()


class RolloutStatsCallback(BaseCallback):
    """Log the training-time efficiency (work / energy over each rollout, all envs), eta and the
    number of masked actions the env had to replace (``info["invalid_action"]``)."""

    def __init__(self, pas_efficiency: float | None = None, verbose: int = 0):
        super().__init__(verbose)
        self.pas_efficiency = pas_efficiency
        self._reset()

    def _reset(self) -> None:
        self._work = self._energy = 0.0
        self._eta: list[float] = []
        self._invalid = 0

    def _on_rollout_start(self) -> None:
        self._reset()

    def _on_step(self) -> bool:
        for info in self.locals["infos"]:
            self._work += info["work"]
            self._energy += info["energy"]
            self._invalid += bool(info["invalid_action"])
        self._eta.append(self.locals["infos"][0]["eta"])
        return True

    def _on_rollout_end(self) -> None:
        if self._energy > 0:
            eff = self._work / self._energy
            self.logger.record("rollout/efficiency", eff)
            g = gaps(eff, self.pas_efficiency, None)["gap_to_pas_pct"]
            if g is not None:
                self.logger.record("rollout/gap_to_pas_pct", g)
        if self._eta:
            self.logger.record("rollout/eta", float(np.mean(self._eta)))
        self.logger.record("rollout/invalid_actions", self._invalid)


class EfficiencyEvalCallback(BaseCallback):
    """Measure the deterministic masked policy's efficiency at the first rollout start, then at
    the first rollout start after every ``eval_freq`` timesteps, and at the end of training.

    Args:
        measure: ``measure(predictor) -> Estimate`` (e.g. a partial of
            ``serverfarm_gym.evaluation.efficiency.measure``); the predictor is the model's deterministic one.
        references: PAS / optimum / bound of the scenario, for the logged gaps.
        eval_freq: timesteps between evaluations (all envs together).
        log_path: ``evaluations.jsonl``, one JSON line per evaluation (kept across resumes).
        save_best: called as ``save_best(model)`` whenever the efficiency beats the best so far.
        history: evaluations restored on ``--resume`` (dicts as written to ``log_path``).
        best_efficiency: the measured efficiency of the best model already saved by the run
            being resumed (default: the best in ``history``); only a better one replaces it.

    On a resume, the evaluations up to the checkpoint's timesteps stay in the history and the log;
    those made after it (by a model the resumed run does not continue) are moved to
    ``evaluations_superseded.jsonl`` next to the log, since the resumed run measures those
    timesteps again. The best model may be one of them: it stays the best until beaten.
    """

    def __init__(
        self,
        measure: Callable[[Callable], Estimate],
        references: References,
        eval_freq: int,
        log_path: str | Path | None = None,
        save_best: Callable[[Any], None] | None = None,
        history: list[dict[str, Any]] | None = None,
        best_efficiency: float | None = None,
        verbose: int = 0,
    ):
        super().__init__(verbose)
        self.measure = measure
        self.refs = references
        self.eval_freq = int(eval_freq)
        self.log_path = Path(log_path) if log_path is not None else None
        self.save_best = save_best
        self.history: list[dict[str, Any]] = list(history or [])
        if best_efficiency is None:
            best_efficiency = max((h["efficiency"] for h in self.history), default=-np.inf)
        self.best_efficiency = float(best_efficiency)
        self.superseded: list[dict[str, Any]] = []
        self._last_eval = self.history[-1]["timesteps"] if self.history else -1

    def _init_callback(self) -> None:
        # a resumed run continues from the checkpoint's timesteps (the model's: SB3 updates the
        # callback's own num_timesteps only at the first step); evaluations made after them are
        # redone, so they move out of the history, to a file of their own rather than nowhere
        start = self.model.num_timesteps
        self.superseded = [h for h in self.history if h["timesteps"] > start]
        self.history = [h for h in self.history if h["timesteps"] <= start]
        self._last_eval = self.history[-1]["timesteps"] if self.history else -1
        if self.log_path is not None:
            if self.superseded:
                with open(self.log_path.with_name("evaluations_superseded.jsonl"), "a") as f:
                    f.write("".join(json.dumps(h) + "\n" for h in self.superseded))
            self._rewrite_log()

    def _rewrite_log(self) -> None:
        assert self.log_path is not None
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.log_path.with_name(f".{self.log_path.name}.tmp")
        tmp.write_text("".join(json.dumps(h) + "\n" for h in self.history))
        os.replace(tmp, self.log_path)

    def evaluate(self) -> dict[str, Any]:
        """Measure now, log, record and (if best) save; returns the history entry."""
        t0 = time.perf_counter()
        est = self.measure(model_predictor(self.model))
        pas = self.refs.pas.efficiency
        entry = {
            "timesteps": int(self.num_timesteps),
            "efficiency": est.efficiency,
            "ci95": est.ci95,
            "method": est.method,
            **gaps(est.efficiency, pas, self.refs.optimum, self.refs.upper_bound),
            "wall_s": time.perf_counter() - t0,
        }
        self.logger.record("eval/efficiency", est.efficiency)
        if est.ci95 > 0:
            self.logger.record("eval/efficiency_ci95", est.ci95)
        for key in ("gap_to_pas_pct", "gap_to_optimum_pct", "gap_to_bound_pct"):
            if entry[key] is not None:
                self.logger.record(f"eval/{key}", entry[key])
        self.history.append(entry)
        self._last_eval = self.num_timesteps
        if self.log_path is not None:
            with open(self.log_path, "a") as f:
                f.write(json.dumps(entry) + "\n")
        if est.efficiency > self.best_efficiency:
            self.best_efficiency = est.efficiency
            if self.save_best is not None:
                self.save_best(self.model)
        if self.verbose:
            g = entry["gap_to_pas_pct"]
            print(
                f"eval @ {self.num_timesteps}: efficiency {est.efficiency:.6f}"
                + (f" +- {est.ci95:.6f}" if est.ci95 > 0 else " (exact)")
                + (f", vs PAS {g:+.3f}%" if g is not None else "")
            )
        return entry

    def _on_rollout_start(self) -> None:
        # at a rollout start the policy has been trained on exactly num_timesteps samples (the
        # policy only changes in train(), between rollouts), so evaluations line up with them
        due = self._last_eval < 0 or self.num_timesteps - self._last_eval >= self.eval_freq
        if self.eval_freq > 0 and due:
            self.evaluate()
            self.logger.dump(self.num_timesteps)

    def _on_step(self) -> bool:
        return True

    def _on_training_end(self) -> None:
        # the final policy is always evaluated, so the history ends at the last timestep
        if self._last_eval != self.num_timesteps:
            self.evaluate()
            self.logger.dump(self.num_timesteps)


class AtomicCheckpointCallback(BaseCallback):
    """Save ``ckpt_<timesteps>_steps.zip`` (+ ``_vecnormalize.json``) at the first rollout start
    after every ``save_freq`` timesteps and at the end of training, atomically; keep the
    ``keep_last`` newest.

    ``on_save`` (e.g. writing the run's state file) is called after each checkpoint.

    It also keeps in memory a copy of the parameters (policy and optimizer) at the latest rollout
    start: :meth:`save_interrupted` writes them as the checkpoint of those timesteps after a
    Ctrl-C, whether it came during a rollout or an update (the samples of the unfinished rollout
    are collected again on ``--resume``; VecNormalize statistics are saved as they are).
    """

    def __init__(
        self,
        save_freq: int,
        save_dir: str | Path,
        keep_last: int = 3,
        on_save: Callable[[Path, int], None] | None = None,
        verbose: int = 0,
    ):
        super().__init__(verbose)
        self.save_freq = int(save_freq)
        self.save_dir = Path(save_dir)
        self.keep_last = max(1, int(keep_last))
        self.on_save = on_save
        self._last_save = -1
        self._start = 0
        self._snapshot: tuple[int, int, dict[str, Any]] | None = None

    def _init_callback(self) -> None:
        self.save_dir.mkdir(parents=True, exist_ok=True)
        # the model's count: a resumed run starts at its checkpoint, which exists already
        self._last_save = self._start = self.model.num_timesteps

    def _take_snapshot(self) -> None:
        params = copy.deepcopy(self.model.get_parameters())
        self._snapshot = (int(self.model.num_timesteps), int(self.model._n_updates), params)

    def save_interrupted(self) -> tuple[Path, int] | None:
        """After an interruption inside ``learn``: save the parameters of the latest rollout start
        as that step's checkpoint; (path, timesteps), or None if nothing was trained since this
        ``learn`` call started (a resumed run's checkpoint is then still the latest)."""
        if self._snapshot is None or self._snapshot[0] == self._start:
            return None
        steps, n_updates, params = self._snapshot
        path = self.save_dir / f"ckpt_{steps}_steps.zip"
        if steps != self._last_save or not path.exists():
            self.model.set_parameters(params, exact_match=True, device=self.model.device)
            self.model.num_timesteps, self.model._n_updates = steps, n_updates
            self.num_timesteps = steps
            path = self.save()
        return path, steps

    def _on_training_start(self) -> None:
        self._take_snapshot()

    def save(self) -> Path:
        steps = int(self.num_timesteps)
        path = self.save_dir / f"ckpt_{steps}_steps.zip"
        venv = self.model.get_vec_normalize_env()
        if venv is not None:  # first: the model file's existence marks a complete checkpoint
            save_vecnormalize(venv, vecnormalize_path(path))
        save_model_atomic(self.model, path)
        self._last_save = steps
        self._prune()
        if self.on_save is not None:
            self.on_save(path, steps)
        if self.verbose:
            print(f"checkpoint: {path}")
        return path

    def _prune(self) -> None:
        found = sorted(
            (int(m.group(1)), f) for f in self.save_dir.iterdir() if (m := CKPT_RE.match(f.name))
        )
        for _, f in found[: -self.keep_last]:
            for extra in self.save_dir.glob(f"{f.stem}_*"):  # vecnormalize, eta state
                extra.unlink(missing_ok=True)
            f.unlink(missing_ok=True)

    def _on_rollout_start(self) -> None:
        # saving between train() and the next rollout: the checkpoint has been trained on exactly
        # num_timesteps samples, so a resumed run loses nothing and repeats nothing
        if self.save_freq > 0 and self.num_timesteps - self._last_save >= self.save_freq:
            self.save()
        self._take_snapshot()

    def _on_step(self) -> bool:
        return True

    def _on_training_end(self) -> None:
        if self._last_save != self.num_timesteps:
            self.save()


def load_checkpoint(
    ckpt_dir: str | Path,
    venv: Any,
    build: Callable[[Any], Any],
    *,
    device: str = "cpu",
    normalize_reward: bool = False,
    gamma: float = 0.99,
) -> tuple[Any, Any, Path, int] | None:
    """Load the newest checkpoint of ``ckpt_dir`` that loads, attached to ``venv`` (wrapped in
    its VecNormalize statistics when ``normalize_reward``): ``(model, venv, path, timesteps)``,
    or None if there is no checkpoint.

    Nothing is unpickled: ``build(env)`` makes a fresh model of the run's arguments (the run's
    ``args.json`` is its identity), and only the checkpoint's weights, Adam state and step
    counts are read into it (``serverfarm_gym.agents.common.artefacts.read_sb3_zip``); SB3's ``MaskablePPO.load``
    would run code planted in the zip. A checkpoint that cannot be loaded (cut short,
    overwritten, disk error, non-finite weights) is skipped with a warning on stderr and the
    previous one is tried; if none loads, a ValueError says why.
    """

    def load(path: Path, steps: int) -> tuple[Any, Any]:
        saved = read_sb3_zip(path, optimizer=True)
        held = saved.data.get("num_timesteps")
        if held != steps:
            raise ValueError(f"it holds {held} timesteps, its name says {steps}")
        env = venv
        if normalize_reward:
            env = load_vecnormalize(vecnormalize_path(path), venv, gamma)
        model = build(env)
        params = {"policy": saved.policy, "policy.optimizer": saved.optimizer}
        model.set_parameters(params, exact_match=True, device=device)
        model.num_timesteps = steps
        n_updates = saved.data.get("_n_updates", 0)
        model._n_updates = n_updates if isinstance(n_updates, int) else 0
        return model, env

    found = newest_loadable(ckpt_dir, load)
    if found is None:
        return None
    (model, env), path, steps = found
    return model, env, path, steps


def saved_best_efficiency(best_model: str | Path, history: list[dict[str, Any]]) -> float | None:
    """The measured efficiency of the best model a run saved (its sidecar's ``eval_efficiency``;
    for runs that predate it, the best efficiency in its evaluation history), or None if the run
    has no best model yet."""
    p = Path(best_model)
    if not p.exists():
        return None
    try:
        value = read_model_sidecar(p).get("eval_efficiency")
    except (OSError, ValueError):
        value = None
    if value is not None:
        return float(value)
    return max((h["efficiency"] for h in history), default=None)
