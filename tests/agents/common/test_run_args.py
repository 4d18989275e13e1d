"""serverfarm_gym.agents.common.run_args: one typed argument class per trainer, the farm loaded and its settings
derived once per run, and args.json files of either layout replayed."""

from __future__ import annotations

import dataclasses
import json

import pytest

from serverfarm_gym.agents.common import run_args
from serverfarm_gym.agents.common.farm_settings import derive_settings
from serverfarm_gym.agents.common.run_args import PPOArgs, Sb3Args, resolve_args
from serverfarm_gym.envs.scenarios import load_scenario


def test_each_trainer_gets_its_own_arguments():
    ppo = resolve_args(["--hyperparams", "none"])
    sb3 = resolve_args(["--hyperparams", "none", "--trainer", "sb3"])
    assert type(ppo.args) is PPOArgs and type(sb3.args) is Sb3Args
    ppo_names = {f.name for f in dataclasses.fields(PPOArgs)}
    sb3_names = {f.name for f in dataclasses.fields(Sb3Args)}
    assert {"vec_env", "reward", "normalize_reward", "episode_steps", "target_kl"} <= (
        sb3_names - ppo_names
    )
    assert {"init", "server_network", "objective", "train_scale", "advantage"} <= (
        ppo_names - sb3_names
    )
    # the PPO trainer's derived settings are the farm's, and nothing replaced them
    settings = derive_settings(load_scenario("tiny"))
    assert ppo.derived is not None and ppo.derived["overridden"] == {}
    assert {k: getattr(ppo.args, k) for k in settings.as_args()} == settings.as_args()
    assert sb3.derived is None and sb3.args.n_steps == 1024


def test_derived_ppo_settings_have_no_default():
    with pytest.raises(TypeError, match="total_timesteps"):
        PPOArgs()  # type: ignore[call-arg]
    Sb3Args()  # the sb3 trainer's defaults are real ones


def test_the_farm_is_loaded_and_derived_once(monkeypatch):
    calls = {"load": 0, "derive": 0}
    load, derive = run_args.load_scenario, run_args.derive_settings

    def counting_load(spec):
        calls["load"] += 1
        return load(spec)

    def counting_derive(*a, **k):
        calls["derive"] += 1
        return derive(*a, **k)

    monkeypatch.setattr(run_args, "load_scenario", counting_load)
    monkeypatch.setattr(run_args, "derive_settings", counting_derive)
    run = resolve_args(["--scenario", "small-2", "--action-mode", "group", "--n-steps", "64"])
    assert calls == {"load": 1, "derive": 1}
    assert run.config.name == load_scenario("small-2").name
    assert run.derived["overridden"] == {"n_steps": 64}
    assert run.derived["reasons"]["action_mode"] == "given"  # small-2 derives server actions


def test_args_file_of_the_single_class_layout_replays(tmp_path):
    """An args.json that lists every option of both trainers (the other trainer's at their
    "not used" values) replays; one with a used option of the other trainer is refused."""
    ppo = resolve_args(["--hyperparams", "none", "--n-steps", "64"]).args
    saved = dataclasses.asdict(ppo) | {"vec_env": "dummy", "reward": "env", "target_kl": 0.0,
                                       "normalize_reward": False, "episode_steps": 0}  # fmt: skip
    path = tmp_path / "args.json"
    path.write_text(json.dumps(saved))
    replay = resolve_args(["--args-file", str(path), "--output-dir", str(tmp_path / "r")]).args
    same = {"output_dir": ppo.output_dir, "args_file": ""}
    assert dataclasses.asdict(replay) | same == dataclasses.asdict(ppo)
    path.write_text(json.dumps(saved | {"reward": "expected"}))
    with pytest.raises(ValueError, match="--reward: an option of --trainer sb3 only"):
        resolve_args(["--args-file", str(path)])


def test_an_args_file_with_the_earlier_trainer_name_replays_as_ppo(tmp_path):
    """An ``args.json`` of an earlier version names the PPO trainer ``lean``."""
    path = tmp_path / "args.json"
    path.write_text(json.dumps({"trainer": "lean", "scenario": "tiny", "seed": 3}))
    assert run_args.saved_args(path)["trainer"] == "ppo"
    a = resolve_args(["--hyperparams", "none", "--args-file", str(path)]).args
    assert type(a) is PPOArgs and a.trainer == "ppo" and a.seed == 3


def test_resume_refuses_an_option_the_run_does_not_record(tmp_path):
    """A PPO run's args.json records no sb3 option: on --resume one given at another value than
    "not used" differs from the run, as a recorded option would."""
    ppo = resolve_args(["--hyperparams", "none", "--output-dir", str(tmp_path)]).args
    (tmp_path / "args.json").write_text(json.dumps(dataclasses.asdict(ppo)))
    with pytest.raises(ValueError, match=r"--target-kl 0\.1 differs from the run.s saved 0\.0"):
        resolve_args(["--output-dir", str(tmp_path), "--resume", "--target-kl", "0.1"])
    resumed = resolve_args(["--output-dir", str(tmp_path), "--resume", "--total-timesteps", "99"])
    assert resumed.args.resume and resumed.args.total_timesteps == 99
    assert dataclasses.asdict(resumed.args) | {"resume": False, "total_timesteps": 0} == (
        dataclasses.asdict(ppo) | {"total_timesteps": 0}
    )
