"""A farm's priority table polished by exact gradient ascent of its soft table: a per-farm
search from a start (e.g. the generalist's own table), measured exactly, with no labels.

The soft table: in each state of the farm's aggregated chain (servers of a group counted by
level; :class:`serverfarm_gym.baselines.solvers.aggregated.AggregatedSpace`) a type-j arrival goes
to an available (group, level) entry a with probability ``softmax(z / tau)`` over the available
entries, z the table's scores. This randomised symmetric policy has an exact stationary
efficiency ``E(z) = pi.W / pi.P``; as ``tau -> 0`` it is the argmax of the scores, the table
itself. Its gradient (:func:`soft_efficiency`) costs one more linear solve than E: with h the
relative values of the reward ``W - E P`` (``Q h = -(W - E P)``),

    dE / dp[s, j, a] = pi_s lambda_j (h[next(s, a)] - h[s]) / (pi . P),

and the softmax's Jacobian carries it to the scores. The scores may also be one table per job
type (float[J, A]), with the same exact gradient.

:func:`polish` ascends ``log E`` from a start by Adam, keeping the best table seen (so never
worse than the start); :func:`polished_table` does it for a priority table float[K, Bmax+1].
The small-farm expert's second teacher (:mod:`serverfarm_gym.agents.table_generalist.exact_expert`
``--polish-from``) is the model's own table polished on each farm.
"""

from __future__ import annotations

import numpy as np
import torch

from serverfarm_gym.baselines.solvers.aggregated import AggregatedSpace, evaluate_aggregated
from serverfarm_gym.baselines.solvers.ctmc import GeneratorSolver
from serverfarm_gym.envs.config import FarmConfig

__all__ = ["argmax_efficiency", "polish", "polished_table", "soft_efficiency", "soft_policy"]


def _per_type(space: AggregatedSpace, z: np.ndarray) -> np.ndarray:
    """float64[J, A]: scores ``z`` of one table (float[A], shared by every job type) or of one
    table per job type (float[J, A])."""
    z = np.asarray(z, dtype=np.float64)
    shape = (len(space.lam), space.n_actions)
    if z.shape not in (shape, shape[1:]):
        raise ValueError(f"z: scores of shape {shape[1:]} or {shape} expected, got {z.shape}")
    return np.broadcast_to(z, shape)


def soft_policy(space: AggregatedSpace, z: np.ndarray, tau: float) -> np.ndarray:
    """float64[N, J, A]: ``softmax(z / tau)`` over the available entries of each state and job
    type (zero where none is available: the arrival is lost); ``z`` is one table (float[A]) or
    one per job type (float[J, A])."""
    valid = space.valid
    logits = np.where(valid, (_per_type(space, z) / tau)[None, :, :], -np.inf)
    top = logits.max(axis=2, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    e = np.where(valid, np.exp(logits - top), 0.0)
    total = e.sum(axis=2, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def soft_efficiency(space: AggregatedSpace, z: np.ndarray, tau: float) -> tuple[float, np.ndarray]:
    """(E, dE/dz): the exact stationary efficiency of the soft table ``softmax(z / tau)``
    (:func:`soft_policy`) and its gradient in the scores ``z``, of ``z``'s shape: float64[A],
    one per action ``level_offsets[k] + b``, or float64[J, A], a table per job type. From the
    relative values of ``W - E P`` (see the module doc)."""
    if not tau > 0:
        raise ValueError(f"tau: must be > 0, got {tau}")
    p = soft_policy(space, z, tau)
    solver = GeneratorSolver(space.generator(p))
    pi = solver.stationary()
    power = float(pi @ space.P)
    eff = float(pi @ space.W) / power
    h = solver.relative_values(space.W - eff * space.P)
    nxt = space.next_state
    h_next = np.where(nxt >= 0, h[nxt.clip(0)], 0.0)  # [N, A]; h[s] cancels in the softmax
    g = pi[:, None, None] * space.lam[None, :, None] * h_next[:, None, :] / power
    centred = g - (p * g).sum(axis=2, keepdims=True)
    dz = (p * centred).sum(axis=0) / tau  # [J, A]
    return eff, dz if np.ndim(z) == 2 else dz.sum(axis=0)


def argmax_efficiency(space: AggregatedSpace, z: np.ndarray) -> float:
    """The exact efficiency of the table ``z`` itself (each arrival to its best available
    entry; one table float[A] or one per job type float[J, A]): the soft table's limit as
    ``tau -> 0``."""
    scores = np.where(space.valid, _per_type(space, z)[None, :, :], -np.inf)
    return evaluate_aggregated(space, np.where(space.has_vacancy, scores.argmax(axis=2), -1))[0]


def polish(
    space: AggregatedSpace, z: np.ndarray, steps: int = 400, lr: float = 0.5, tau: float = 1.0
) -> tuple[np.ndarray, float]:
    """(scores, exact efficiency of their table): the scores of one farm's table (float[A], or
    float[J, A] a table per job type) after ``steps`` of Adam on the exact ``log E`` of their
    soft table, keeping the best table seen (measured by :func:`argmax_efficiency`).

    A per-farm search, not the generalist: it measures how far the farm's table class reaches
    from a start (e.g. the network's table), with no labels.
    """
    if steps < 0 or not (lr > 0 and tau > 0):
        raise ValueError(f"steps/lr/tau: need steps >= 0 and lr, tau > 0, got {steps}, {lr}, {tau}")
    x = torch.tensor(np.asarray(z, dtype=np.float64), requires_grad=True)
    opt = torch.optim.Adam([x], lr=lr)
    best_z = x.detach().numpy().copy()
    best = argmax_efficiency(space, best_z)
    for _ in range(steps):
        eff, dz = soft_efficiency(space, x.detach().numpy(), tau)
        opt.zero_grad()
        x.grad = torch.as_tensor(-dz / eff)
        opt.step()
        e = argmax_efficiency(space, x.detach().numpy())
        if e > best:
            best, best_z = e, x.detach().numpy().copy()
    return best_z, best


def polished_table(config: FarmConfig, table: np.ndarray, steps: int) -> np.ndarray:
    """``table`` (float[K, Bmax+1]) after ``steps`` of :func:`polish` on ``config``: a per-farm
    search from ``table`` (e.g. the generalist's), not the generalist. Entries no state offers
    are set below every other."""
    space = AggregatedSpace(config)
    entries = space.act_k, space.act_b  # action a is (group, level) entries[:, a]
    z, _ = polish(space, table[entries], steps=steps)
    out = np.full_like(table, float(z.min()) - 1.0)
    out[entries] = z
    return out
