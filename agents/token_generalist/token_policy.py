"""The generalist policy: one token network (``serverfarm_gym.agents.token_generalist.network``) for every farm.

:class:`TokenGeneralistPolicy` is a policy like every other (``predict(obs, action_masks=...)``) for
any farm the token encoding can describe, in either action mode: it turns the env's observation
into group tokens (``serverfarm_gym.envs.tokens``), takes the masked argmax of the network's token logits and
maps the chosen (group, level) back to the env's action (in server mode: the smallest-index
server of that group at that level that the mask allows, the group mode's convention).

Files: :meth:`TokenGeneralistPolicy.save` writes ``NAME.pt`` (a plain ``state_dict``, loaded with
``torch.load(weights_only=True)``: no code runs on load) and ``NAME.json`` (network sizes,
padding limits, how it was trained). The trainer is :mod:`serverfarm_gym.agents.token_generalist.train`.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from serverfarm_gym.agents.common.artefacts import (
    ArtefactError,
    check_finite_state,
    load_weights_file,
    read_json_object,
)
from serverfarm_gym.agents.ppo.losses import masked_logits
from serverfarm_gym.agents.token_generalist.network import (
    TokenNetConfig,
    TokenPolicyNet,
    pas_anchor,
)
from serverfarm_gym.baselines.base import Policy
from serverfarm_gym.baselines.pas import PASPolicy
from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.observation import hist_offsets
from serverfarm_gym.envs.tokens import TokenEncoding

__all__ = ["TOKEN_MODEL", "TokenGeneralistPolicy"]

#: the token network shipped with the package (``make_policy("generalist-checked", config)``
#: loads it; ``make_policy("generalist", config)`` is the table network of ``policy``)
TOKEN_MODEL = Path(__file__).with_name("models") / "generalist.pt"


def token_tensors(tokens: dict[str, np.ndarray]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return tuple(torch.as_tensor(tokens[k]) for k in ("groups", "group_mask", "job"))  # type: ignore[return-value]


def _pas_server_fallback(policy: TokenGeneralistPolicy) -> PASPolicy | None:
    """Server mode of an anchored network: where it keeps PAS's (group, level), it takes
    server-mode PAS's own server (the smallest-index vacancy of PAS's group), so a network that
    never deviates is server-mode PAS exactly, not the group-mode packing rule."""
    return PASPolicy(policy.config, "server") if policy.net.cfg.anchor > 0 else None


# ---------------------------------------------------------------------------------------------
# the policy
# ---------------------------------------------------------------------------------------------
class TokenGeneralistPolicy(Policy):
    """The shipped (or any saved) generalist network as a policy for ``config``.

    Args:
        config, action_mode, seed: as every policy (``seed`` is unused: it is deterministic).
        model: a ``.pt`` file written by :meth:`save` (default: the shipped model).
        net: an in-memory network instead of a file (with ``max_groups`` / ``max_levels``).
    """

    name = "generalist-token"

    def __init__(
        self,
        config: FarmConfig,
        action_mode: str = "server",
        seed: int | None = None,
        model: str | Path | None = None,
        net: TokenPolicyNet | None = None,
        max_groups: int | None = None,
        max_levels: int | None = None,
    ) -> None:
        super().__init__(config, action_mode, seed)
        if net is None:
            net, meta = self.load_net(model or TOKEN_MODEL)
            max_groups, max_levels = meta["max_groups"], meta["max_levels"]
        if max_groups is None or max_levels is None:
            raise ValueError("max_groups, max_levels: give both with an in-memory net")
        self.net = net.eval()
        self.encoding = TokenEncoding(config, max_groups, max_levels)
        self._hoff = hist_offsets(config)
        self._pas = _pas_server_fallback(self) if action_mode == "server" else None

    # ---- files ----------------------------------------------------------------------------------
    @staticmethod
    def save(net: TokenPolicyNet, path: str | Path, max_groups: int, **meta: Any) -> Path:
        """Write ``path`` (``.pt``: the weights) and its ``.json`` sidecar."""
        p = Path(path).with_suffix(".pt")
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f".{p.name}.tmp")
        torch.save(net.state_dict(), tmp)
        tmp.replace(p)
        side = {"net": asdict(net.cfg), "max_groups": max_groups,
                "max_levels": net.cfg.max_levels, **meta}  # fmt: skip
        p.with_suffix(".json").write_text(json.dumps(side, indent=1, default=str))
        return p

    @staticmethod
    def load_net(path: str | Path) -> tuple[TokenPolicyNet, dict[str, Any]]:
        """(network, sidecar) of a file written by :meth:`save` (weights only, no pickle)."""
        p = Path(path).with_suffix(".pt")
        side = p.with_suffix(".json")
        if not p.is_file() or not side.is_file():
            raise ValueError(
                f"model: {p} and its sidecar {side.name} are needed (written by "
                "TokenGeneralistPolicy.save / python train.py token-generalist)"
            )
        meta = read_json_object(side)
        try:
            net = TokenPolicyNet(TokenNetConfig(**meta["net"]))
        except (KeyError, TypeError, ValueError) as e:  # a tampered or foreign sidecar
            raise ArtefactError(f"{side}: net is not a TokenNetConfig ({e})") from e
        try:
            state = load_weights_file(p)
            if not isinstance(state, dict):
                raise ArtefactError(f"{p}: not a state dict")
            check_finite_state(state, str(p))
            net.load_state_dict(state)
        except Exception as e:  # other network: say which file
            raise ValueError(f"model: cannot load the weights of {p}: {e}") from e
        return net, meta

    # ---- acting ---------------------------------------------------------------------------------
    @torch.no_grad()
    def token_actions(self, tokens: dict[str, np.ndarray], token_masks: np.ndarray) -> np.ndarray:
        """Masked argmax of the network's logits over a batch of tokens."""
        m = torch.as_tensor(token_masks, dtype=torch.bool)
        logits, _ = self.net(*token_tensors(tokens), m)
        return masked_logits(logits, m).argmax(-1).numpy()

    def _act_batch(
        self, obs: np.ndarray, masks: np.ndarray, deterministic: bool = True
    ) -> np.ndarray:
        if self.action_mode == "group":
            tok = self.encoding.to_group_actions(
                self.token_actions(self.encoding.encode(obs), self.encoding.masks(masks))
            )
            return np.asarray(tok, dtype=np.int64).reshape(-1)
        return self._act_servers(obs, masks)

    def _act_servers(self, obs: np.ndarray, masks: np.ndarray) -> np.ndarray:
        """Server mode: the group-mode view of the same state, then the chosen (group, level)
        as the smallest-index allowed server of that group at that level."""
        c, L = self.config, self.encoding.max_levels
        N, S = len(obs), c.n_servers
        sg = c.server_group
        occ = np.rint(obs[:, :S].astype(np.float64) * c.buffers[sg]).astype(np.int64)
        K, B1 = c.n_groups, c.max_buffer + 1
        # flat (row, group, level) cell of every server: one bincount instead of np.add.at
        cell = ((np.arange(N)[:, None] * K + sg[None, :]) * B1 + occ).ravel()
        counts = np.bincount(cell, minlength=N * K * B1).reshape(N, K, B1).astype(np.float64)
        allowed = np.zeros(N * K * B1, dtype=bool)
        allowed[cell[masks.ravel()]] = True
        allowed = allowed.reshape(N, K, B1)
        group_obs = np.zeros((N, int(self._hoff[-1]) + obs.shape[1] - S), dtype=np.float32)
        tmask = np.zeros((N, self.encoding.max_groups * L), dtype=bool)
        for k, g in enumerate(c.groups):
            group_obs[:, self._hoff[k] : self._hoff[k + 1]] = counts[:, k, : g.buffer + 1] / g.count
            tmask[:, k * L : k * L + g.buffer] = allowed[:, k, : g.buffer]
        group_obs[:, self._hoff[-1] :] = obs[:, S:]  # the same interval and job one-hots
        tokens = self.encoding.encode(group_obs)
        tok = self.token_actions(tokens, tmask)
        out = np.empty(N, dtype=np.int64)
        off = c.group_offsets
        keeps_pas = np.zeros(N, dtype=bool)
        if self._pas is not None:
            anchor = pas_anchor(torch.as_tensor(tokens["groups"]), torch.as_tensor(tmask), L)
            keeps_pas = anchor.numpy()[np.arange(N), tok] & tmask.any(axis=1)
            if keeps_pas.any():
                out[keeps_pas] = self._pas._act_batch(obs[keeps_pas], masks[keeps_pas])
        for i, t in enumerate(tok):
            if keeps_pas[i]:
                continue
            k, b = divmod(int(t), L)
            lo = off[k]
            hit = np.flatnonzero((occ[i, lo : off[k + 1]] == b) & masks[i, lo : off[k + 1]])
            if len(hit):
                out[i] = lo + hit[0]
            else:  # no valid (group, level): a blocking state; any masked server, as PAS does
                out[i] = int(np.argmax(masks[i]))
        return out
