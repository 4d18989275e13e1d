"""The masked PPO of ``train.py`` (:class:`PPO`, CleanRL style), trained directly on the batched
arrays of :class:`~serverfarm_gym.envs.vector.ServerFarmVectorEnv`: the rollout
(:meth:`PPO.collect`: one forward pass for all envs and one compiled vector step per step), GAE
and the clipped losses (``serverfarm_gym.agents.ppo.losses``), the update (:meth:`PPO.update`:
a few large minibatches over preallocated tensors), the loop (:meth:`PPO.learn`), behaviour
cloning of a teacher (:meth:`PPO.clone_pas`) and the file (:meth:`PPO.save`, :meth:`PPO.load`).
Its settings are :class:`~serverfarm_gym.agents.ppo.config.PPOConfig`; train.py's run around it
is ``serverfarm_gym.agents.ppo.run``. Why not sb3-contrib's ``MaskablePPO``: its Python work per
collected step and per minibatch caps training far below what the vector env delivers
(BENCHMARKS.md, "Training throughput").

The network *is* sb3-contrib's ``MaskableActorCriticPolicy`` (same modules, same orthogonal
initialisation, same Adam with ``eps=1e-5``): :meth:`PPO.save` writes an ordinary
``MaskablePPO`` ``.zip`` plus the JSON sidecar of :func:`serverfarm_gym.agents.ppo.write_sidecar`, so
``serverfarm_gym.agents.ppo.PPOAgent.load`` (and ``evaluate.py --policies ppo:PATH``) use it unchanged.

PPO with the clipped surrogate, GAE(lambda), an unclipped value loss, an entropy bonus, global
gradient-norm clipping and a linearly decaying learning rate. Three advantages (``advantage``):

* ``"discounted"``: GAE with discount ``gamma``; ``gamma="auto"``: a horizon of
  ``horizon_durations`` mean job durations in model time (``config.auto_gamma``).
* ``"average"``: average-reward (differential) GAE without a discount: ``delta_t = r_t - rho +
  V(s_{t+1}) - V(s_t)``, ``rho`` the running average reward (updated once per rollout). The
  env's reward ``W - eta P`` is a Dinkelbach average reward, so this is the criterion
  optimised; ``gae_lambda < 1`` keeps the variance bounded.
* ``"afterstate"``: the same criterion, the advantage read off a critic of the farm *after* the
  placement, ``A(s, a) = U(y_a) - sum_b pi(b | s) U(y_b)``, instead of off a sampled return
  (``serverfarm_gym.agents.ppo.afterstate``; farms without right-sizing).

A clone of PAS's (or another teacher's) decisions starts training at its efficiency; the clone
is label-smoothed (``clone_smoothing``): a hard clone is near-deterministic and PPO's gradient
through a saturated softmax barely moves it. ``critic_warmup`` fits the value net alone for the
first rollouts after it, and ``pas_anchor`` adds the smoothed clone loss on every rollout's
states to PPO's loss (large farms, where the advantages are mostly noise).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from serverfarm_gym.agents.common.artefacts import ArtefactError, read_model_sidecar, read_sb3_zip
from serverfarm_gym.agents.common.checkpoints import (
    check_finite_params,
    diverged,
    save_model_atomic,
)
from serverfarm_gym.agents.ppo.afterstate import AfterstateCritic
from serverfarm_gym.agents.ppo.agent import sidecar_path, write_sidecar
from serverfarm_gym.agents.ppo.config import PPOConfig, auto_gamma
from serverfarm_gym.agents.ppo.losses import clone_loss, gae, masked_logits, ppo_losses
from serverfarm_gym.baselines.registry import make_policy
from serverfarm_gym.envs.config import FarmConfig, farm_from_dict
from serverfarm_gym.envs.scenarios import load_scenario
from serverfarm_gym.envs.vector import ServerFarmVectorEnv, make_sb3_vec_env
from serverfarm_gym.evaluation.policy_report import epochs_per_duration

__all__ = ["PPO", "SIDECAR_CONFIGS"]


#: the sidecar's ``trainer`` tag -> its entry with the settings: :meth:`PPO.save` writes
#: ``"ppo"``, :meth:`PPO.load` also reads files written by earlier versions (``"lean_ppo"``)
SIDECAR_CONFIGS = {"ppo": "ppo_config", "lean_ppo": "lean_ppo_config"}


class PPO:
    """Masked PPO on a :class:`ServerFarmVectorEnv` of ``config``.

    ``model`` is an sb3-contrib ``MaskablePPO`` whose ``policy`` is the network trained here
    (the object is only used for its policy and for :meth:`save`: it never collects data).
    """

    def __init__(self, scenario: Any, cfg: PPOConfig | None = None, **overrides: Any):
        from sb3_contrib import MaskablePPO

        self.cfg = cfg = (cfg or PPOConfig(**overrides)).check()
        self.config = load_scenario(scenario) if not isinstance(scenario, FarmConfig) else scenario
        torch.set_num_threads(int(cfg.torch_threads))
        torch.manual_seed(cfg.seed)
        warmup = cfg.warmup_epochs
        if warmup < 0:  # the farm starts empty: reach steady state before learning from it
            warmup = max(1_000, math.ceil(50 * epochs_per_duration(self.config)))
        eta = cfg.reward_eta if cfg.reward_eta == "running" else float(cfg.reward_eta)
        adapter = make_sb3_vec_env(
            cfg.n_envs,
            self.config,
            action_mode=cfg.action_mode,
            reward_eta=eta,
            eta_tau=cfg.eta_tau,
            warmup_epochs=warmup,
            max_episode_steps=None,  # continuing task: never truncated
            parallel=cfg.env_parallel,
            objective=cfg.objective,
        )
        self.venv: ServerFarmVectorEnv = adapter.venv
        if self.config.is_time_varying:  # start the envs spread over the schedule's cycle
            cycle, n = self.config.cycle_arrivals, cfg.n_envs
            self.venv.set_warmup([warmup + round(e * cycle / n) for e in range(n)])
        act = torch.nn.Tanh if cfg.activation == "tanh" else torch.nn.ReLU
        arch = list(cfg.net_arch)
        self.model = MaskablePPO(
            "MlpPolicy",
            adapter,
            learning_rate=cfg.learning_rate,  # a float: the file loads anywhere
            n_steps=cfg.n_steps,
            batch_size=cfg.batch_size,
            n_epochs=cfg.n_epochs,
            gamma=self.gamma if cfg.advantage == "discounted" else 1.0,
            gae_lambda=cfg.gae_lambda,
            policy_kwargs={"net_arch": {"pi": arch, "vf": arch}, "activation_fn": act},
            seed=cfg.seed,
            device="cpu",
        )
        self.policy = self.model.policy
        self.policy.set_training_mode(False)
        self.optimizer = self.policy.optimizer
        self.num_timesteps = 0
        self.n_updates = 0  # updates done by learn() (critic_warmup counts them)
        # the steps the linear learning-rate schedule runs over; 0: each learn() call's own.
        # train.py's run sets its whole length, so a resumed run continues the schedule where
        # its checkpoint left it (as SB3's reset_num_timesteps=False does)
        self.schedule_total = 0
        self.rho = 0.0  # running average reward (advantage "average" and "afterstate")
        self._rho_init = False
        self._obs: np.ndarray | None = None
        self.history: list[dict[str, float]] = []
        # PAS itself, when the loss anchors the policy to its decisions (pas_anchor > 0)
        self._pas = make_policy("pas", self.config, cfg.action_mode) if cfg.pas_anchor > 0 else None
        self._gen = torch.Generator().manual_seed(cfg.seed)
        self._after = (  # advantage="afterstate": the value net is a critic of afterstates
            AfterstateCritic(self.config, cfg.action_mode, self.value_of)
            if cfg.advantage == "afterstate" else None
        )  # fmt: skip

    # ---- the network ----------------------------------------------------------------------------
    @property
    def gamma(self) -> float:
        g = self.cfg.gamma
        return auto_gamma(self.config, self.cfg.horizon_durations) if g == "auto" else float(g)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits [n, A], values [n]) of float32 observations (no masking)."""
        return self.logits_of(obs), self.value_of(obs)

    def logits_of(self, obs: torch.Tensor) -> torch.Tensor:
        """The policy net alone: logits [n, A] of float32 observations (no masking)."""
        p = self.policy
        return p.action_net(p.mlp_extractor.forward_actor(p.features_extractor(obs)))

    def value_of(self, obs: torch.Tensor) -> torch.Tensor:
        """The value net alone on float32 observations (afterstates: ``values [n]``)."""
        p = self.policy
        return p.value_net(p.mlp_extractor.forward_critic(p.features_extractor(obs))).squeeze(-1)

    @torch.no_grad()
    def predict_batch(self, obs: np.ndarray, masks: np.ndarray) -> np.ndarray:
        """Deterministic masked actions (the argmax of the masked logits) of a batch."""
        p = self.policy  # the policy head only: evaluations need no value
        obs_t = torch.as_tensor(obs, dtype=torch.float32)
        logits = p.action_net(p.mlp_extractor.forward_actor(p.features_extractor(obs_t)))
        m = torch.as_tensor(masks, dtype=torch.bool)
        return masked_logits(logits, m).argmax(-1).numpy()

    # ---- training -------------------------------------------------------------------------------
    def _start(self) -> None:
        obs, _ = self.venv.reset(seed=self.cfg.seed)
        self._obs = obs

    def collect(self, buf: dict[str, torch.Tensor]) -> dict[str, float]:
        """Fill ``buf`` with ``n_steps`` steps of every env; returns rollout statistics."""
        if self._obs is None:
            self._start()
        venv, T = self.venv, self.cfg.n_steps
        obs = torch.from_numpy(self._obs)
        work = energy = area = 0.0
        accepted = 0
        for t in range(T):
            mask = torch.from_numpy(venv.action_masks())
            accepted += int(mask.any(-1).sum())  # an arrival with a vacancy is admitted
            with torch.no_grad():
                logits, v = self.forward(obs)
                lp = torch.log_softmax(masked_logits(logits, mask), -1)
                # Gumbel-max sampling: exact categorical draws, masked actions have -inf
                g = -torch.log(-torch.log(torch.rand(lp.shape, generator=self._gen)))
                a = (lp + g).argmax(-1)
            buf["obs"][t] = obs
            buf["masks"][t] = mask
            buf["actions"][t] = a
            buf["logp"][t] = lp.gather(1, a[:, None]).squeeze(1)
            buf["values"][t] = v
            if self._after is not None:  # U of the taken afterstate instead
                self._after.record(buf, t, obs, lp, a)
            if self._pas is not None:  # PAS's choice in the same state, for the anchor
                pa, _ = self._pas.predict(obs.numpy(), action_masks=mask.numpy())
                buf["pas"][t] = torch.from_numpy(np.asarray(pa, dtype=np.int64))
            o, r, _, _, info = venv.step(a.numpy())
            buf["rewards"][t] = torch.from_numpy(r.astype(np.float32))
            work += float(info["work"].sum())
            energy += float(info["energy"].sum())
            area += float(venv.job_area.sum())  # the step's integral of N (Little's law)
            obs = torch.from_numpy(o)
        self._obs = obs.numpy()
        with torch.no_grad():
            logits, last_v = self.forward(obs)
            if self._after is not None:
                last_v = self._after.state_value(obs, logits, venv.action_masks())
        buf["last_value"] = last_v
        self.num_timesteps += T * self.cfg.n_envs
        return {
            "efficiency": work / energy if energy > 0 else float("nan"),
            # Little's law over the rollout: the dual ascent's measured E[T]
            "mean_response_time": area / accepted if accepted > 0 else float("nan"),
        }

    def update(self, buf: dict[str, torch.Tensor], progress_remaining: float) -> dict[str, float]:
        """One PPO update on the rollout in ``buf``: GAE, then ``n_epochs`` passes of clipped
        minibatch steps at the learning rate of ``progress_remaining`` (of ``schedule_total``
        when set); returns the mean of each loss term."""
        cfg = self.cfg
        if self.schedule_total > 0:  # the schedule of the whole run
            done = (self.num_timesteps - cfg.n_steps * cfg.n_envs) / self.schedule_total
            progress_remaining = min(1.0, max(0.0, 1.0 - done))
        lr = cfg.learning_rate * (progress_remaining if cfg.lr_schedule == "linear" else 1.0)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        if cfg.advantage != "discounted":
            mean_r = float(buf["rewards"].mean())
            self.rho = (
                mean_r if not self._rho_init else self.rho + cfg.rho_tau * (mean_r - self.rho)
            )
            self._rho_init = True
        if cfg.advantage == "average":
            adv, ret = gae(
                buf["rewards"], buf["values"], buf["last_value"], 1.0, cfg.gae_lambda, self.rho
            )
        elif self._after is not None:  # advantage="afterstate"
            adv, ret = self._after.advantages(buf, cfg.gae_lambda, self.rho)
        else:
            adv, ret = gae(
                buf["rewards"], buf["values"], buf["last_value"], self.gamma, cfg.gae_lambda
            )
        n = cfg.n_steps * cfg.n_envs
        flat = {
            "obs": buf["obs"].reshape(n, -1),
            "masks": buf["masks"].reshape(n, -1),
            "actions": buf["actions"].reshape(n),
            "logp": buf["logp"].reshape(n),
            "adv": adv.reshape(n),
            "ret": ret.reshape(n),
            "pas": buf["pas"].reshape(n) if "pas" in buf else buf["actions"].reshape(n),
        } | ({"after": buf["after"].reshape(n, -1)} if "after" in buf else {})
        # critic warm-up: after a PAS clone the value net is untrained, and advantages from it
        # are noise that would push the policy away from PAS before it has learnt anything;
        # the policy and value MLPs are separate, so a value-only loss leaves the policy as is
        critic_only = self.n_updates < int(cfg.critic_warmup)
        self.n_updates += 1
        self.policy.set_training_mode(True)
        stats: dict[str, list[float]] = {}
        for _ in range(cfg.n_epochs):
            perm = torch.randperm(n, generator=self._gen)
            for lo in range(0, n - cfg.batch_size + 1, cfg.batch_size):
                idx = perm[lo : lo + cfg.batch_size]
                a = flat["adv"][idx]
                if cfg.normalize_advantage and len(idx) > 1:
                    a = (a - a.mean()) / (a.std() + 1e-8)
                loss, terms = self._loss(flat, idx, a, critic_only)
                if not bool(torch.isfinite(loss)):  # stop before a step spreads it
                    raise diverged(self.num_timesteps, f"the loss is {float(loss.detach())}")
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.policy.parameters(), cfg.max_grad_norm)
                self.optimizer.step()
                for k, val in terms.items():
                    stats.setdefault(k, []).append(float(val.detach()))
        check_finite_params(self.policy.parameters(), self.num_timesteps)
        self.policy.set_training_mode(False)
        out = {k: float(np.mean(v)) for k, v in stats.items()}
        return out | {"lr": lr, "rho": self.rho, "critic_only": float(critic_only)}

    def _loss(
        self, flat: dict[str, torch.Tensor], idx: torch.Tensor, adv: torch.Tensor, critic_only: bool
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The loss on the minibatch ``idx`` of the rollout ``flat`` (``adv``: its advantages)
        and its terms: the clipped surrogate, value and entropy terms (:func:`ppo_losses`) and
        the anchor to PAS (``pas_anchor``); the value term alone in the critic warm-up."""
        cfg = self.cfg
        if "after" in flat:  # the value net is U of the taken action's afterstate
            logits, v = self.logits_of(flat["obs"][idx]), self.value_of(flat["after"][idx])
        else:
            logits, v = self.forward(flat["obs"][idx])
        terms = ppo_losses(
            logits, flat["masks"][idx], v, flat["actions"][idx], flat["logp"][idx], adv,
            flat["ret"][idx], cfg.clip_range,
        )  # fmt: skip
        if cfg.pas_anchor > 0:
            # a behaviour-cloning term on the rollout's own states: PPO's advantages on
            # a large farm are mostly noise (one decision among ~100 servers' events),
            # and normalised advantages turn that noise into unit-sized steps; the
            # anchor pulls the policy back to PAS except where the advantages agree
            terms["anchor"] = clone_loss(
                logits, flat["masks"][idx], flat["pas"][idx], cfg.anchor_smoothing
            )
        if critic_only:
            loss = cfg.vf_coef * terms["value"]
        else:
            loss = terms["policy"] + cfg.vf_coef * terms["value"] - cfg.ent_coef * terms["entropy"]
            if cfg.pas_anchor > 0:
                loss = loss + cfg.pas_anchor * terms["anchor"]
        return loss, terms

    def _buffer(self) -> dict[str, torch.Tensor]:
        T, N = self.cfg.n_steps, self.cfg.n_envs
        d = int(np.prod(self.venv.single_observation_space.shape))
        A = int(self.venv.single_action_space.n)
        return {
            "obs": torch.zeros(T, N, d),
            "masks": torch.zeros(T, N, A, dtype=torch.bool),
            "actions": torch.zeros(T, N, dtype=torch.int64),
            "logp": torch.zeros(T, N),
            "values": torch.zeros(T, N),
            "rewards": torch.zeros(T, N),
        } | ({"pas": torch.zeros(T, N, dtype=torch.int64)} if self._pas is not None else {}) | (
            self._after.buffers(T, N, d) if self._after is not None else {}
        )  # fmt: skip

    def learn(
        self,
        total_timesteps: int,
        callback: Callable[[PPO], Any] | None = None,
    ) -> PPO:
        """Train for ``total_timesteps`` env steps (rounded up to whole rollouts);
        ``callback(self)`` runs after every update (evaluations, checkpoints)."""
        torch.set_num_threads(int(self.cfg.torch_threads))
        buf = self._buffer()
        per = self.cfg.n_steps * self.cfg.n_envs
        start = self.num_timesteps
        end = start + max(1, math.ceil(total_timesteps / per)) * per
        while self.num_timesteps < end:
            t0 = time.process_time()
            roll = self.collect(buf)
            t1 = time.process_time()
            upd = self.update(buf, 1.0 - (self.num_timesteps - per - start) / (end - start))
            t2 = time.process_time()
            self.history.append(
                {"timesteps": self.num_timesteps, "rollout_cpu_s": t1 - t0,
                 "update_cpu_s": t2 - t1, **roll, **upd}
            )  # fmt: skip
            if callback is not None:
                callback(self)
        return self

    # ---- PAS initialisation ---------------------------------------------------------------------
    def clone_pas(
        self,
        n_steps: int = 4096,
        epochs: int | None = None,
        batch_size: int = 1024,
        lr: float = 1e-3,
        smoothing: float | None = None,
        teacher: Any = "pas",
    ) -> dict[str, float]:
        """Behaviour cloning: fit the policy (:func:`clone_loss` on masked logits) to the
        decisions of ``teacher`` (PAS by default; any registry name, e.g. ``"best-priority"``
        or ``"generalist"``, or a policy with ``predict`` in the network's action mode) on
        ``n_steps`` states per env visited by the teacher itself. ``epochs`` and ``smoothing``
        default to ``cfg.clone_epochs`` and ``cfg.clone_smoothing``. Returns the final accuracy
        (argmax = the teacher's action), the mean probability of the teacher's choice and the
        entropy."""
        epochs = int(self.cfg.clone_epochs if epochs is None else epochs)
        smoothing = float(self.cfg.clone_smoothing if smoothing is None else smoothing)
        if not 0.0 <= smoothing < 1.0:
            raise ValueError(f"smoothing: must be in [0, 1), got {smoothing}")
        obs, masks, actions = self.teacher_states(teacher, n_steps)
        X = torch.from_numpy(obs)
        # the env's masks are int8 0/1; torch.where below takes a boolean condition
        M = torch.from_numpy(masks).bool()
        Y = torch.from_numpy(actions)
        opt = torch.optim.Adam(self.policy.parameters(), lr=lr)
        n = len(Y)
        for _ in range(epochs):
            perm = torch.randperm(n, generator=self._gen)
            for lo in range(0, n, batch_size):
                idx = perm[lo : lo + batch_size]
                logits, _ = self.forward(X[idx])
                loss = clone_loss(logits, M[idx], Y[idx], smoothing)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
        with torch.no_grad():
            acc = float((self.predict_batch(X.numpy(), M.numpy()) == Y.numpy()).mean())
            logp = torch.log_softmax(masked_logits(self.forward(X)[0], M), -1)
            p = logp.exp()
            ent = -torch.where(M, p * logp, torch.zeros_like(p)).sum(-1).mean()
            p_pas = p.gather(1, Y[:, None]).mean()
        return {"accuracy": acc, "samples": n, "p_pas": float(p_pas), "entropy": float(ent)}

    def teacher(self, teacher: Any) -> Any:
        """The policy of a registry name (in the network's action mode), or ``teacher`` itself."""
        if isinstance(teacher, str):
            return make_policy(teacher, self.config, self.cfg.action_mode)
        return teacher

    def teacher_states(
        self, teacher: Any, n_steps: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(obs, masks, actions) of ``n_steps`` steps of every env with ``teacher``
        (:meth:`teacher`) choosing the actions, where the envs' trajectories stand."""
        policy = self.teacher(teacher)
        if self._obs is None:
            self._start()
        obs_l, mask_l, act_l = [], [], []
        for _ in range(n_steps):
            m = self.venv.action_masks()
            a, _ = policy.predict(self._obs, action_masks=m)
            obs_l.append(self._obs)
            mask_l.append(m)
            act_l.append(np.asarray(a, dtype=np.int64))
            self._obs = self.venv.step(a)[0]
        return np.concatenate(obs_l), np.concatenate(mask_l), np.concatenate(act_l)

    # ---- saving ---------------------------------------------------------------------------------
    def save(
        self,
        path: str | Path,
        action_mode: str | None = None,
        config: FarmConfig | None = None,
        **sidecar: Any,
    ) -> Path:
        """Write ``path`` (a ``MaskablePPO`` ``.zip``) and its sidecar for ``PPOAgent.load``.
        ``action_mode``: the actions the saved model serves, by default the network's own;
        ``"server"`` for a group network tied over exchangeable servers (``serverfarm_gym.agents.ppo``).
        ``config``: the farm the model serves, if not the one it trains on (a group network
        trained on a scaled-down twin); the sidecar then also keeps ``train_scenario``, which
        :meth:`load` trains on."""
        p = Path(path)
        if p.suffix != ".zip":
            p = p.with_name(p.name + ".zip")
        p.parent.mkdir(parents=True, exist_ok=True)
        self.model.num_timesteps = self.num_timesteps
        save_model_atomic(self.model, p)  # a full disk: a named error, no temporary file left
        cfg = asdict(self.cfg)
        cfg["net_arch"] = list(cfg["net_arch"])
        if config is not None and config.to_dict() != self.config.to_dict():
            sidecar["train_scenario"] = self.config.to_dict()
        write_sidecar(
            p, config or self.config, action_mode or self.cfg.action_mode,
            network_mode=self.cfg.action_mode,
            timesteps=self.num_timesteps,
            trainer="ppo", ppo_config=cfg, gamma=self.gamma, rho=self.rho,
            n_updates=self.n_updates, **sidecar,
        )  # fmt: skip
        return p

    @classmethod
    def load(cls, path: str | Path, **overrides: Any) -> PPO:
        """Continue training from a file written by :meth:`save` (network, Adam state, step
        count and running average reward; ``overrides`` change settings, e.g. ``n_envs``). The
        envs start afresh (new PAS warm-ups), as SB3's ``MaskablePPO.load`` does. Nothing is
        unpickled (``serverfarm_gym.agents.common.artefacts.read_sb3_zip``): a planted checkpoint cannot run code."""
        p = Path(path)
        meta = read_model_sidecar(p)
        key = SIDECAR_CONFIGS.get(str(meta.get("trainer")), "")
        cfg = meta.get(key)
        if not key or not isinstance(cfg, dict):
            raise ValueError(f"path: {p} was not saved by PPO.save (no ppo_config)")
        kw = dict(cfg) | overrides
        try:
            kw["net_arch"] = tuple(kw["net_arch"])
            config = PPOConfig(**kw)
        except (KeyError, TypeError) as err:
            raise ArtefactError(f"{sidecar_path(p)}: {key} is not one of PPOConfig: {err}") from err
        farm = meta.get("train_scenario") or meta["scenario"]  # a twin trains on its own farm
        trainer = cls(farm_from_dict(farm), config)
        # weights and Adam state only, no unpickling (serverfarm_gym.agents.common.artefacts)
        saved = read_sb3_zip(p, optimizer=True)
        try:
            trainer.policy.load_state_dict(saved.policy)
            trainer.optimizer.load_state_dict(saved.optimizer)
        except (RuntimeError, ValueError, KeyError) as err:
            raise ArtefactError(
                f"{p}: the weights do not fit the network of its sidecar ({' '.join(str(err).split())})"
            ) from err
        steps = meta.get("timesteps", saved.data.get("num_timesteps"))
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ArtefactError(f"{p}: no step count (timesteps) in its sidecar or data entry")
        trainer.num_timesteps = steps
        trainer.rho = float(meta.get("rho", 0.0))
        # a resumed run does not repeat its critic warm-up (files before n_updates: 1 per rollout)
        per = int(cfg["n_steps"]) * int(cfg["n_envs"])
        trainer.n_updates = int(meta.get("n_updates", trainer.num_timesteps // per))
        trainer._rho_init = trainer.cfg.advantage != "discounted" and trainer.num_timesteps > 0
        return trainer
