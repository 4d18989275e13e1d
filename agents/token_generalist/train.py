"""How the token network of ``generalist-checked`` (:mod:`serverfarm_gym.agents.token_generalist.network`,
served by :mod:`~serverfarm_gym.agents.token_generalist.token_policy` behind the per-farm check of
:mod:`~serverfarm_gym.agents.token_generalist.guard`; weights ``models/generalist.pt``) is trained.
Its command line is :mod:`~serverfarm_gym.agents.token_generalist.run` (``python train.py
token-generalist``). The table network of ``generalist`` is another package,
:mod:`serverfarm_gym.agents.table_generalist`.

:class:`GeneralistTrainer` is PPO with domain randomisation: each rollout runs ``farms`` farms
drawn by ``serverfarm_gym.envs.farm_sampler.sample_farm`` (seeds below the held-out range), each as a native
vector env of ``envs_per_farm`` replications in group mode, all stepped in lockstep and read by
one forward pass; every ``rotate_every`` rollouts the farms are replaced by new draws. Because
the farms differ, so do the settings derived from them: each farm's discount comes from its own
decision epochs per mean job duration (a horizon of ``horizon_durations`` durations, as
``serverfarm_gym.agents.ppo.config.auto_gamma``) and advantages are normalised per farm, so that a 10,000-server
farm (tiny effect per decision) weighs as much as a 5-server one. Before PPO the network is
fitted to PAS's decisions on ``clone_farms`` farms (label-smoothed behaviour cloning), so it
starts at PAS's efficiency everywhere instead of at random's.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from serverfarm_gym.agents.ppo.config import auto_gamma
from serverfarm_gym.agents.ppo.losses import gae, masked_logits, ppo_losses
from serverfarm_gym.agents.token_generalist.network import TokenNetConfig, TokenPolicyNet
from serverfarm_gym.agents.token_generalist.token_policy import TokenGeneralistPolicy, token_tensors
from serverfarm_gym.baselines.registry import make_policy
from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.farm_sampler import HELD_OUT_SEEDS, FarmDistribution, sample_farm
from serverfarm_gym.envs.tokens import TokenEncoding
from serverfarm_gym.envs.vector import ServerFarmVectorEnv

#: the columns :meth:`GeneralistTrainer.label_states` fills (tokens, token mask, label)
LABEL_COLUMNS = ("groups", "group_mask", "job", "masks", "target")

__all__ = ["LABEL_COLUMNS", "GeneralistConfig", "GeneralistTrainer"]


# ---------------------------------------------------------------------------------------------
# the trainer
# ---------------------------------------------------------------------------------------------
@dataclass
class GeneralistConfig:
    """Settings of :class:`GeneralistTrainer`."""

    max_groups: int = 8
    max_levels: int = 8
    farms: int = 8
    envs_per_farm: int = 8
    n_steps: int = 128
    rotate_every: int = 2
    n_epochs: int = 4
    batch_size: int = 2048
    learning_rate: float = 3e-4
    clip_range: float = 0.2
    ent_coef: float = 0.003
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    gae_lambda: float = 0.95
    horizon_durations: float = 4.0
    #: logit bonus at PAS's action (serverfarm_gym.agents.token_generalist.network): the untrained network is PAS
    anchor: float = 4.0
    clone_farms: int = 0  # PAS cloning farms (only needed without an anchor)
    clone_steps: int = 128  # PAS decisions per env of each cloning farm
    clone_epochs: int = 8
    clone_smoothing: float = 0.05
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    seed: int = 0
    torch_threads: int = 1
    distribution: dict[str, Any] = field(default_factory=dict)

    def check(self) -> GeneralistConfig:
        for name in ("farms", "envs_per_farm", "n_steps", "rotate_every", "n_epochs",
                     "batch_size", "torch_threads"):  # fmt: skip
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if int(self.clone_farms) < 0:
            raise ValueError(f"clone_farms: must be >= 0, got {self.clone_farms}")
        if not 0.0 <= self.clone_smoothing < 1.0:
            raise ValueError(f"clone_smoothing: must be in [0, 1), got {self.clone_smoothing}")
        dist = self.farm_distribution()
        if dist.n_groups[1] > self.max_groups or dist.buffer[1] > self.max_levels:
            raise ValueError(
                f"distribution: draws up to {dist.n_groups[1]} groups and buffers of "
                f"{dist.buffer[1]}, beyond max_groups={self.max_groups} / max_levels="
                f"{self.max_levels}; raise the limits or narrow the distribution"
            )
        return self

    def farm_distribution(self) -> FarmDistribution:
        return FarmDistribution.from_dict(self.distribution)


@dataclass
class _Farm:
    config: FarmConfig
    venv: ServerFarmVectorEnv
    encoding: TokenEncoding
    gamma: float
    obs: np.ndarray


class GeneralistTrainer:
    """PPO over farms drawn from ``cfg.distribution`` (see the module docstring)."""

    def __init__(self, cfg: GeneralistConfig | None = None, **overrides: Any) -> None:
        self.cfg = cfg = (cfg or GeneralistConfig(**overrides)).check()
        torch.set_num_threads(int(cfg.torch_threads))
        torch.manual_seed(cfg.seed)
        self.distribution = cfg.farm_distribution()
        probe = TokenEncoding(sample_farm(0, self.distribution), cfg.max_groups, cfg.max_levels)
        space = probe.observation_space
        self.net = TokenPolicyNet(
            TokenNetConfig(space["groups"].shape[1], space["job"].shape[0], cfg.max_levels,
                           cfg.d_model, cfg.n_heads, cfg.n_layers, anchor=cfg.anchor)
        )  # fmt: skip
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=cfg.learning_rate, eps=1e-5)
        self._gen = torch.Generator().manual_seed(cfg.seed)
        # training farms: seeds from a stream of their own, never in the held-out range
        self._seeds = np.random.default_rng(cfg.seed).integers(0, HELD_OUT_SEEDS.start, 2**20)
        self._next_seed = 0
        self.num_timesteps = 0
        self.history: list[dict[str, float]] = []
        self.farms: list[_Farm] = []

    # ---- farms ----------------------------------------------------------------------------------
    def next_farm_seed(self) -> int:
        """The next training-farm seed of this run's stream (never in the held-out range)."""
        seed = int(self._seeds[self._next_seed % len(self._seeds)])
        self._next_seed += 1
        return seed

    def _draw_farm(self, n_envs: int) -> _Farm:
        seed = self.next_farm_seed()
        return self._draw_farm_for(sample_farm(seed, self.distribution), n_envs, seed)

    def _draw_farm_for(self, config: FarmConfig, n_envs: int, seed: int) -> _Farm:
        """``config`` as a group-mode vector env of ``n_envs`` replications, reset and warm."""
        per = config.epochs_per_duration
        venv = ServerFarmVectorEnv(
            n_envs, config, action_mode="group", warmup_epochs=max(1_000, math.ceil(50 * per)),
            max_episode_steps=None,
        )  # fmt: skip
        obs, _ = venv.reset(seed=seed % 2**31)
        enc = TokenEncoding(config, self.cfg.max_groups, self.cfg.max_levels)
        return _Farm(config, venv, enc, auto_gamma(config, self.cfg.horizon_durations), obs)

    def _observe(self) -> tuple[dict[str, np.ndarray], np.ndarray]:
        toks = [f.encoding.encode(f.obs) for f in self.farms]
        masks = [f.encoding.masks(f.venv.action_masks()) for f in self.farms]
        return {k: np.concatenate([t[k] for t in toks]) for k in toks[0]}, np.concatenate(masks)

    def _step(self, token_actions: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        n = self.cfg.envs_per_farm
        rewards, work, energy = [], [], []
        for i, f in enumerate(self.farms):
            a = f.encoding.to_group_actions(token_actions[i * n : (i + 1) * n])
            f.obs, r, _, _, info = f.venv.step(np.asarray(a, dtype=np.int64))
            rewards.append(r)
            work.append(info["work"])
            energy.append(info["energy"])
        return np.concatenate(rewards), {"work": np.stack(work), "energy": np.stack(energy)}

    # ---- PAS initialisation ---------------------------------------------------------------------
    def clone_pas(self) -> dict[str, float]:
        """Fit the network to PAS's group-mode decisions on ``clone_farms`` new farms
        (cross-entropy with label smoothing, so the start keeps some entropy for PPO)."""
        cfg = self.cfg
        cols: dict[str, list[np.ndarray]] = {k: [] for k in LABEL_COLUMNS}
        for _ in range(cfg.clone_farms):
            f = self._draw_farm(cfg.envs_per_farm)
            self.label_states(f, make_policy("pas", f.config, "group"), cfg.clone_steps, cols)
            f.venv.close()
        data = {k: torch.as_tensor(np.concatenate(v)) for k, v in cols.items()}
        acc = self.fit_labels(data, cfg.clone_epochs, smoothing=cfg.clone_smoothing)
        return {"accuracy": acc, "samples": len(data["target"])}

    # ---- supervised fits (PAS cloning, optimum distillation) -----------------------------------
    def label_states(
        self,
        farm: _Farm,
        teacher: Any,
        steps: int,
        cols: dict[str, list[np.ndarray]],
        explore: float = 0.0,
        rng: np.random.Generator | None = None,
    ) -> None:
        """Run ``farm`` for ``steps`` decisions under ``teacher`` (a group-mode policy) and append
        every state's tokens, token mask and the teacher's token action to ``cols``
        (:data:`LABEL_COLUMNS`). With ``rng``, a share ``explore`` of the envs takes a uniformly
        random valid action instead at each step (the labels stay the teacher's), so states
        beside the teacher's own path are labelled too."""
        n = farm.venv.num_envs
        for _ in range(steps):
            m = farm.venv.action_masks()
            a, _ = teacher.predict(farm.obs, action_masks=m)
            act = np.asarray(a, dtype=np.int64).copy()
            for k, v in farm.encoding.encode(farm.obs).items():
                cols[k].append(v)
            cols["masks"].append(farm.encoding.masks(m))
            cols["target"].append(farm.encoding.from_group_actions(act))
            if rng is not None:
                wild = rng.random(n) < explore
                for i in np.flatnonzero(wild & m.any(axis=1)):
                    act[i] = rng.choice(np.flatnonzero(m[i]))
            farm.obs = farm.venv.step(act)[0]

    def fit_labels(
        self,
        data: dict[str, torch.Tensor],
        epochs: int,
        smoothing: float = 0.0,
        clip: float | None = None,
    ) -> float:
        """Cross-entropy of the (anchored, masked) logits against ``data["target"]`` for
        ``epochs`` passes in minibatches of ``batch_size``; ``smoothing`` spreads that share of
        the target over the valid actions (masked ones stay impossible); ``clip``: gradient norm
        clipping. Returns the final accuracy (argmax = target)."""
        net, opt, bs = self.net, self.optimizer, self.cfg.batch_size
        X = [data[k] for k in ("groups", "group_mask", "job", "masks")]  # the net's inputs
        masks, target = data["masks"], data["target"]
        n = len(target)
        net.train()
        for _ in range(epochs):
            perm = torch.randperm(n, generator=self._gen)
            for lo in range(0, n, bs):
                idx = perm[lo : lo + bs]
                logits, _ = net(*(x[idx] for x in X))
                lg = masked_logits(logits, masks[idx])
                if smoothing > 0:
                    valid = masks[idx].float()
                    soft = smoothing * valid / valid.sum(-1, keepdim=True)
                    soft = soft + (1 - smoothing) * F.one_hot(target[idx], lg.shape[-1])
                    loss = -(soft * torch.log_softmax(lg, -1)).sum(-1).mean()
                else:
                    loss = F.cross_entropy(lg, target[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if clip is not None:
                    torch.nn.utils.clip_grad_norm_(net.parameters(), clip)
                opt.step()
        net.eval()
        hits = 0
        with torch.no_grad():
            for lo in range(0, n, 8192):
                logits, _ = net(*(x[lo : lo + 8192] for x in X))
                pick = masked_logits(logits, masks[lo : lo + 8192]).argmax(-1)
                hits += int((pick == target[lo : lo + 8192]).sum())
        return hits / max(n, 1)

    # ---- PPO ------------------------------------------------------------------------------------
    def _rollout(self) -> dict[str, Any]:
        cfg = self.cfg
        T = cfg.n_steps
        buf: dict[str, list[Any]] = {k: [] for k in
                                     ("groups", "group_mask", "job", "masks", "actions", "logp",
                                      "values", "rewards")}  # fmt: skip
        work = energy = 0.0
        for _ in range(T):
            tok, masks = self._observe()
            t = token_tensors(tok)
            m = torch.as_tensor(masks)
            with torch.no_grad():
                logits, v = self.net(*t, m)
                lp = torch.log_softmax(masked_logits(logits, m), -1)
                g = -torch.log(-torch.log(torch.rand(lp.shape, generator=self._gen)))
                a = (lp + g).argmax(-1)  # Gumbel-max: an exact categorical draw
            r, info = self._step(a.numpy())
            for k, x in zip(("groups", "group_mask", "job"), t, strict=True):
                buf[k].append(x)
            buf["masks"].append(m)
            buf["actions"].append(a)
            buf["logp"].append(lp.gather(1, a[:, None]).squeeze(1))
            buf["values"].append(v)
            buf["rewards"].append(torch.as_tensor(r, dtype=torch.float32))
            work += float(info["work"].sum())
            energy += float(info["energy"].sum())
        with torch.no_grad():
            tok, masks = self._observe()
            _, last = self.net(*token_tensors(tok), torch.as_tensor(masks))
        out = {k: torch.stack(v) for k, v in buf.items()}
        out["last_value"] = last
        self.num_timesteps += T * len(self.farms) * cfg.envs_per_farm
        out["efficiency"] = work / energy if energy > 0 else float("nan")
        return out

    def _update(self, buf: dict[str, Any], progress_remaining: float) -> dict[str, float]:
        cfg = self.cfg
        lr = cfg.learning_rate * progress_remaining
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        n_env = cfg.envs_per_farm
        gamma = torch.tensor(np.repeat([f.gamma for f in self.farms], n_env), dtype=torch.float32)
        adv, ret = gae(buf["rewards"], buf["values"], buf["last_value"], gamma, cfg.gae_lambda)  # type: ignore[arg-type]
        # per-farm normalisation: every farm weighs the same whatever its per-decision scale
        T, N = adv.shape
        a = adv.reshape(T, len(self.farms), n_env)
        a = (a - a.mean(dim=(0, 2), keepdim=True)) / (a.std(dim=(0, 2), keepdim=True) + 1e-8)
        flat = {
            "groups": buf["groups"].reshape(T * N, *buf["groups"].shape[2:]),
            "group_mask": buf["group_mask"].reshape(T * N, -1),
            "job": buf["job"].reshape(T * N, -1),
            "masks": buf["masks"].reshape(T * N, -1),
            "actions": buf["actions"].reshape(-1),
            "logp": buf["logp"].reshape(-1),
            "adv": a.reshape(-1),
            "ret": ret.reshape(-1),
        }
        n = T * N
        stats: dict[str, list[float]] = {}
        for _ in range(cfg.n_epochs):
            perm = torch.randperm(n, generator=self._gen)
            for lo in range(0, n - cfg.batch_size + 1, cfg.batch_size):
                idx = perm[lo : lo + cfg.batch_size]
                logits, v = self.net(
                    flat["groups"][idx], flat["group_mask"][idx], flat["job"][idx],
                    flat["masks"][idx],
                )  # fmt: skip
                terms = ppo_losses(
                    logits, flat["masks"][idx], v, flat["actions"][idx], flat["logp"][idx],
                    flat["adv"][idx], flat["ret"][idx], cfg.clip_range,
                )  # fmt: skip
                loss = (
                    terms["policy"] + cfg.vf_coef * terms["value"] - cfg.ent_coef * terms["entropy"]
                )
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.net.parameters(), cfg.max_grad_norm)
                self.optimizer.step()
                for k, val in terms.items():
                    stats.setdefault(k, []).append(float(val.detach()))
        return {k: float(np.mean(v)) for k, v in stats.items()} | {"lr": lr}

    def learn(
        self, total_timesteps: int, callback: Callable[[GeneralistTrainer], Any] | None = None
    ) -> GeneralistTrainer:
        """PPO for ``total_timesteps`` env steps (whole rollouts); ``callback(self)`` after each
        update (evaluations, checkpoints)."""
        cfg = self.cfg
        per = cfg.n_steps * cfg.farms * cfg.envs_per_farm
        n_rollouts = max(1, math.ceil(total_timesteps / per))
        self.net.train()
        for i in range(n_rollouts):
            if i % cfg.rotate_every == 0 or not self.farms:
                for f in self.farms:
                    f.venv.close()
                self.farms = [self._draw_farm(cfg.envs_per_farm) for _ in range(cfg.farms)]
            t0 = time.process_time()
            buf = self._rollout()
            t1 = time.process_time()
            upd = self._update(buf, 1.0 - i / n_rollouts)
            self.history.append(
                {"timesteps": self.num_timesteps, "efficiency": buf["efficiency"],
                 "rollout_cpu_s": t1 - t0, "update_cpu_s": time.process_time() - t1, **upd}
            )  # fmt: skip
            if callback is not None:
                callback(self)
        self.net.eval()
        return self

    def policy(self, config: FarmConfig, action_mode: str = "group") -> TokenGeneralistPolicy:
        """The current network as a policy for ``config``."""
        return TokenGeneralistPolicy(
            config, action_mode, net=self.net, max_groups=self.cfg.max_groups,
            max_levels=self.cfg.max_levels,
        )  # fmt: skip

    def save(self, path: str | Path, **meta: Any) -> Path:
        return TokenGeneralistPolicy.save(
            self.net, path, self.cfg.max_groups, timesteps=self.num_timesteps,
            trainer_config=asdict(self.cfg), **meta,
        )  # fmt: skip
