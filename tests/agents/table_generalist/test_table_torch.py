"""serverfarm_gym.agents.table_generalist.table_torch: the torch twin of the numpy forward, batched without leaks
between farms, and its loss."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from serverfarm_gym.agents.table_generalist.labels import SMALL, exact_seeds  # noqa: E402
from serverfarm_gym.agents.table_generalist.policy import SHIPPED_MODEL  # noqa: E402
from serverfarm_gym.agents.table_generalist.table_net import (  # noqa: E402
    FEATURES,
    SMALL_EXPERT,
    forward,
    load_weights,
    members,
    save_weights,
    table_features,
)
from serverfarm_gym.agents.table_generalist.table_torch import TableNet, batch_loss, collate  # noqa: E402
from serverfarm_gym.envs.farm_sampler import sample_farm  # noqa: E402


def _example(seed: int) -> dict:
    x, group, _ = table_features(sample_farm(seed))
    T = len(group)
    i, j = np.triu_indices(T, k=1)
    return {"x": x, "group": group, "ordered": np.stack([i, j], 1), "tied": np.zeros((0, 2)),
            "weight": np.linspace(0.0, 1.0, len(i))}  # fmt: skip


@pytest.mark.parametrize(("layers", "prior"), [(0, 0.0), (2, 0.0), (1, 1.5)])
def test_the_numpy_forward_is_the_torch_one(layers: int, prior: float) -> None:
    torch.manual_seed(0)
    net = TableNet(16, prior, n_features=len(FEATURES), layers=layers, heads=4).eval()
    x, group, _ = table_features(sample_farm(5))
    with torch.no_grad():
        want = net(torch.as_tensor(x), torch.as_tensor(group)).numpy()
    np.testing.assert_allclose(forward(net.numpy_weights(), x, group), want, rtol=1e-5, atol=1e-5)


def test_a_batch_scores_each_farm_as_alone() -> None:
    # the farms' means, groups and attention stay apart: stacking changes no farm's scores
    torch.manual_seed(0)
    net = TableNet(16, 1.0, n_features=len(FEATURES), layers=2, heads=2).eval()
    examples = [_example(s) for s in (1, 2, 7)]
    b = collate(examples)
    with torch.no_grad():
        together = net(b.x, b.group, b.farm).numpy()
        alone = [
            net(torch.as_tensor(e["x"]), torch.as_tensor(e["group"])).numpy() for e in examples
        ]
    np.testing.assert_allclose(together, np.concatenate(alone), rtol=1e-5, atol=1e-6)


def test_the_batch_loss_is_the_mean_of_the_farms_losses() -> None:
    torch.manual_seed(0)
    net = TableNet(8, n_features=len(FEATURES), layers=1, heads=2)
    examples = [_example(s) for s in (1, 2)]
    with torch.no_grad():
        both = batch_loss(net, collate(examples, pair_floor=0.1), 0.3).item()
        each = [batch_loss(net, collate([e], pair_floor=0.1), 0.3).item() for e in examples]
    assert both == pytest.approx(np.mean(each), rel=1e-6)


def test_heads_must_divide_the_width() -> None:
    with pytest.raises(ValueError, match="heads"):
        TableNet(10, layers=1, heads=4)


def test_a_model_with_blocks_but_no_head_count_is_refused(tmp_path) -> None:
    w = TableNet(8, n_features=len(FEATURES), layers=1, heads=2).numpy_weights()
    del w["blocks.heads"]
    path = save_weights(w, tmp_path / "m")
    with pytest.raises(ValueError, match=r"blocks\.heads"):
        load_weights(path)


def test_a_model_with_weights_it_does_not_read_is_refused(tmp_path) -> None:
    # weights that no forward reads would be silently ignored: the file is refused instead
    w = TableNet(8).numpy_weights() | {"attn.q.weight": np.zeros((8, 8), np.float32)}
    path = save_weights(w, tmp_path / "m")
    with pytest.raises(ValueError, match=r"attn\.q\.weight"):
        load_weights(path)


def test_networks_read_back_from_a_model_score_as_the_numpy_forward() -> None:
    w, _ = load_weights(SHIPPED_MODEL)
    config = sample_farm(exact_seeds(1, 0)[0], SMALL)
    x, group, _ = table_features(config)
    for m in members(w, SMALL_EXPERT)[:2]:
        net = TableNet.from_numpy(w, m)
        with torch.no_grad():
            got = net(torch.as_tensor(x), torch.as_tensor(group)).numpy()
        # float32 sums in another order: a few units of float32's precision over two blocks
        np.testing.assert_allclose(got, forward(w, x, group, m), rtol=5e-5, atol=1e-5)
        back = net.numpy_weights()
        assert all(np.array_equal(back[k], w[m + k]) for k in back)
