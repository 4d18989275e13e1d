"""A trained MaskablePPO dispatcher behind the common ``predict`` interface, and its sidecar.

A model saved by ``train.py`` is ``<name>.zip`` (stable-baselines3's ``save_to_zip_file``
layout) plus a JSON sidecar ``<name>.json`` holding the scenario (as a plain dict, so the file
stands alone), the action mode, the policy network's architecture and the training arguments.
``evaluate.py --policies ppo:runs/tiny/best_model.zip`` needs nothing else.

Loading never unpickles. SB3's own ``MaskablePPO.load`` deserialises cloudpickled objects from the
zip's ``data`` entry, so a crafted model file runs arbitrary code when loaded that way.
:meth:`PPOAgent.load` instead rebuilds the policy network (spaces from the sidecar's farm and
action mode, activation from the sidecar, layer widths from the weights' shapes) and reads the
file through ``serverfarm_gym.agents.common.artefacts`` (the one loader of models, checkpoints and sidecars): only the
weights, ``policy.pth``, with ``torch.load(weights_only=True)`` (finite tensors only; anything
else is refused), after size checks on the zip, and a schema-checked sidecar. A foreign SB3 zip (custom policy classes, no
architecture in its sidecar) can still be loaded with ``trust_pickle=True``: that runs code from
the file, so only do it for files you trust as you would trust a Python script.
"""

from __future__ import annotations

import io
import json
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from serverfarm_gym.agents.common.artefacts import (
    MAX_ZIP_BYTES,
    read_model_sidecar,
    read_sb3_zip,
    sidecar_path,
)
from serverfarm_gym.agents.common.checkpoints import atomic_write_json
from serverfarm_gym.baselines.base import Policy
from serverfarm_gym.envs.config import FarmConfig, farm_from_dict
from serverfarm_gym.envs.mapping_files import read_regular_file
from serverfarm_gym.envs.observation import check_action_mode, n_actions, obs_size
from serverfarm_gym.envs.symmetry import GroupView

__all__ = [
    "MASKED_LOGIT",
    "PPOAgent",
    "atomic_write_json",
    "model_predictor",
    "numpy_predictor",
    "policy_architecture",
    "read_sidecar",
    "sidecar_path",
    "write_sidecar",
]

#: a predictor maps (obs float32[n, d], masks bool[n, A]) to actions int64[n], deterministically
Predictor = Callable[[np.ndarray, np.ndarray], np.ndarray]

#: SB3's defaults for ``MlpPolicy`` (what a model trained without ``policy_kwargs`` uses)
DEFAULT_ARCHITECTURE: dict[str, Any] = {
    "net_arch": {"pi": [64, 64], "vf": [64, 64]},
    "activation_fn": "Tanh",
}


def policy_architecture(model: Any = None, train_args: Mapping[str, Any] | None = None) -> dict:
    """``{"net_arch": {"pi": [...], "vf": [...]}, "activation_fn": "Tanh"}`` of a MaskablePPO model
    (or its policy), else as ``train.py`` builds it from its arguments (``net_arch`` "64,64",
    ``activation`` "tanh"/"relu"), else SB3's defaults."""
    if model is not None:
        policy = getattr(model, "policy", model)
        arch = policy.net_arch
        if isinstance(arch, list):
            arch = {"pi": list(arch), "vf": list(arch)}
        return {
            "net_arch": {"pi": list(arch["pi"]), "vf": list(arch["vf"])},
            "activation_fn": policy.activation_fn.__name__,
        }
    if train_args is not None and "net_arch" in train_args:
        sizes = [int(x) for x in str(train_args["net_arch"]).split(",") if x.strip()]
        act = {"tanh": "Tanh", "relu": "ReLU"}[str(train_args.get("activation", "tanh"))]
        return {"net_arch": {"pi": sizes, "vf": list(sizes)}, "activation_fn": act}
    return json.loads(json.dumps(DEFAULT_ARCHITECTURE))


def write_sidecar(
    model_path: str | Path,
    config: FarmConfig,
    action_mode: str,
    model: Any = None,
    network_mode: str | None = None,
    **extra: Any,
) -> None:
    """Write the JSON sidecar that :meth:`PPOAgent.load` needs next to a saved model: the farm, the
    action mode, the policy architecture (from ``model`` if given, else ``extra["train_args"]``,
    else SB3's defaults) and the network's spaces' sizes; ``extra`` is stored as is.

    ``network_mode`` is the encoding the network itself reads and acts in (default:
    ``action_mode``). ``"group"`` with ``action_mode="server"`` is a network tied over
    exchangeable servers: it scores (group, level) pairs and acts on servers through
    ``serverfarm_gym.envs.symmetry.GroupView``."""
    check_action_mode(action_mode)
    net = _network_mode(action_mode, network_mode)
    arch = policy_architecture(model, extra.get("train_args"))
    meta = {
        "scenario": config.to_dict(),
        "action_mode": action_mode,
        "policy": {
            "class": "sb3_contrib MaskableActorCriticPolicy",
            **arch,
            "network_mode": net,
            "obs_size": obs_size(config, net),
            "n_actions": n_actions(config, net),
        },
        **extra,
    }
    atomic_write_json(sidecar_path(model_path), meta)


def _network_mode(action_mode: str, network_mode: str | None) -> str:
    """The network's own encoding: ``action_mode``'s, or a group network serving server actions."""
    net = action_mode if network_mode is None else check_action_mode(network_mode)
    if net != action_mode and (action_mode, net) != ("server", "group"):
        raise ValueError(
            f"network_mode: a {net!r} network cannot serve {action_mode!r} actions (only a "
            "'group' network can act on servers, through serverfarm_gym.envs.symmetry.GroupView)"
        )
    return net


def read_sidecar(model_path: str | Path) -> dict[str, Any]:
    """The schema-checked sidecar of ``model_path`` (``serverfarm_gym.agents.common.artefacts.read_model_sidecar``:
    FileNotFoundError if missing, a ValueError naming the file and the field if unreadable)."""
    return read_model_sidecar(model_path)


def _resolve_model_path(path: str | Path) -> Path:
    p = Path(path)
    if p.is_dir():
        found = [c for c in (p / "best_model.zip", p / "final_model.zip") if c.exists()]
        if not found:
            raise FileNotFoundError(
                f"path: {p} is a directory without best_model.zip or final_model.zip; "
                "pass the model's .zip file"
            )
        p = found[0]
    if not p.exists() and p.with_suffix(".zip").exists():
        p = p.with_suffix(".zip")
    if not p.exists():
        raise FileNotFoundError(f"path: no model at {p}")
    return p


def _read_weights(path: Path) -> dict[str, Any]:
    """The policy's state dict from the zip's ``policy.pth``: tensors only, finite, read by
    ``serverfarm_gym.agents.common.artefacts.read_sb3_zip`` (no unpickling, size limits before decompression)."""
    return read_sb3_zip(path).policy


def _check_weight_sizes(
    path: Path, state: Mapping[str, Any], config: FarmConfig, mode: str
) -> None:
    """Name the mismatch when the weights do not fit the sidecar's farm (instead of torch's
    'size mismatch' or numpy's 'cannot reshape')."""
    want_obs, want_act = obs_size(config, mode), n_actions(config, mode)
    first = state.get("mlp_extractor.policy_net.0.weight")
    last = state.get("action_net.weight")
    got_obs = int(first.shape[1]) if first is not None else None
    got_act = int(last.shape[0]) if last is not None else None
    if (got_obs is not None and got_obs != want_obs) or (
        got_act is not None and got_act != want_act
    ):
        raise ValueError(
            f"{path}: the weights take observations of size {got_obs} and have {got_act} "
            f"actions, but its sidecar's farm {config.name!r} in action mode {mode!r} has "
            f"observation size {want_obs} and {want_act} actions; the sidecar does not belong to "
            "this model"
        )


def _layer_widths(state: Mapping[str, Any], net: str) -> list[int]:
    """Hidden layer widths of ``mlp_extractor.<net>`` read from the weights' shapes."""
    prefix = f"mlp_extractor.{net}."
    idx = sorted(
        int(k[len(prefix) :].split(".")[0])
        for k in state
        if k.startswith(prefix) and k.endswith(".weight")
    )
    return [int(state[f"{prefix}{i}.weight"].shape[0]) for i in idx]


def _build_policy(
    meta: Mapping[str, Any], state: Mapping[str, Any], config: FarmConfig, mode: str, device: str
) -> Any:
    """A fresh MaskablePPO policy network with the farm's spaces, the hidden layer widths of the
    weights and the sidecar's activation (``policy.activation_fn``, else ``train_args``, else
    SB3's default, Tanh)."""
    import torch
    from gymnasium import spaces
    from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy

    arch = meta.get("policy") or policy_architecture(train_args=meta.get("train_args"))
    act_name = str(arch.get("activation_fn", "Tanh"))
    activation = getattr(torch.nn, act_name, None)
    if not (isinstance(activation, type) and issubclass(activation, torch.nn.Module)):
        raise ValueError(f"sidecar: policy.activation_fn {act_name!r} is not a torch.nn activation")
    net_arch = {"pi": _layer_widths(state, "policy_net"), "vf": _layer_widths(state, "value_net")}
    policy = MaskableActorCriticPolicy(
        spaces.Box(0.0, 1.0, (obs_size(config, mode),), np.float32),
        spaces.Discrete(n_actions(config, mode)),
        lambda _: 0.0,  # no optimiser steps: the learning rate is irrelevant here
        net_arch=net_arch,
        activation_fn=activation,
    )
    return policy.to(device)


def model_predictor(model: Any) -> Predictor:
    """Deterministic masked predictor of an sb3-contrib ``MaskablePPO`` model (or its policy)."""
    policy = getattr(model, "policy", model)

    def predict(obs: np.ndarray, masks: np.ndarray) -> np.ndarray:
        acts, _ = policy.predict(obs, deterministic=True, action_masks=masks)
        return np.asarray(acts, dtype=np.int64).reshape(-1)

    return predict


#: the logit of a masked action (also serverfarm_gym.agents.ppo.losses.masked_logits): finite, so gradients stay finite
MASKED_LOGIT = -1e8


def numpy_predictor(policy: Any) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """Deterministic masked predictor of an SB3 (Maskable)ActorCriticPolicy's MLP policy head
    in numpy: the argmax of the masked logits, as the policy's own ``predict``.

    Why: for the batches of an evaluation (8-128 observations) torch's per-call overhead is most
    of the cost (140 us for a 64x64 MLP on 32 rows, against ~20 us here). The weights are copied,
    so later training does not change this predictor. Raises ValueError for a network it does
    not read (a layer other than Linear/Tanh/ReLU, or a features extractor other than SB3's
    FlattenExtractor of a flat observation).
    """
    import torch  # heavy import: only when a model is loaded
    from stable_baselines3.common.torch_layers import FlattenExtractor

    if not isinstance(policy.features_extractor, FlattenExtractor):
        raise ValueError(
            f"policy: features extractor {type(policy.features_extractor).__name__} is not "
            "SB3's FlattenExtractor"
        )
    layers: list[tuple[np.ndarray, np.ndarray] | str] = []
    for mod in policy.mlp_extractor.policy_net:
        if isinstance(mod, torch.nn.Linear):
            w = mod.weight.detach().numpy().T.copy()
            layers.append((w, mod.bias.detach().numpy().copy()))
        elif isinstance(mod, torch.nn.Tanh):
            layers.append("tanh")
        elif isinstance(mod, torch.nn.ReLU):
            layers.append("relu")
        else:
            raise ValueError(f"policy: unsupported layer {type(mod).__name__} in the policy net")
    head = policy.action_net
    layers.append((head.weight.detach().numpy().T.copy(), head.bias.detach().numpy().copy()))

    def predict(obs: np.ndarray, masks: np.ndarray) -> np.ndarray:
        x = np.asarray(obs, dtype=np.float32).reshape(len(masks), -1)
        for layer in layers:
            if layer == "tanh":
                x = np.tanh(x)
            elif layer == "relu":
                x = np.maximum(x, 0.0)
            else:
                x = x @ layer[0] + layer[1]
        return np.where(masks, x, MASKED_LOGIT).argmax(axis=1)

    return predict


class PPOAgent(Policy):
    """A trained MaskablePPO policy with the common ``predict`` interface of ``serverfarm_gym.baselines.base``.

    Build it with :meth:`load` (or by name: ``make_policy("ppo:PATH", config)``). ``config`` and
    ``action_mode`` are those the model was trained on (observations must use the same encoding);
    ``meta`` holds the sidecar (training args, ...). ``model`` is a ``MaskablePPO`` model or its
    policy network. A sidecar whose ``policy.network_mode`` is ``"group"`` under server actions
    holds a network tied over exchangeable servers: observations, masks and actions pass through
    ``serverfarm_gym.envs.symmetry.GroupView`` (the job goes to the smallest allowed server of the chosen
    (group, level) pair).
    """

    name = "ppo"
    builtin = None

    def __init__(self, model: Any, config: FarmConfig, action_mode: str, meta: Mapping[str, Any]):
        super().__init__(config, action_mode)
        self.model = model
        self.policy = getattr(model, "policy", model)
        self.meta = dict(meta)
        net = _network_mode(action_mode, (self.meta.get("policy") or {}).get("network_mode"))
        self.network_mode = net
        self.view = GroupView(config) if net != action_mode else None
        n_obs = int(np.prod(self.policy.observation_space.shape))
        n_act = int(self.policy.action_space.n)
        if n_obs != obs_size(config, net) or n_act != n_actions(config, net):
            raise ValueError(
                f"model: its spaces (obs {n_obs}, actions {n_act}) do not match "
                f"scenario {config.name!r} in action mode {net!r}; load the sidecar that "
                "was saved with the model"
            )

    @classmethod
    def load(cls, path: str | Path, device: str = "cpu", trust_pickle: bool = False) -> PPOAgent:
        """Load ``path`` (a ``.zip`` saved by ``train.py``, or a run directory, which loads its
        ``best_model.zip`` if present, else ``final_model.zip``) with its JSON sidecar.

        Only the weights are read (``torch.load(weights_only=True)``); see the module doc.
        ``trust_pickle=True`` loads through ``MaskablePPO.load`` instead, which **runs code stored
        in the file**: only for foreign SB3 zips you trust.

        Raises:
            FileNotFoundError: no model, or no sidecar.
            ValueError: a truncated or corrupt zip, weights that are not plain tensors, or
                weights that do not fit the sidecar's farm (each message names the file).
        """
        p = _resolve_model_path(path)
        meta = read_sidecar(p)
        config = farm_from_dict(meta["scenario"])
        mode = check_action_mode(meta["action_mode"])
        if trust_pickle:
            from sb3_contrib import MaskablePPO

            raw = read_regular_file(p, MAX_ZIP_BYTES, expected="a model .zip")  # no FIFO
            return cls(MaskablePPO.load(io.BytesIO(raw), device=device), config, mode, meta)
        try:
            net = _network_mode(mode, (meta.get("policy") or {}).get("network_mode"))
        except ValueError as err:
            raise ValueError(f"{sidecar_path(p)}: {err}") from None
        state = _read_weights(p)
        _check_weight_sizes(p, state, config, net)
        policy = _build_policy(meta, state, config, net, device)
        try:
            policy.load_state_dict(state)
        except RuntimeError as err:
            raise ValueError(
                f"{p}: the weights do not fit a MaskablePPO MlpPolicy network "
                f"({' '.join(str(err).split())})"
            ) from err
        policy.set_training_mode(False)
        return cls(policy, config, mode, meta)

    @classmethod
    def from_spec(
        cls, path: str, config: FarmConfig, action_mode: str = "server", seed: int | None = None
    ) -> PPOAgent:
        """The agent of ``ppo:PATH`` for evaluation on ``config`` (``serverfarm_gym.baselines.registry``).

        Raises:
            ValueError: no model or sidecar at ``path``, an unreadable file, or a model trained
                for a farm whose spaces differ from ``config``'s (farm names, action mode and
                sizes named). A farm that differs but has the same spaces only warns.
        """
        try:
            agent = cls.load(path)
        except FileNotFoundError as err:
            raise ValueError(f"policy 'ppo:{path}': {err}") from err
        mode = agent.action_mode
        want = (obs_size(config, mode), n_actions(config, mode))
        have = (obs_size(agent.config, mode), n_actions(agent.config, mode))
        if want != have:
            raise ValueError(
                f"policy 'ppo:{path}': the model was trained for farm {agent.config.name!r} in "
                f"action mode {mode!r} (observation size {have[0]}, {have[1]} actions); scenario "
                f"{config.name!r} in that mode has observation size {want[0]} and {want[1]} "
                "actions. Evaluate it on the farm it was trained for"
            )
        if agent.config.to_dict() != config.to_dict():
            warnings.warn(
                f"policy 'ppo:{path}' was trained on scenario {agent.config.name!r}, evaluated on "
                f"{config.name!r}; the spaces match but the farms differ",
                stacklevel=2,
            )
        return agent

    def act(self, obs: np.ndarray, mask: np.ndarray, deterministic: bool = True) -> int:
        return int(self._act_batch(np.asarray(obs)[None], np.asarray(mask)[None], deterministic)[0])

    def _act_batch(
        self, obs: np.ndarray, masks: np.ndarray, deterministic: bool = True
    ) -> np.ndarray:
        """One forward pass of the network for the whole batch (:meth:`Policy.predict` batches)."""
        obs = np.asarray(obs, dtype=np.float32).reshape(len(masks), -1)
        net_obs, net_masks = obs, masks
        if self.view is not None:
            net_obs, net_masks = self.view.observation(obs), self.view.masks(obs, masks)
        acts, _ = self.policy.predict(net_obs, deterministic=deterministic, action_masks=net_masks)
        acts = np.asarray(acts, dtype=np.int64).reshape(-1)
        return acts if self.view is None else self.view.server_actions(obs, masks, acts)

    def predictor(self) -> Predictor:
        """Deterministic masked predictor (``serverfarm_gym.evaluation.efficiency``, ``serverfarm_gym.evaluation.exact``)."""
        try:  # numpy forward passes: the same argmax, without torch's per-call overhead
            pred = numpy_predictor(self.policy)
        except ValueError:
            pred = model_predictor(self.policy)
        return pred if self.view is None else self.view.wrap(pred)
