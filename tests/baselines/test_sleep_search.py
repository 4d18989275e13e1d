"""Static baselines for right-sizing (serverfarm_gym.baselines.sleep_search) and the sleep presets."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from serverfarm_gym.baselines.sleep_search import best_static_order, heuristic_orders, priority_of
from serverfarm_gym.baselines.solvers.sleep_chain import (
    SleepSpace,
    evaluate_pas,
    evaluate_table,
    solve_optimum,
)
from serverfarm_gym.envs.config import farm_from_dict
from serverfarm_gym.envs.scenarios import load_scenario
from serverfarm_gym.envs.simulator import FarmSimulator
from tests.helpers.sleep import SLEEP, sleep_farm_dict

ROOT = Path(__file__).resolve().parents[2]


def _space() -> SleepSpace:
    return SleepSpace(farm_from_dict(sleep_farm_dict(SLEEP, {**SLEEP, "idle_timeout_rate": "inf"})))


def test_heuristic_orders_rank_every_class() -> None:
    space = _space()
    orders = heuristic_orders(space)
    for order in orders.values():
        assert sorted(order) == list(range(len(space.classes)))
    awake = [space.classes[a][1][0] for a in orders["join-awake"]]
    assert awake == sorted(awake)  # every ON class before every SETUP before every OFF
    p = priority_of([2, 0, 1])
    assert list(np.argsort(-p)) == [2, 0, 1]


def test_search_improves_on_its_starts_and_stays_below_the_optimum() -> None:
    space = _space()
    starts = heuristic_orders(space)
    found = best_static_order(space, max_evaluations=150)
    opt, _ = solve_optimum(space)
    for order in starts.values():
        assert found.result.efficiency >= evaluate_table(space, priority_of(order)).efficiency
    assert found.result.efficiency <= opt * (1 + 1e-9)
    assert found.evaluations <= 150 + len(starts)
    again = evaluate_table(space, priority_of(found.order))
    assert again.efficiency == pytest.approx(found.result.efficiency, rel=1e-12)


def test_sleep_tiny_preset_numbers() -> None:
    """The exact numbers in scenarios/sleep-tiny.yaml's header."""
    c = load_scenario(str(ROOT / "scenarios" / "sleep-tiny.yaml"))
    space = SleepSpace(c)
    assert space.n_states == 1008
    opt, res = solve_optimum(space)
    assert opt == pytest.approx(0.352808, abs=5e-7)
    assert res.mean_response_time == pytest.approx(1.824, abs=5e-4)
    pas = evaluate_pas(c)
    assert pas.efficiency == pytest.approx(0.344842, abs=5e-7)


def test_sleep_100_preset_runs() -> None:
    c = load_scenario(str(ROOT / "scenarios" / "sleep-100.yaml"))
    assert c.n_servers == 100 and all(g.sleep is not None for g in c.groups)
    sim = FarmSimulator(c, seed=0)
    st = sim.run(20_000, "priority", np.repeat(c.group_efficiency[:, None], c.max_buffer + 1, 1))
    assert st.efficiency > 0 and st.mean_response_time > 0
    assert sim.mode_counts[:, 0].sum() > 0  # some servers asleep at load 0.6
