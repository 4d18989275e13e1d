"""Loading a trained agent: no code from the model file runs, mismatches are named, and the agent
is found by name through the one policy registry (``ppo:PATH``)."""

from __future__ import annotations

import base64
import contextlib
import json
import pathlib
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sb3_contrib")

from sb3_contrib import MaskablePPO
from stable_baselines3.common.vec_env import DummyVecEnv

from serverfarm_gym.agents.ppo import PPOAgent, write_sidecar
from serverfarm_gym.agents.ppo_sb3.wrappers import TrainingWrapper
from serverfarm_gym.baselines.registry import make_policy, policy_names
from serverfarm_gym.envs import ServerFarmEnv, load_scenario
from serverfarm_gym.evaluation.exact import exact_evaluation


def save_untrained(path: Path, scenario: str = "tiny", mode: str = "server", seed: int = 3) -> Path:
    cfg = load_scenario(scenario)
    venv = DummyVecEnv([lambda: TrainingWrapper(ServerFarmEnv(cfg, action_mode=mode))])
    model = MaskablePPO(
        "MlpPolicy", venv, n_steps=64, batch_size=64, seed=seed, device="cpu",
        policy_kwargs={"net_arch": [16, 8]},
    )  # fmt: skip
    model.save(path)
    write_sidecar(path, cfg, mode, model=model)
    return path


class _WriteMarker:
    """Unpickling this writes a file: stands for any code an attacker hides in a model."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.write_text, (pathlib.Path(self.marker), "code ran"))


def _rewrite_zip(src: Path, dst: Path, replace: dict[str, bytes]) -> None:
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            zout.writestr(item, replace.get(item.filename, zin.read(item.filename)))
    dst.with_suffix(".json").write_text(src.with_suffix(".json").read_text())


@pytest.fixture(scope="module")
def model_zip(tmp_path_factory) -> Path:
    return save_untrained(tmp_path_factory.mktemp("model") / "model.zip")


def test_loaded_agent_acts_as_the_saved_model(model_zip):
    agent = PPOAgent.load(model_zip)
    ref = MaskablePPO.load(model_zip, device="cpu")  # our own file: trusted here
    env = ServerFarmEnv("tiny")
    obs, info = env.reset(seed=0)
    obs_b, masks = [], []
    for _ in range(200):
        obs_b.append(obs)
        masks.append(info["action_mask"])
        obs, _, _, _, info = env.step(int(np.flatnonzero(info["action_mask"])[0]))
    obs_b, masks = np.array(obs_b), np.array(masks)
    a, _ = agent.predict(obs_b, action_masks=masks)
    b, _ = ref.policy.predict(obs_b, deterministic=True, action_masks=masks)
    assert np.array_equal(a, b)
    # the same network: the same exact value
    assert exact_evaluation(agent, load_scenario("tiny")).efficiency == pytest.approx(
        exact_evaluation(PPOAgent(ref, agent.config, "server", {}), agent.config).efficiency,
        rel=1e-12,
    )


def test_code_hidden_in_the_data_entry_does_not_run_on_load(model_zip, tmp_path):
    marker = tmp_path / "marker.txt"
    data = json.loads(zipfile.ZipFile(model_zip).read("data"))
    payload = base64.b64encode(pickle.dumps(_WriteMarker(marker))).decode()
    data["policy_kwargs"] = {":type:": "<class 'dict'>", ":serialized:": payload}
    bad = tmp_path / "bad.zip"
    _rewrite_zip(model_zip, bad, {"data": json.dumps(data).encode()})

    agent = PPOAgent.load(bad)
    assert not marker.exists()
    assert agent.action_mode == "server"
    # the payload is live: the trusted (unpickling) path runs it
    # the unpickled policy_kwargs is no dict: SB3 fails, but only after running it
    with contextlib.suppress(Exception):
        PPOAgent.load(bad, trust_pickle=True)
    assert marker.read_text() == "code ran"


def test_code_hidden_in_the_weights_is_refused(model_zip, tmp_path):
    import io

    import torch

    marker = tmp_path / "marker.txt"
    buf = io.BytesIO()
    torch.save({"weights": _WriteMarker(marker)}, buf)
    bad = tmp_path / "bad.zip"
    _rewrite_zip(model_zip, bad, {"policy.pth": buf.getvalue()})
    with pytest.raises(ValueError, match=r"bad\.zip: policy\.pth holds something other"):
        PPOAgent.load(bad)
    assert not marker.exists()


def test_truncated_zip_is_a_clear_error_naming_the_file(model_zip, tmp_path):
    bad = tmp_path / "cut.zip"
    raw = model_zip.read_bytes()
    bad.write_bytes(raw[: len(raw) // 2])
    bad.with_suffix(".json").write_text(model_zip.with_suffix(".json").read_text())
    with pytest.raises(ValueError, match=r"cut\.zip: not a readable model zip"):
        PPOAgent.load(bad)
    with pytest.raises(ValueError, match=r"cut\.zip"):
        make_policy(f"ppo:{bad}", "tiny")


def test_model_for_another_farm_names_the_mismatch(model_zip):
    with pytest.raises(ValueError) as err:
        make_policy(f"ppo:{model_zip}", "small-1")
    msg = str(err.value)
    for part in ("'tiny'", "'small-1'", "'server'", "observation size"):
        assert part in msg
    assert "reshape" not in msg


def test_sidecar_of_another_model_names_the_sizes(model_zip, tmp_path):
    other = save_untrained(tmp_path / "other.zip", scenario="small-1")
    # tiny's weights with small-1's sidecar
    mixed = tmp_path / "mixed.zip"
    mixed.write_bytes(model_zip.read_bytes())
    mixed.with_suffix(".json").write_text(other.with_suffix(".json").read_text())
    with pytest.raises(ValueError, match=r"mixed\.zip: the weights take observations of size"):
        PPOAgent.load(mixed)


def test_ppo_is_one_registry_name(model_zip):
    assert "ppo:PATH" in policy_names()
    with pytest.raises(ValueError, match=r"give an argument"):
        make_policy("ppo", "tiny")
    with pytest.raises(ValueError, match="no model at"):
        make_policy("ppo:/nonexistent/model.zip", "tiny")
    agent = make_policy(f"ppo:{model_zip}", "tiny")
    assert isinstance(agent, PPOAgent)


def test_tied_network_acts_on_servers_through_the_group_view(tmp_path):
    """A group network saved for server actions (``network_mode="group"``) reads the group view
    of a server observation and sends the job to the smallest allowed server of its pair; its
    exact efficiency in server mode is the group network's own."""
    cfg = load_scenario("pas-gap")
    group_zip = save_untrained(tmp_path / "group.zip", "pas-gap", "group")
    tied_zip = tmp_path / "tied.zip"
    tied_zip.write_bytes(group_zip.read_bytes())
    write_sidecar(tied_zip, cfg, "server", network_mode="group",
                  train_args={"net_arch": "16,8", "activation": "tanh"})  # fmt: skip
    group, tied = PPOAgent.load(group_zip), PPOAgent.load(tied_zip)
    assert tied.action_mode == "server" and tied.network_mode == "group"
    env = ServerFarmEnv(cfg)
    obs, _ = env.reset(seed=1)
    for _ in range(200):
        mask = env.action_masks()
        a, _ = tied.predict(obs, action_masks=mask)
        g_obs, g_mask = tied.view.observation(obs[None]), tied.view.masks(obs[None], mask[None])
        pair = group.predict(g_obs[0], action_masks=g_mask[0])[0]
        assert a == tied.view.server_actions(obs[None], mask[None], np.array([pair]))[0]
        obs, *_ = env.step(a)
    e_tied = exact_evaluation(tied, cfg, "server")
    e_group = exact_evaluation(group, cfg, "group")
    assert e_tied.efficiency == pytest.approx(e_group.efficiency, rel=1e-12)


def test_network_mode_that_cannot_serve_the_actions_is_refused(model_zip, tmp_path):
    bad = tmp_path / "bad.zip"
    bad.write_bytes(model_zip.read_bytes())
    side = json.loads(model_zip.with_suffix(".json").read_text())
    side["action_mode"], side["policy"]["network_mode"] = "group", "server"
    bad.with_suffix(".json").write_text(json.dumps(side))
    with pytest.raises(ValueError, match="cannot serve 'group' actions"):
        PPOAgent.load(bad)
