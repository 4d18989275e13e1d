"""Farms with dynamic right-sizing (groups with ``sleep``) and their exact reference: the
per-server CTMC over every server's (mode, jobs), solved here with no aggregation and no code of
the project (:func:`exact_priority_chain`), for the simulator's and the exact solvers' tests."""

from __future__ import annotations

import itertools
import math

import numpy as np
from scipy import linalg

from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.simulator import MODE_OFF, MODE_ON, MODE_SETUP

SLEEP = {"power": 0.2, "setup_rate": 0.5, "setup_power": 3.0, "idle_timeout_rate": 1.5}


def sleep_farm_dict(sleep_a=SLEEP, sleep_b=None, rate=1.5, buffers=(2, 3), counts=(2, 1)) -> dict:
    """A two-group farm whose groups a and b sleep as given (``None``: always on)."""
    ga = {"name": "a", "count": counts[0], "service_rate": 1.0, "busy_power": 2.0,
          "idle_power": 1.0, "buffer": buffers[0]}  # fmt: skip
    gb = {"name": "b", "count": counts[1], "service_rate": 2.0, "busy_power": 5.0,
          "idle_power": 1.0, "buffer": buffers[1]}  # fmt: skip
    if sleep_a is not None:
        ga["sleep"] = dict(sleep_a)
    if sleep_b is not None:
        gb["sleep"] = dict(sleep_b)
    return {
        "name": "sleepy",
        "groups": [ga, gb],
        "job_types": [
            {"name": "web", "arrival_rate": rate, "groups": ["a", "b"]},
            {"name": "gpu", "arrival_rate": 0.5, "groups": ["b"]},
        ],
    }


def server_states(g) -> list[tuple[int, int]]:
    """(mode, jobs) states of one server of group g."""
    on = [(MODE_ON, n) for n in range(g.buffer + 1)]
    if g.sleep is None:
        return on
    return [(MODE_OFF, 0), *((MODE_SETUP, n) for n in range(1, g.buffer + 1)), *on]


def exact_priority_chain(c: FarmConfig) -> tuple[float, float, float]:
    """(efficiency, E[N], E[T]) of the farm under the group-priority dispatcher (most efficient
    group with a non-full server, then the smallest index, whatever the mode) from the CTMC
    over every server's (mode, jobs)."""
    sg = c.server_group
    groups = [c.groups[k] for k in sg]
    per = [server_states(g) for g in groups]
    states = list(itertools.product(*per))
    index = {s: i for i, s in enumerate(states)}
    n = len(states)
    q = np.zeros((n, n))
    work, power, jobs, accept = (np.zeros(n) for _ in range(4))
    eff = c.group_efficiency

    def go(i: int, s: tuple, v: int, new: tuple[int, int], rate: float) -> None:
        t = list(s)
        t[v] = new
        q[i, index[tuple(t)]] += rate

    for i, s in enumerate(states):
        for v, ((m, b), g) in enumerate(zip(s, groups, strict=True)):
            z = g.sleep
            jobs[i] += b
            if m == MODE_ON:
                power[i] += g.idle_power if b == 0 else g.busy_power[b - 1]
                if b > 0:
                    work[i] += g.service_rate[b - 1]
                    off = b == 1 and z is not None and math.isinf(z.idle_timeout_rate)
                    go(i, s, v, (MODE_OFF, 0) if off else (MODE_ON, b - 1), g.service_rate[b - 1])
                elif z is not None and 0 < z.idle_timeout_rate < math.inf:
                    go(i, s, v, (MODE_OFF, 0), z.idle_timeout_rate)
            elif m == MODE_SETUP:
                power[i] += z.setup_power
                go(i, s, v, (MODE_ON, b), z.setup_rate)
            else:
                power[i] += z.power
        for jt in c.job_types:
            free = [v for v in range(len(s)) if sg[v] in jt.groups and s[v][1] < groups[v].buffer]
            if not free:
                continue
            v = min(free, key=lambda v: (-eff[sg[v]], v))
            m, b = s[v]
            new = (MODE_SETUP, 1) if m == MODE_OFF else (m, b + 1)
            go(i, s, v, new, jt.arrival_rate[0])
            accept[i] += jt.arrival_rate[0]
    q -= np.diag(q.sum(axis=1))
    reach = reachable(q, index[tuple(st[0] if groups[v].sleep is None or
                                      groups[v].sleep.idle_timeout_rate == 0 else (MODE_OFF, 0)
                                      for v, st in enumerate(per))])  # fmt: skip
    qr = q[np.ix_(reach, reach)]
    a = qr.T.copy()
    a[-1, :] = 1.0
    rhs = np.zeros(len(reach))
    rhs[-1] = 1.0
    pi = linalg.solve(a, rhs)
    en = float(pi @ jobs[reach])
    return float(pi @ work[reach]) / float(pi @ power[reach]), en, en / float(pi @ accept[reach])


def reachable(q: np.ndarray, start: int) -> list[int]:
    """States reachable from ``start`` (a server that never sleeps never reaches OFF)."""
    seen = {start}
    todo = [start]
    while todo:
        i = todo.pop()
        for j in np.flatnonzero(q[i] > 0):
            if j not in seen:
                seen.add(int(j))
                todo.append(int(j))
    return sorted(seen)
