"""Fixtures shared by every test package (helpers live in ``tests/helpers/``)."""

from __future__ import annotations

import pytest

from envs.config import FarmConfig


@pytest.fixture
def tiny_config() -> FarmConfig:
    """The ``tiny`` preset."""
    from envs.scenarios import load_preset

    return load_preset("tiny")
