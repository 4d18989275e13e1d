"""train.py and agents/: smoke training, save/load, resume, masks, the predict contract, settings.

Budgets are tiny (a few hundred timesteps) so the whole file runs in well under a minute.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sb3_contrib")

import train
from serverfarm_gym.agents.common.checkpoints import latest_checkpoint, save_model_atomic
from serverfarm_gym.agents.common.farm_settings import derive_settings
from serverfarm_gym.agents.ppo import PPOAgent, model_predictor, write_sidecar
from serverfarm_gym.agents.ppo_sb3.wrappers import TrainingWrapper
from serverfarm_gym.envs import ServerFarmEnv, load_scenario
from serverfarm_gym.evaluation.efficiency import Window, measure, replication_seeds

# exact efficiencies (serverfarm_gym.baselines.solvers.ctmc / reference-farms.yaml), copied here on purpose
TINY_PAS = 0.3273379092816369

FAST = [
    "--trainer", "sb3",
    "--n-envs", "2", "--n-steps", "64", "--batch-size", "64", "--n-epochs", "2",
    "--net-arch", "16,16", "--eval-freq", "128", "--checkpoint-freq", "128",
    "--final-eval-epochs", "500", "--no-progress-bar", "--no-tensorboard",
    "--hyperparams", "none",
]  # fmt: skip


def run(tmp: Path, *extra: str) -> dict:
    return train.main([*FAST, "--output-dir", str(tmp), *extra])


def untrained_model(scenario: str = "tiny", action_mode: str = "server", seed: int = 0):
    from sb3_contrib import MaskablePPO

    env = TrainingWrapper(ServerFarmEnv(scenario, action_mode=action_mode))
    return MaskablePPO(
        "MlpPolicy", env, n_steps=64, batch_size=64, seed=seed, device="cpu",
        policy_kwargs={"net_arch": [16, 16]},
    )  # fmt: skip


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("smoke")
    return out, run(out, "--total-timesteps", "256")


def test_smoke_training_writes_everything(smoke_run):
    out, summary = smoke_run
    assert summary["timesteps"] == 256
    for name in ("args.json", "summary.json", "final_model.zip", "final_model.json",
                 "best_model.zip", "best_model.json", "evaluations.jsonl", "references.json"):  # fmt: skip
        assert (out / name).exists(), name
    on_disk = json.loads((out / "summary.json").read_text())
    assert on_disk["timesteps"] == 256 and on_disk["seed"] == 0
    assert set(on_disk["versions"]) >= {"torch", "stable_baselines3", "sb3_contrib", "numpy"}
    # tiny is solved exactly: PAS and the learned policy are exact numbers
    assert on_disk["references"]["pas"]["method"] == "exact"
    assert on_disk["references"]["pas"]["efficiency"] == pytest.approx(TINY_PAS, rel=1e-12)
    assert on_disk["best"]["method"] == "exact"
    assert 0.2 < on_disk["best"]["efficiency"] < 0.34
    hist = [json.loads(line) for line in (out / "evaluations.jsonl").read_text().splitlines()]
    steps = [h["timesteps"] for h in hist]
    assert steps[0] == 0 and steps[-1] == 256 and steps == sorted(steps)
    assert all("gap_to_pas_pct" in h for h in hist)
    assert latest_checkpoint(out / "checkpoints")[1] == 256


def test_saved_model_loads_with_its_config(smoke_run):
    out, _ = smoke_run
    agent = PPOAgent.load(out / "final_model.zip")
    assert agent.config.name == "tiny" and agent.action_mode == "server"
    assert agent.meta["train_args"]["n_envs"] == 2
    # a run directory loads its best model
    assert PPOAgent.load(out).config.to_dict() == load_scenario("tiny").to_dict()


def test_resume_continues_the_timestep_count(tmp_path):
    run(tmp_path, "--total-timesteps", "256")
    # simulate a kill right after the checkpoint at 128 timesteps
    (tmp_path / "checkpoints" / "ckpt_256_steps.zip").unlink()
    for name in ("final_model.zip", "final_model.json", "summary.json"):
        (tmp_path / name).unlink()
    assert latest_checkpoint(tmp_path / "checkpoints")[1] == 128
    summary = train.main(
        ["--output-dir", str(tmp_path), "--resume", "--total-timesteps", "384", "--no-progress-bar"]
    )
    assert summary["resumed_from"] == 128
    assert summary["timesteps"] == 384
    hist = [json.loads(x) for x in (tmp_path / "evaluations.jsonl").read_text().splitlines()]
    steps = [h["timesteps"] for h in hist]
    assert steps == sorted(set(steps)), "evaluations after the checkpoint are replaced, not doubled"
    assert steps[-1] == 384
    # the resumed run kept the saved settings (args.json), not the defaults
    assert json.loads((tmp_path / "args.json").read_text())["n_steps"] == 64


def test_resume_refuses_changed_settings(tmp_path):
    run(tmp_path, "--total-timesteps", "128")
    with pytest.raises(SystemExit):
        train.main(["--output-dir", str(tmp_path), "--resume", "--learning-rate", "0.1"])


def test_new_run_refuses_an_existing_run_dir(tmp_path):
    run(tmp_path, "--total-timesteps", "128")
    with pytest.raises(SystemExit):
        run(tmp_path, "--total-timesteps", "128")


def test_save_load_round_trip_gives_identical_actions(tmp_path):
    model = untrained_model("small-1", "group", seed=3)
    path = save_model_atomic(model, tmp_path / "m.zip")
    write_sidecar(path, load_scenario("small-1"), "group")
    agent = PPOAgent.load(path)
    env = ServerFarmEnv("small-1", action_mode="group")
    obs, _ = env.reset(seed=0)
    observations, masks = [], []
    for _ in range(300):
        observations.append(obs)
        masks.append(env.action_masks())
        obs, *_ = env.step(int(np.flatnonzero(env.action_masks())[0]))
    obs_b, masks_b = np.array(observations), np.array(masks)
    a_agent, state = agent.predict(obs_b, action_masks=masks_b)
    a_model, _ = model.predict(obs_b, deterministic=True, action_masks=masks_b)
    assert state is None
    np.testing.assert_array_equal(a_agent, a_model)


def test_predict_shape_contract():
    cfg = load_scenario("tiny")
    agent = PPOAgent(untrained_model(), cfg, "server", {})
    env = ServerFarmEnv("tiny")
    obs, _ = env.reset(seed=1)
    a, state = agent.predict(obs, action_masks=env.action_masks())
    assert state is None and np.shape(a) == () and np.asarray(a).dtype == np.int64
    a2, _ = agent.predict(np.stack([obs] * 5), action_masks=np.stack([env.action_masks()] * 5))
    assert a2.shape == (5,) and np.all(a2 == a)
    a3, _ = agent.predict(obs)  # no mask given: any action of the space
    assert 0 <= int(a3) < cfg.n_servers
    assert isinstance(agent.act(obs, env.action_masks()), int)
    with pytest.raises(ValueError, match="do not match"):
        PPOAgent(untrained_model(), load_scenario("small-1"), "server", {})


@pytest.mark.parametrize(("scenario", "mode"), [("tiny", "server"), ("small-1", "group")])
def test_masks_always_respected(scenario, mode):
    """A sampling (non-deterministic) policy visits many states; it must never pick a masked
    action, which the env would report as info["invalid_action"]."""
    agent = PPOAgent(untrained_model(scenario, mode), load_scenario(scenario), mode, {})
    env = ServerFarmEnv(scenario, action_mode=mode)
    obs, info = env.reset(seed=2)
    for _ in range(3000):
        a, _ = agent.predict(obs, action_masks=info["action_mask"], deterministic=False)
        obs, _, _, _, info = env.step(a)
        assert not info["invalid_action"]


def test_exact_and_simulated_efficiency_agree():
    """The CTMC route (states encoded as the env encodes them) and a rollout of the same
    deterministic policy must agree within the rollout's confidence interval."""
    cfg = load_scenario("tiny")
    model = untrained_model(seed=5)
    pred = model_predictor(model)
    exact = measure(pred, cfg, method="exact")
    sim = measure(pred, cfg, Window.for_farm(cfg, 4000), replication_seeds(7, 6), method="env")
    assert exact.method == "exact"
    # 95% t half-width with 5 dof -> sigma = ci95 / 2.571; allow 4.5 sigma
    assert abs(sim.efficiency - exact.efficiency) < 4.5 * sim.ci95 / 2.571


def test_exact_efficiency_of_pas_matches_ctmc():
    from serverfarm_gym.baselines.registry import make_policy

    cfg = load_scenario("tiny")
    pas = make_policy("pas", cfg)
    est = measure(lambda o, m: pas.predict(o, action_masks=m)[0], cfg, method="exact")
    assert est.efficiency == pytest.approx(TINY_PAS, rel=1e-10)


def test_settings_precedence(tmp_path):
    hp = tmp_path / "hp.yml"
    hp.write_text(
        "default: {learning_rate: 0.001, n_steps: 32}\n"
        "tiny: {n_steps: 64, gamma: 0.9}\n"
        "tiny:group: {gamma: 0.95}\n"
    )
    a = train.resolve_args(["--hyperparams", str(hp)]).args
    assert (a.learning_rate, a.n_steps, a.gamma) == (0.001, 64, 0.9)  # file beats defaults
    a = train.resolve_args(["--hyperparams", str(hp), "--action-mode", "group"]).args
    assert a.gamma == 0.95  # "<scenario>:<mode>" beats "<scenario>"
    a = train.resolve_args(["--hyperparams", str(hp), "--n-steps", "128"]).args
    assert a.n_steps == 128  # the command line beats the file
    a = train.resolve_args(["--hyperparams", "none"]).args
    assert a.n_steps == derive_settings(load_scenario("tiny")).n_steps  # the PPO trainer's
    a = train.resolve_args(["--hyperparams", "none", "--trainer", "sb3"]).args
    assert a.n_steps == train.Sb3Args.n_steps  # the sb3 trainer's own default
    # the sb3 trainer reads its own entries, not the PPO trainer's
    hp.write_text("default: {n_steps: 32}\nsb3: {n_steps: 16}\nsb3:tiny: {gamma: 0.8}\n")
    a = train.resolve_args(["--hyperparams", str(hp), "--trainer", "sb3"]).args
    assert (a.n_steps, a.gamma) == (16, 0.8)
    a = train.resolve_args(["--hyperparams", str(hp)]).args
    assert a.n_steps == 32
    hp.write_text("tiny: {n_stepz: 3}\n")
    with pytest.raises(ValueError, match="n_stepz"):
        train.resolve_args(["--hyperparams", str(hp)])


def test_shipped_hyperparams_cover_the_presets():
    import yaml

    from serverfarm_gym.envs.scenarios import PRESETS

    data = yaml.safe_load(train.DEFAULT_HYPERPARAMS.read_text())
    assert "sb3" in data  # the reference trainer's settings; the PPO trainer derives its own
    assert not [k for k in data if not k.startswith("sb3")], "no hand-set PPO entries ship"
    for name in PRESETS:
        for trainer in ("ppo", "sb3"):
            a = train.resolve_args(["--scenario", name, "--trainer", trainer]).args
            assert a.total_timesteps >= 1


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="--vec-env"):
        train.resolve_args(["--trainer", "sb3", "--vec-env", "threads"])
    with pytest.raises(ValueError, match="--batch-size"):
        train.resolve_args(["--trainer", "sb3", "--batch-size", "10000"])
    with pytest.raises(ValueError, match="--net-arch"):
        train.resolve_args(["--net-arch", "64,x"])


def test_expected_reward_has_the_env_rewards_long_run_mean():
    """TrainingWrapper(reward="expected") changes the reward, not its long-run average per step
    (Campbell-Mecke); checked under PAS with a fixed eta by batch means of the paired difference."""
    from serverfarm_gym.baselines.registry import make_policy

    env = TrainingWrapper(ServerFarmEnv("tiny", reward_eta=0.3), reward="expected")
    pas = make_policy("pas", load_scenario("tiny"))
    obs, _ = env.reset(seed=11)
    diff = np.empty(40_000)
    for t in range(diff.size):
        a, _ = pas.predict(obs, action_masks=env.action_masks())
        obs, r, _, _, info = env.step(a)
        diff[t] = r - info["env_reward"]
    batches = diff.reshape(40, -1).mean(axis=1)  # 1,000 steps per batch >> the chain's memory
    se = batches.std(ddof=1) / np.sqrt(len(batches))
    assert abs(batches.mean()) < 4.5 * se
    assert se < 0.01  # the test has power: 4.5 se is a small fraction of the reward's scale
