"""Fixtures shared by the script tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def small_generalist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generalist saved to a file: PAS-cloned on a few small sampled farms (seconds)."""
    pytest.importorskip("torch")
    from serverfarm_gym.agents.token_generalist import GeneralistConfig, GeneralistTrainer

    tr = GeneralistTrainer(GeneralistConfig(
        farms=2, envs_per_farm=4, clone_farms=6, clone_steps=64, clone_epochs=6,
        distribution={"n_servers": [2, 12], "buffer": [1, 3], "n_groups": [2, 4]},
    ))  # fmt: skip
    tr.clone_pas()
    return tr.save(tmp_path_factory.mktemp("gen") / "g")
