"""serverfarm_gym.envs.scenarios.loading: load_scenario from a file, a preset name, a dict or a config, and its
errors."""

from __future__ import annotations

import json

import pytest
import yaml

from serverfarm_gym.envs.config import ConfigError, farm_from_dict
from serverfarm_gym.envs.scenarios import load_preset, load_scenario
from tests.helpers.farms import random_scenario_dict


@pytest.mark.parametrize("suffix", [".yaml", ".yml", ".json"])
def test_load_from_file(tmp_path, suffix: str) -> None:
    c = farm_from_dict(random_scenario_dict(5, time_varying=True, per_level=True))
    path = tmp_path / f"farm{suffix}"
    text = json.dumps(c.to_dict()) if suffix == ".json" else yaml.safe_dump(c.to_dict())
    path.write_text(text)
    assert load_scenario(path) == c
    assert load_scenario(str(path)) == c


def test_load_file_errors(tmp_path) -> None:
    p = tmp_path / "list.yaml"
    p.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_scenario(p)
    bad = random_scenario_dict(5)
    bad["groups"][0]["buffer"] = 0
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(bad))
    with pytest.raises(ConfigError, match=r"groups\[0\].*buffer"):
        load_scenario(p)


def test_unknown_preset_message() -> None:
    with pytest.raises(ConfigError, match=r"'no-such-farm'.*neither a preset.*tiny"):
        load_scenario("no-such-farm")
    with pytest.raises(ConfigError, match=r"unknown preset 'no-such-farm'.*tiny"):
        load_preset("no-such-farm")
