"""The farm-agnostic token encoding (envs/tokens.py): spaces, exactness against the group mode,
invariances (units, size, group order) and the wrapper's equivalence with the group-mode env."""

from __future__ import annotations

import numpy as np
import pytest

from serverfarm_gym.baselines.registry import make_policy
from serverfarm_gym.envs.config import farm_from_dict
from serverfarm_gym.envs.observation import decode_group_obs
from serverfarm_gym.envs.scenarios import load_preset, random_farm
from serverfarm_gym.envs.server_farm import ServerFarmEnv
from serverfarm_gym.envs.tokens import JOB_FEATURES, TokenEncoding

FARMS = ["tiny", "small-1", "pas-gap", "speed-scaling", "paper-100"]


def _group_env(config, **kw) -> ServerFarmEnv:
    return ServerFarmEnv(config, action_mode="group", warmup_epochs=200, **kw)


def _visited(config, n: int = 200, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Group-mode observations and masks along a random trajectory."""
    env = _group_env(config)
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    X, M = [], []
    for _ in range(n):
        m = env.action_masks()
        X.append(obs)
        M.append(m)
        obs, *_ = env.step(int(rng.choice(np.flatnonzero(m))))
    return np.array(X), np.array(M)


@pytest.mark.parametrize("name", FARMS)
def test_tokens_lie_in_the_space_and_carry_the_histogram(name: str) -> None:
    config = load_preset(name)
    enc = TokenEncoding(config)
    X, _ = _visited(config)
    batch = enc.encode(X)
    for i in range(0, len(X), 37):
        one = enc.encode(X[i])
        assert enc.observation_space.contains(one)
        for key in one:  # the batch path and the single path agree
            np.testing.assert_array_equal(one[key], batch[key][i])
        counts, j = decode_group_obs(config, X[i])
        for k, g in enumerate(config.groups):
            hist = one["groups"][k, : g.buffer + 1]
            np.testing.assert_allclose(hist * g.count, counts[k, : g.buffer + 1], atol=1e-4)
            assert one["groups"][k, enc.feature_names.index("available")] == float(
                config.availability[j, k]
            )
        assert not one["groups"][config.n_groups :].any()  # padding rows are zero
        np.testing.assert_array_equal(one["group_mask"][: config.n_groups], 1.0)
        assert not one["group_mask"][config.n_groups :].any()


@pytest.mark.parametrize("name", FARMS)
def test_masks_and_actions_map_one_to_one(name: str) -> None:
    config = load_preset(name)
    enc = TokenEncoding(config, max_groups=6, max_levels=10)
    _, M = _visited(config, n=50)
    T = enc.masks(M)
    assert T.shape == (len(M), 60)
    for m, t in zip(M, T, strict=True):
        assert t.sum() == m.sum()
        np.testing.assert_array_equal(
            np.sort(enc.to_group_actions(np.flatnonzero(t))), np.flatnonzero(m)
        )
    all_group = np.arange(M.shape[1])
    np.testing.assert_array_equal(
        enc.to_group_actions(enc.from_group_actions(all_group)), all_group
    )
    for k, g in enumerate(config.groups):  # token g * L + b is (group g, level b)
        assert enc.to_group_actions(k * 10 + g.buffer - 1) == sum(config.buffers[:k]) + g.buffer - 1


def test_padded_and_out_of_range_actions_are_refused() -> None:
    enc = TokenEncoding(load_preset("tiny"), max_groups=4, max_levels=5)  # B = 3 in both groups
    for bad in (3, 4, 2 * 5, 4 * 5 - 1):  # levels 3, 4 of group 0; groups 2, 3 (padding)
        with pytest.raises(ValueError, match="padded"):
            enc.to_group_actions(bad)
    for bad in (-1, 20):
        with pytest.raises(ValueError, match=r"lie in \[0, 20\)"):
            enc.to_group_actions(bad)
    with pytest.raises(ValueError, match="integer"):
        enc.to_group_actions(1.5)


def test_limits_are_checked_with_the_fix() -> None:
    config = load_preset("paper-100")
    with pytest.raises(ValueError, match=r"max_groups: .* has \d+ groups, more than max_groups=1"):
        TokenEncoding(config, max_groups=1)
    with pytest.raises(ValueError, match=r"max_levels: .* buffer of \d+, more than max_levels=1;"):
        TokenEncoding(config, max_levels=1)
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match="max_groups: must be an integer >= 1"):
            TokenEncoding(config, max_groups=bad)


def _rescaled(config, time: float, power: float):
    d = config.to_dict()
    for g in d["groups"]:
        for key, c in (("service_rate", time), ("busy_power", power), ("idle_power", power)):
            v = g[key]
            g[key] = [x * c for x in v] if isinstance(v, list) else v * c
    for j in d["job_types"]:
        r = j["arrival_rate"]
        j["arrival_rate"] = [x * time for x in r] if isinstance(r, list) else r * time
    return farm_from_dict(d)


@pytest.mark.parametrize("seed", [1000, 1001, 1002])
def test_units_do_not_change_the_tokens(seed: int) -> None:
    config = random_farm(seed)
    other = _rescaled(config, time=7.0, power=0.01)  # another time and power unit
    X, _ = _visited(config, n=30)
    a, b = TokenEncoding(config).encode(X), TokenEncoding(other).encode(X)
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=1e-5, atol=1e-7)


def test_size_changes_only_the_size_features() -> None:
    config = load_preset("paper-100")
    big = config.scaled(10)
    enc, enc_big = TokenEncoding(config), TokenEncoding(big)
    X, _ = _visited(config, n=5)
    a, b = enc.encode(X), enc_big.encode(X)  # the same fractions on both farms
    one = enc.feature_names.index("one_server")
    keep = [i for i in range(len(enc.feature_names)) if i != one]
    np.testing.assert_allclose(a["groups"][..., keep], b["groups"][..., keep], rtol=1e-6)
    K = config.n_groups
    np.testing.assert_allclose(b["groups"][:, :K, one] * 10, a["groups"][:, :K, one], rtol=1e-6)
    size = JOB_FEATURES.index("farm_size")
    keep_j = [i for i in range(len(JOB_FEATURES)) if i != size]
    np.testing.assert_allclose(a["job"][:, keep_j], b["job"][:, keep_j], rtol=1e-6)
    assert (b["job"][:, size] > a["job"][:, size]).all()


def test_reordering_groups_reorders_the_tokens() -> None:
    config = load_preset("small-1")
    d = config.to_dict()
    d["groups"] = d["groups"][::-1]
    flipped = farm_from_dict(d)
    K = config.n_groups
    enc, enc_f = TokenEncoding(config), TokenEncoding(flipped)
    # the same state: the histogram blocks of the group-mode observation in the other order
    X, _ = _visited(config, n=20)
    off = np.concatenate([[0], np.cumsum(config.buffers + 1)])
    blocks = [X[:, off[k] : off[k + 1]] for k in range(K)]
    Of = np.concatenate([*blocks[::-1], X[:, off[-1] :]], axis=1)
    a, b = enc.encode(X), enc_f.encode(Of)
    np.testing.assert_allclose(
        a["groups"][:, :K], b["groups"][:, K - 1 :: -1] if K else 0, rtol=1e-6
    )
    np.testing.assert_array_equal(a["job"], b["job"])


def test_prices_and_rates_follow_the_schedule() -> None:
    from serverfarm_gym.envs.scenarios import load_scenario

    config = load_scenario("geo-us-eu")
    assert config.is_time_varying
    enc = TokenEncoding(config, max_groups=max(8, config.n_groups))
    price = enc.feature_names.index("price")
    tables = enc._static[:, : config.n_groups, price]
    np.testing.assert_allclose(tables, config.prices / config.prices.max(), rtol=1e-6)
    assert len({tuple(np.round(t, 6)) for t in tables}) > 1  # it changes with the interval


def _token_env(config, **kw) -> ServerFarmEnv:
    return ServerFarmEnv(config, action_mode="group", obs_mode="tokens", warmup_epochs=200, **kw)


def test_token_mode_is_the_group_env_in_token_actions() -> None:
    config = load_preset("pas-gap")
    pas = make_policy("pas", config, "group")
    group_env = _group_env(config)
    token_env = _token_env(config)
    enc = token_env.tokens
    obs_g, _ = group_env.reset(seed=3)
    obs_t, info_t = token_env.reset(seed=3)
    for _ in range(300):
        a, _ = pas.predict(obs_g, action_masks=group_env.action_masks())
        np.testing.assert_array_equal(token_env.action_masks(), enc.masks(group_env.action_masks()))
        np.testing.assert_array_equal(info_t["action_mask"], token_env.action_masks())
        obs_g, r_g, *_, info_g = group_env.step(a)
        obs_t, r_t, *_, info_t = token_env.step(enc.from_group_actions(a))
        assert r_t == r_g and info_t["efficiency"] == info_g["efficiency"]
        for key, v in enc.encode(obs_g).items():
            np.testing.assert_array_equal(obs_t[key], v)
    with pytest.raises(ValueError, match=r"not in the action space Discrete\(128\)"):
        token_env.step(10**6)
    raising = _token_env(config, invalid_action="raise")
    raising.reset(seed=0)
    with pytest.raises(ValueError, match="padded"):
        raising.step(enc.max_levels - 1)  # group 0, level max_levels - 1: beyond its buffer


def test_a_padded_action_falls_back_like_a_masked_one() -> None:
    """With invalid_action="fallback" a padded slot sends the job where PAS would, exactly as the
    group env does with one of its own masked actions."""
    config = load_preset("pas-gap")
    group_env, token_env = _group_env(config), _token_env(config)
    enc = token_env.tokens
    group_env.reset(seed=5)
    token_env.reset(seed=5)
    padded = np.flatnonzero(enc._to_group < 0)
    fallbacks = 0
    for t in range(400):
        m = group_env.action_masks()
        masked = np.flatnonzero(m == 0)  # int8 masks: ~ would be bitwise
        if len(masked) and t % 3 == 0:
            a_g, a_t = int(masked[0]), int(padded[t % len(padded)])
            fallbacks += 1
        else:
            a_g = int(np.flatnonzero(m)[0])
            a_t = enc.from_group_actions(a_g)
        obs_g, r_g, *_, info_g = group_env.step(a_g)
        obs_t, r_t, *_, info_t = token_env.step(a_t)
        assert r_t == r_g and info_t["invalid_action"] == info_g["invalid_action"]
        for key, v in enc.encode(obs_g).items():
            np.testing.assert_array_equal(obs_t[key], v)
    assert fallbacks > 50


def test_token_mode_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="use action_mode='group'"):
        ServerFarmEnv("tiny", obs_mode="tokens")
    with pytest.raises(ValueError, match="obs_mode: 'server' with action_mode='group'"):
        ServerFarmEnv("tiny", action_mode="group", obs_mode="server")
    with pytest.raises(ValueError, match="max_levels: the farm 'paper-100' has a buffer"):
        _token_env(load_preset("paper-100"), max_levels=2)


def test_token_mode_passes_gymnasium_checks_and_makes() -> None:
    import gymnasium as gym
    from gymnasium.utils.env_checker import check_env

    check_env(_token_env(load_preset("tiny")), skip_render_check=True)
    env = gym.make("ServerFarmTokens-v0", scenario="small-1", max_groups=4, max_levels=4)
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs) and env.action_space.n == 16
    np.testing.assert_array_equal(info["action_mask"], env.unwrapped.action_masks())
