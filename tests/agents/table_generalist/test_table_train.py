"""serverfarm_gym.agents.table_generalist.table_train: the main network as an ensemble, pair
costs, a kept small-farm expert, a diverged fit, and its usage errors."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from serverfarm_gym.agents.table_generalist import table_train  # noqa: E402
from serverfarm_gym.agents.table_generalist.labels import farm_labels  # noqa: E402
from serverfarm_gym.agents.table_generalist.policy import SHIPPED_MODEL, generalist_table  # noqa: E402
from serverfarm_gym.agents.table_generalist.table_net import (  # noqa: E402
    MAIN_ENSEMBLE,
    SMALL_EXPERT,
    expert_scores,
    forward,
    load_weights,
    members,
    save_weights,
    table_features,
)
from serverfarm_gym.agents.table_generalist.table_train import TableNet, fit, main  # noqa: E402
from serverfarm_gym.envs.scenarios import load_scenario  # noqa: E402


@pytest.mark.parametrize(
    "bad",
    [
        ["--exact-farms", "-2"],
        ["--members", "0"],
        ["--workers", "0"],
        ["--pair-floor", "0"],
    ],
)
def test_bad_options_are_usage_errors(bad: list[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--farms", "0", "--small-farms", "0", *bad])
    assert e.value.code == 2


def test_the_main_network_as_an_ensemble_averages_its_members(tmp_path) -> None:
    common = ["--farms", "0", "--small-farms", "3", "--epochs", "2", "--width", "8",
              "--layers", "1", "--heads", "2", "--cache", str(tmp_path)]  # fmt: skip
    meta = main([*common, "--members", "2", "--workers", "2", "--out", str(tmp_path / "m")])
    w, side = load_weights(tmp_path / "m.npz")
    assert members(w, "") == [f"{MAIN_ENSEMBLE}0.", f"{MAIN_ENSEMBLE}1."]
    assert side["trained"]["members"] == 2 == meta["trained"]["members"]
    big = load_scenario("paper-100")
    x, g, _ = table_features(big)
    want = (forward(w, x, g, "main.0.") + forward(w, x, g, "main.1.")) / 2
    np.testing.assert_allclose(expert_scores(w, x, g), want, rtol=1e-12)
    assert not np.allclose(forward(w, x, g, "main.0."), forward(w, x, g, "main.1."))  # 2 seeds
    assert np.all(np.isfinite(generalist_table(big, weights=w)))
    # a member is the single network that --members 1 writes with its seed (workers or not)
    main([*common, "--seed", "1", "--out", str(tmp_path / "one")])
    one, _ = load_weights(tmp_path / "one.npz")
    assert all(np.array_equal(one[k], w["main.1." + k]) for k in one)


def test_a_diverged_fit_goes_back_to_its_lowest_epoch(monkeypatch) -> None:
    data = [farm_labels(s, small=True) for s in range(3)]
    steady = fit(data, epochs=3, width=8, lr=1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an annealed fit that did not blow up says nothing
        assert all(np.array_equal(a, b) for a, b in zip(
            fit(data, epochs=3, width=8, lr=1e-3).numpy_weights().values(),
            steady.numpy_weights().values(), strict=True))  # fmt: skip
    # Adam at a rate of 1e4 throws the weights far off: the last epoch's loss is many times the
    # lowest, and the weights are set back (finite, and no longer the last epoch's)
    lines: list[str] = []
    with pytest.warns(RuntimeWarning, match="diverged"):
        kept = fit(data, epochs=4, width=8, lr=1e4, log=lines.append).numpy_weights()
    assert "diverged" in lines[-1]
    assert all(np.isfinite(v).all() for v in kept.values())
    monkeypatch.setattr(table_train, "DIVERGED", math.inf)
    last = fit(data, epochs=4, width=8, lr=1e4).numpy_weights()
    assert any(not np.array_equal(kept[k], last[k]) for k in kept)


def test_the_divergence_rule() -> None:
    net, other = TableNet(8, 0.0, 25, 0, 4), TableNet(8, 0.0, 25, 0, 4)
    low = (0.1, {k: v.clone() for k, v in other.state_dict().items()})
    before = {k: v.clone() for k, v in net.state_dict().items()}
    table_train._undo_divergence(net, 0.19, low, None)  # under twice the lowest: kept as is
    assert all(torch.equal(v, net.state_dict()[k]) for k, v in before.items())
    for final in (0.21, math.nan, math.inf):
        with pytest.warns(RuntimeWarning, match="diverged"):
            table_train._undo_divergence(net, final, low, None)
        assert all(torch.equal(v, net.state_dict()[k]) for k, v in low[1].items())
    with pytest.raises(ValueError, match="never finite"):
        table_train._undo_divergence(net, math.nan, None, None)


def test_weights_that_are_not_finite_are_not_written(tmp_path) -> None:
    w = {"embed.0.weight": np.array([[1.0, np.nan]])}
    with pytest.raises(ValueError, match=r"embed\.0\.weight is not finite"):
        save_weights(w, tmp_path / "m")
    assert not list(tmp_path.iterdir())
    with pytest.raises(ValueError, match="not finite"):  # finite in float64, not as stored
        save_weights({"embed.0.weight": np.array([[1e300]])}, tmp_path / "m")
    assert not list(tmp_path.iterdir())


def test_pair_costs_weigh_the_main_networks_pairs(tmp_path) -> None:
    common = ["--farms", "0", "--small-farms", "2", "--epochs", "1", "--width", "8",
              "--cache", str(tmp_path)]  # fmt: skip
    meta = main([*common, "--pair-floor", "0.1", "--out", str(tmp_path / "w")])
    assert meta["trained"]["pair_floor"] == 0.1
    assert sorted(p.name for p in tmp_path.glob("wsmall-*.npz")) == ["wsmall-0.npz", "wsmall-1.npz"]
    main([*common, "--out", str(tmp_path / "u")])
    w, _ = load_weights(tmp_path / "w.npz")
    u, _ = load_weights(tmp_path / "u.npz")
    assert any(not np.array_equal(w[k], u[k]) for k in w)  # the weights changed the fit


def test_keep_expert_writes_the_new_main_network_beside_the_kept_expert(tmp_path) -> None:
    common = ["--farms", "0", "--small-farms", "2", "--epochs", "1", "--width", "8",
              "--cache", str(tmp_path)]  # fmt: skip
    main([*common, "--out", str(tmp_path / "main")])  # a file with a main network only
    with pytest.raises(SystemExit) as e:
        main([*common, "--keep-expert", str(tmp_path / "main.npz"), "--out", str(tmp_path / "x")])
    assert e.value.code == 2  # no expert there to keep
    shipped, side = load_weights(SHIPPED_MODEL)
    meta = main([*common, "--keep-expert", str(SHIPPED_MODEL), "--out", str(tmp_path / "k")])
    w, kept_side = load_weights(tmp_path / "k.npz")
    new_main, _ = load_weights(tmp_path / "main.npz")
    expert = {k for k in shipped if k.startswith(SMALL_EXPERT)}
    assert expert and all(np.array_equal(w[k], shipped[k]) for k in expert)
    assert all(np.array_equal(w[k], new_main[k]) for k in new_main)  # the new main network
    assert set(w) == expert | set(new_main)
    assert kept_side["small_expert"]["farms"] == side["small_expert"]["farms"]
    assert meta["small_expert"]["kept_from"] == str(SHIPPED_MODEL)


def test_a_model_without_a_main_network_is_refused(tmp_path) -> None:
    weights = {"main.0.x": np.zeros(1, np.float32)}
    with pytest.raises(ValueError, match="no main network"):
        load_weights(save_weights(weights, tmp_path / "m"))
