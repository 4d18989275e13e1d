"""PDR+PAS (baselines/pdr_pas.py) and the interval-aware price-aware PAS on the geo preset.

Frequencies are checked against binomial confidence intervals: with n draws of a cluster of
probability p the count is Binomial(n, p), so |count - n p| <= 5 sqrt(n p (1 - p)) fails with
probability < 1e-6 per check (fixed seeds make the tests deterministic anyway).
"""

from __future__ import annotations

import numpy as np
import pytest

from serverfarm_gym.baselines.pas import PASPolicy, PriceAwarePASPolicy
from serverfarm_gym.baselines.pdr_pas import PDRPASPolicy
from serverfarm_gym.baselines.registry import make_policy
from serverfarm_gym.baselines.solvers.pdr import routing_probabilities, solve_interval
from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.observation import (
    counts_from_occupancy,
    hist_offsets,
    n_interval_features,
    obs_size,
)
from serverfarm_gym.envs.scenarios import load_scenario
from serverfarm_gym.evaluation.rollout import rollout
from tests.helpers.env import valid_group_mask, valid_server_mask

Z = 5.0  # sigmas


@pytest.fixture(scope="module")
def geo_farm() -> FarmConfig:
    return load_scenario("geo-us-eu")


_CACHE: dict[str, PDRPASPolicy] = {}


def pdr(config: FarmConfig, mode: str = "server", seed: int = 0) -> PDRPASPolicy:
    """The policy for ``mode``, built once per module (0.5-1 s of LPs) and re-seeded."""
    if mode not in _CACHE:
        _CACHE[mode] = PDRPASPolicy(config, mode)
    pol = _CACHE[mode]
    pol.reset(seed=seed)
    return pol


@pytest.fixture(scope="module")
def pdr_server(geo_farm: FarmConfig) -> PDRPASPolicy:
    return pdr(geo_farm)


def obs_of(config: FarmConfig, occ: np.ndarray, j: int, t: int, mode: str = "server") -> np.ndarray:
    """The env's observation for occupancy ``occ``, arriving type ``j``, interval ``t``."""
    obs = np.zeros(obs_size(config, mode), dtype=np.float32)
    if mode == "server":
        base = config.n_servers
        obs[:base] = occ / config.buffers[config.server_group]
    else:
        counts = counts_from_occupancy(config, occ)
        off = hist_offsets(config)
        base = int(off[-1])
        for k, g in enumerate(config.groups):
            obs[off[k] : off[k + 1]] = counts[k, : g.buffer + 1] / g.count
    if n_interval_features(config):
        obs[base + t] = 1.0
    obs[-config.n_job_types + j] = 1.0
    return obs


def cluster_of_server(config: FarmConfig) -> np.ndarray:
    return config.geo.cluster_of_farm_group()[config.server_group]


def fill_clusters(config: FarmConfig, clusters: list[int]) -> np.ndarray:
    """Occupancy with every server of ``clusters`` full, the others empty."""
    full = np.isin(cluster_of_server(config), clusters)
    return np.where(full, config.buffers[config.server_group], 0).astype(np.int64)


def draw(policy: PDRPASPolicy, obs: np.ndarray, mask: np.ndarray, n: int) -> np.ndarray:
    acts, _ = policy.predict(
        np.repeat(obs[None], n, axis=0), action_masks=np.repeat(mask[None], n, 0)
    )
    return acts


def assert_binomial(counts: np.ndarray, p: np.ndarray, n: int) -> None:
    sd = np.sqrt(n * p * (1 - p))
    assert np.all(np.abs(counts - n * p) <= Z * sd + 1e-9), (counts, n * p, sd)


# ---------------------------------------------------------------------------------------------
def test_needs_a_geo_scenario() -> None:
    with pytest.raises(ValueError, match="pdr-pas needs a geo scenario"):
        make_policy("pdr-pas", "tiny")


def test_probabilities_are_the_lp_split(geo_farm: FarmConfig, pdr_server: PDRPASPolicy) -> None:
    geo = geo_farm.geo
    P = pdr_server.probabilities
    assert P.shape == (geo.n_intervals, geo.n_ingress, geo.n_clusters)
    np.testing.assert_allclose(P.sum(axis=2), 1.0, atol=1e-12)
    for t in (0, 9, 17):
        np.testing.assert_allclose(P[t], routing_probabilities(solve_interval(geo, t)), atol=1e-9)
    assert make_policy("pdr-pas", geo_farm).builtin is None


@pytest.mark.parametrize("mode", ["server", "group"])
@pytest.mark.parametrize(("t", "i"), [(9, 1), (17, 3), (0, 3)])
def test_routing_frequencies_match_the_plan(
    geo_farm: FarmConfig, mode: str, t: int, i: int
) -> None:
    c = geo_farm
    pol = pdr(c, mode, seed=11)
    occ = np.zeros(c.n_servers, dtype=np.int64)
    obs = obs_of(c, occ, i, t, mode)
    mask = valid_server_mask(c, occ, i) if mode == "server" else valid_group_mask(c, occ, i)
    n = 10_000
    acts = draw(pol, obs, mask, n)
    cl_of_act = pol._act_cluster
    counts = np.bincount(cl_of_act[acts], minlength=c.geo.n_clusters)
    p = pol.probabilities[t, i]
    assert_binomial(counts, p, n)
    # inside the chosen cluster the decision is PAS's, restricted to that cluster
    pas = PASPolicy(c, mode)
    for j in np.flatnonzero(counts):
        expect = int(pas.predict(obs, action_masks=mask & (cl_of_act == j))[0])
        assert set(acts[cl_of_act[acts] == j].tolist()) == {expect}


def test_full_cluster_share_is_renormalised(geo_farm: FarmConfig, pdr_server: PDRPASPolicy) -> None:
    c, t, i = geo_farm, 9, 1  # na-west at 09 UTC: us-east, us-central, us-west all planned
    p = pdr_server.probabilities[t, i]
    assert (p[:3] > 0.05).all()
    occ = fill_clusters(c, [1])  # us-central full
    obs, mask = obs_of(c, occ, i, t), valid_server_mask(c, occ, i)
    n = 10_000
    acts = draw(pdr(c, seed=3), obs, mask, n)
    counts = np.bincount(cluster_of_server(c)[acts], minlength=5)
    q = p * np.array([1, 0, 1, 1, 1])
    assert counts[1] == 0
    assert_binomial(counts, q / q.sum(), n)


@pytest.mark.parametrize("mode", ["server", "group"])
def test_fallback_to_pas_when_planned_clusters_are_full(geo_farm: FarmConfig, mode: str) -> None:
    c = geo_farm
    pol = pdr(c, mode, seed=5)
    pas = PASPolicy(c, mode)
    for t, i, full in [(0, 4, [2]), (9, 1, [0, 1, 2]), (17, 3, [0, 3, 4])]:
        p = pol.probabilities[t, i]
        assert set(np.flatnonzero(p > 0)) <= set(full)  # every planned cluster is full
        occ = fill_clusters(c, full)
        obs = obs_of(c, occ, i, t, mode)
        mask = valid_server_mask(c, occ, i) if mode == "server" else valid_group_mask(c, occ, i)
        assert mask.any()
        assert not pol.cluster_probabilities(obs, mask).any()
        acts = draw(pol, obs, mask, 50)
        expect = int(pas.predict(obs, action_masks=mask)[0])
        assert set(acts.tolist()) == {expect}
        assert pol._act_cluster[expect] not in full


@pytest.mark.parametrize("mode", ["server", "group"])
def test_masks_respected(geo_farm: FarmConfig, mode: str) -> None:
    c = geo_farm
    rng = np.random.default_rng(2)
    pol = pdr(c, mode, seed=9)
    bufs = c.buffers[c.server_group]
    for _ in range(300):
        occ = rng.integers(0, bufs + 1)
        i, t = int(rng.integers(c.n_job_types)), int(rng.integers(c.n_intervals))
        valid = valid_server_mask(c, occ, i) if mode == "server" else valid_group_mask(c, occ, i)
        mask = valid & (rng.random(valid.shape) < 0.3)  # the env's mask, or a stricter one
        if not mask.any():
            continue
        a = int(pol.predict(obs_of(c, occ, i, t, mode), action_masks=mask)[0])
        assert mask[a]


def test_seeded_and_sampled_even_when_deterministic(geo_farm: FarmConfig) -> None:
    c, t, i = geo_farm, 9, 1
    occ = np.zeros(c.n_servers, dtype=np.int64)
    obs, mask = obs_of(c, occ, i, t), valid_server_mask(c, occ, i)
    a = draw(PDRPASPolicy(c, seed=4), obs, mask, 200)
    b = draw(PDRPASPolicy(c, seed=4), obs, mask, 200)
    np.testing.assert_array_equal(a, b)
    assert len(set(a.tolist())) == 3  # deterministic=True (the default) still draws clusters
    pol = PDRPASPolicy(c, seed=4)
    pol.reset(seed=4)
    np.testing.assert_array_equal(draw(pol, obs, mask, 200), a)


def test_interval_is_read_from_the_observation(geo_farm: FarmConfig) -> None:
    c = geo_farm
    pol = pdr(c, seed=1)
    occ = np.zeros(c.n_servers, dtype=np.int64)
    mask = valid_server_mask(c, occ, 1)
    cl = cluster_of_server(c)
    for t in (0, 9):
        acts = draw(pol, obs_of(c, occ, 1, t), mask, 400)
        used = set(np.unique(cl[acts]).tolist())
        assert used == set(np.flatnonzero(pol.probabilities[t, 1] > 0).tolist())
    fixed = PDRPASPolicy(c, seed=1, interval=9)
    acts = draw(fixed, obs_of(c, occ, 1, 0), mask, 400)
    assert set(np.unique(cl[acts]).tolist()) == {0, 1, 2}


def test_env_rollout_has_no_invalid_actions(geo_farm: FarmConfig) -> None:
    for mode in ("server", "group"):
        res = rollout(pdr(geo_farm, mode), geo_farm, horizon=2000, seed=1)
        assert res.invalid_actions == 0
        assert res.stats.epochs == 2000


# ---------------------------------------------------------------------------------------------
# price-aware PAS that follows the interval
# ---------------------------------------------------------------------------------------------
def test_price_aware_pas_follows_the_interval(geo_farm: FarmConfig) -> None:
    c = geo_farm
    auto = make_policy("pas-price", c)
    assert auto.follows_interval and auto.builtin is None
    with pytest.raises(ValueError, match="no single table"):
        auto.priority_table()
    rng = np.random.default_rng(0)
    fixed = [PriceAwarePASPolicy(c, interval=t) for t in range(c.n_intervals)]
    rankings = {tuple(np.argsort(-f.table[:, 0])) for f in fixed}
    assert len(rankings) > 1  # the preset's prices do reorder the groups during the day
    obs_b, mask_b, expect = [], [], []
    for _ in range(200):
        occ = rng.integers(0, c.buffers[c.server_group] + 1)
        i, t = int(rng.integers(c.n_job_types)), int(rng.integers(c.n_intervals))
        mask = valid_server_mask(c, occ, i)
        if not mask.any():
            continue
        obs = obs_of(c, occ, i, t)
        obs_b.append(obs)
        mask_b.append(mask)
        expect.append(int(fixed[t].predict(obs, action_masks=mask)[0]))
    got = auto.predict(np.array(obs_b), action_masks=np.array(mask_b))[0]  # batched, mixed t
    np.testing.assert_array_equal(got, expect)
    # an explicit interval keeps the fixed (built-in) ranking
    assert fixed[3].builtin == "priority" and not fixed[3].follows_interval


def test_price_aware_pas_constant_scenario_unchanged() -> None:
    c = load_scenario("small-1")
    pol = make_policy("pas-price", c)
    assert pol.builtin == "priority" and not pol.follows_interval
    np.testing.assert_array_equal(pol.priority_table(), PriceAwarePASPolicy(c, interval=0).table)
