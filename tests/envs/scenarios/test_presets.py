"""serverfarm_gym.envs.scenarios.presets and serverfarm_gym.envs.scenarios.files: the shipped presets load, have their
documented shapes, and are found in a source checkout and in an installed wheel's layout."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib

from serverfarm_gym.envs.scenarios import PRESETS, geo_presets, load_preset, load_scenario
from serverfarm_gym.envs.scenarios import files as scenario_files

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("name", list(PRESETS))
def test_presets_load(name: str) -> None:
    c = load_scenario(name)
    assert c.name == name and c == load_preset(name)
    assert load_scenario(c) is c
    assert load_scenario(c.to_dict()) == c


def test_preset_shapes() -> None:
    assert load_preset("tiny").n_servers == 4
    assert load_preset("paper-100").n_servers == 100
    assert load_preset("large-10k").n_servers == 10_000
    assert load_preset("paper-100").load == pytest.approx(0.6, abs=0.02)
    # overlap-100: two types share the efficient group `new`, each with its own alternative
    ov = load_preset("overlap-100")
    assert ov.n_servers == 100 and ov.load == pytest.approx(0.5)
    names = [g.name for g in ov.groups]
    assert [[names[k] for k in jt.groups] for jt in ov.job_types] == [
        ["new", "mid"],
        ["new", "legacy"],
    ]
    assert ov.scaled(100).n_servers == 10_000
    assert not load_preset("speed-scaling").is_on_off


def test_every_preset_has_a_shipped_file() -> None:
    names = scenario_files.shipped_scenarios()
    assert set(PRESETS) <= set(names) and set(geo_presets()) <= set(names)
    assert geo_presets() == [n for n in names if n.startswith("geo-")] != []


def test_a_source_checkout_reads_the_repository_folder() -> None:
    assert scenario_files.data_dir() == ROOT / "scenarios"
    assert not list((ROOT / "scenarios").rglob("*.py"))  # data only: scenario code is in envs/


def test_an_installed_layout_reads_the_data_package_first(tmp_path, monkeypatch) -> None:
    """A wheel carries scenarios/ as envs/scenarios/data/ (pyproject.toml); there it wins."""
    data = tmp_path / "data"
    data.mkdir()
    text = (ROOT / "scenarios" / "tiny.yaml").read_text(encoding="utf-8")
    (data / "tiny.yaml").write_text(text.replace("name: tiny", "name: tiny-from-wheel", 1))
    monkeypatch.setattr(scenario_files, "_DATA_DIRS", (data, ROOT / "scenarios"))
    assert scenario_files.data_dir() == data
    assert load_preset("tiny").name == "tiny-from-wheel"
    monkeypatch.setattr(scenario_files, "_DATA_DIRS", (tmp_path / "none", tmp_path / "nor"))
    with pytest.raises(FileNotFoundError, match="reinstall serverfarm-gym"):
        load_scenario("tiny")


def test_the_wheel_maps_and_ships_every_scenario_file() -> None:
    """pyproject.toml ships the data folder as the package serverfarm_gym.envs.scenarios.data, with patterns that
    cover every file in it (so load_preset and the suites work from an installed package)."""
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]
    setup = tool["setuptools"]
    assert (
        "serverfarm_gym.envs.scenarios.data" in setup["packages"]
        and "scenarios" not in setup["packages"]
    )
    assert setup["package-dir"]["serverfarm_gym.envs.scenarios.data"] == "scenarios"
    patterns = setup["package-data"]["serverfarm_gym.envs.scenarios.data"]
    shipped = {p.relative_to(ROOT / "scenarios") for p in (ROOT / "scenarios").rglob("*")
               if p.is_file()}  # fmt: skip
    covered = {p for p in shipped if any(p.match(pat) for pat in patterns)}
    assert covered == shipped and shipped
