"""The permutation-invariant token network (``serverfarm_gym.agents.generalist.network``) as an RLlib RLModule.

For users who want a bigger generalist than one machine trains: RLlib's PPO runs the
domain-randomised env (``serverfarm_gym.envs.rllib.RLlibSampledFarmEnv``: a new farm per episode, token
observations with the action mask) on a Ray cluster, with this module as the policy::

    from ray.rllib.algorithms.ppo import PPOConfig
    from serverfarm_gym.agents.generalist.rllib_module import token_module_spec
    from serverfarm_gym.envs.rllib import RLlibSampledFarmEnv

    config = (
        PPOConfig()
        .environment(env=RLlibSampledFarmEnv, env_config={"max_groups": 8, "max_levels": 8})
        .env_runners(num_env_runners=64)  # one per cluster core
        .rl_module(rl_module_spec=token_module_spec())
    )
    algo = config.build_algo()
    for _ in range(1000):
        algo.train()

Masked logits are set to RLlib's ``FLOAT_MIN`` (log of the 0/1 mask, clamped), as RLlib's own
``ActionMaskingTorchRLModule`` does. Needs the ``rllib`` extra (Ray is imported here).
"""

from __future__ import annotations

from typing import Any

import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.apis.value_function_api import ValueFunctionAPI
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.core.rl_module.torch.torch_rl_module import TorchRLModule
from ray.rllib.utils.torch_utils import FLOAT_MIN

from serverfarm_gym.agents.generalist.network import TokenNetConfig, TokenPolicyNet

__all__ = ["TokenRLModule", "token_module_spec"]


class TokenRLModule(TorchRLModule, ValueFunctionAPI):
    """Observations ``{"action_mask": [A], "observations": {"groups", "group_mask", "job"}}``;
    ``model_config`` may set ``d_model``, ``n_heads``, ``n_layers``, ``d_hidden`` and ``anchor``
    (the PAS anchor of ``serverfarm_gym.agents.generalist.network``, placed from the action mask)."""

    def setup(self) -> None:
        tokens = self.observation_space["observations"]
        groups, job = tokens["groups"].shape, tokens["job"].shape
        max_levels = int(self.action_space.n) // groups[0]
        sizes = {k: v for k, v in (self.model_config or {}).items()
                 if k in ("d_model", "n_heads", "n_layers", "d_hidden", "anchor")}  # fmt: skip
        self.net = TokenPolicyNet(TokenNetConfig(groups[1], job[0], max_levels, **sizes))

    def _net(self, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        obs = batch[Columns.OBS]
        tok = obs["observations"]
        mask = obs["action_mask"]
        logits, value = self.net(tok["groups"], tok["group_mask"], tok["job"], mask > 0.5)
        return logits + torch.clamp(torch.log(mask), min=FLOAT_MIN), value

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return {Columns.ACTION_DIST_INPUTS: self._net(batch)[0]}

    def compute_values(self, batch: dict[str, Any], embeddings: Any = None) -> torch.Tensor:
        return self._net(batch)[1]


def token_module_spec(**model_config: Any) -> RLModuleSpec:
    """``RLModuleSpec`` of :class:`TokenRLModule` (network sizes as keyword arguments)."""
    return RLModuleSpec(module_class=TokenRLModule, model_config=model_config)
