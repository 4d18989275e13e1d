"""Bad input never crashes, hangs or is silently changed: every class of bad scenario
value, env argument and action is refused with a ValueError naming the field and the fix, and
values at the limits are still accepted."""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from serverfarm_gym.envs.config import farm_from_dict
from serverfarm_gym.envs.geo import geo_from_dict
from serverfarm_gym.envs.scenarios import load_preset
from serverfarm_gym.envs.server_farm import ServerFarmEnv
from serverfarm_gym.envs.validation import (
    MAX_BUFFER,
    MAX_EPOCHS_PER_DURATION,
    MAX_LEVELS,
    MAX_OVERLOAD,
    MAX_SERVERS,
    MIN_ARRIVALS_PER_INTERVAL,
    VALUE_MAX,
    VALUE_MIN,
    ConfigError,
)


def tiny() -> dict[str, Any]:
    return load_preset("tiny").to_dict()


def small_geo() -> dict[str, Any]:
    return {
        "name": "g",
        "interval_length": 10.0,
        "n_intervals": 2,
        "clusters": [
            {
                "name": "east",
                "price": [0.05, 0.08],
                "processing_delay": {"model": "mm1", "base_ms": 20},
                "groups": [
                    {
                        "name": "n",
                        "count": 4,
                        "service_rate": 2.0,
                        "busy_power": 0.3,
                        "idle_power": 0.1,
                        "buffer": 3,
                    }
                ],
            }
        ],
        "ingress": [{"name": "na", "rate": [2.0, 3.0], "latency_ms": {"east": 10}}],
    }


def at(*path: Any, value: Any) -> Callable[[dict], None]:
    def mutate(d: dict) -> None:
        for p in path[:-1]:
            d = d[p]
        d[path[-1]] = value

    return mutate


G0, J0, J1 = ("groups", 0), ("job_types", 0), ("job_types", 1)

# (id, mutation of the tiny preset, regex the message must match: field and limit)
REFUSED: list[tuple[str, Callable[[dict], None], str]] = [
    (
        "nested group list",
        at(*J0, "groups", value=[["slow"], "fast"]),
        r"job_types\[0\] \(web\)\.groups\[0\]: expected a name \(a string\), got \['slow'\]",
    ),
    (
        "distribution given as a list",
        at("job_size", value={"distribution": ["erlang"]}),
        r"job_size\.distribution: unknown distribution \['erlang'\]",
    ),
    (
        "arrival rate 1e300",
        at(*J0, "arrival_rate", value=1e300),
        r"job_types\[0\] \(web\)\.arrival_rate: 1e\+300 is outside \[1e-06, 1e\+06\]",
    ),
    (
        "service rate 1e300",
        at(*G0, "service_rate", value=1e300),
        r"groups\[0\] \(slow\)\.service_rate: 1e\+300 is outside \[1e-06, 1e\+06\]",
    ),
    (
        "tiny service rate in a level list",
        at(*G0, "service_rate", value=[1.0, 1e-9, 1.0]),
        r"groups\[0\] \(slow\)\.service_rate\[1\]: 1e-09 is outside",
    ),
    ("busy power 1e9", at(*G0, "busy_power", value=1e9), r"groups\[0\] \(slow\)\.busy_power"),
    ("idle power 1e-300", at(*G0, "idle_power", value=1e-300), r"\.idle_power: 1e-300"),
    ("price 1e7", at(*G0, "price", value=1e7), r"groups\[0\] \(slow\)\.price"),
    (
        "interval length 1e9",
        at("interval_length", value=1e9),
        r"^interval_length: 1000000000\.0 is outside",
    ),
    (
        "buffer 10^6",
        at(*G0, "buffer", value=10**6),
        rf"groups\[0\] \(slow\)\.buffer: must be <= {MAX_BUFFER:,}",
    ),
    (
        "servers beyond the limit",
        at(*G0, "count", value=MAX_SERVERS + 1),
        rf"groups\[0\] \(slow\)\.count: must be <= {MAX_SERVERS:,}",
    ),
    (
        "too many servers in all",
        lambda d: [g.__setitem__("count", MAX_SERVERS // 2 + 1) for g in d["groups"]],
        rf"groups: .* servers in all; at most {MAX_SERVERS:,}",
    ),
    (
        "too many levels in all",
        lambda d: d.update(
            groups=[dict(d["groups"][0], name=f"g{i}", buffer=MAX_BUFFER) for i in range(11)],
            job_types=[{"name": "j", "arrival_rate": 1.0, "groups": ["g0"]}],
        ),
        rf"groups: the buffers add up to 11,000 levels; at most {MAX_LEVELS:,}",
    ),
    (
        "overload",
        at(*J1, "arrival_rate", value=5000.0),
        r"job_types\[1\] \(gpu\)\.arrival_rate: 5000 is more than 1000x the total service rate 4 ",
    ),
    (
        "overload in one interval",
        at(*J1, "arrival_rate", value=[1.0, 4001.0]),
        r"job_types\[1\] \(gpu\)\.arrival_rate: 4001 is more than 1000x",
    ),
    (
        "intervals shorter than the arrivals",
        lambda d: (
            d.__setitem__("interval_length", 1e-6),
            at(*J0, "arrival_rate", value=[1.0, 1.0])(d),
        ),
        r"^interval_length: 1e-06 time units hold .* arrivals on average; at least 0\.001",
    ),
    (
        "time scales too far apart",
        lambda d: (
            at(*G0, "service_rate", value=1e-6)(d),
            at("groups", 1, "service_rate", value=1e6)(d),
            at(*J0, "arrival_rate", value=1e3)(d),
        ),
        r"^groups\[0\] \(slow\)\.service_rate: 1e-06 against a total arrival rate of 1001: "
        r"one mean job there spans 1e\+09 decision epochs; at most 1e\+07",
    ),
    ("erlang k 10^9", at("job_size", value={"distribution": "erlang", "k": 10**9}), r"job_size\.k"),
    (
        "lognormal scv 1e300",
        at("job_size", value={"distribution": "lognormal", "scv": 1e300}),
        r"job_size\.scv: 1e\+300 is outside",
    ),
]


@pytest.mark.parametrize(("mutate", "match"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_refused_with_the_field_and_the_limit(mutate: Callable[[dict], None], match: str) -> None:
    d = tiny()
    mutate(d)
    with pytest.raises(ConfigError, match=match):
        farm_from_dict(d)


def test_values_at_the_limits_are_accepted() -> None:
    d = tiny()
    d["groups"][0].update(service_rate=VALUE_MAX, busy_power=VALUE_MAX, idle_power=VALUE_MIN)
    d["groups"][1].update(service_rate=VALUE_MIN, buffer=MAX_BUFFER)
    d["job_types"][1]["arrival_rate"] = MAX_OVERLOAD * 2 * VALUE_MIN  # fast group: 2 servers
    c = farm_from_dict(d)
    assert c.max_buffer == MAX_BUFFER and c.job_types[1].arrival_rate == (2e-3,)
    d = tiny()
    rate = d["job_types"][0]["arrival_rate"] + d["job_types"][1]["arrival_rate"]
    d["job_types"][0]["arrival_rate"] = [d["job_types"][0]["arrival_rate"]] * 2
    d["interval_length"] = MIN_ARRIVALS_PER_INTERVAL / rate
    assert farm_from_dict(d).is_time_varying
    d = tiny()  # epochs per mean duration of the slowest group exactly at the limit
    d["groups"][0]["service_rate"] = VALUE_MIN
    total = d["job_types"][0]["arrival_rate"] + d["job_types"][1]["arrival_rate"]
    d["job_types"][0]["arrival_rate"] += MAX_EPOCHS_PER_DURATION * VALUE_MIN - total
    assert farm_from_dict(d).epochs_per_duration == pytest.approx(MAX_EPOCHS_PER_DURATION)


WEIRD = [None, [], {}, [[1]], {"a": [1]}, "x", True, -1, 0, math.nan, math.inf, 1e300, 1.5]


def _leaves(d: Any, path: tuple = ()) -> list[tuple]:
    if isinstance(d, dict):
        return [p for k, v in d.items() for p in _leaves(v, (*path, k))] or [path]
    if isinstance(d, list):
        return [p for i, v in enumerate(d) for p in _leaves(v, (*path, i))] or [path]
    return [path]


@pytest.mark.parametrize(
    ("build", "spec"), [(farm_from_dict, tiny), (geo_from_dict, small_geo)], ids=["farm", "geo"]
)
def test_any_value_anywhere_is_accepted_or_a_config_error(build, spec) -> None:
    """Every field (leaf and container) replaced by each odd value: the validator either accepts
    it or raises ConfigError, never TypeError/KeyError/... from deep inside."""
    base = spec()
    paths = set(_leaves(base))
    paths |= {p[:i] for p in paths for i in range(1, len(p))}
    for path in sorted(paths, key=str):
        for value in WEIRD:
            d = copy.deepcopy(base)
            at(*path, value=value)(d)
            with contextlib.suppress(ConfigError):
                build(d)


# ---------------------------------------------------------------------------------------------
# env arguments and actions
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"reward_scale": math.inf}, r"reward_scale: must be a finite number > 0, got inf"),
        ({"reward_scale": math.nan}, r"reward_scale: must be a finite number"),
        ({"reward_scale": "1"}, r"reward_scale: expected a number, got '1'"),
        ({"eta_tau": math.inf}, r"eta_tau .*finite"),
        ({"reward_eta": math.inf}, r"reward_eta .*finite"),
        ({"reward_eta": True}, r"reward_eta .*expected a number"),
        ({"warmup_epochs": 1.5}, r"warmup_epochs: expected an integer, got 1\.5"),
        ({"warmup_epochs": 2.0}, r"warmup_epochs: expected an integer"),
        ({"warmup_epochs": "10"}, r"warmup_epochs: expected an integer"),
        ({"warmup_epochs": None}, r"warmup_epochs: expected an integer"),
    ],
)
def test_constructor_refuses_arguments_it_would_change(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ServerFarmEnv("tiny", **kwargs)


def test_constructor_accepts_numpy_numbers() -> None:
    env = ServerFarmEnv(
        "tiny", reward_scale=np.float32(2.0), reward_eta=np.float64(0.5), warmup_epochs=np.int64(3)
    )
    assert env.reward_scale == 2.0 and env.warmup_epochs == 3


@pytest.mark.parametrize("mode", ["server", "group"])
@pytest.mark.parametrize(
    "action", [1.7, np.float32(2.9), 1.0, "1", np.array([1]), np.array(1.0), None, -1, 10**6]
)
def test_actions_outside_the_space_are_refused(mode: str, action: Any) -> None:
    env = ServerFarmEnv("tiny", action_mode=mode)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"action .* is not in the action space Discrete\("):
        env.step(action)


@pytest.mark.parametrize("mode", ["server", "group"])
def test_integer_actions_of_any_kind_act_alike(mode: str) -> None:
    """Python int, NumPy integer scalars and 0-d integer arrays (what Discrete.contains accepts)
    give the same transition."""
    results = []
    for cast in (int, np.int64, np.int32, np.uint8, lambda a: np.array(a, dtype=np.int16)):
        env = ServerFarmEnv("tiny", action_mode=mode)
        _, info = env.reset(seed=3)
        a = int(np.flatnonzero(info["action_mask"])[0])
        obs, reward, *_ = env.step(cast(a))
        results.append((obs.tobytes(), reward))
    assert len(set(results)) == 1
