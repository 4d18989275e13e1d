"""The one loader of every artefact the project reads back: model zips and training checkpoints
(stable-baselines3's zip layout), their JSON sidecars, and the generalist's ``.pt`` weights and
sidecar. Nothing here unpickles.

Why: SB3's ``MaskablePPO.load`` deserialises cloudpickled objects from the zip's ``data`` entry,
so a model or checkpoint planted in a run directory would run code when loaded that way (a
``--resume`` would run it). Here every file

* is read through ``serverfarm_gym.envs.mapping_files.read_regular_file``: a regular file (a FIFO would block the
  reader forever), below a size limit, before anything is parsed;
* if a zip, is checked member by member before decompression: the total uncompressed size and
  each member's compression ratio are bounded (a zip bomb is refused, not a ``MemoryError``);
* yields only tensors (``torch.load(weights_only=True)``), finite ones (a diverged run's NaN
  weights are refused by name), and plain JSON: the zip's ``data`` entry is parsed as JSON and
  its cloudpickled fields stay strings, never decoded;
* if a sidecar, is schema-checked (a JSON object; the farm, the action mode, an activation from
  :data:`ACTIVATIONS`, non-negative step counts, ...), each problem a :class:`ArtefactError`
  naming the file and the field.
"""

from __future__ import annotations

import io
import math
import zipfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from serverfarm_gym.envs.mapping_files import MAX_FILE_BYTES, parse_mapping_text, read_regular_file

__all__ = [
    "ACTIVATIONS",
    "MAX_COMPRESSION_RATIO",
    "MAX_UNCOMPRESSED_BYTES",
    "MAX_ZIP_BYTES",
    "ArtefactError",
    "SB3Zip",
    "check_finite_state",
    "check_model_sidecar",
    "load_tensors",
    "load_weights_file",
    "read_json_object",
    "read_model_sidecar",
    "read_sb3_zip",
    "sidecar_path",
]

#: the largest model / checkpoint / weights file read (a 64x64 policy is ~50 kB)
MAX_ZIP_BYTES = 1 << 30
#: the most bytes a zip may unpack to, all members together
MAX_UNCOMPRESSED_BYTES = 1 << 30
#: the highest compression ratio of a member above 1 MiB (weights compress ~1.1x, JSON ~10x;
#: a zip bomb ~1000x)
MAX_COMPRESSION_RATIO = 100
#: torch activations a sidecar may name (the ones SB3's MlpPolicy is built with)
ACTIVATIONS = ("Tanh", "ReLU", "LeakyReLU", "ELU", "SELU", "SiLU", "GELU", "Sigmoid", "Identity")
_MODES = ("server", "group")


class ArtefactError(ValueError):
    """A model, checkpoint, weights file or sidecar is refused; the message names the file."""


def sidecar_path(model_path: str | Path) -> Path:
    """``runs/x/model.zip`` -> ``runs/x/model.json`` (config, action mode and args of the model)."""
    p = Path(model_path)
    return p.with_suffix(".json") if p.suffix == ".zip" else p.with_name(p.name + ".json")


def read_json_object(path: str | Path, what: str = "a JSON sidecar") -> dict[str, Any]:
    """The JSON object in ``path`` (regular file, size-limited, nesting-limited, no duplicate
    keys); ``serverfarm_gym.envs.mapping_files.FileFormatError`` (a ValueError) naming the file otherwise."""
    raw = read_regular_file(path, MAX_FILE_BYTES, expected=what)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ArtefactError(f"{path}: not UTF-8 text, expected {what}") from err
    return parse_mapping_text(text, str(path), "json")


def _check_zip(zf: zipfile.ZipFile, source: str) -> None:
    """Refuse a zip whose members would unpack to more than the limits allow."""
    infos = zf.infolist()
    total = sum(i.file_size for i in infos)
    if total > MAX_UNCOMPRESSED_BYTES:
        raise ArtefactError(
            f"{source}: unpacks to {total:,} bytes, above the limit of "
            f"{MAX_UNCOMPRESSED_BYTES:,}; not a model saved by this project (a zip bomb?)"
        )
    for i in infos:
        ratio = i.file_size / max(1, i.compress_size)
        if i.file_size > (1 << 20) and ratio > MAX_COMPRESSION_RATIO:
            raise ArtefactError(
                f"{source}: member {i.filename} is compressed {ratio:,.0f}:1 (above "
                f"{MAX_COMPRESSION_RATIO}:1); not a model saved by this project (a zip bomb?)"
            )


def _open_zip(raw: bytes, source: str) -> zipfile.ZipFile:
    try:
        zf = zipfile.ZipFile(io.BytesIO(raw))
    except (zipfile.BadZipFile, zlib.error, EOFError, ValueError) as err:
        raise ArtefactError(
            f"{source}: not a readable model zip (truncated or corrupt: {err}); "
            "use another checkpoint or retrain"
        ) from err
    _check_zip(zf, source)
    return zf


def load_tensors(raw: bytes, source: str) -> Any:
    """``torch.load(weights_only=True)`` of ``raw`` (tensors and plain containers only; torch's
    own zip inside is held to the same limits first)."""
    import torch  # heavy import: only when a model is loaded

    if zipfile.is_zipfile(io.BytesIO(raw)):
        _open_zip(raw, source)
    try:
        return torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises UnpicklingError, RuntimeError, EOFError, ...
        first = str(err).splitlines()[0] if str(err) else ""
        raise ArtefactError(
            f"{source} holds something other than plain weights, or is corrupt "
            f"({type(err).__name__}: {first}); refusing to load it"
        ) from err


def load_weights_file(path: str | Path, what: str = "a .pt weights file") -> Any:
    """The tensors of a ``torch.save`` file (regular file, size-limited, weights only)."""
    return load_tensors(read_regular_file(path, MAX_ZIP_BYTES, expected=what), str(path))


def check_finite_state(state: Any, source: str) -> None:
    """Refuse a state dict (nested dicts/lists of tensors) holding a NaN or an infinity."""
    import torch

    stack = [("", state)]
    while stack:
        key, v = stack.pop()
        if isinstance(v, Mapping):
            stack.extend((f"{key}.{k}" if key else str(k), x) for k, x in v.items())
        elif isinstance(v, (list, tuple)):
            stack.extend((f"{key}[{i}]", x) for i, x in enumerate(v))
        elif isinstance(v, torch.Tensor) and v.is_floating_point():
            if not bool(torch.isfinite(v).all()):
                raise ArtefactError(
                    f"{source}: {key} holds non-finite values (NaN or inf): the weights of a "
                    "diverged training run; use an earlier checkpoint or retrain"
                )
        elif isinstance(v, float) and not math.isfinite(v):
            raise ArtefactError(f"{source}: {key} is {v}, not a finite number")


@dataclass
class SB3Zip:
    """What is read from a model zip: ``data`` (the JSON of the ``data`` entry; cloudpickled
    fields stay as SB3 wrote them, ``{":type:": ..., ":serialized:": "<base64>"}``, undecoded),
    the policy's state dict and, if asked for, the optimizer's."""

    data: dict[str, Any]
    policy: dict[str, Any]
    optimizer: dict[str, Any] | None


def read_sb3_zip(path: str | Path, optimizer: bool = False) -> SB3Zip:
    """Read a zip saved by SB3's ``save`` (``MaskablePPO``, ``PPO.save``) without
    unpickling; ``optimizer=True`` also reads ``policy.optimizer.pth`` (a checkpoint). Weights
    must be finite."""
    p = Path(path)
    zf = _open_zip(read_regular_file(p, MAX_ZIP_BYTES, expected="a model .zip"), str(p))
    names = set(zf.namelist())
    need = ["data", "policy.pth"] + (["policy.optimizer.pth"] if optimizer else [])
    missing = [n for n in need if n not in names]
    if missing:
        # a truncated file can still parse: torch's own zip inside policy.pth remains
        raise ArtefactError(
            f"{p}: not a readable model zip (no {', '.join(missing)}: truncated, corrupt, or "
            "not saved by stable-baselines3); use another checkpoint or retrain"
        )
    try:
        raw = {n: zf.read(n) for n in need}
    except (zipfile.BadZipFile, zlib.error, EOFError) as err:
        raise ArtefactError(f"{p}: not a readable model zip (truncated or corrupt: {err})") from err
    try:
        data = parse_mapping_text(raw["data"].decode("utf-8"), f"{p}:data", "json")
    except UnicodeDecodeError as err:
        raise ArtefactError(f"{p}: its data entry is not UTF-8 JSON") from err
    states = {n: load_tensors(raw[n], f"{p}: {n}") for n in need[1:]}
    for n, s in states.items():
        if not isinstance(s, dict):
            raise ArtefactError(f"{p}: {n} is not a state dict")
        check_finite_state(s, f"{p}: {n}")
    return SB3Zip(data, states["policy.pth"], states.get("policy.optimizer.pth"))


# ---------------------------------------------------------------------------------------------
# sidecars
# ---------------------------------------------------------------------------------------------
def _count(meta: Mapping[str, Any], key: str, source: str) -> None:
    v = meta.get(key)
    if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
        raise ArtefactError(f"{source}: {key} must be a non-negative integer, got {v!r}")


def _number(meta: Mapping[str, Any], key: str, source: str) -> None:
    v = meta.get(key)
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if v is not None and not ok:
        raise ArtefactError(f"{source}: {key} must be a finite number, got {v!r}")


def _check_policy(policy: Any, source: str) -> None:
    if not isinstance(policy, Mapping):
        raise ArtefactError(f"{source}: policy must be a JSON object, got {policy!r}")
    act = policy.get("activation_fn", "Tanh")
    if act not in ACTIVATIONS:
        raise ArtefactError(
            f"{source}: policy.activation_fn {act!r} is not an activation; expected one of "
            f"{', '.join(ACTIVATIONS)}"
        )
    mode = policy.get("network_mode")
    if mode is not None and mode not in _MODES:
        raise ArtefactError(
            f"{source}: policy.network_mode must be 'server' or 'group', got {mode!r}"
        )
    arch = policy.get("net_arch")
    if arch is not None:
        ok = isinstance(arch, Mapping) and all(
            isinstance(arch.get(k), list)
            and all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in arch[k])
            for k in ("pi", "vf")
        )
        if not ok:
            raise ArtefactError(
                f"{source}: policy.net_arch must be {{'pi': [sizes], 'vf': [sizes]}} of positive "
                f"integers, got {arch!r}"
            )


def check_model_sidecar(meta: Any, source: str) -> dict[str, Any]:
    """``meta`` if it is a model sidecar as ``serverfarm_gym.agents.ppo.write_sidecar`` writes it; else an
    :class:`ArtefactError` naming ``source`` and the field."""
    if not isinstance(meta, dict):
        raise ArtefactError(f"{source}: a sidecar must be a JSON object, got {type(meta).__name__}")
    missing = [k for k in ("scenario", "action_mode") if k not in meta]
    if missing:
        raise ArtefactError(f"{source}: the sidecar lacks {missing}")
    for key in (
        "scenario",
        "train_scenario",
        "train_args",
        "ppo_config",
        "lean_ppo_config",
        "config",
    ):
        if key in meta and meta[key] is not None and not isinstance(meta[key], Mapping):
            raise ArtefactError(f"{source}: {key} must be a JSON object, got {meta[key]!r}")
    if meta["action_mode"] not in _MODES:
        raise ArtefactError(
            f"{source}: action_mode must be 'server' or 'group', got {meta['action_mode']!r}"
        )
    if "policy" in meta:
        _check_policy(meta["policy"], source)
    for key in ("timesteps", "n_updates"):
        _count(meta, key, source)
    for key in ("eval_efficiency", "rho", "gamma"):
        _number(meta, key, source)
    return meta


def read_model_sidecar(model_path: str | Path) -> dict[str, Any]:
    """The schema-checked sidecar of ``model_path`` (FileNotFoundError if there is none)."""
    side = sidecar_path(model_path)
    if not side.exists() and not side.is_symlink():
        raise FileNotFoundError(
            f"path: {model_path} has no sidecar {side.name} (scenario, action mode, architecture); "
            "models saved by train.py always have one"
        )
    return check_model_sidecar(read_json_object(side), str(side))
