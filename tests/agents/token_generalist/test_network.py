"""The permutation-invariant token network (agents/token_generalist/network.py): equivariance of the logits and
invariance of the value under a reordering of the groups, indifference to padding, any farm."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from serverfarm_gym.agents.token_generalist.network import TokenNetConfig, TokenPolicyNet  # noqa: E402
from serverfarm_gym.envs.farm_sampler import sample_farm  # noqa: E402
from serverfarm_gym.envs.server_farm import ServerFarmEnv  # noqa: E402

G, L = 8, 8


def _net() -> TokenPolicyNet:
    torch.manual_seed(0)
    env = _env(sample_farm(3))
    space = env.observation_space
    return TokenPolicyNet(
        TokenNetConfig(space["groups"].shape[1], space["job"].shape[0], max_levels=L)
    ).eval()


def _env(config) -> ServerFarmEnv:
    return ServerFarmEnv(
        config,
        action_mode="group",
        obs_mode="tokens",
        warmup_epochs=100,
        max_groups=G,
        max_levels=L,
    )


def _batch(seed: int) -> dict[str, torch.Tensor]:
    env = _env(sample_farm(seed))
    obs, _ = env.reset(seed=seed)
    return {k: torch.as_tensor(v)[None] for k, v in obs.items()}


@pytest.mark.parametrize("seed", [0, 1, 2, 5])
def test_reordering_groups_reorders_logits_and_keeps_the_value(seed: int) -> None:
    net, b = _net(), _batch(seed)
    K = int(b["group_mask"].sum())
    perm = torch.cat([torch.randperm(K, generator=torch.Generator().manual_seed(seed)),
                      torch.arange(K, G)])  # fmt: skip
    with torch.no_grad():
        logits, value = net(b["groups"], b["group_mask"], b["job"])
        lp, vp = net(b["groups"][:, perm], b["group_mask"][:, perm], b["job"])
    torch.testing.assert_close(lp.reshape(1, G, L), logits.reshape(1, G, L)[:, perm])
    torch.testing.assert_close(vp, value)


def test_padding_content_does_not_matter() -> None:
    net, b = _net(), _batch(1)
    K = int(b["group_mask"].sum())
    noisy = b["groups"].clone()
    noisy[:, K:] = torch.rand_like(noisy[:, K:])  # garbage in the padded tokens
    with torch.no_grad():
        logits, value = net(b["groups"], b["group_mask"], b["job"])
        ln, vn = net(noisy, b["group_mask"], b["job"])
    torch.testing.assert_close(ln[:, : K * L], logits[:, : K * L])
    torch.testing.assert_close(vn, value)


def test_one_network_reads_farms_of_any_shape() -> None:
    net = _net()
    shapes = set()
    for seed in range(12):
        config = sample_farm(seed)
        if config.n_groups > G or config.max_buffer > L:
            continue
        env = _env(config)
        obs, _ = env.reset(seed=0)
        with torch.no_grad():
            logits, value = net(
                *(torch.as_tensor(obs[k])[None] for k in ("groups", "group_mask", "job"))
            )
        assert logits.shape == (1, G * L) and torch.isfinite(value).all()
        masked = np.where(env.action_masks(), logits[0].numpy(), -np.inf)
        a = int(np.argmax(masked))
        env.step(a)  # the masked argmax is always an action of this farm
        shapes.add((config.n_groups, config.n_servers))
    assert len(shapes) >= 8


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="n_heads: 3 must divide d_model=64"):
        TokenNetConfig(10, 5, 4, n_heads=3)
    with pytest.raises(ValueError, match="max_levels: must be >= 1"):
        TokenNetConfig(10, 5, 0)


def test_an_anchored_network_needs_the_mask_and_starts_at_pas() -> None:
    from serverfarm_gym.agents.token_generalist.network import pas_anchor

    env = _env(sample_farm(4))
    obs, _ = env.reset(seed=4)
    b = {k: torch.as_tensor(v)[None] for k, v in obs.items()}
    m = torch.as_tensor(env.action_masks())[None]
    space = env.observation_space
    net = TokenPolicyNet(
        TokenNetConfig(space["groups"].shape[1], space["job"].shape[0], L, anchor=3.0)
    )
    with pytest.raises(ValueError, match="masks: a network with a PAS anchor"):
        net(b["groups"], b["group_mask"], b["job"])
    logits, _ = net(b["groups"], b["group_mask"], b["job"], m)
    anchor = pas_anchor(b["groups"], m, L)
    assert int(anchor.sum()) == 1 and bool(m[anchor].all())
    torch.testing.assert_close(logits, 3.0 * anchor.float())  # the zero-initialised head
    with pytest.raises(ValueError, match="anchor: must be a finite number >= 0"):
        TokenNetConfig(1, 1, L, anchor=-1.0)
