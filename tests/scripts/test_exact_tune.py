"""experiments/studies/exact_tune.py: exact policy-gradient tuning of the small-farm expert (near
ties, the PAS weight, the tuner's ascent, its farms and its command line)."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from experiments.studies.exact_tune import (  # noqa: E402
    TuneFarm,
    expert_nets,
    farm_gradient,
    main,
    random_seeds,
    sampled_seeds,
    tie_gradient,
    tune,
)
from serverfarm_gym.agents.table_generalist.labels import SMALL, exact_seeds  # noqa: E402
from serverfarm_gym.agents.table_generalist.policy import SHIPPED_MODEL, generalist_table  # noqa: E402
from serverfarm_gym.agents.table_generalist.polish import argmax_efficiency  # noqa: E402
from serverfarm_gym.agents.table_generalist.table_net import (  # noqa: E402
    SMALL_EXPERT,
    forward,
    load_weights,
    members,
    save_weights,
    table_features,
)
from serverfarm_gym.agents.token_generalist.oracle import RANDOM_FARM_TRAIN_SEEDS  # noqa: E402
from serverfarm_gym.baselines.pas import PASPolicy  # noqa: E402
from serverfarm_gym.baselines.priority import PriorityPolicy  # noqa: E402
from serverfarm_gym.envs.farm_sampler import HELD_OUT_SEEDS, sample_farm  # noqa: E402
from serverfarm_gym.envs.scenarios import random_farm  # noqa: E402
from serverfarm_gym.evaluation.exact import exact_evaluation, exact_solvable  # noqa: E402


def test_tie_gradient_pulls_a_near_tie_apart_on_the_better_side() -> None:
    farm = TuneFarm.of(0, sample_farm(exact_seeds(3, 0)[2], SMALL))
    space = farm.space
    z = farm.scores_to_actions(np.arange(len(farm.action), 0, -1, dtype=float) * 10.0)
    ranked = farm.action[np.argsort(-z[farm.action], kind="stable")]
    # find two neighbours in the order whose exchange changes the table's efficiency
    for a, b in itertools.pairwise(ranked):
        swapped = z.copy()
        swapped[a], swapped[b] = z[b], z[a]
        d = np.log(argmax_efficiency(space, z)) - np.log(argmax_efficiency(space, swapped))
        if abs(d) > 1e-9:
            break
    else:
        pytest.fail("no exchange of neighbours changes this farm's table")
    near = z.copy()
    near[b] = z[a] - 0.1  # the pair nearly ties, in the same order; all others are 10 apart
    g = tie_gradient(space, near, farm.action, gap=1.0, tau=0.3)
    assert np.count_nonzero(g) == 2 and g[a] == -g[b]
    assert np.sign(g[a]) == np.sign(d)  # ascent widens the gap on the better side
    # the pull is |d| times the logistic loss's slope
    assert abs(g[a]) == pytest.approx(abs(d) / 0.3 / (1 + np.exp(np.sign(d) * 0.1 / 0.3)))
    assert not tie_gradient(space, z, farm.action, gap=1.0, tau=0.3).any()  # no near tie


def test_tuning_raises_the_mean_log_efficiency_of_its_farms() -> None:
    w, _ = load_weights(SHIPPED_MODEL)
    nets = expert_nets(w)[:2]
    farms = [TuneFarm.of(s, sample_farm(s, SMALL)) for s in exact_seeds(8, 0)]
    history = tune(nets, farms, epochs=3, lr=1e-3, tau=1.0, batch_size=4)
    assert len(history) == 3 and history[2] > history[0]  # measured before each step


def test_sampled_seeds_are_training_farms_the_expert_reads() -> None:
    seeds = sampled_seeds(3, 5_000)
    assert len(seeds) == 3 and max(seeds) < HELD_OUT_SEEDS.start
    for s in seeds:
        c = sample_farm(s)
        assert c.job_size.is_exponential and exact_solvable(c, 5_000)


def test_keep_start_writes_the_tuned_networks_beside_the_start(tmp_path) -> None:
    w, _ = load_weights(SHIPPED_MODEL)
    one = {k: v for k, v in w.items() if not k.startswith(SMALL_EXPERT) or k.startswith(
        (SMALL_EXPERT + "0.", SMALL_EXPERT + "max_states"))}  # fmt: skip
    model = save_weights(one, tmp_path / "base", small_expert={"farms": 1})
    main(["--farms", "2", "--epochs", "1", "--lr", "1e-3", "--keep-start",
          "--model", str(model), "--out", str(tmp_path / "tuned")])  # fmt: skip
    got, side = load_weights(tmp_path / "tuned")
    assert members(got, SMALL_EXPERT) == [SMALL_EXPERT + "0.", SMALL_EXPERT + "1."]
    assert all(np.array_equal(got[k], one[k]) for k in one)  # the start, bit for bit
    assert not np.array_equal(got["small.1.head.1.weight"], one["small.0.head.1.weight"])
    assert side["small_expert"]["exact_tune"]["keep_start"] is True


def test_random_seeds_are_training_seeds_of_the_other_family() -> None:
    seeds = random_seeds(3, 5_000)
    assert len(seeds) == 3 and all(s in RANDOM_FARM_TRAIN_SEEDS for s in seeds)
    assert all(exact_solvable(random_farm(s), 5_000) for s in seeds)


def test_the_command_rewrites_the_expert_and_keeps_the_main_network(tmp_path) -> None:
    w, _ = load_weights(SHIPPED_MODEL)
    small = {k: v for k, v in w.items() if not k.startswith(SMALL_EXPERT) or k.startswith(
        (SMALL_EXPERT + "0.", SMALL_EXPERT + "max_states"))}  # fmt: skip
    model = save_weights(small, tmp_path / "base", small_expert={"farms": 1})
    meta = main(["--farms", "3", "--sampled-farms", "2", "--random-farms", "1", "--epochs", "1", "--lr", "1e-3",
                 "--model", str(model), "--out", str(tmp_path / "tuned")])  # fmt: skip
    got, side = load_weights(tmp_path / "tuned")
    assert set(got) == set(small)
    assert all(np.array_equal(got[k], small[k]) for k in small if not k.startswith(SMALL_EXPERT))
    assert not np.array_equal(got["small.0.head.1.weight"], small["small.0.head.1.weight"])
    record = side["small_expert"]["exact_tune"]
    assert side["small_expert"]["farms"] == 1  # the distillation's record is kept
    assert (
        record["farms"] == 3
        and record["sampled_farms"] == 2
        and record["random_farms"] == 1
        and record["tau"] == 0.3
    )
    assert meta["small_expert"]["exact_tune"] == json.loads(json.dumps(record))


@pytest.mark.parametrize(
    "bad",
    [
        ["--epochs", "0"],
        ["--tau", "0"],
        ["--lr", "-1"],
        ["--farms", "0"],
        ["--tie-gap", "-1"],
        ["--random-farms", "-1"],
    ],
)
def test_bad_options_are_usage_errors(bad: list[str], tmp_path) -> None:
    with pytest.raises(SystemExit) as e:
        main([*bad, "--model", str(SHIPPED_MODEL), "--out", str(tmp_path / "m")])
    assert e.value.code == 2


def test_a_model_without_an_expert_is_refused(tmp_path) -> None:
    w, _ = load_weights(SHIPPED_MODEL)
    main_only = save_weights({k: v for k, v in w.items() if not k.startswith(SMALL_EXPERT)},
                             tmp_path / "main")  # fmt: skip
    with pytest.raises(SystemExit) as e:
        main(["--farms", "1", "--model", str(main_only), "--out", str(tmp_path / "m")])
    assert e.value.code == 2


def test_a_farms_table_and_pas_are_measured_as_the_evaluation_measures_them() -> None:
    w, _ = load_weights(SHIPPED_MODEL)
    config = sample_farm(exact_seeds(3, 0)[1], SMALL)
    farm = TuneFarm.of(0, config)
    x, group, _ = table_features(config)
    scores = np.mean([forward(w, x, group, m) for m in members(w, SMALL_EXPERT)], axis=0)
    policy_table = exact_evaluation(
        PriorityPolicy(config, table=generalist_table(config, weights=w)), config
    )
    assert farm.table_efficiency(scores) == pytest.approx(policy_table.efficiency, rel=1e-12)
    pas = exact_evaluation(PASPolicy(config), config).efficiency
    assert farm.pas_efficiency() == pytest.approx(pas, rel=1e-12)


def test_the_pas_weight_weighs_only_a_table_below_pas() -> None:
    config = sample_farm(exact_seeds(3, 0)[1], SMALL)
    farm = TuneFarm.of(0, config)
    eff = np.log(config.group_efficiency)[farm.group.numpy()]
    for scores, below in ((eff, False), (-eff, True)):  # PAS's order, then its reverse
        assert (farm.table_efficiency(scores) < farm.pas_efficiency()) is below
        log_e, plain = farm_gradient(farm, scores, tau=1.0)
        log_w, weighed = farm_gradient(farm, scores, tau=1.0, pas_weight=10.0)
        assert log_w == log_e
        np.testing.assert_array_equal(weighed, plain * (11.0 if below else 1.0))
