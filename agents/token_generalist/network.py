"""A permutation-invariant actor-critic over the group tokens of ``serverfarm_gym.envs.tokens``.

Why this shape: a farm is a *set* of groups. The network embeds every group token together with the
arriving job's vector, lets the tokens attend to each other (a Transformer encoder without
positional encodings, padding masked out), and reads

* the **logits** per token: one per level b of that group, i.e. the token actions
  ``g * max_levels + b`` of ``serverfarm_gym.envs.tokens`` (so reordering the groups reorders the logits the same
  way: permutation-equivariant), and
* the **value** from a masked mean over the tokens (permutation-invariant).

Nothing depends on the number of groups, levels in use, servers or job types: the same weights act
on every farm the token encoding can describe (up to its padding limits).

**The PAS anchor** (``TokenNetConfig.anchor = c > 0``): the logits are the network's plus ``c`` at
PAS's own choice (:func:`pas_anchor`, computed from the tokens and the action mask: the valid
(group, level) of the group with the highest ``pas_priority``, ties to the smallest group, then
the highest level, as ``serverfarm_gym.baselines.priority``'s group mode). Why: a network that must *represent*
PAS by cloning it imitates it imperfectly (a cloned network starts below PAS on part of the
farms, and PPO over sampled farms does not repair that everywhere), while with the anchor the untrained network (its last logit layer starts at zero) *is* PAS, and
training only has to learn where to deviate: the deterministic policy leaves PAS's action only
where the network's preference for another one exceeds ``c`` nats.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from serverfarm_gym.envs.tokens import group_feature_names

__all__ = ["TokenNetConfig", "TokenPolicyNet", "pas_anchor"]


def pas_anchor(groups: torch.Tensor, masks: torch.Tensor, max_levels: int) -> torch.Tensor:
    """bool[N, G * L]: PAS's group-mode action as a one-hot over the token actions.

    Among the valid token actions (``masks``), the group with the highest ``pas_priority``
    column; ties to the smallest group index, then the highest level (pack), exactly
    ``serverfarm_gym.baselines.priority.PriorityPolicy``'s group rule with PAS's table. All False where no
    action is valid.
    """
    N, G, _ = groups.shape
    L = int(max_levels)
    col = group_feature_names(L).index("pas_priority")
    m = masks.reshape(N, G, L).bool()
    pri = groups[..., col][..., None].expand(N, G, L)
    score = torch.where(m, pri, torch.full_like(pri, -torch.inf))
    tied = m & (score == score.amax(dim=(1, 2), keepdim=True))
    g = torch.arange(G, device=groups.device)[:, None]
    b = torch.arange(L, device=groups.device)[None, :]
    key = (g * (L + 1) + (L - b)).expand(N, G, L)
    key = torch.where(tied, key, torch.full_like(key, G * (L + 1) + L + 1))
    pick = F.one_hot(key.reshape(N, G * L).argmin(-1), G * L).bool()
    return pick & m.reshape(N, G * L).any(-1, keepdim=True)


@dataclass(frozen=True)
class TokenNetConfig:
    """Sizes of :class:`TokenPolicyNet` (``n_group_features``, ``n_job_features``, ``max_levels``
    come from the token encoding; the rest are the network's own)."""

    n_group_features: int
    n_job_features: int
    max_levels: int
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    d_hidden: int = 128
    #: logit bonus at PAS's action (0: none; see the module docstring)
    anchor: float = 0.0

    def __post_init__(self) -> None:
        if not (self.anchor >= 0.0 and self.anchor < float("inf")):
            raise ValueError(f"anchor: must be a finite number >= 0, got {self.anchor}")
        for name in ("n_group_features", "n_job_features", "max_levels", "d_model", "n_layers"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.d_model % self.n_heads:
            raise ValueError(
                f"n_heads: {self.n_heads} must divide d_model={self.d_model} (attention heads "
                "split the embedding)"
            )


class TokenPolicyNet(nn.Module):
    """``forward(groups [N, G, F], group_mask [N, G], job [N, Fj], masks [N, G * L]) ->
    (logits [N, G * L], value [N])``.

    Logits of padded groups and invalid levels are returned as they come; mask them with the
    env's action mask before sampling, as for every policy here. ``masks`` (the token action
    mask) places the PAS anchor; it is required when ``cfg.anchor > 0``.
    """

    def __init__(self, cfg: TokenNetConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.embed = nn.Sequential(
            nn.Linear(cfg.n_group_features + cfg.n_job_features, d), nn.Tanh(), nn.Linear(d, d)
        )
        layer = nn.TransformerEncoderLayer(
            d, cfg.n_heads, dim_feedforward=cfg.d_hidden, dropout=0.0, batch_first=True
        )
        # enable_nested_tensor=False: the nested fast path returns zeros at padded tokens in eval
        # mode only, which would make training and evaluation differ
        self.encoder = nn.TransformerEncoder(layer, cfg.n_layers, enable_nested_tensor=False)
        self.logit_head = nn.Sequential(nn.Linear(d, d), nn.Tanh(), nn.Linear(d, cfg.max_levels))
        self.value_head = nn.Sequential(nn.Linear(d, d), nn.Tanh(), nn.Linear(d, 1))
        if cfg.anchor > 0:
            # the untrained anchored network is PAS exactly (in its deterministic decisions)
            nn.init.zeros_(self.logit_head[-1].weight)
            nn.init.zeros_(self.logit_head[-1].bias)

    def forward(
        self,
        groups: torch.Tensor,
        group_mask: torch.Tensor,
        job: torch.Tensor,
        masks: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        N, G, _ = groups.shape
        real = group_mask > 0.5
        x = torch.cat([groups, job[:, None, :].expand(N, G, job.shape[-1])], dim=-1)
        h = self.encoder(self.embed(x), src_key_padding_mask=~real)
        logits = self.logit_head(h).reshape(N, G * self.cfg.max_levels)
        if self.cfg.anchor > 0:
            if masks is None:
                raise ValueError("masks: a network with a PAS anchor needs the token action mask")
            anchor = pas_anchor(groups, masks, self.cfg.max_levels)
            logits = logits + self.cfg.anchor * anchor.to(logits.dtype)
        w = real.to(h.dtype)[..., None]
        pooled = (h * w).sum(1) / w.sum(1).clamp_min(1.0)
        return logits, self.value_head(pooled).squeeze(-1)
