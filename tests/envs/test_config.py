"""Scenario configuration: every validation error names its field, derived arrays, round trips,
transformations, and bad text in files (loading and presets: tests/envs/scenarios/)."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import yaml

from serverfarm_gym.envs.config import ConfigError, FarmConfig, JobSizeConfig, farm_from_dict
from serverfarm_gym.envs.scenarios import PRESETS, load_preset, load_scenario, random_farm
from tests.helpers.farms import random_scenario_dict


def base() -> dict[str, Any]:
    """A valid two-group, two-type scenario (the tiny preset plus a per-level group)."""
    return {
        "name": "base",
        "groups": [
            {
                "name": "slow",
                "count": 2,
                "service_rate": 1.0,
                "busy_power": 2.0,
                "idle_power": 1.0,
                "buffer": 3,
            },
            {
                "name": "fast",
                "count": 2,
                "service_rate": [1.0, 1.5],
                "busy_power": [3.0, 5.0],
                "idle_power": 1.0,
                "buffer": 2,
            },
        ],
        "job_types": [
            {"name": "web", "arrival_rate": 1.5, "groups": ["slow", "fast"]},
            {"name": "gpu", "arrival_rate": 1.0, "groups": ["fast"]},
        ],
        "job_size": {"distribution": "exponential"},
    }


def setter(*path: Any, value: Any) -> Callable[[dict], None]:
    """Mutation that sets ``d[path...] = value``."""

    def mutate(d: dict) -> None:
        for p in path[:-1]:
            d = d[p]
        d[path[-1]] = value

    return mutate


def deleter(*path: Any) -> Callable[[dict], None]:
    def mutate(d: dict) -> None:
        for p in path[:-1]:
            d = d[p]
        del d[path[-1]]

    return mutate


G0, G1, J0, J1 = ("groups", 0), ("groups", 1), ("job_types", 0), ("job_types", 1)

# (id, mutation, regex the message must match: it names the field)
INVALID: list[tuple[str, Callable[[dict], None], str]] = [
    # rates and powers
    (
        "service_rate zero",
        setter(*G0, "service_rate", value=0.0),
        r"groups\[0\].*service_rate.*> 0",
    ),
    ("service_rate negative", setter(*G0, "service_rate", value=-1.0), r"service_rate.*> 0"),
    (
        "service_rate level zero",
        setter(*G1, "service_rate", value=[1.0, 0.0]),
        r"groups\[1\].*service_rate\[1\]",
    ),
    ("service_rate nan", setter(*G0, "service_rate", value=float("nan")), r"service_rate.*finite"),
    ("service_rate inf", setter(*G0, "service_rate", value=float("inf")), r"service_rate.*finite"),
    ("service_rate string", setter(*G0, "service_rate", value="fast"), r"service_rate.*number"),
    ("service_rate bool", setter(*G0, "service_rate", value=True), r"service_rate.*number"),
    ("busy_power zero", setter(*G0, "busy_power", value=0.0), r"busy_power"),
    ("idle_power negative", setter(*G0, "idle_power", value=-0.1), r"idle_power.*>= 0"),
    ("arrival_rate zero", setter(*J0, "arrival_rate", value=0.0), r"job_types\[0\].*arrival_rate"),
    ("arrival_rate negative", setter(*J0, "arrival_rate", value=-2.0), r"arrival_rate.*> 0"),
    (
        "arrival_rate schedule negative",
        setter(*J0, "arrival_rate", value=[1.0, -1.0]),
        r"arrival_rate\[1\].*>= 0",
    ),
    (
        "arrival_rate schedule all zero",
        setter(*J0, "arrival_rate", value=[0.0, 0.0]),
        r"arrival_rate.*positive",
    ),
    ("arrival_rate empty list", setter(*J0, "arrival_rate", value=[]), r"arrival_rate.*empty"),
    ("price zero", setter(*G0, "price", value=0.0), r"groups\[0\].*price"),
    ("price schedule negative", setter(*G0, "price", value=[1.0, -1.0]), r"price\[1\]"),
    ("price schedule zero", setter(*G0, "price", value=[0.0, 0.0]), r"price.*positive"),
    ("interval_length zero", setter("interval_length", value=0.0), r"interval_length.*> 0"),
    ("interval_length negative", setter("interval_length", value=-1), r"interval_length"),
    # eps <= eps0
    ("busy == idle", setter(*G0, "busy_power", value=1.0), r"groups\[0\].*busy_power.*idle_power"),
    ("busy < idle", setter(*G0, "busy_power", value=0.5), r"busy_power.*idle_power"),
    (
        "busy <= idle at one level",
        setter(*G1, "busy_power", value=[3.0, 1.0]),
        r"groups\[1\].*busy_power.*level 2",
    ),
    # counts, buffers
    ("buffer zero", setter(*G0, "buffer", value=0), r"groups\[0\].*buffer.*>= 1"),
    ("buffer negative", setter(*G0, "buffer", value=-2), r"buffer.*>= 1"),
    ("buffer fractional", setter(*G0, "buffer", value=1.5), r"buffer.*integer"),
    ("count zero", setter(*G0, "count", value=0), r"count.*>= 1"),
    ("count string", setter(*G0, "count", value="two"), r"count.*integer"),
    # wrong per-level list lengths
    (
        "service_rate too short",
        setter(*G0, "service_rate", value=[1.0, 2.0]),
        r"service_rate.*length 3",
    ),
    (
        "busy_power too long",
        setter(*G1, "busy_power", value=[3.0, 4.0, 5.0]),
        r"busy_power.*length 2",
    ),
    # job types and their groups
    ("no groups", setter(*J0, "groups", value=[]), r"job_types\[0\].*groups.*non-empty"),
    ("groups a string", setter(*J0, "groups", value="slow"), r"job_types\[0\].*groups"),
    (
        "unknown group",
        setter(*J1, "groups", value=["fats"]),
        r"job_types\[1\].*unknown group 'fats'",
    ),
    ("group twice", setter(*J0, "groups", value=["slow", "slow"]), r"groups.*twice"),
    # duplicates
    ("duplicate group", setter(*G1, "name", value="slow"), r"groups\[1\].*duplicate group name"),
    ("duplicate job type", setter(*J1, "name", value="web"), r"job_types\[1\].*duplicate job type"),
    # job-size distributions
    (
        "erlang k zero",
        setter("job_size", value={"distribution": "erlang", "k": 0}),
        r"job_size\.k.*>= 1",
    ),
    (
        "erlang k fractional",
        setter("job_size", value={"distribution": "erlang", "k": 2.5}),
        r"job_size\.k.*integer",
    ),
    (
        "erlang k missing",
        setter("job_size", value={"distribution": "erlang"}),
        r"job_size\.k.*missing",
    ),
    (
        "hyperexponential scv 1",
        setter("job_size", value={"distribution": "hyperexponential", "scv": 1.0}),
        r"job_size\.scv.*> 1",
    ),
    (
        "hyperexponential scv < 1",
        setter("job_size", value={"distribution": "hyperexponential", "scv": 0.5}),
        r"job_size\.scv",
    ),
    (
        "lognormal scv 0",
        setter("job_size", value={"distribution": "lognormal", "scv": 0.0}),
        r"job_size\.scv.*> 0",
    ),
    (
        "lognormal scv < 0",
        setter("job_size", value={"distribution": "lognormal", "scv": -1.0}),
        r"job_size\.scv",
    ),
    (
        "pareto alpha 1",
        setter("job_size", value={"distribution": "pareto", "alpha": 1.0}),
        r"job_size\.alpha.*> 1",
    ),
    (
        "pareto alpha < 1",
        setter("job_size", value={"distribution": "pareto", "alpha": 0.5}),
        r"job_size\.alpha",
    ),
    ("pareto alpha missing", setter("job_size", value="pareto"), r"job_size\.alpha.*missing"),
    (
        "unknown distribution",
        setter("job_size", value={"distribution": "weibull"}),
        r"job_size\.distribution.*'weibull'",
    ),
    ("job_size not a mapping", setter("job_size", value=3), r"job_size.*mapping"),
    (
        "per-type job_size error",
        setter(*J1, "job_size", value={"distribution": "pareto", "alpha": 0.9}),
        r"job_types\[1\] \(gpu\)\.job_size\.alpha",
    ),
    # unknown keys at every level (typos)
    ("typo top", setter("grups", value=[]), r"scenario.*unknown key.*grups"),
    (
        "typo group",
        setter(*G0, "serivce_rate", value=1.0),
        r"groups\[0\].*unknown key.*serivce_rate",
    ),
    (
        "typo job type",
        setter(*J1, "arival_rate", value=1.0),
        r"job_types\[1\].*unknown key.*arival_rate",
    ),
    (
        "typo job_size",
        setter("job_size", value={"distribution": "lognormal", "scv": 1.0, "svc": 2}),
        r"job_size.*unknown key.*svc",
    ),
    (
        "param of another distribution",
        setter("job_size", value={"distribution": "exponential", "alpha": 2}),
        r"job_size.*unknown key.*alpha",
    ),
    (
        "typo per-type job_size",
        setter(*J0, "job_size", value={"distribution": "erlang", "kk": 2}),
        r"job_types\[0\].*job_size.*unknown key.*kk",
    ),
    # missing or malformed structure
    ("groups missing", deleter("groups"), r"scenario\.groups.*missing"),
    ("groups empty", setter("groups", value=[]), r"scenario\.groups.*non-empty"),
    ("job_types missing", deleter("job_types"), r"scenario\.job_types.*missing"),
    ("job_types empty", setter("job_types", value=[]), r"scenario\.job_types.*non-empty"),
    ("buffer missing", deleter(*G0, "buffer"), r"groups\[0\].*buffer.*missing"),
    ("idle_power missing", deleter(*G1, "idle_power"), r"groups\[1\].*idle_power.*missing"),
    (
        "arrival_rate missing",
        deleter(*J0, "arrival_rate"),
        r"job_types\[0\].*arrival_rate.*missing",
    ),
    ("group not a mapping", setter("groups", value=[3]), r"groups\[0\].*mapping"),
    # schedules of different lengths
    (
        "arrival schedules mismatch",
        lambda d: (
            setter(*J0, "arrival_rate", value=[1.0, 2.0])(d),
            setter(*J1, "arrival_rate", value=[1.0, 2.0, 3.0])(d),
        ),
        r"arrival_rate/price.*same number of intervals.*\[2, 3\]",
    ),
    (
        "price vs arrival mismatch",
        lambda d: (
            setter(*J0, "arrival_rate", value=[1.0, 2.0])(d),
            setter(*G1, "price", value=[1.0, 2.0, 3.0])(d),
        ),
        r"arrival_rate/price.*same number of intervals",
    ),
]


def test_base_is_valid() -> None:
    c = farm_from_dict(base())
    assert c.n_groups == 2 and c.n_job_types == 2 and c.n_servers == 4


@pytest.mark.parametrize(("mutate", "match"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_validation_error_names_the_field(mutate: Callable[[dict], None], match: str) -> None:
    d = base()
    mutate(d)
    with pytest.raises(ConfigError, match=match):
        farm_from_dict(d)


def test_config_error_is_a_value_error() -> None:
    assert issubclass(ConfigError, ValueError)
    with pytest.raises(ValueError):
        farm_from_dict({"groups": []})


def test_top_level_must_be_a_mapping() -> None:
    with pytest.raises(ConfigError, match=r"scenario.*mapping"):
        farm_from_dict([1, 2])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"scenario.*preset name"):
        load_scenario(42)  # type: ignore[arg-type]


def test_mutations_do_not_leak() -> None:
    """Sanity: the table above mutates copies (every case starts from a valid scenario)."""
    d = base()
    d2 = copy.deepcopy(d)
    INVALID[0][1](d2)
    assert d == base() and d2 != d


# ---------------------------------------------------------------------------------------------
# accepted spellings and derived arrays
# ---------------------------------------------------------------------------------------------
def test_accepted_forms() -> None:
    d = base()
    d["groups"][0]["buffer"] = 3.0  # an integral float is an integer
    d["groups"][0]["count"] = np.int64(2)
    d["groups"][0]["idle_power"] = 0  # idle power may be 0
    d["job_size"] = "exponential"  # a bare distribution name
    d["job_types"][0]["arrival_rate"] = [0.0, 2.0]  # one zero interval is fine
    c = farm_from_dict(d)
    assert c.groups[0].buffer == 3 and isinstance(c.groups[0].buffer, int)
    assert c.job_size == JobSizeConfig("exponential")
    assert c.n_intervals == 2 and c.is_time_varying
    # defaults
    d = base()
    del d["job_size"], d["name"]
    c = farm_from_dict(d)
    assert c.name == "unnamed" and c.job_size.is_exponential and c.interval_length == 1.0
    assert c.groups[0].price == (1.0,)


def test_derived_arrays() -> None:
    c = farm_from_dict(base())
    np.testing.assert_array_equal(c.buffers, [3, 2])
    np.testing.assert_array_equal(c.group_offsets, [0, 2, 4])
    np.testing.assert_array_equal(c.server_group, [0, 0, 1, 1])
    np.testing.assert_allclose(c.mu_table, [[0, 1, 1, 1], [0, 1.0, 1.5, 0]])
    np.testing.assert_allclose(c.power_table, [[1, 2, 2, 2], [1, 3, 5, 0]])
    np.testing.assert_array_equal(c.availability, [[True, True], [False, True]])
    np.testing.assert_array_equal(c.server_availability, [[True] * 4, [False, False, True, True]])
    np.testing.assert_allclose(c.arrival_rates, [[1.5, 1.0]])
    np.testing.assert_allclose(c.prices, [[1.0, 1.0]])
    # PAS priority uses the full-rate (last) level: 1/(2-1), 1.5/(5-1)
    np.testing.assert_allclose(c.group_efficiency, [1.0, 0.375])
    assert c.groups[0].is_on_off and not c.groups[1].is_on_off and not c.is_on_off
    assert c.max_buffer == 3 and c.n_intervals == 1 and not c.is_time_varying
    assert c.total_arrival_rate == pytest.approx(2.5)
    assert c.load == pytest.approx(2.5 / (2 * 1.0 + 2 * 1.5))
    assert c.job_types[1].groups == (1,)


def test_schedules_stretch_and_are_cyclic_means() -> None:
    d = base()
    d["job_types"][0]["arrival_rate"] = [1.0, 3.0, 2.0]
    d["groups"][1]["price"] = [0.5, 1.0, 2.0]
    d["interval_length"] = 0.5
    c = farm_from_dict(d)
    np.testing.assert_allclose(c.arrival_rates, [[1.0, 1.0], [3.0, 1.0], [2.0, 1.0]])
    np.testing.assert_allclose(c.prices, [[1.0, 0.5], [1.0, 1.0], [1.0, 2.0]])
    assert c.total_arrival_rate == pytest.approx(2.0 + 1.0)
    assert c.job_types[0].mean_rate == pytest.approx(2.0)
    # one cycle: 3 intervals of 0.5 time units at 3.0 jobs per unit on average
    assert c.cycle_arrivals == pytest.approx(3 * 0.5 * 3.0)


def test_job_types_sort_groups_and_use_default_size() -> None:
    d = base()
    d["job_types"][0]["groups"] = ["fast", "slow"]
    d["job_types"][1]["job_size"] = {"distribution": "erlang", "k": 2}
    d["job_size"] = {"distribution": "lognormal", "scv": 3.0}
    c = farm_from_dict(d)
    assert c.job_types[0].groups == (0, 1)
    assert c.size_of(0) == JobSizeConfig("lognormal", scv=3.0)
    assert c.size_of(1) == JobSizeConfig("erlang", k=2)
    assert not c.all_exponential


def test_job_size_params() -> None:
    """The compiled sampler's parameters (mean-1 parameterisations)."""
    assert JobSizeConfig("erlang", k=4).params() == (4.0, 0.0)
    p1, _ = JobSizeConfig("hyperexponential", scv=3.0).params()
    # balanced means: p1/(2 p1) = (1-p1)/(2(1-p1)); scv = 1/(2 p1 (1-p1)) - 1
    assert 1.0 / (2 * p1 * (1 - p1)) - 1.0 == pytest.approx(3.0)
    m, s = JobSizeConfig("lognormal", scv=2.0).params()
    assert np.exp(m + s**2 / 2) == pytest.approx(1.0) and np.exp(s**2) - 1 == pytest.approx(2.0)
    a, xm = JobSizeConfig("pareto", alpha=3.0).params()
    assert a == 3.0 and a * xm / (a - 1) == pytest.approx(1.0)
    assert [JobSizeConfig(d).code for d in ("exponential", "deterministic")] == [0, 1]


# ---------------------------------------------------------------------------------------------
# round trips and transformations
# ---------------------------------------------------------------------------------------------
def _round_trip_configs() -> list[FarmConfig]:
    out = [load_preset(p) for p in PRESETS]
    out += [random_farm(s) for s in range(5)]
    out += [farm_from_dict(random_scenario_dict(s)) for s in range(20)]
    out.append(farm_from_dict(base()))
    return out


@pytest.mark.parametrize("config", _round_trip_configs(), ids=lambda c: c.name)
def test_to_dict_round_trip(config: FarmConfig) -> None:
    again = farm_from_dict(config.to_dict())
    assert again == config
    np.testing.assert_array_equal(again.arrival_rates, config.arrival_rates)
    np.testing.assert_array_equal(again.prices, config.prices)
    # and through JSON (plain types only)
    assert farm_from_dict(json.loads(json.dumps(config.to_dict()))) == config


def test_round_trip_keeps_constant_price_schedule() -> None:
    """A price schedule with equal values over several intervals is still a schedule.

    to_dict collapses ``price: [2.0, 2.0]`` to ``2.0``, so when no other schedule has two intervals
    the reloaded farm has one interval instead of two (GroupConfig.to_dict's ``scal``).
    """
    d = base()
    d["groups"][0]["price"] = [2.0, 2.0]
    c = farm_from_dict(d)
    assert c.n_intervals == 2
    again = farm_from_dict(c.to_dict())
    assert again.n_intervals == c.n_intervals
    assert again == c


def test_round_trip_keeps_interval_length() -> None:
    """FarmConfig.to_dict writes interval_length only for time-varying farms, so a constant farm
    with ``interval_length: 2.0`` reloads with 1.0 (harmless for the dynamics, but not a round
    trip: ``again != c``)."""
    d = base()
    d["interval_length"] = 2.0
    c = farm_from_dict(d)
    assert farm_from_dict(c.to_dict()) == c


def test_scaled() -> None:
    d = base()
    d["job_types"][1]["arrival_rate"] = [1.0, 2.0]
    d["groups"][1]["price"] = [1.0, 3.0]
    c = farm_from_dict(d)
    s = c.scaled(3)
    assert s.name == "base-x3"
    assert [g.count for g in s.groups] == [6, 6]
    np.testing.assert_allclose(s.arrival_rates, 3 * c.arrival_rates)
    np.testing.assert_allclose(s.mu_table, c.mu_table)
    np.testing.assert_allclose(s.power_table, c.power_table)
    np.testing.assert_allclose(s.prices, c.prices)
    assert s.load == pytest.approx(c.load)
    assert c.scaled(1, name="same") == farm_from_dict({**c.to_dict(), "name": "same"})
    for bad in (0, -1, 1.5):
        with pytest.raises(ConfigError, match="scale factor"):
            c.scaled(bad)
    # paper-100 -> large-10k is exactly the x100 scaling
    big = load_preset("paper-100").scaled(100, name="large-10k")
    ref = load_preset("large-10k")
    assert big.groups == ref.groups and big.job_types == ref.job_types


def test_with_job_size() -> None:
    d = base()
    d["job_types"][0]["job_size"] = {"distribution": "erlang", "k": 2}
    c = farm_from_dict(d)
    p = c.with_job_size({"distribution": "pareto", "alpha": 2.5})
    assert all(jt.job_size is None for jt in p.job_types)
    assert all(p.size_of(j) == JobSizeConfig("pareto", alpha=2.5) for j in range(2))
    assert p.groups == c.groups
    e = p.with_job_size(JobSizeConfig("exponential"))
    assert e.all_exponential
    with pytest.raises(ConfigError, match=r"job_size\.scv"):
        c.with_job_size({"distribution": "hyperexponential", "scv": 0.5})


def test_config_is_frozen() -> None:
    c = farm_from_dict(base())
    with pytest.raises(AttributeError):
        c.name = "x"  # type: ignore[misc]


# ---- text fields, YAML alias bombs, huge numbers -------------------------------------------------
def _alias_bomb(depth: int = 40) -> str:
    """YAML flow text of a list whose items are lists of 9 aliases of the previous one: under
    3 KB, but ``str()`` of it has 9^40 leaves (it never returns); PyYAML builds it at once, as
    shared references."""
    levels = ["&a0 [" + ", ".join(["lol"] * 9) + "]"]
    levels += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, depth)]
    return "[" + ", ".join(levels) + "]"


BOMB_FIELDS = [
    ("name", r"^\S+: scenario\.name: expected a string, got \[\["),
    ("description", r"scenario\.description: expected a string"),
    ("groups[0].name", r"groups\[0\]\.name: expected a string"),
    ("job_types[0].name", r"job_types\[0\]\.name: expected a string"),
    ("job_types[0].groups", r"job_types\[0\] \(web\)\.groups\[0\]: expected a name"),
    ("job_types[0].arrival_rate", r"job_types\[0\] \(web\)\.arrival_rate\[0\]: expected a number"),
    ("groups[0].service_rate", r"groups\[0\] \(slow\)\.service_rate: a list must have one value"),
    ("groups[1].price", r"groups\[1\] \(fast\)\.price\[0\]: expected a number"),
    ("groups[0].idle_power", r"groups\[0\] \(slow\)\.idle_power: expected a number"),
    ("job_size.distribution", r"job_size\.distribution: unknown distribution \[\["),
]


def _with_field(d: dict, path: str, marker: str) -> dict:
    keys = [
        int(k) if k.isdigit() else k for k in path.replace("[", ".").replace("]", "").split(".")
    ]
    target = d
    for k in keys[:-1]:
        target = target[k]
    target[keys[-1]] = marker
    return d


@pytest.mark.parametrize(("field", "match"), BOMB_FIELDS, ids=[f for f, _ in BOMB_FIELDS])
def test_a_yaml_alias_bomb_in_any_field_is_refused_without_expanding_it(field, match, tmp_path):
    # the bomb goes in through a real YAML file, where the aliases are (json has none)
    d = _with_field(load_preset("tiny").to_dict(), field, "BOMB")
    text = yaml.safe_dump(d, sort_keys=False).replace("BOMB", _alias_bomb())
    path = tmp_path / "bomb.yaml"
    path.write_text(text)
    assert len(text) < 4000
    with pytest.raises(ConfigError, match=match) as err:
        load_scenario(path)
    assert len(str(err.value)) < 1000  # the message shows a few items, not the expansion


def test_a_yaml_alias_bomb_in_a_geo_scenario_is_refused(tmp_path):
    from serverfarm_gym.envs.scenarios import geo_presets, load_geo_scenario

    d = load_geo_scenario(geo_presets()[0]).to_dict()
    for where, target in (("geo.description", d), ("clusters[0].name", d["clusters"][0])):
        target["description" if where.startswith("geo") else "name"] = "BOMB"
        path = tmp_path / "bomb.yaml"
        path.write_text(yaml.safe_dump(d, sort_keys=False).replace("BOMB", _alias_bomb()))
        with pytest.raises(ConfigError, match=rf"{re.escape(where)}: expected a string"):
            load_scenario(path)
        target["description" if where.startswith("geo") else "name"] = "ok"


@pytest.mark.parametrize(
    ("value", "shown"),
    [(None, "None"), (["a", "b"], r"\['a', 'b'\]"), (7, "7"), ({"x": 1}, r"\{'x': 1\}")],
)
@pytest.mark.parametrize("field", ["name", "description", "groups[1].name", "job_types[1].name"])
def test_names_and_descriptions_must_be_strings(field, value, shown):
    # a null or a list was turned into the string "None" / "['a', 'b']"
    d = _with_field(base(), field, value)
    with pytest.raises(ConfigError, match=rf"{re.escape(field)}: expected a string, got {shown}"):
        farm_from_dict(d)


def test_names_and_descriptions_have_a_bounded_length():
    from serverfarm_gym.envs.validation import MAX_DESCRIPTION_LENGTH, MAX_NAME_LENGTH

    ok = base() | {"name": "n" * MAX_NAME_LENGTH, "description": "d" * MAX_DESCRIPTION_LENGTH}
    assert farm_from_dict(ok).name == "n" * MAX_NAME_LENGTH
    with pytest.raises(ConfigError, match=r"^scenario\.name: 201 characters; at most 200"):
        farm_from_dict(base() | {"name": "n" * (MAX_NAME_LENGTH + 1)})
    with pytest.raises(ConfigError, match=r"scenario\.description: 10,001 characters"):
        farm_from_dict(base() | {"description": "d" * (MAX_DESCRIPTION_LENGTH + 1)})
    d = base()
    d["groups"][0]["name"] = "g" * 1000
    with pytest.raises(ConfigError, match=r"groups\[0\]\.name: 1,000 characters"):
        farm_from_dict(d)


@pytest.mark.parametrize("digits", [400, 5000])
@pytest.mark.parametrize(
    ("field", "match"),
    [
        (
            "groups[0].idle_power",
            r"groups\[0\] \(slow\)\.idle_power: must be finite, got an integer",
        ),
        (
            "job_types[0].arrival_rate",
            r"job_types\[0\] \(web\)\.arrival_rate: must be finite, got an integer",
        ),
        ("groups[0].count", r"groups\[0\] \(slow\)\.count: must be <= 1,000,000, got an integer"),
        ("groups[0].buffer", r"groups\[0\] \(slow\)\.buffer: must be <= 1,000, got an integer"),
    ],
)
def test_huge_integers_in_a_file_name_the_field(field, match, digits, tmp_path):
    # a 400-digit integer was an OverflowError traceback (float() of it); one of 5,000 digits,
    # past Python's int-str conversion limit, raised while the message was being formatted
    d = _with_field(load_preset("tiny").to_dict(), field, "HUGE")
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(d).replace('"HUGE"', "1" + "0" * (digits - 1)))
    if digits > 4300:
        # past Python's int-str conversion limit the reader refuses it before parsing, naming
        # the line and the key (json.dumps writes one line)
        key = field.rsplit(".", 1)[-1]
        match = rf"line 1: {key}: a number of {digits:,} digits"
    else:
        match = rf"{match} of about {digits:,} digits"
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: {match}"):
        load_scenario(path)


def test_a_schedule_has_a_bounded_number_of_intervals():
    from serverfarm_gym.envs.validation import MAX_INTERVALS, MAX_SCHEDULE_ENTRIES

    d = base()
    d["job_types"][0]["arrival_rate"] = [1.0] * (MAX_INTERVALS + 1)
    with pytest.raises(
        ConfigError, match=r"job_types\[0\] \(web\)\.arrival_rate: 100,001 intervals"
    ):
        farm_from_dict(d)
    # intervals x (types + groups) values in the per-interval tables
    n_types = MAX_SCHEDULE_ENTRIES // MAX_INTERVALS
    d = base()
    d["job_types"] = [
        {"name": f"t{j}", "arrival_rate": 0.01, "groups": ["slow"]} for j in range(n_types)
    ]
    d["groups"][0]["price"] = [1.0] * MAX_INTERVALS
    with pytest.raises(ConfigError, match=r"100,000 intervals x 100 job types and 2 groups"):
        farm_from_dict(d)
