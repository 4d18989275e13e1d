"""The torch twin of the table network (:func:`serverfarm_gym.agents.table_generalist.table_net.forward`) and the
batches it is trained on.

:class:`TableNet` computes the same scores as the numpy forward, under the same parameter names
(:meth:`TableNet.numpy_weights`), for one farm or for a batch of farms at once: the tokens of
the batch's farms are stacked, and every mean (over the farm, over a group) and every attention
weight stays within its own farm (a block-diagonal mask), so a batch gives each farm exactly the
scores it gets alone. Batching is what makes the deeper experts cheap to fit: one step costs
about what one farm did.

:func:`collate` packs examples (features, groups, the teacher's ordered and tied pairs, optional
pair weights) into a :class:`Batch`; :func:`batch_loss` is the distillation loss of
:mod:`serverfarm_gym.agents.table_generalist.table_train`, each farm weighing the same.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from serverfarm_gym.agents.table_generalist.table_net import FEATURES

__all__ = ["MAIN_FEATURES", "Batch", "TableNet", "batch_loss", "collate"]

_EFF_RANK = FEATURES.index("eff_rank")
#: the features the main network reads (the first ones of FEATURES)
MAIN_FEATURES = FEATURES.index("types_4") + 1


#: torch's names of the second linear layer of each MLP (an index past the ReLU) and numpy's
_RENAMED = (("embed.2", "embed.1"), ("head.2", "head.1"), ("ff.2", "ff.1"))


class _Block(nn.Module):
    """Multi-head self-attention over a farm's entries, then a feed-forward layer, each
    residual: each entry compares itself with every other, which the mean embeddings cannot."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.o = nn.Linear(width, width)
        self.ff = nn.Sequential(nn.Linear(width, 2 * width), nn.ReLU(), nn.Linear(2 * width, width))

    def forward(self, h: torch.Tensor, apart: torch.Tensor | None) -> torch.Tensor:
        T, W = h.shape
        d = W // self.heads
        q, k, v = self.qkv(h).view(T, 3, self.heads, d).unbind(1)
        a = torch.einsum("thd,shd->hts", q, k) / math.sqrt(d)
        if apart is not None:  # entries of other farms of the batch
            a = a.masked_fill(apart[None], float("-inf"))
        h = h + self.o(torch.einsum("hts,shd->thd", a.softmax(-1), v).reshape(T, W))
        return h + self.ff(h)


class TableNet(nn.Module):
    """Scores of a farm's (group, level) entries: a token MLP, ``layers`` attention blocks
    (:class:`_Block`, ``heads`` heads; 0 = none, the main network), the mean embedding over the
    farm and over the token's group appended to each token, and a head giving a group score
    g(k) (averaged over the group's tokens) and a level term d(k, b); score = g(k) + d(k, b),
    plus ``prior`` times minus the group's PAS rank (``prior.scale``, 0 = none)."""

    def __init__(
        self,
        width: int = 48,
        prior: float = 0.0,
        n_features: int = MAIN_FEATURES,
        layers: int = 0,
        heads: int = 4,
    ) -> None:
        super().__init__()
        if layers and width % heads:
            raise ValueError(f"width: {width} must be a multiple of heads ({heads})")
        F = self.n_features = n_features  # it reads the first F of FEATURES
        self.prior = prior
        self.heads = heads
        self.embed = nn.Sequential(nn.Linear(F, width), nn.ReLU(), nn.Linear(width, width))
        self.blocks = nn.ModuleList(_Block(width, heads) for _ in range(layers))
        self.head = nn.Sequential(nn.Linear(3 * width, width), nn.ReLU(), nn.Linear(width, 2))

    def forward(
        self, x: torch.Tensor, group: torch.Tensor, farm: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The scores: PAS's prior plus the network's correction (:meth:`correction`)."""
        return self.correction(x, group, farm) + self.prior_term(x, group, farm)

    def prior_term(
        self, x: torch.Tensor, group: torch.Tensor, farm: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``prior`` times minus the token's group's PAS rank, read back from ``eff_rank``
        (the torch twin of :func:`serverfarm_gym.agents.table_generalist.table_net.pas_prior`)."""
        if self.prior == 0.0:
            return torch.zeros(len(group), dtype=torch.float64)
        K = _groups_per_token(group, farm)
        return -self.prior * torch.round(x[:, _EFF_RANK].double() * (K - 1).clamp(min=1))

    def correction(
        self, x: torch.Tensor, group: torch.Tensor, farm: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The network's part of the scores, ``g(k) + d(k, b)``. ``group``: the token's group,
        numbered across the batch (farm i's groups after farm i-1's); ``farm``: the token's
        farm in the batch (None: one farm)."""
        n_groups = int(group.max()) + 1
        farm = torch.zeros_like(group) if farm is None else farm
        n_farms = int(farm.max()) + 1
        h = torch.relu(self.embed(x[:, : self.n_features]))
        apart = (farm[:, None] != farm[None, :]) if n_farms > 1 else None
        for block in self.blocks:
            h = block(h, apart)
        fmean = _mean_by(h, farm, n_farms)
        gmean = _mean_by(h, group, n_groups)
        out = self.head(torch.cat([h, fmean[farm], gmean[group]], dim=1))
        g = _mean_by(out[:, :1], group, n_groups)[:, 0]
        return (g[group] + out[:, 1]).double()

    @classmethod
    def from_numpy(cls, w: dict[str, np.ndarray], prefix: str = "") -> TableNet:
        """The network ``prefix`` of a model's weights (the inverse of :meth:`numpy_weights`),
        to be trained further."""
        first = w[prefix + "embed.0.weight"]
        n_layers = sum(k.startswith(prefix + "blocks.") and k.endswith(".qkv.weight") for k in w)
        heads = int(np.asarray(w[prefix + "blocks.heads"]).reshape(-1)[0]) if n_layers else 4
        prior = float(np.asarray(w.get(prefix + "prior.scale", 0.0)).reshape(-1)[0])
        net = cls(first.shape[0], prior, first.shape[1], n_layers, heads)
        state = {}
        for name in net.state_dict():
            stored = name
            for torch_name, numpy_name in _RENAMED:
                stored = stored.replace(torch_name, numpy_name)
            state[name] = torch.as_tensor(np.asarray(w[prefix + stored], dtype=np.float32))
        net.load_state_dict(state)
        return net

    def numpy_weights(self) -> dict[str, np.ndarray]:
        """The weights under the numpy forward's names (``embed.0.weight``, ...)."""
        w = {}
        for k, v in self.state_dict().items():
            for torch_name, numpy_name in _RENAMED:
                k = k.replace(torch_name, numpy_name)
            w[k] = v.numpy()
        if len(self.blocks):
            w["blocks.heads"] = np.array([self.heads], dtype=np.float32)
        return w | {"prior.scale": np.array([self.prior], dtype=np.float32)}


def _mean_by(h: torch.Tensor, index: torch.Tensor, n: int) -> torch.Tensor:
    cnt = torch.bincount(index, minlength=n).to(h.dtype)[:, None]
    return torch.zeros(n, h.shape[1], dtype=h.dtype).index_add_(0, index, h) / cnt


def _groups_per_token(group: torch.Tensor, farm: torch.Tensor | None) -> torch.Tensor:
    """The number of groups of each token's farm."""
    if farm is None:
        return torch.full((len(group),), int(group.max()) + 1)
    n_farms = int(farm.max()) + 1
    first = torch.full((n_farms,), int(group.max()) + 1).scatter_reduce(0, farm, group, "amin")
    last = torch.zeros(n_farms, dtype=group.dtype).scatter_reduce(0, farm, group, "amax")
    return (last - first + 1)[farm]


@dataclass
class Batch:
    """Examples stacked: tokens (``x``, ``group`` numbered across the batch, ``farm``), the
    ordered pairs (first entry first) with their weights, the tied pairs with theirs; every
    weight already divided by its farm's number of pairs, so each farm weighs the same."""

    x: torch.Tensor
    group: torch.Tensor
    farm: torch.Tensor
    n_farms: int
    ordered: torch.Tensor
    ordered_weight: torch.Tensor
    tied: torch.Tensor
    tied_weight: torch.Tensor


def collate(examples: Sequence[dict[str, Any]], pair_floor: float | None = None) -> Batch:
    """One :class:`Batch` of ``examples``. With ``pair_floor`` (exact labels that carry
    ``weight``), an ordered pair weighs what breaking it costs plus the floor; else 1."""
    xs, gs, fs, o, ow, t, tw = [], [], [], [], [], [], []
    offset = goffset = 0
    for i, ex in enumerate(examples):
        n = len(ex["group"])
        xs.append(np.asarray(ex["x"], dtype=np.float32))
        gs.append(np.asarray(ex["group"]) + goffset)
        fs.append(np.full(n, i))
        pairs = np.asarray(ex["ordered"], dtype=np.int64).reshape(-1, 2)
        if len(pairs):
            has_w = pair_floor is not None and "weight" in ex
            w = np.maximum(ex["weight"], 0.0) + pair_floor if has_w else np.ones(len(pairs))
            o.append(pairs + offset)
            ow.append(w / len(pairs))
        ties = np.asarray(ex["tied"], dtype=np.int64).reshape(-1, 2)
        if len(ties):
            t.append(ties + offset)
            tw.append(np.full(len(ties), 1.0 / len(ties)))
        offset += n
        goffset += int(np.max(ex["group"])) + 1

    def cat(parts: list[np.ndarray], shape: tuple[int, ...], dtype: Any) -> torch.Tensor:
        return torch.as_tensor(np.concatenate(parts) if parts else np.zeros(shape, dtype))

    return Batch(
        x=torch.as_tensor(np.concatenate(xs)),
        group=torch.as_tensor(np.concatenate(gs)),
        farm=torch.as_tensor(np.concatenate(fs)),
        n_farms=len(examples),
        ordered=cat(o, (0, 2), np.int64),
        ordered_weight=cat(ow, (0,), np.float64),
        tied=cat(t, (0, 2), np.int64),
        tied_weight=cat(tw, (0,), np.float64),
    )


def batch_loss(net: TableNet, b: Batch, tie_weight: float) -> torch.Tensor:
    """The mean over the batch's farms of: a pairwise logistic loss on the score difference of
    each ordered pair and ``tie_weight`` times the absolute difference of each tied pair."""
    farm = b.farm if b.n_farms > 1 else None
    s = net(b.x, b.group, farm)
    loss = torch.zeros((), dtype=torch.float64)
    if len(b.ordered):
        diff = s[b.ordered[:, 0]] - s[b.ordered[:, 1]]
        loss = loss + (b.ordered_weight * nn.functional.softplus(-diff)).sum()
    if len(b.tied):
        loss = loss + tie_weight * (b.tied_weight * (s[b.tied[:, 0]] - s[b.tied[:, 1]]).abs()).sum()
    return loss / b.n_farms
