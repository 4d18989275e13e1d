"""The losses of the masked PPO: GAE (discounted or average-reward), masked logits, PPO's
clipped surrogate with value and entropy terms, and the behaviour-cloning loss."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from serverfarm_gym.agents.ppo.agent import MASKED_LOGIT

__all__ = ["clone_loss", "gae", "masked_logits", "ppo_losses"]


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    last_value: torch.Tensor,
    gamma: float,
    lam: float,
    rho: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns) of a continuing task by GAE(lambda) over ``[T, N]`` arrays.

    ``delta_t = r_t - rho + gamma V(s_{t+1}) - V(s_t)``, ``A_t = delta_t + gamma lam A_{t+1}``,
    bootstrapped with ``last_value = V(s_T)``; ``returns = A + V`` (the value targets). ``rho``
    is 0 for the discounted criterion and the average reward (with ``gamma = 1``) for the
    differential one.
    """
    T = rewards.shape[0]
    adv = torch.zeros_like(rewards)
    run = torch.zeros_like(last_value)
    nxt = last_value
    for t in range(T - 1, -1, -1):
        delta = rewards[t] - rho + gamma * nxt - values[t]
        run = delta + gamma * lam * run
        adv[t] = run
        nxt = values[t]
    return adv, adv + values


def masked_logits(logits: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
    """Logits with masked actions at -1e8: their probability is exactly 0 in float32 (never
    sampled, even with Gumbel noise) while, unlike -inf, gradients stay finite (0 * -inf would
    make the entropy's gradient NaN); sb3-contrib uses the same constant."""
    return logits.masked_fill(~as_bool(masks), MASKED_LOGIT)


def as_bool(masks: torch.Tensor) -> torch.Tensor:
    """Boolean masks of bool masks or of the envs' ``int8`` 0/1 ones (``~`` on ``int8`` is
    bitwise, and ``torch.where`` takes only a boolean condition)."""
    return masks if masks.dtype == torch.bool else masks != 0


def ppo_losses(
    logits: torch.Tensor,
    masks: torch.Tensor,
    values: torch.Tensor,
    actions: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    returns: torch.Tensor,
    clip_range: float,
) -> dict[str, torch.Tensor]:
    """PPO's terms on a minibatch: clipped surrogate (to minimise), value MSE, entropy of the
    masked distribution, approximate KL and clip fraction."""
    masks = as_bool(masks)
    logp_all = torch.log_softmax(masked_logits(logits, masks), dim=-1)
    logp = logp_all.gather(1, actions[:, None]).squeeze(1)
    ratio = torch.exp(logp - old_logp)
    pg = -torch.min(ratio * advantages, ratio.clamp(1 - clip_range, 1 + clip_range) * advantages)
    p = logp_all.exp()
    ent = -torch.where(masks, p * logp_all, torch.zeros_like(p)).sum(-1)
    with torch.no_grad():
        log_ratio = logp - old_logp
        kl = ((ratio - 1) - log_ratio).mean()
        clipped = ((ratio - 1).abs() > clip_range).float().mean()
    return {
        "policy": pg.mean(),
        "value": F.mse_loss(values, returns),
        "entropy": ent.mean(),
        "approx_kl": kl,
        "clip_fraction": clipped,
    }


def clone_loss(
    logits: torch.Tensor, masks: torch.Tensor, actions: torch.Tensor, smoothing: float = 0.0
) -> torch.Tensor:
    """Cross-entropy of the masked policy against PAS's ``actions`` with label smoothing over
    the *valid* actions: the target puts ``1 - smoothing`` on PAS's choice and spreads
    ``smoothing`` uniformly over the n valid actions (PAS's included), so the fitted policy's
    argmax is PAS's while it keeps probability on the others for PPO to explore (a hard clone
    saturates the softmax: the policy gradient of a near-deterministic policy is ~0)."""
    masks = as_bool(masks)
    logp = torch.log_softmax(masked_logits(logits, masks), dim=-1)
    n_valid = masks.sum(-1, keepdim=True).clamp(min=1)
    target = masks.float() * (smoothing / n_valid)
    target = target.scatter_add(
        1, actions[:, None], torch.full_like(target[:, :1], 1.0 - smoothing)
    )
    # masked entries have target 0; their logp (~ -1e8) must not turn 0 x logp into noise
    return -torch.where(masks, target * logp, torch.zeros_like(logp)).sum(-1).mean()


# ---------------------------------------------------------------------------------------------
# the trainer
# ---------------------------------------------------------------------------------------------
