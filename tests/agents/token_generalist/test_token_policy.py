"""The token network's policy (agents/token_generalist/token_policy.py): one network acting on any farm in both action modes,
a multi-farm PPO trainer that starts from PAS, and weight-only files."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from serverfarm_gym.agents.token_generalist import (  # noqa: E402
    GeneralistConfig,
    GeneralistTrainer,
    TokenGeneralistPolicy,
)
from serverfarm_gym.baselines.pas import PASPolicy  # noqa: E402
from serverfarm_gym.envs.farm_sampler import HELD_OUT_SEEDS, sample_farm  # noqa: E402
from serverfarm_gym.envs.observation import decode_group_action  # noqa: E402
from serverfarm_gym.envs.server_farm import ServerFarmEnv  # noqa: E402

SMALL = {"n_servers": [2, 40]}  # small farms keep the smoke runs short


def _trainer(**kw) -> GeneralistTrainer:
    base = dict(farms=2, envs_per_farm=4, n_steps=16, batch_size=64, n_epochs=2, anchor=0.0,
                clone_farms=3, clone_steps=32, clone_epochs=4, distribution=SMALL)  # fmt: skip
    return GeneralistTrainer(GeneralistConfig(**(base | kw)))


@pytest.mark.parametrize("seed", [HELD_OUT_SEEDS.start + i for i in range(4)])
def test_server_mode_picks_the_group_and_level_of_group_mode(seed: int) -> None:
    config = sample_farm(seed, GeneralistConfig(distribution=SMALL).farm_distribution())
    net = _trainer().net.eval()
    kw = dict(net=net, max_groups=8, max_levels=8)
    by_group = TokenGeneralistPolicy(config, "group", **kw)
    by_server = TokenGeneralistPolicy(config, "server", **kw)
    genv = ServerFarmEnv(config, action_mode="group", warmup_epochs=300)
    senv = ServerFarmEnv(config, action_mode="server", warmup_epochs=300)
    og, _ = genv.reset(seed=1)
    os_, _ = senv.reset(seed=1)
    for _ in range(100):
        ag, _ = by_group.predict(og, action_masks=genv.action_masks())
        as_, _ = by_server.predict(os_, action_masks=senv.action_masks())
        k, b = decode_group_action(config, int(ag))
        assert config.server_group[int(as_)] == k and senv.unwrapped.sim.occ[int(as_)] == b
        # the smallest allowed server of that (group, level): what the group env dispatches to
        assert int(as_) == senv.unwrapped.sim.server_at_level(k, b)
        og, rg, *_ = genv.step(ag)
        os_, rs, *_ = senv.step(as_)
        assert rg == pytest.approx(rs, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("seed", [HELD_OUT_SEEDS.start + i for i in range(6)])
def test_the_untrained_anchored_network_is_pas_in_both_modes(seed: int) -> None:
    """anchor > 0: the logit head starts at zero, so the deterministic decisions are PAS's own:
    group-mode PAS in group mode, server-mode PAS (smallest-index vacancy) in server mode."""
    config = sample_farm(seed)
    net = _trainer(anchor=4.0, clone_farms=0).net.eval()
    kw = dict(net=net, max_groups=8, max_levels=8)
    rng = np.random.default_rng(seed)
    for mode in ("group", "server"):
        gen, pas = TokenGeneralistPolicy(config, mode, **kw), PASPolicy(config, mode)
        env = ServerFarmEnv(config, action_mode=mode, warmup_epochs=200)
        obs, _ = env.reset(seed=seed)
        for _ in range(150):
            m = env.action_masks()
            a, _ = gen.predict(obs, action_masks=m)
            assert a == pas.predict(obs, action_masks=m)[0]
            # move on by a random valid action too, so the states are not only PAS's own
            obs, *_ = env.step(rng.choice(np.flatnonzero(m)) if rng.random() < 0.5 else a)


def test_anchored_training_runs_and_keeps_its_anchor(tmp_path) -> None:
    tr = _trainer(anchor=4.0, clone_farms=0)
    tr.learn(2 * 16 * 2 * 4)
    assert all(np.isfinite(h["policy"]) for h in tr.history)
    path = tr.save(tmp_path / "a")
    loaded, meta = TokenGeneralistPolicy.load_net(path)
    assert loaded.cfg.anchor == 4.0 and meta["trainer_config"]["anchor"] == 4.0


def test_training_starts_from_pas_and_files_hold_only_weights(tmp_path) -> None:
    tr = _trainer()
    clone = tr.clone_pas()
    assert clone["samples"] == 3 * 4 * 32 and clone["accuracy"] > 0.8
    tr.learn(2 * 16 * 2 * 4)
    assert [h["timesteps"] for h in tr.history] == [128, 256]
    assert all(np.isfinite(h["policy"]) and np.isfinite(h["value"]) for h in tr.history)
    path = tr.save(tmp_path / "g")
    config = sample_farm(HELD_OUT_SEEDS.start + 9)
    loaded = TokenGeneralistPolicy(config, "group", model=path)
    mine = tr.policy(config, "group")
    env = ServerFarmEnv(config, action_mode="group", warmup_epochs=200)
    obs, _ = env.reset(seed=0)
    for _ in range(50):
        m = env.action_masks()
        a, _ = loaded.predict(obs, action_masks=m)
        assert a == mine.predict(obs, action_masks=m)[0] and m[a]
        obs, *_ = env.step(a)
    (tmp_path / "bad.pt").write_bytes(path.read_bytes()[:100])
    (tmp_path / "bad.json").write_text(path.with_suffix(".json").read_text())
    with pytest.raises(ValueError, match=r"cannot load the weights of .*bad\.pt"):
        TokenGeneralistPolicy(config, model=tmp_path / "bad.pt")
    with pytest.raises(ValueError, match="and its sidecar"):
        TokenGeneralistPolicy(config, model=tmp_path / "missing.pt")


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="beyond max_groups=4"):
        GeneralistConfig(max_groups=4).check()
    with pytest.raises(ValueError, match="farms: must be >= 1"):
        GeneralistConfig(farms=0).check()
    with pytest.raises(ValueError, match="clone_farms: must be >= 0"):
        GeneralistConfig(clone_farms=-1).check()
