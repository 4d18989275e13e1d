"""Fixtures shared by every test package (helpers live in ``tests/helpers/``)."""

from __future__ import annotations

import pytest

from serverfarm_gym.envs.config import FarmConfig


@pytest.fixture
def tiny_config() -> FarmConfig:
    """The ``tiny`` preset."""
    from serverfarm_gym.envs.scenarios import load_preset

    return load_preset("tiny")
