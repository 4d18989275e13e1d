"""A permutation-invariant actor-critic over the group tokens of ``envs.tokens``.

Why this shape: a farm is a *set* of groups. The network embeds every group token together with the
arriving job's vector, lets the tokens attend to each other (a Transformer encoder without
positional encodings, padding masked out), and reads

* the **logits** per token: one per level b of that group, i.e. the token actions
  ``g * max_levels + b`` of ``envs.tokens`` (so reordering the groups reorders the logits the same
  way: permutation-equivariant), and
* the **value** from a masked mean over the tokens (permutation-invariant).

Nothing depends on the number of groups, levels in use, servers or job types: the same weights act
on every farm the token encoding can describe (up to its padding limits).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["TokenNetConfig", "TokenPolicyNet"]


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

    def __post_init__(self) -> None:
        for name in ("n_group_features", "n_job_features", "max_levels", "d_model", "n_layers"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.d_model % self.n_heads:
            raise ValueError(
                f"n_heads: {self.n_heads} must divide d_model={self.d_model} (attention heads "
                "split the embedding)"
            )


class TokenPolicyNet(nn.Module):
    """``forward(groups [N, G, F], group_mask [N, G], job [N, Fj]) -> (logits [N, G * L], value [N])``.

    Logits of padded groups are returned as they come; mask them (and invalid levels) with the
    env's action mask before sampling, as for every policy here.
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

    def forward(
        self, groups: torch.Tensor, group_mask: torch.Tensor, job: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        N, G, _ = groups.shape
        real = group_mask > 0.5
        x = torch.cat([groups, job[:, None, :].expand(N, G, job.shape[-1])], dim=-1)
        h = self.encoder(self.embed(x), src_key_padding_mask=~real)
        logits = self.logit_head(h).reshape(N, G * self.cfg.max_levels)
        w = real.to(h.dtype)[..., None]
        pooled = (h * w).sum(1) / w.sum(1).clamp_min(1.0)
        return logits, self.value_head(pooled).squeeze(-1)
