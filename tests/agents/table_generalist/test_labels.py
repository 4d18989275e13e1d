"""The main network's labels: the teacher's farm, the cost of exchanging each ordered pair (by
the teacher's own evaluator), the weighted cache and the pack ties' padding."""

from __future__ import annotations

import numpy as np
import pytest

from serverfarm_gym.agents.table_generalist.labels import (
    EXACT_SEARCH,
    SIM_SEARCH,
    SMALL,
    exact_seeds,
    farm_labels,
    label_all,
    pack_ties,
    pair_costs,
    teacher_farm,
)
from serverfarm_gym.baselines.best_priority import table_evaluator
from serverfarm_gym.envs.farm_sampler import sample_farm
from serverfarm_gym.envs.scenarios import load_scenario


def test_pair_costs_exchange_the_two_entries_and_lift_a_pack_tie() -> None:
    table = np.array([[3.0, 3.0, -9.0], [1.0, -9.0, -9.0]])  # group 0's levels tie (packing)
    group, level = np.array([0, 0, 1]), np.array([0, 1, 0])
    seen: list[np.ndarray] = []

    def evaluate(t: np.ndarray) -> float:
        seen.append(t.copy())
        return 1.0 - 0.1 * len(seen[1:])  # the base 1.0, then 0.9, 0.8

    ordered = np.array([[1, 0], [0, 2]])  # the tie: higher level first; then group 0 before 1
    costs = pair_costs(table, group, level, ordered, evaluate)
    np.testing.assert_allclose(costs, [10.0, 20.0])
    assert seen[1][0, 0] == pytest.approx(3.0 + 1e-6) and seen[1][0, 1] == 3.0  # lower lifted
    assert seen[2][0, 0] == 1.0 and seen[2][1, 0] == 3.0  # exchanged


def test_weighted_labels_on_an_exact_farm_are_exact_exchange_costs(tmp_path) -> None:
    seed = exact_seeds(1, 0)[0]
    ex = label_all([seed], tmp_path, small=True, weighted=True)[0]
    assert (tmp_path / f"wsmall-{seed}.npz").is_file() and ex["method"] == "exact"
    assert len(ex["weight"]) == len(ex["ordered"]) > 0 and np.all(np.isfinite(ex["weight"]))
    evaluate = table_evaluator(sample_farm(seed, SMALL), EXACT_SEARCH)[0]
    t, g, lv = ex["table"], ex["group"], ex["level"]
    o, v = ex["ordered"], t[g, lv]
    strict = np.flatnonzero(v[o[:, 0]] != v[o[:, 1]])
    q = strict[int(np.argmax(ex["weight"][strict]))]  # the costliest pair the table orders
    (i, j), swapped = o[q], t.copy()
    swapped[g[i], lv[i]], swapped[g[j], lv[j]] = t[g[j], lv[j]], t[g[i], lv[i]]
    base = evaluate(t)
    assert ex["weight"][q] == pytest.approx(100.0 * (base - evaluate(swapped)) / base, abs=1e-12)
    # the cached file reads back the same labels; unweighted labels keep their own file
    again = label_all([seed], tmp_path, small=True, weighted=True)[0]
    assert np.array_equal(again["weight"], ex["weight"])
    plain = label_all([seed], tmp_path, small=True)[0]
    assert "weight" not in plain and np.array_equal(plain["ordered"], ex["ordered"])


def test_a_large_farm_is_costed_on_its_twin() -> None:
    farm, settings, method = teacher_farm(load_scenario("large-10k"))
    assert method == "twin" and settings == SIM_SEARCH and farm.n_servers <= 200


def test_pack_ties_pads_the_weights_of_the_pairs_it_adds() -> None:
    ex = {"group": np.array([0, 0, 1]), "ordered": np.array([[0, 2]]),
          "tied": np.array([[0, 1]]), "weight": np.array([4.0])}  # fmt: skip
    out = pack_ties(ex)
    assert out["ordered"].tolist() == [[0, 2], [1, 0]] and out["weight"].tolist() == [4.0, 0.0]
    assert len(out["tied"]) == 0 and pack_ties(out)["weight"].tolist() == [4.0, 0.0]


def test_held_out_seeds_are_refused() -> None:
    from serverfarm_gym.envs.farm_sampler import HELD_OUT_SEEDS

    with pytest.raises(ValueError, match="held out"):
        farm_labels(HELD_OUT_SEEDS.start, weighted=True)
