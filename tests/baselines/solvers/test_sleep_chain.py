"""The exact right-sizing chains (serverfarm_gym.baselines.solvers.sleep_chain) against closed forms, brute force,
an independent per-server CTMC (tests/envs/test_sleep.py) and the simulator (tolerances from
Student-t intervals over replications at 99.9%, fixed seeds)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp
from scipy import stats

from serverfarm_gym.baselines.solvers.sleep_chain import (
    OFF,
    SETUP,
    SleepSpace,
    _stationary,
    evaluate_pas,
    evaluate_table,
    solve_optimum,
)
from serverfarm_gym.envs.config import farm_from_dict
from serverfarm_gym.envs.simulator import FarmSimulator
from tests.helpers.sleep import SLEEP, exact_priority_chain, sleep_farm_dict

REPLICATIONS = 12
T_QUANTILE = float(stats.t.ppf(0.9995, REPLICATIONS - 1))


def _one_server(lam, mu, gamma, alpha, buffer):
    return farm_from_dict({
        "name": "one",
        "groups": [{"name": "g", "count": 1, "service_rate": mu, "busy_power": 2.0,
                    "idle_power": 1.0, "buffer": buffer,
                    "sleep": {"power": 0.1, "setup_rate": gamma, "setup_power": 3.0,
                              "idle_timeout_rate": alpha}}],
        "job_types": [{"name": "j", "arrival_rate": lam, "groups": ["g"]}],
    })  # fmt: skip


@pytest.mark.parametrize(("lam", "mu", "gamma"), [(0.5, 1.0, 0.25), (0.9, 1.3, 2.0)])
def test_single_server_closed_form(lam, mu, gamma) -> None:
    """M/M/1 with exponential setup, off at once when idle (Welch): E[T] = 1/(mu-lam) + 1/gamma;
    a buffer of 80 leaves a truncation far below the tolerance."""
    c = _one_server(lam, mu, gamma, "inf", 80)
    space = SleepSpace(c)
    r = evaluate_table(space, np.zeros(len(space.classes)))
    assert r.mean_response_time == pytest.approx(1 / (mu - lam) + 1 / gamma, rel=1e-7)
    # power: busy a fraction lam/mu of the time (every job is served at rate mu)
    assert r.throughput == pytest.approx(lam, rel=1e-7)


def test_pas_and_tables_match_the_independent_chain() -> None:
    for sleeps in [(SLEEP, None), ({**SLEEP, "idle_timeout_rate": "inf"}, SLEEP)]:
        c = farm_from_dict(sleep_farm_dict(*sleeps))
        eff, en, et = exact_priority_chain(c)
        r = evaluate_pas(c)
        assert r.efficiency == pytest.approx(eff, rel=1e-10)
        assert r.mean_jobs == pytest.approx(en, rel=1e-10)
        assert r.mean_response_time == pytest.approx(et, rel=1e-10)


def _one_per_group():
    """Three single-server groups: a static (group, level) table of the simulator is then a
    function of the histogram (no index ties within a group)."""
    d = sleep_farm_dict(
        SLEEP, {**SLEEP, "idle_timeout_rate": "inf", "setup_rate": 1.0}, counts=(1, 1)
    )
    d["groups"].append({"name": "c", "count": 1, "service_rate": 1.5, "busy_power": 3.0,
                        "idle_power": 0.5, "buffer": 2})  # fmt: skip
    d["job_types"][0]["groups"] = ["a", "b", "c"]
    return farm_from_dict(d)


def test_simulator_equals_the_aggregated_chain() -> None:
    c = _one_per_group()
    table = np.array([[1.0, 3.0, 0.0, 0.0], [2.0, 0.5, 2.5, 0.0], [1.5, 1.2, 0.0, 0.0]])
    space = SleepSpace(c)
    prio = np.array([table[k, x[1]] for k, x in space.classes])
    exact = evaluate_table(space, prio)
    res = []
    for seed in range(REPLICATIONS):
        sim = FarmSimulator(c, seed=300 + seed)
        sim.run(4_000, "priority", table)
        st = sim.run(40_000, "priority", table)
        res.append((st.efficiency, st.mean_response_time))
    res = np.array(res)
    half = T_QUANTILE * res.std(axis=0, ddof=1) / np.sqrt(REPLICATIONS)
    assert abs(res[:, 0].mean() - exact.efficiency) <= half[0]
    assert abs(res[:, 1].mean() - exact.mean_response_time) <= half[1]


def _brute_force(space: SleepSpace) -> float:
    """The best deterministic stationary dispatcher, by enumeration (tiny farms)."""
    choices = []  # per (state, type) with a vacancy: the admissible available classes
    for j in range(len(space.lam)):
        adm = space.admissible(j)
        for m in range(space.n_states):
            opts = [a for a in adm if space.avail[a][m]]
            if opts:
                choices.append((m, j, opts))
    best = -np.inf
    for pick in itertools.product(*[opts for _, _, opts in choices]):
        Q = space.U.tolil()
        for (m, j, _), a in zip(choices, pick, strict=True):
            row = space.A[a].getrow(m)
            for col, v in zip(row.indices, row.data, strict=True):
                Q[m, col] += space.lam[j] * v
        Q = Q.tocsr()
        Q = (Q - sp.diags(np.asarray(Q.sum(axis=1)).ravel())).tocsr()
        pi = _stationary(Q, space.start)
        best = max(best, float(pi @ space.W) / float(pi @ space.P))
    return best


def test_lp_optimum_equals_brute_force_on_a_tiny_farm() -> None:
    d = sleep_farm_dict({**SLEEP, "idle_timeout_rate": 2.0}, {**SLEEP, "idle_timeout_rate": "inf"},
              buffers=(2, 1), counts=(1, 1))  # fmt: skip
    d["job_types"] = d["job_types"][:1]
    c = farm_from_dict(d)
    space = SleepSpace(c)
    opt, res = solve_optimum(space)
    assert opt == pytest.approx(_brute_force(space), rel=1e-7)
    assert res.efficiency == pytest.approx(opt, rel=1e-7)


def test_optimum_dominates_pas_and_every_group_order() -> None:
    c = farm_from_dict(sleep_farm_dict(SLEEP, {**SLEEP, "idle_timeout_rate": "inf"}))
    space = SleepSpace(c)
    opt, _ = solve_optimum(space)
    assert evaluate_pas(c).efficiency <= opt * (1 + 1e-9)
    for order in itertools.permutations(range(c.n_groups)):
        rank = {k: -i for i, k in enumerate(order)}
        prio = np.array([rank[k] for k, _ in space.classes], dtype=float)
        assert evaluate_table(space, prio).efficiency <= opt * (1 + 1e-9)


def test_classes_and_sizes() -> None:
    c = farm_from_dict(sleep_farm_dict(SLEEP, None, buffers=(2, 2), counts=(2, 1)))
    space = SleepSpace(c)
    modes = {x[0] for k, x in space.classes if k == 0}
    assert modes == {0, SETUP, OFF}
    assert {x[0] for k, x in space.classes if k == 1} == {0}
    # group a: 2 servers over 6 classes (on 0..2, setup 1..2, off); group b: 3 levels
    assert space.n_states == 21 * 3
    with pytest.raises(ValueError, match="max_states"):
        SleepSpace(c, max_states=10)
