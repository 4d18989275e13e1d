"""serverfarm_gym.agents.common.artefacts, the one loader of models, checkpoints, sidecars and generalist weights: no
code from a file runs (a planted checkpoint included), zip bombs and non-regular files are refused
before anything is decompressed or blocks, and tampered sidecars are named errors."""

from __future__ import annotations

import base64
import json
import os
import pathlib
import pickle
import zipfile
from pathlib import Path

import pytest
import torch

from serverfarm_gym.agents.common.artefacts import (
    ArtefactError,
    check_model_sidecar,
    read_model_sidecar,
    read_sb3_zip,
)
from serverfarm_gym.agents.ppo import PPOAgent
from serverfarm_gym.agents.ppo.ppo import PPO
from serverfarm_gym.agents.token_generalist import TokenGeneralistPolicy
from serverfarm_gym.baselines.registry import make_policy
from serverfarm_gym.envs.mapping_files import FileFormatError

SMALL = {"n_envs": 2, "n_steps": 64, "batch_size": 64, "n_epochs": 1, "net_arch": (8, 8)}


class _WriteMarker:
    """Unpickling this writes a file: stands for any code an attacker hides in a checkpoint."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.write_text, (pathlib.Path(self.marker), "code ran"))


def _rewrite_zip(src: Path, dst: Path, replace: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            zout.writestr(item, replace.get(item.filename, zin.read(item.filename)))
    dst.with_suffix(".json").write_text(src.with_suffix(".json").read_text())
    return dst


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A PPO checkpoint after one update (weights, Adam state, step count)."""
    t = PPO("tiny", seed=1, **SMALL)
    t.learn(SMALL["n_envs"] * SMALL["n_steps"])
    return t.save(tmp_path_factory.mktemp("ckpt") / "ckpt_128_steps.zip")


def _planted(checkpoint: Path, tmp_path: Path, marker: Path) -> Path:
    """The checkpoint with a cloudpickled payload in every serialised field of ``data`` (what
    SB3's ``MaskablePPO.load`` decodes), as an attacker would plant it in ``checkpoints/``."""
    data = json.loads(zipfile.ZipFile(checkpoint).read("data"))
    payload = base64.b64encode(pickle.dumps(_WriteMarker(marker))).decode()
    for k, v in data.items():
        if isinstance(v, dict) and ":serialized:" in v:
            data[k] = {":type:": v[":type:"], ":serialized:": payload}
    return _rewrite_zip(
        checkpoint, tmp_path / "ckpt_256_steps.zip", {"data": json.dumps(data).encode()}
    )


def test_a_planted_checkpoint_runs_no_code(checkpoint, tmp_path):
    marker = tmp_path / "marker.txt"
    bad = _planted(checkpoint, tmp_path, marker)
    trainer = PPO.load(bad)
    assert trainer.num_timesteps == 128
    read_sb3_zip(bad, optimizer=True)
    PPOAgent.load(bad)
    assert not marker.exists()
    # the payload is live: SB3's own loader runs it
    from sb3_contrib import MaskablePPO

    with pytest.raises(Exception):  # noqa: B017 (SB3 fails after running it, any error)
        MaskablePPO.load(bad)
    assert marker.read_text() == "code ran"


def test_code_in_the_optimizer_state_is_refused(checkpoint, tmp_path):
    import io

    marker = tmp_path / "marker.txt"
    buf = io.BytesIO()
    torch.save({"state": _WriteMarker(marker)}, buf)
    bad = _rewrite_zip(checkpoint, tmp_path / "bad.zip", {"policy.optimizer.pth": buf.getvalue()})
    with pytest.raises(ArtefactError, match=r"bad\.zip: policy\.optimizer\.pth holds something"):
        PPO.load(bad)
    assert not marker.exists()


def test_a_zip_bomb_is_refused_before_decompression(checkpoint, tmp_path, monkeypatch):
    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("data", "{}")
        zf.writestr("policy.pth", b"\0" * (16 << 20))  # 16 MiB of zeros: ~1000:1
    bomb.with_suffix(".json").write_text(checkpoint.with_suffix(".json").read_text())
    with pytest.raises(ArtefactError, match=r"bomb\.zip: member policy\.pth is compressed .*:1"):
        PPOAgent.load(bomb)
    with pytest.raises(ValueError, match=r"bomb\.zip: .*zip bomb"):
        make_policy(f"ppo:{bomb}", "tiny")
    # the total uncompressed size is bounded too (limit lowered: no need for a real 1 GiB)
    monkeypatch.setattr("serverfarm_gym.agents.common.artefacts.MAX_UNCOMPRESSED_BYTES", 1000)
    with pytest.raises(ArtefactError, match=r"ckpt_128_steps\.zip: unpacks to [\d,]+ bytes"):
        read_sb3_zip(checkpoint)


@pytest.mark.parametrize("which", ["model", "sidecar"])
def test_a_fifo_model_or_sidecar_is_refused_without_blocking(checkpoint, tmp_path, which):
    model = tmp_path / "m.zip"
    if which == "model":
        os.mkfifo(model)
        model.with_suffix(".json").write_text(checkpoint.with_suffix(".json").read_text())
    else:
        model.write_bytes(checkpoint.read_bytes())
        os.mkfifo(model.with_suffix(".json"))
    with pytest.raises(FileFormatError, match=r"m\.(zip|json): is a FIFO"):
        PPOAgent.load(model)
    with pytest.raises(FileFormatError, match="is a FIFO"):
        PPO.load(model)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m["policy"].update(activation_fn="system"), r"activation_fn 'system' is not"),
        (lambda m: m.update(action_mode="servers"), r"action_mode must be 'server' or 'group'"),
        (lambda m: m.update(timesteps=-5), r"timesteps must be a non-negative integer"),
        (lambda m: m.update(timesteps=True), r"timesteps must be a non-negative integer"),
        (lambda m: m.update(scenario=[1]), r"scenario must be a JSON object"),
        (lambda m: m["policy"].update(net_arch={"pi": [0]}), r"policy\.net_arch must be"),
        (lambda m: m.update(eval_efficiency="nan"), r"eval_efficiency must be a finite number"),
    ],
)
def test_a_tampered_sidecar_is_a_named_error(checkpoint, tmp_path, edit, message):
    meta = json.loads(checkpoint.with_suffix(".json").read_text())
    edit(meta)
    model = tmp_path / "m.zip"
    model.write_bytes(checkpoint.read_bytes())
    model.with_suffix(".json").write_text(json.dumps(meta))
    with pytest.raises(ArtefactError, match=rf"m\.json: .*{message}"):
        PPOAgent.load(model)
    with pytest.raises(ArtefactError, match=message):
        check_model_sidecar(meta, "side")


def test_a_sidecar_that_is_not_a_json_object_is_named(checkpoint, tmp_path):
    model = tmp_path / "m.zip"
    model.write_bytes(checkpoint.read_bytes())
    for text in ("[1, 2]", "42", '{"a": ' * 200 + "1" + "}" * 200):
        model.with_suffix(".json").write_text(text)
        with pytest.raises(FileFormatError, match=r"m\.json: .*(mapping|nested deeper)"):
            read_model_sidecar(model)


def test_non_finite_weights_are_refused(checkpoint, tmp_path):
    """A diverged run's weights are never loaded (and so never evaluated or reported)."""
    import io

    state = read_sb3_zip(checkpoint).policy
    state = {k: v.clone() for k, v in state.items()}
    state["action_net.weight"][0, 0] = float("nan")
    buf = io.BytesIO()
    torch.save(state, buf)
    bad = _rewrite_zip(checkpoint, tmp_path / "nan.zip", {"policy.pth": buf.getvalue()})
    with pytest.raises(ArtefactError, match=r"nan\.zip: policy\.pth: action_net\.weight holds non"):
        PPOAgent.load(bad)


def test_generalist_files_go_through_the_same_loader(tmp_path):
    from serverfarm_gym.agents.token_generalist import TOKEN_MODEL

    pt = Path(TOKEN_MODEL).with_suffix(".pt")
    model = tmp_path / "g.pt"
    model.write_bytes(pt.read_bytes())
    meta = json.loads(pt.with_suffix(".json").read_text())
    bad = dict(meta, net=dict(meta["net"], activation="os.system", extra=1))
    model.with_suffix(".json").write_text(json.dumps(bad))
    with pytest.raises(ArtefactError, match=r"g\.json: net is not a TokenNetConfig"):
        TokenGeneralistPolicy.load_net(model)
    model.with_suffix(".json").write_text("[]")
    with pytest.raises(FileFormatError, match=r"g\.json: .*mapping"):
        TokenGeneralistPolicy.load_net(model)
    model.with_suffix(".json").unlink()
    os.mkfifo(model.with_suffix(".json"))
    with pytest.raises(ValueError, match=r"g\.pt and its sidecar g\.json are needed"):
        TokenGeneralistPolicy.load_net(model)
