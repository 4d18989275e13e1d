"""Geo scenario format (envs/geo.py): loading, validation, derived arrays, mapping to the farm."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import yaml

from serverfarm_gym.envs.config import ConfigError
from serverfarm_gym.envs.geo import GeoConfig, diurnal_profile, geo_from_dict
from serverfarm_gym.envs.scenarios import geo_presets, load_geo_scenario


def small_geo() -> dict:
    """Two clusters, two ingress points, two intervals (the doc example, extended)."""
    return {
        "name": "small",
        "interval_length": 10,
        "n_intervals": 2,
        "d_min_ms": 20,
        "d_max_ms": 80,
        "clusters": [
            {
                "name": "east",
                "pue": 1.2,
                "price": [0.05, 0.08],
                "processing_delay": {"model": "mm1", "base_ms": 10},
                "groups": [
                    {
                        "name": "new",
                        "count": 4,
                        "service_rate": 2.0,
                        "busy_power": 3.0,
                        "idle_power": 1.0,
                        "buffer": 3,
                    },
                    {
                        "name": "old",
                        "count": 2,
                        "service_rate": 1.0,
                        "busy_power": 2.5,
                        "idle_power": 1.0,
                        "buffer": 2,
                    },
                ],
            },
            {
                "name": "west",
                "pue": 1.5,
                "price": 0.1,
                "processing_delay": 12,
                "groups": [
                    {
                        "name": "new",
                        "count": 5,
                        "service_rate": 2.0,
                        "busy_power": 3.0,
                        "idle_power": 1.0,
                        "buffer": 2,
                    }
                ],
            },
        ],
        "ingress": [
            {
                "name": "a",
                "rate": [4.0, 6.0],
                "latency_ms": {"east": 10, "west": 60},
                "network_cost": {"east": 0.001, "west": 0.003},
            },
            {
                "name": "b",
                "rate": {"profile": "diurnal", "mean": 5.0, "amplitude": 0.2, "peak": 1},
                "latency_ms": [65, 8],
            },
        ],
    }


# ---- the preset -----------------------------------------------------------------------------
def test_preset_loads_with_real_world_shape() -> None:
    assert "geo-us-eu" in geo_presets()
    g = load_geo_scenario("geo-us-eu")
    assert isinstance(g, GeoConfig)
    assert g.n_intervals == 24
    assert 4 <= g.n_clusters <= 5 and 4 <= g.n_ingress <= 6
    assert g.rates.shape == (24, g.n_ingress) and g.prices.shape == (24, g.n_clusters)
    for c in g.clusters:
        assert 1 <= len(c.groups) <= 2
        for gr in c.groups:
            assert 10 <= gr.count <= 40 and 2 <= gr.buffer <= 4
    # diurnal demand: every ingress varies, with its maximum at a different hour for some regions
    assert (g.rates.max(axis=0) > 1.2 * g.rates.min(axis=0)).all()
    assert len(set(np.argmax(g.rates, axis=0).tolist())) >= 3
    # region-specific price curves: different peak hours
    assert len(set(np.argmax(g.prices, axis=0).tolist())) >= 3
    # feasible every hour: demand below capacity, every ingress reaches some cluster
    assert (g.rates.sum(axis=1) < g.capacities.sum()).all()
    assert g.available.any(axis=1).all()
    # the latency budget restricts some links (partially connected), but not most
    assert 0 < (~g.available).sum() < g.available.size // 2
    np.testing.assert_allclose(g.capacities, g.utilisation_cap * g.raw_capacities)


def test_preset_farm_builds_and_matches() -> None:
    g = load_geo_scenario("geo-us-eu")
    f = g.to_farm()
    assert f.n_intervals == 24 and f.interval_length == g.interval_length
    assert f.n_job_types == g.n_ingress
    assert f.n_groups == sum(len(c.groups) for c in g.clusters)
    assert 0.3 < f.load < 0.9  # modest, simulates quickly
    np.testing.assert_allclose(f.arrival_rates, g.rates)


# ---- format details ---------------------------------------------------------------------------
def test_small_geo_fields_and_units() -> None:
    g = geo_from_dict(small_geo())
    assert g.cluster_names == ("east", "west") and g.ingress_names == ("a", "b")
    np.testing.assert_allclose(g.raw_capacities, [4 * 2 + 2 * 1, 5 * 2])
    np.testing.assert_allclose(g.capacities, [9.0, 9.0])  # default cap 0.9
    np.testing.assert_allclose(g.prices, [[0.05, 0.1], [0.08, 0.1]])
    np.testing.assert_allclose(g.latency, [[10, 60], [65, 8]])
    np.testing.assert_allclose(g.network_cost, [[0.001, 0.003], [0.0, 0.0]])
    # diurnal over 2 intervals: mean (1 + 0.2 cos(2 pi (t - 1)/2)) = 4 at t=0, 6 at t=1
    np.testing.assert_allclose(g.rates[:, 1], [4.0, 6.0])
    np.testing.assert_allclose(g.base_delays, [10, 12])
    # the latency budget defaults to D_max = 80: unloaded a->west = 60+12 <= 80, b->east = 75
    assert g.latency_budget == 80 and g.available.all()
    # exact M/M/1 delay at half the raw rate is twice the base
    np.testing.assert_allclose(g.processing_delay(g.raw_capacities / 2), [20.0, 24.0])


def test_diurnal_profile_mean_peak() -> None:
    v = diurnal_profile(10.0, 0.4, 5, 24)
    assert v.mean() == pytest.approx(10.0)
    assert int(np.argmax(v)) == 5 and v.max() == pytest.approx(14.0)
    assert v.min() == pytest.approx(6.0)


def test_budget_and_full_connectivity() -> None:
    d = small_geo()
    d["latency_budget_ms"] = 30  # only the near links: a->east (20), b->west (20)
    g = geo_from_dict(d)
    np.testing.assert_array_equal(g.available, [[True, False], [False, True]])
    d["latency_budget_ms"] = "full"
    assert geo_from_dict(d).available.all()
    d.pop("latency_budget_ms")
    d.pop("d_max_ms")
    g = geo_from_dict(d)
    assert g.d_max is None and g.latency_budget is None and g.available.all()


def test_capacity_given_overrides_cap() -> None:
    d = small_geo()
    d["clusters"][0]["capacity"] = 7.5
    d["utilisation_cap"] = 0.8
    g = geo_from_dict(d)
    np.testing.assert_allclose(g.capacities, [7.5, 8.0])


def test_round_trip_dict_yaml_json(tmp_path) -> None:
    g = geo_from_dict(small_geo())
    again = geo_from_dict(g.to_dict())
    assert again == g
    p = tmp_path / "g.yaml"
    p.write_text(yaml.safe_dump(g.to_dict()))
    assert load_geo_scenario(p) == g
    q = tmp_path / "g.json"
    q.write_text(json.dumps(g.to_dict()))
    assert load_geo_scenario(str(q)) == g
    assert load_geo_scenario(g) is g


# ---- to_farm ------------------------------------------------------------------------------------
def test_to_farm_groups_prices_job_types() -> None:
    d = small_geo()
    d["latency_budget_ms"] = 30
    g = geo_from_dict(d)
    f = g.to_farm()
    assert [gr.name for gr in f.groups] == ["east/new", "east/old", "west/new"]
    assert g.farm_group_names() == [gr.name for gr in f.groups]
    np.testing.assert_array_equal(g.cluster_of_farm_group(), [0, 0, 1])
    # price x PUE per interval
    np.testing.assert_allclose(f.prices[:, 0], [0.05 * 1.2, 0.08 * 1.2])
    np.testing.assert_allclose(f.prices[:, 1], f.prices[:, 0])
    np.testing.assert_allclose(f.prices[:, 2], [0.15, 0.15])
    np.testing.assert_allclose(f.arrival_rates, g.rates)
    assert f.interval_length == 10
    # availability = groups of the clusters within the budget
    np.testing.assert_array_equal(f.availability, [[True, True, False], [False, False, True]])
    east_new = f.groups[0]
    assert east_new.count == 4 and east_new.buffer == 3
    assert east_new.service_rate == (2.0,) * 3 and east_new.idle_power == 1.0


def test_to_farm_single_interval_and_fully_connected() -> None:
    g = geo_from_dict(small_geo())
    f = g.to_farm(1)
    assert f.n_intervals == 1 and f.name == "small@1"
    np.testing.assert_allclose(f.arrival_rates[0], g.rates[1])
    np.testing.assert_allclose(f.prices[0], [0.08 * 1.2, 0.08 * 1.2, 0.15])
    assert f.availability.all()
    with pytest.raises(ValueError, match="interval: 2 out of range"):
        g.to_farm(2)


def test_to_farm_zero_rate_interval_is_explicit() -> None:
    d = small_geo()
    d["ingress"][0]["rate"] = [0.0, 3.0]
    g = geo_from_dict(d)
    g.to_farm()  # a schedule with a zero interval is fine
    with pytest.raises(ConfigError, match=r"ingress\[0\] \(a\)\.rate: zero in interval 0"):
        g.to_farm(0)


# ---- validation ---------------------------------------------------------------------------------
def _set(path: list, value):
    def mutate(d: dict) -> None:
        node = d
        for key in path[:-1]:
            node = node[key]
        if value is _DELETE:
            del node[path[-1]]
        else:
            node[path[-1]] = value

    return mutate


_DELETE = object()

BAD = [
    (_set(["colour"], 1), r"geo: unknown key\(s\) \['colour'\]"),
    (_set(["interval_length"], _DELETE), r"geo\.interval_length: missing"),
    (_set(["n_intervals"], 0), r"geo\.n_intervals: must be >= 1"),
    (_set(["d_max_ms"], 10), r"geo\.d_max_ms: must be >= d_min_ms"),
    (_set(["utilisation_cap"], 1.0), r"geo\.utilisation_cap: must be in \(0, 1\)"),
    (_set(["clusters"], []), r"geo\.clusters: must be a non-empty list"),
    (_set(["clusters", 0, "groups"], []), r"clusters\[0\] \(east\)\.groups: an empty cluster"),
    (_set(["clusters", 1, "groups"], _DELETE), r"clusters\[1\] \(west\)\.groups: an empty cluster"),
    (_set(["clusters", 1, "name"], "east"), r"clusters\[1\] \(east\)\.name: duplicate"),
    (_set(["clusters", 0, "name"], "a/b"), r"must not contain '/'"),
    (_set(["clusters", 0, "pue"], 0.9), r"clusters\[0\] \(east\)\.pue: .* must be >= 1"),
    (
        _set(["clusters", 0, "price"], [0.1]),
        r"clusters\[0\] \(east\)\.price: a list must have one value per interval \(n_intervals = 2\)",
    ),
    (
        _set(["clusters", 0, "price"], [0.1, 0.0]),
        r"clusters\[0\] \(east\)\.price\[1\]: must be > 0",
    ),
    (
        _set(["clusters", 0, "price"], {"profile": "diurnal", "mean": 1, "amplitude": 1.0}),
        r"price\.amplitude: must be in \[0, 1\)",
    ),
    (
        _set(["clusters", 0, "price"], {"profile": "weekly", "mean": 1}),
        r"price\.profile: unknown profile 'weekly'",
    ),
    (
        _set(["clusters", 0, "processing_delay"], {"model": "mg1", "base_ms": 5}),
        r"processing_delay\.model: unknown model 'mg1'",
    ),
    (_set(["clusters", 0, "processing_delay"], _DELETE), r"processing_delay: missing"),
    (_set(["clusters", 0, "capacity"], 10.0), r"capacity: 10.0 must be below the raw service rate"),
    (
        _set(["clusters", 0, "groups", 0, "busy_power"], 0.5),
        r"groups\[0\] \(new\)\.busy_power: must exceed idle_power",
    ),
    (_set(["clusters", 0, "groups", 1, "name"], "new"), r"groups: duplicate group names"),
    (_set(["clusters", 0, "groups", 0, "count"], 0), r"groups\[0\] \(new\)\.count: must be >= 1"),
    (_set(["ingress"], []), r"geo\.ingress: must be a non-empty list"),
    (_set(["ingress", 0, "rate"], [1.0, -1.0]), r"ingress\[0\] \(a\)\.rate\[1\]: must be >= 0"),
    (_set(["ingress", 0, "rate"], [0.0, 0.0]), r"ingress\[0\] \(a\)\.rate: at least one interval"),
    (_set(["ingress", 0, "latency_ms"], {"east": 10}), r"latency_ms: missing value\(s\).*west"),
    (
        _set(["ingress", 0, "latency_ms"], {"east": 10, "west": 5, "north": 1}),
        r"latency_ms: unknown cluster\(s\) \['north'\]",
    ),
    (_set(["ingress", 1, "latency_ms"], [1, 2, 3]), r"latency_ms: a list needs one value per"),
    (_set(["ingress", 0, "latency_ms"], 5), r"latency_ms: expected a mapping"),
    (_set(["ingress", 0, "network_cost"], {"east": -1, "west": 0}), r"network_cost\[east\]"),
    (_set(["ingress", 1, "name"], "a"), r"ingress\[1\] \(a\)\.name: duplicate"),
    (
        _set(["latency_budget_ms"], 15),
        r"ingress\[0\] \(a\)\.latency_ms: no cluster within latency_budget_ms \(15.0\); "
        r"the nearest is east at 20 ms",
    ),
    (_set(["job_size"], {"distribution": "gamma"}), r"geo\.job_size\.distribution: unknown"),
]


@pytest.mark.parametrize(("mutate", "message"), BAD)
def test_validation_names_the_field(mutate, message) -> None:
    d = copy.deepcopy(small_geo())
    mutate(d)
    with pytest.raises(ConfigError, match=message):
        geo_from_dict(d)


def test_load_errors(tmp_path) -> None:
    with pytest.raises(ConfigError, match="neither a geo preset"):
        load_geo_scenario("no-such-geo")
    with pytest.raises(ConfigError, match="expected a preset name"):
        load_geo_scenario(42)  # type: ignore[arg-type]
    p = tmp_path / "list.yaml"
    p.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_geo_scenario(p)
