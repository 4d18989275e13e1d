"""serverfarm_gym.agents.common.farm_settings: the rules that derive training settings from a farm (presets and random
farms a user might bring), their reasons, and their precedence below the files in train.py."""

from __future__ import annotations

import math

import pytest

from serverfarm_gym.agents.common.farm_settings import RULES, Rules, derive_settings, policy_warmup
from serverfarm_gym.envs.config import farm_from_dict
from serverfarm_gym.envs.observation import n_actions
from serverfarm_gym.envs.scenarios import PRESETS, load_scenario, random_farm
from serverfarm_gym.evaluation.exact import exact_solvable, exact_unsupported_reason
from serverfarm_gym.evaluation.policy_report import epochs_per_duration

FARMS = [load_scenario(p) for p in PRESETS] + [random_farm(s) for s in (1000, 1001, 1002, 1003)]


@pytest.mark.parametrize("config", FARMS, ids=lambda c: c.name)
def test_every_setting_has_a_reason_and_a_valid_value(config):
    st = derive_settings(config)
    args = st.as_args()
    assert set(st.reasons) == set(args), "one reason per setting"
    assert all(isinstance(r, str) and r for r in st.reasons.values())
    assert st.action_mode in ("server", "group")
    assert 0.0 < st.gamma < 1.0 and 0.0 <= st.gae_lambda <= 1.0
    per = st.n_envs * st.n_steps
    assert st.batch_size <= per
    # whole rollouts, within the budget's bounds (rounded up to a rollout)
    for k in ("total_timesteps", "eval_freq", "checkpoint_freq"):
        assert args[k] % per == 0, k
    assert RULES.min_total_timesteps <= st.total_timesteps < RULES.max_total_timesteps + per
    assert st.eval_freq <= st.total_timesteps
    floor = math.ceil(RULES.min_window_durations * epochs_per_duration(config))
    assert max(RULES.eval_min_epochs, floor) <= st.eval_epochs
    assert st.eval_epochs <= max(RULES.eval_max_epochs, floor)
    assert st.eval_epochs <= st.final_eval_epochs <= max(RULES.final_eval_max_epochs, floor)
    assert RULES.warmup_min_epochs <= st.warmup_epochs <= RULES.warmup_max_epochs
    assert policy_warmup(config) >= max(
        100, RULES.policy_warmup_durations * epochs_per_duration(config)
    )
    assert 4 <= st.eval_replications <= RULES.eval_replications


@pytest.mark.parametrize("config", FARMS, ids=lambda c: c.name)
def test_action_mode_rule(config):
    st = derive_settings(config)
    expected = "server" if config.n_servers <= RULES.server_actions_max_servers else "group"
    assert st.action_mode == expected
    assert str(n_actions(config, expected)) in st.reasons["action_mode"]
    # a mode given by the user is kept, and the rest follows from it
    other = "group" if expected == "server" else "server"
    given = derive_settings(config, other)
    assert given.action_mode == other and given.reasons["action_mode"] == "given"
    with pytest.raises(ValueError, match="action"):
        derive_settings(config, "servers")


@pytest.mark.parametrize("config", FARMS, ids=lambda c: c.name)
def test_discount_is_a_fixed_horizon_in_model_time(config):
    """gamma = 1 - 1 / (H x epochs per duration): the effective horizon 1 / (1 - gamma) in
    decisions, divided by the decisions per mean job duration, is H durations on every farm
    (of the farm trained on: a large farm's scaled-down twin)."""
    st = derive_settings(config)
    trained_on = config if st.train_scale == 1 else config.scaled_down(st.train_scale)
    horizon_durations = 1.0 / (1.0 - st.gamma) / epochs_per_duration(trained_on)
    assert horizon_durations == pytest.approx(RULES.horizon_durations, rel=1e-9)
    assert st.epochs_per_duration == pytest.approx(epochs_per_duration(config))


def test_larger_farms_get_a_discount_closer_to_one_and_more_steps():
    tiny, paper, large = (derive_settings(load_scenario(s)) for s in
                          ("tiny", "paper-100", "large-10k"))  # fmt: skip
    assert tiny.gamma == pytest.approx(0.9)
    assert tiny.gamma < paper.gamma < large.gamma < 1.0
    assert tiny.total_timesteps < paper.total_timesteps <= large.total_timesteps


@pytest.mark.parametrize("config", FARMS, ids=lambda c: c.name)
def test_evaluation_method_is_exact_exactly_when_the_chain_is_small(config):
    st = derive_settings(config)
    small = exact_unsupported_reason(config) is None
    assert st.eval_exact == small
    if (
        config.n_servers <= 10
    ):  # the state count prints: compare with serverfarm_gym.evaluation.exact's check
        assert small == exact_solvable(config)
    if st.eval_exact:
        assert st.eval_freq == st.n_envs * st.n_steps, "exact evaluations after every rollout"
    else:
        assert "states" in st.reasons["eval_exact"] or "exponential" in st.reasons["eval_exact"]
        assert st.eval_freq >= st.n_envs * st.n_steps


def test_windows_are_in_mean_job_durations_capped_in_epochs():
    paper = load_scenario("paper-100")
    st = derive_settings(paper)
    epd = epochs_per_duration(paper)
    assert st.eval_epochs == math.ceil(RULES.eval_durations * epd)
    assert st.final_eval_epochs == math.ceil(RULES.final_eval_durations * epd)
    assert st.eval_replications == RULES.eval_replications
    large_farm = load_scenario("large-10k")
    large = derive_settings(large_farm)
    ten = math.ceil(RULES.min_window_durations * epochs_per_duration(large_farm))
    # the in-training cap would give 1.7 durations: the 10-duration floor wins
    assert large.eval_epochs == ten
    # the final window: 100 durations (1.2M epochs) capped at 1M, about 84 durations
    assert large.final_eval_epochs == RULES.final_eval_max_epochs == 1_000_000
    assert large.warmup_epochs == math.ceil(
        RULES.warmup_durations * epochs_per_duration(large_farm)
    )
    assert large.eval_replications == 4  # 16 would exceed the evaluation's epoch budget
    assert "about 10^" in large.reasons["eval_exact"]  # the huge state count is not printed in full


def test_rules_are_one_place_to_retune():
    rules = Rules(server_actions_max_servers=10, horizon_durations=2.0, advantage="average",
                  init="random", init_simulated="pas")  # fmt: skip
    st = derive_settings(load_scenario("pas-gap"), rules=rules)
    assert st.action_mode == "server"  # 6 servers <= 10
    assert st.advantage == "average" and st.init == "random"
    assert 1.0 / (1.0 - st.gamma) == pytest.approx(
        2.0 * epochs_per_duration(load_scenario("pas-gap"))
    )
    with pytest.raises(ValueError, match=r"rules\.init"):
        derive_settings(load_scenario("tiny"), rules=Rules(init="clone"))


def test_non_exponential_farm_is_simulated():
    cfg = random_farm(1004, job_size={"distribution": "deterministic"})
    st = derive_settings(cfg)
    assert not st.eval_exact and "exponential" in st.reasons["eval_exact"]


def test_describe_marks_overridden_settings():
    st = derive_settings(load_scenario("tiny"))
    lines = st.describe({"gamma": (0.95, "command line")})
    assert any(line.startswith("  gamma = 0.95  (command line; derived 0.9") for line in lines)
    assert len(lines) == len(st.as_args())


def test_large_farms_train_on_a_scaled_down_twin():
    """A group network fits every size of a farm: above 480 decisions per mean job duration the
    farm trains on its twin scaled down to about 120 (an exact twin where a factor divides every
    count); smaller farms and per-server actions train on the farm itself."""
    large = load_scenario("large-10k")  # counts 3000, 2500, 2000, 1500, 1000: gcd 500
    st = derive_settings(large)
    assert st.train_scale == 50 and "exact" in st.reasons["train_scale"]
    twin = large.scaled_down(50)
    assert [g.count for g in twin.groups] == [g.count // 50 for g in large.groups]
    assert (
        RULES.twin_epochs_per_duration
        <= epochs_per_duration(twin)
        <= 2 * (RULES.twin_epochs_per_duration)
    )
    assert derive_settings(large, "server").train_scale == 1
    for name in ("paper-100", "overlap-100", "tiny"):
        assert derive_settings(load_scenario(name)).train_scale == 1
    # no common divisor: counts rounded, and said so
    odd = large.to_dict()
    odd["groups"][0]["count"] = 2999
    st = derive_settings(farm_from_dict(odd))
    assert st.train_scale == 99 and "rounded" in st.reasons["train_scale"]


def test_scaled_down_inverts_scaled():
    tiny = load_scenario("tiny")
    back = tiny.scaled(7).scaled_down(7)
    assert [g.count for g in back.groups] == [g.count for g in tiny.groups]
    assert [j.arrival_rate[0] for j in back.job_types] == pytest.approx(
        [j.arrival_rate[0] for j in tiny.job_types]
    )
    with pytest.raises(ValueError, match="scale factor"):
        tiny.scaled_down(0)


def test_init_is_random_on_exact_farms_and_best_priority_on_simulated_farms():
    st = derive_settings(load_scenario("tiny"))
    assert st.init == "random" and "exactly evaluated farm" in st.reasons["init"]
    assert derive_settings(load_scenario("tiny"), rules=Rules(init="pas")).init == "pas"
    st = derive_settings(load_scenario("paper-100"))
    assert st.init == "best-priority" and "simulated farm" in st.reasons["init"]
    assert (
        derive_settings(load_scenario("paper-100"), rules=Rules(init_simulated="pas")).init == "pas"
    )
    with pytest.raises(ValueError, match=r"rules\.init_simulated"):
        derive_settings(load_scenario("tiny"), rules=Rules(init_simulated="whittle"))


def test_time_varying_farms_are_measured_over_whole_cycles():
    geo = load_scenario("geo-us-eu")  # 24 hourly intervals: one day is ~226,000 decisions
    cycle = geo.n_intervals * geo.interval_length * geo.total_arrival_rate
    st = derive_settings(geo)
    assert not st.eval_exact
    assert st.eval_epochs >= cycle and st.final_eval_epochs >= cycle
    assert "one cycle of the schedule" in st.reasons["eval_epochs"]
    assert st.eval_replications == 4  # the evaluation's epoch budget


def test_a_farm_with_an_slo_derives_the_start_training_clones() -> None:
    """``init`` of a farm with ``slo:`` is what serverfarm_gym.agents.ppo.slo.slo_teacher clones: the exact
    SLO-constrained optimum where the aggregated chain is solved, else slo-mix; with its reason."""
    from serverfarm_gym.agents.common.farm_settings import slo_init

    farm = load_scenario("tiny-slo")
    st = derive_settings(farm)
    assert st.init == "slo-optimal" and "SLO-constrained optimum" in st.reasons["init"]
    assert "unused with an SLO" in st.reasons["pas_confidence"]
    assert derive_settings(farm, "group").init == "slo-optimal"
    erlang = farm.with_job_size({"distribution": "erlang", "k": 3})  # no exact chain
    assert derive_settings(erlang).init == slo_init(erlang, "server") == "slo-mix"
    assert derive_settings(load_scenario("tiny")).init == "random"  # no SLO: the rules'


@pytest.mark.parametrize(
    "name", ["tiny", "small-1", "small-2", "small-3", "pas-gap", "speed-scaling"]
)
def test_exact_farms_train_the_average_reward_from_random(name):
    """Exactly evaluated farms without an SLO: the average-reward advantage (no horizon bias,
    serverfarm_gym.agents.ppo.criterion), a random start, the rollout and budget of the from-scratch study
    (serverfarm_gym.agents.ppo.config.recommended's small-farm settings, docs/learning.md)."""
    from serverfarm_gym.agents.ppo.config import recommended

    config = load_scenario(name)
    st = derive_settings(config)
    rec = recommended(config)
    assert (st.advantage, st.init, st.eval_exact) == ("average", "random", True)
    assert (st.n_envs, st.n_steps, st.batch_size, st.n_epochs) == tuple(
        rec[k] for k in ("n_envs", "n_steps", "batch_size", "n_epochs")
    )
    assert rec["advantage"] == "average"
    assert st.total_timesteps == RULES.exact_total_timesteps <= 200_000


@pytest.mark.parametrize("name", ["paper-100", "tiny-slo"])
def test_simulated_and_slo_farms_keep_the_discount(name):
    st = derive_settings(load_scenario(name))
    assert st.advantage == "discounted" and st.init != "random"
    assert (st.n_steps, st.batch_size) == (RULES.n_steps, RULES.batch_size)
