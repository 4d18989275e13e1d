"""The small-farm expert: its exact labels and pair weights, the routing of farms between the two
experts of a model file, and the trainer's usage errors."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from serverfarm_gym.agents.table_generalist.exact_expert import (  # noqa: E402
    exact_labels,
    label_all,
    main,
    model_digest,
    pair_weights,
)
from serverfarm_gym.agents.table_generalist.labels import (  # noqa: E402
    EXACT_SEARCH,
    SMALL,
    exact_seeds,
)
from serverfarm_gym.agents.table_generalist.policy import SHIPPED_MODEL, generalist_table  # noqa: E402
from serverfarm_gym.agents.table_generalist.table_net import (  # noqa: E402
    FEATURES,
    SMALL_EXPERT,
    chain_states_log10,
    expert_prefix,
    expert_scores,
    forward,
    load_weights,
    members,
    merge_expert,
    n_blocks,
    save_weights,
    table_features,
)
from serverfarm_gym.agents.table_generalist.table_torch import MAIN_FEATURES  # noqa: E402
from serverfarm_gym.agents.table_generalist.table_train import TableNet  # noqa: E402
from serverfarm_gym.baselines.best_priority import table_evaluator  # noqa: E402
from serverfarm_gym.envs.farm_sampler import HELD_OUT_SEEDS, sample_farm  # noqa: E402
from serverfarm_gym.envs.scenarios import load_scenario  # noqa: E402
from serverfarm_gym.evaluation.exact import n_full_states  # noqa: E402


def _exchange(table: np.ndarray, a: tuple[int, int], b: tuple[int, int]) -> np.ndarray:
    t = table.copy()
    t[a], t[b] = table[b], table[a]
    return t


def test_pair_weights_are_the_exact_losses_of_neighbour_exchanges() -> None:
    seed = exact_seeds(1, 0)[0]
    ex = exact_labels(seed)
    config = sample_farm(seed, SMALL)
    evaluate, method = table_evaluator(config, EXACT_SEARCH)
    assert method == "exact"
    t, g, lv = ex["table"], ex["group"], ex["level"]
    base = evaluate(t)
    for q, (i, j) in enumerate(ex["ordered"]):
        v = t[g, lv]
        between = (v < v[i]) & (v > v[j])
        if v[i] != v[j] and not between.any():  # neighbours in the teacher's order
            want = 100.0 * (base - evaluate(_exchange(t, (g[i], lv[i]), (g[j], lv[j])))) / base
            assert ex["weight"][q] == pytest.approx(want, abs=1e-12)
    # a pair's weight is at least that of every neighbouring pair inside it
    assert len(ex["weight"]) == len(ex["ordered"]) and np.all(np.isfinite(ex["weight"]))


def test_pair_weights_on_a_two_entry_order() -> None:
    table = np.array([[2.0, -9.0], [1.0, -9.0]])
    group, level = np.array([0, 1]), np.array([0, 0])
    calls: list[np.ndarray] = []

    def evaluate(t: np.ndarray) -> float:  # efficiency 1 in the given order, 0.9 exchanged
        calls.append(t)
        return 1.0 if t[0, 0] > t[1, 0] else 0.9

    w = pair_weights(table, group, level, np.array([[0, 1]]), evaluate)
    np.testing.assert_allclose(w, [10.0])
    assert len(calls) == 2  # the base and one exchange


def test_labels_are_cached_and_refused_for_held_out_seeds(tmp_path) -> None:
    seed = exact_seeds(1, 0)[0]
    first = label_all([seed], tmp_path)[0]
    assert (tmp_path / f"exact-{seed}.npz").is_file()
    again = label_all([seed], tmp_path)[0]
    for k in ("ordered", "tied", "weight", "table"):
        np.testing.assert_array_equal(first[k], again[k])
    assert again["x"].shape[1] == len(FEATURES)
    with pytest.raises(ValueError, match="held out"):
        exact_labels(HELD_OUT_SEEDS.start)


def test_a_polished_teacher_is_the_model_table_improved_and_cached_by_its_start(tmp_path) -> None:
    seed = exact_seeds(1, 0)[0]
    config = sample_farm(seed, SMALL)
    evaluate = table_evaluator(config, EXACT_SEARCH)[0]
    polished = label_all([seed], tmp_path, start=SHIPPED_MODEL, polish_steps=5)[0]
    # the best table seen is kept, so the teacher is never worse than the model's own table
    assert evaluate(polished["table"]) >= evaluate(generalist_table(config)) - 1e-12
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) == 1 and files[0].startswith("exactp5-") and files[0].endswith(f"-{seed}.npz")
    # the weights are measured on the polished table, as for the search's
    ordered, w = polished["ordered"], polished["weight"]
    assert len(w) == len(ordered) and np.all(np.isfinite(w))
    # the sidecar names the start by its digest too, the one its label files carry
    meta = main(["--farms", "1", "--epochs", "1", "--members", "1", "--width", "8",
                 "--layers", "0", "--polish-from", str(SHIPPED_MODEL), "--polish-steps", "5",
                 "--cache", str(tmp_path), "--out", str(tmp_path / "m")])  # fmt: skip
    teacher = meta["small_expert"]["teacher"]
    assert files[0] == f"exactp5-{teacher['digest']}-{seed}.npz"
    assert teacher["digest"] == model_digest(SHIPPED_MODEL) and teacher["steps"] == 5
    with pytest.raises(SystemExit):
        main(["--farms", "1", "--polish-from", str(tmp_path / "missing.npz")])


def test_keep_base_expert_writes_the_new_networks_beside_the_base_ones(tmp_path) -> None:
    w, base, _ = _two_expert_model(tmp_path)
    model = save_weights(w, tmp_path / "base", small_expert={"farms": 7})
    meta = main(["--farms", "1", "--epochs", "1", "--members", "1", "--width", "8",
                 "--layers", "0", "--keep-base-expert", "--base", str(model),
                 "--cache", str(tmp_path), "--out", str(tmp_path / "m")])  # fmt: skip
    got, side = load_weights(tmp_path / "m")
    assert members(got, SMALL_EXPERT) == ["small.0.", "small.1.", "small.2."]
    assert all(np.array_equal(got[k], w[k]) for k in w)  # the base's networks, bit for bit
    assert meta["small_expert"]["beside"] == {"farms": 7} == side["small_expert"]["beside"]
    no_expert = save_weights(base, tmp_path / "main-only")
    with pytest.raises(SystemExit):
        main(["--farms", "1", "--keep-base-expert", "--base", str(no_expert)])


def _two_expert_model(tmp_path):
    torch.manual_seed(1)
    shipped, _ = load_weights(SHIPPED_MODEL)
    base = {k: v for k, v in shipped.items() if not k.startswith(SMALL_EXPERT)}  # main only
    nets = [TableNet(8, n_features=len(FEATURES), layers=n).numpy_weights() for n in (2, 0)]
    w = merge_expert(base, nets, EXACT_SEARCH.exact_max_states)
    path = save_weights(w, tmp_path / "m")
    return load_weights(path)[0], base, nets


def test_small_farms_read_by_the_expert_large_by_the_main_network(tmp_path) -> None:
    w, base, nets = _two_expert_model(tmp_path)
    assert members(w, SMALL_EXPERT) == ["small.0.", "small.1."]
    assert members(w, "") == members(base, "")  # the main network's members kept
    tiny = sample_farm(exact_seeds(1, 0)[0], SMALL)
    big = load_scenario("paper-100")
    assert n_full_states(tiny) <= EXACT_SEARCH.exact_max_states
    assert np.isclose(10 ** chain_states_log10(tiny), n_full_states(tiny))
    assert expert_prefix(w, tiny) == SMALL_EXPERT and expert_prefix(w, big) == ""
    assert expert_prefix(base, tiny) == ""  # a model without an expert: the main network
    # the expert's (the mean of its networks' scores) on the small farm, the main network's
    # (unchanged) on the large one
    x, g, _ = table_features(tiny)
    want = (forward(nets[0], x, g) + forward(nets[1], x, g)) / 2
    np.testing.assert_allclose(expert_scores(w, x, g, SMALL_EXPERT), want, rtol=1e-12)
    np.testing.assert_array_equal(
        generalist_table(big, weights=w), generalist_table(big, weights=base)
    )


def test_the_main_network_reads_its_own_features(tmp_path) -> None:
    base, _ = load_weights(SHIPPED_MODEL)
    for m in members(base, ""):  # every member of the shipped main network
        assert base[m + "embed.0.weight"].shape[1] == MAIN_FEATURES <= len(FEATURES)
    net = TableNet(16, n_features=len(FEATURES), layers=2, heads=4).eval()
    x, g, _ = table_features(sample_farm(3))
    with torch.no_grad():
        want = net(torch.as_tensor(x), torch.as_tensor(g)).numpy()
    np.testing.assert_allclose(forward(net.numpy_weights(), x, g), want, rtol=1e-5, atol=1e-5)


def test_a_model_whose_expert_reads_unlisted_features_is_refused(tmp_path) -> None:
    w, _, _ = _two_expert_model(tmp_path)
    w[SMALL_EXPERT + "1.embed.0.weight"] = np.zeros((8, len(FEATURES) + 2), np.float32)
    path = save_weights(w, tmp_path / "bad")
    with pytest.raises(ValueError, match="features"):
        load_weights(path)


@pytest.mark.parametrize(
    "bad", [["--farms", "0"], ["--floor", "-1"], ["--members", "0"], ["--base", "nowhere.npz"]]
)
def test_bad_options_are_usage_errors(bad: list[str], tmp_path) -> None:
    argv = ["--cache", str(tmp_path), "--out", str(tmp_path / "m"), *bad]
    if "--base" in bad:
        with pytest.raises(ValueError, match="nowhere"):
            main(argv)
        return
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2


def test_the_trainer_writes_an_ensemble_of_attention_networks(tmp_path) -> None:
    argv = ["--farms", "3", "--epochs", "2", "--members", "2", "--width", "8", "--heads", "2",
            "--layers", "2", "--batch-size", "2", "--workers", "2", "--cache", str(tmp_path),
            "--out", str(tmp_path / "m")]  # fmt: skip
    meta = main(argv)
    w, side = load_weights(tmp_path / "m.npz")
    assert members(w, SMALL_EXPERT) == ["small.0.", "small.1."]
    assert n_blocks(w, "small.0.") == 2
    base, _ = load_weights(SHIPPED_MODEL)  # the --base default: its main network is kept
    assert all(np.array_equal(w[k], v) for k, v in base.items() if not k.startswith(SMALL_EXPERT))
    assert side["small_expert"]["members"] == 2 == meta["small_expert"]["members"]
    tiny = sample_farm(exact_seeds(1, 0)[0], SMALL)
    assert np.all(np.isfinite(generalist_table(tiny, weights=w)))


@pytest.mark.parametrize("bad", [["--heads", "3"], ["--layers", "-1"], ["--lr", "0"]])
def test_bad_attention_options_are_usage_errors(bad: list[str], tmp_path) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--cache", str(tmp_path), "--out", str(tmp_path / "m"), *bad])
    assert e.value.code == 2
