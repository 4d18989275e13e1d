"""The shipped generalist (agents/generalist/models/generalist_table.npz): a small table network
that loads by name, gives every farm a finite, valid priority table, runs at compiled speed, and
on held-out farms is at least PAS (exactly)."""

from __future__ import annotations

import numpy as np
import pytest

from serverfarm_gym.agents.generalist.policy import (
    SHIPPED_MODEL,
    GeneralistPolicy,
    generalist_table,
)
from serverfarm_gym.agents.generalist.table_net import FEATURES, SMALL_EXPERT, load_weights, members
from serverfarm_gym.baselines.pas import PASPolicy
from serverfarm_gym.baselines.priority import check_table
from serverfarm_gym.baselines.registry import make_policy
from serverfarm_gym.envs.farm_sampler import HELD_OUT_SEEDS, sample_farm
from serverfarm_gym.envs.scenarios import load_scenario
from serverfarm_gym.envs.server_farm import ServerFarmEnv
from serverfarm_gym.evaluation.efficiency import measure
from serverfarm_gym.evaluation.exact import exact_solvable
from serverfarm_gym.evaluation.rollout import policy_route


def test_the_model_ships_small_loads_and_is_finite() -> None:
    assert SHIPPED_MODEL.is_file() and SHIPPED_MODEL.stat().st_size < 5 * 2**20
    w, meta = load_weights(SHIPPED_MODEL)
    assert tuple(meta["features"]) == FEATURES
    assert all(np.all(np.isfinite(v)) for v in w.values())
    # small networks: the main network's four and the small-farm expert's ten, 85k each
    assert len(members(w, "")) == 4 and len(members(w, SMALL_EXPERT)) == 10
    assert sum(v.size for v in w.values()) < 1_200_000


@pytest.mark.parametrize("farm", ["paper-100", "overlap-100", "large-10k", "speed-scaling"])
def test_a_valid_table_on_every_farm(farm: str) -> None:
    config = load_scenario(farm)
    policy = make_policy("generalist", config)
    assert isinstance(policy, GeneralistPolicy)
    t = check_table(config, policy.priority_table())  # shape and finiteness
    usable = np.arange(config.max_buffer + 1)[None, :] < config.buffers[:, None]
    assert t[~usable].max(initial=-np.inf) < t[usable].min()  # never above a usable entry
    # server mode runs in the compiled simulator's dispatcher, like PAS
    kind, table = policy_route(policy)
    assert kind == "priority" and np.array_equal(table, t)


def test_a_network_with_no_correction_is_pas() -> None:
    # the prior alone (every weight 0): PAS's table up to a monotone map, so PAS's decisions
    w, _ = load_weights(SHIPPED_MODEL)
    zero = {k: v if k.endswith("blocks.heads") else np.zeros_like(v) for k, v in w.items()}
    for m in members(w, ""):  # each member of the main network: the prior alone
        zero[m + "prior.scale"] = np.ones(1, np.float32)
    for seed in range(HELD_OUT_SEEDS.start + 20, HELD_OUT_SEEDS.start + 26):
        config = sample_farm(seed)
        t = generalist_table(config, weights=zero)
        usable = np.arange(config.max_buffer + 1)[None, :] < config.buffers[:, None]
        eff = np.broadcast_to(config.group_efficiency[:, None], t.shape)
        a, b = np.argwhere(usable).T
        # whenever PAS strictly prefers one group, so does the table; within a group: ties
        hi = eff[a, b][:, None] > eff[a, b][None, :]
        assert np.all((t[a, b][:, None] > t[a, b][None, :])[hi])
        same = a[:, None] == a[None, :]
        assert np.all((t[a, b][:, None] == t[a, b][None, :])[same])


def test_group_mode_respects_the_mask() -> None:
    config = sample_farm(HELD_OUT_SEEDS.start + 11)
    p = make_policy("generalist", config, "group")
    rng = np.random.default_rng(0)
    env = ServerFarmEnv(config, action_mode="group", warmup_epochs=100)
    obs, _ = env.reset(seed=1)
    for _ in range(100):
        m = env.action_masks() & (rng.random(env.action_space.n) < 0.7)  # a thinner mask
        if not m.any():
            m = env.action_masks()
        a, _ = p.predict(obs, action_masks=m)
        assert m[a]
        obs, *_ = env.step(a)


def _held_out_tiny(n: int) -> list:
    """The first ``n`` held-out draws (the evaluation's seeds) of the small-farm stream that the
    exact measure handles in milliseconds."""
    from serverfarm_gym.agents.generalist.labels import SMALL

    out, seed = [], HELD_OUT_SEEDS.start + 10_000_000
    while len(out) < n:
        c = sample_farm(seed, SMALL)
        if exact_solvable(c, 2_000):
            out.append(c)
        seed += 1
    return out


def test_at_least_pas_on_held_out_tiny_farms() -> None:
    # exact stationary efficiencies: no sampling error, so the comparison needs no tolerance
    # beyond float rounding
    for config in _held_out_tiny(3):
        gen = measure(
            GeneralistPolicy(config), config, action_mode="server", method="exact"
        ).efficiency
        pas = measure(PASPolicy(config), config, action_mode="server", method="exact").efficiency
        assert gen >= pas * (1 - 1e-9), (config.name, gen, pas)
    assert generalist_table(config).shape == (config.n_groups, config.max_buffer + 1)


def test_a_large_farm_reads_as_its_twin() -> None:
    # above 200 servers the network reads the ~100-server twin: scaled copies share one table
    base = load_scenario("overlap-100")
    t3, t100 = (generalist_table(base.scaled(f)) for f in (3, 100))
    np.testing.assert_array_equal(t3, t100)
