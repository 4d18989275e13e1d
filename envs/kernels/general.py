"""Event loop for general job sizes: exact processor sharing with per-job remaining work (virtual
clocks, see the package docstring)."""

from __future__ import annotations

import numpy as np

from serverfarm_gym.envs.kernels.cache import kernel_njit
from serverfarm_gym.envs.kernels.dispatch import (
    POLICY_EXTERNAL,
    POLICY_PRIORITY,
    choose_server,
    has_vacancy,
    integrate,
    level_constant,
    next_boundary,
    pick_type,
    recompute_rates,
    sample_size,
)
from serverfarm_gym.envs.kernels.intrinsics import borrow
from serverfarm_gym.envs.kernels.layout import (
    BLOCKED_LEFT,
    DEPARTURES,
    DHEAP_SIZE,
    EPOCHS,
    INTERVAL,
    NEXT_ARR,
    PENDING,
    T,
    set_views,
)
from serverfarm_gym.envs.kernels.level_sets import move_server


@kernel_njit()
def _dheap_up(dheap, dpos, dkey, i):
    x = dheap[i]
    kx = dkey[x]
    while i > 0:
        p = (i - 1) >> 1
        y = dheap[p]
        if dkey[y] <= kx:
            break
        dheap[i] = y
        dpos[y] = i
        i = p
    dheap[i] = x
    dpos[x] = i


@kernel_njit()
def _dheap_down(dheap, dpos, dkey, size, i):
    x = dheap[i]
    kx = dkey[x]
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        y = dheap[c]
        if c + 1 < size and dkey[dheap[c + 1]] < dkey[y]:
            c += 1
            y = dheap[c]
        if kx <= dkey[y]:
            break
        dheap[i] = y
        dpos[y] = i
        i = c
    dheap[i] = x
    dpos[x] = i


@kernel_njit()
def _dheap_update(s, key, dheap, dpos, dkey, isc):
    """Insert, re-key or (key = inf) remove server s in the departure heap."""
    size = isc[DHEAP_SIZE]
    i = dpos[s]
    if key == np.inf:
        if i >= 0:
            last = size - 1
            dpos[s] = -1
            if i != last:
                y = dheap[last]
                dheap[i] = y
                dpos[y] = i
                _dheap_down(dheap, dpos, dkey, last, i)
                _dheap_up(dheap, dpos, dkey, dpos[y])
            isc[DHEAP_SIZE] = last
        dkey[s] = np.inf
        return
    dkey[s] = key
    if i < 0:
        dheap[size] = s
        dpos[s] = size
        isc[DHEAP_SIZE] = size + 1
        _dheap_up(dheap, dpos, dkey, size)
    else:
        _dheap_up(dheap, dpos, dkey, i)
        _dheap_down(dheap, dpos, dkey, isc[DHEAP_SIZE], dpos[s])


@kernel_njit()
def _refresh_server(s, k, t, occ, mu, vwork, tlast, jobs, dheap, dpos, dkey, isc):
    """Bring s's virtual clock to time t (occupancy unchanged since tlast)."""
    n = occ[s]
    if n > 0:
        vwork[s] += (t - tlast[s]) * mu[k, n] / n
    tlast[s] = t


@kernel_njit()
def _reschedule(s, k, t, occ, mu, vwork, jobs, dheap, dpos, dkey, isc):
    n = occ[s]
    if n == 0:
        vwork[s] = 0.0  # reset the clock when empty: keeps marks small (precision)
        _dheap_update(s, np.inf, dheap, dpos, dkey, isc)
        return
    fmin = jobs[s, 0]
    for i in range(1, n):
        if jobs[s, i] < fmin:
            fmin = jobs[s, i]
    rem = fmin - vwork[s]
    if rem < 0.0:
        rem = 0.0
    _dheap_update(s, t + rem * n / mu[k, n], dheap, dpos, dkey, isc)


@kernel_njit()
def _general_accept(s, j, t, server_group, mu, pw, price, dist, dparams, occ, hdata, hpos, hbase,
                    hsize, sets, fs, isc, cnt, vwork, tlast, jobs, dheap, dpos, dkey, rng):  # fmt: skip
    k = server_group[s]
    _refresh_server(s, k, t, occ, mu, vwork, tlast, jobs, dheap, dpos, dkey, isc)
    n = occ[s]
    jobs[s, n] = vwork[s] + sample_size(dist[j], dparams[j, 0], dparams[j, 1], rng)
    move_server(s, k, n, n + 1, occ, hdata, hpos, hbase, hsize, sets, mu, pw, price, fs)
    _reschedule(s, k, t, occ, mu, vwork, jobs, dheap, dpos, dkey, isc)
    cnt[1, j] += 1


@kernel_njit()
def loop_general(
    server_group, group_count, buffers, jg_ptr, jg_idx, mu, pw, crates, prices, interval_length,
    dist, dparams, occ, hdata, hpos, hbase, hsize, sets, fs, isc, cnt, vwork, tlast, jobs, dheap,
    dpos, dkey, rng, policy, table, n_epochs,
):  # fmt: skip
    """As :func:`loop_exponential`, for any job-size distribution (exact PS); also returns when
    the countdown ``isc[BLOCKED_LEFT]`` of blocked arrivals reaches 0 (the state is in ``fs``, so
    a new call continues)."""
    # borrowed arrays: the views and inlined helpers below then do no reference counting
    server_group, group_count, buffers = borrow(server_group), borrow(group_count), borrow(buffers)
    jg_ptr, jg_idx, mu, pw = borrow(jg_ptr), borrow(jg_idx), borrow(mu), borrow(pw)
    crates, prices, dist, dparams = borrow(crates), borrow(prices), borrow(dist), borrow(dparams)
    occ, hdata, hpos, hbase = borrow(occ), borrow(hdata), borrow(hpos), borrow(hbase)
    hsize, fs, isc, cnt = borrow(hsize), borrow(fs), borrow(isc), borrow(cnt)
    vwork, tlast, jobs, dheap = borrow(vwork), borrow(tlast), borrow(jobs), borrow(dheap)
    dpos, dkey, table, sets = borrow(dpos), borrow(dkey), borrow(table), borrow(sets)
    sv = set_views(sets)
    levelconst = policy == POLICY_PRIORITY and level_constant(table, buffers)
    NI = crates.shape[0]
    iv = isc[INTERVAL]
    price = prices[iv]
    done = 0
    while True:
        t = fs[T]
        lam = crates[iv, crates.shape[1] - 1]
        if fs[NEXT_ARR] < 0.0:  # no arrival scheduled (fresh start or after a boundary)
            fs[NEXT_ARR] = t + rng.standard_exponential() / lam if lam > 0 else np.inf
        t_arr = fs[NEXT_ARR]
        t_dep = dkey[dheap[0]] if isc[DHEAP_SIZE] > 0 else np.inf
        t_bnd = np.inf
        if NI > 1:
            t_bnd = next_boundary(t, interval_length)
        if t_bnd <= t_arr and t_bnd <= t_dep:
            integrate(fs, t_bnd - t)
            fs[T] = t_bnd
            iv = int(np.floor(t_bnd / interval_length + 0.5)) % NI
            isc[INTERVAL] = iv
            price = prices[iv]
            recompute_rates(occ, server_group, mu, pw, price, fs)
            fs[NEXT_ARR] = -1.0  # memoryless: redraw with the new rate
            continue
        if t_dep <= t_arr:
            integrate(fs, t_dep - t)
            s = dheap[0]
            k = server_group[s]
            _refresh_server(s, k, t_dep, occ, mu, vwork, tlast, jobs, dheap, dpos, dkey, isc)
            n = occ[s]
            imin = 0
            for i in range(1, n):
                if jobs[s, i] < jobs[s, imin]:
                    imin = i
            jobs[s, imin] = jobs[s, n - 1]
            move_server(s, k, n, n - 1, occ, hdata, hpos, hbase, hsize, sets, mu, pw, price, fs)
            _reschedule(s, k, t_dep, occ, mu, vwork, jobs, dheap, dpos, dkey, isc)
            isc[DEPARTURES] += 1
            continue
        integrate(fs, t_arr - t)
        fs[NEXT_ARR] = -1.0
        j = pick_type(crates[iv], rng)
        cnt[0, j] += 1
        if not has_vacancy(j, jg_ptr, jg_idx, buffers, hsize, group_count):
            cnt[2, j] += 1
            isc[BLOCKED_LEFT] -= 1
            if isc[BLOCKED_LEFT] == 0:
                return done
            continue
        isc[EPOCHS] += 1
        if policy == POLICY_EXTERNAL:
            isc[PENDING] = j
            return done
        s = choose_server(
            policy, j, table, levelconst, rng, jg_ptr, jg_idx, buffers, hdata, hbase, hsize,
            group_count, sets, sv, occ,
        )[0]  # fmt: skip
        _general_accept(s, j, t_arr, server_group, mu, pw, price, dist, dparams, occ, hdata, hpos,
                        hbase, hsize, sets, fs, isc, cnt, vwork, tlast, jobs, dheap, dpos, dkey,
                        rng)  # fmt: skip
        done += 1
        if done >= n_epochs:
            return done


@kernel_njit()
def assign_general(s, j, server_group, mu, pw, prices, dist, dparams, occ, hdata, hpos, hbase,
                   hsize, sets, fs, isc, cnt, vwork, tlast, jobs, dheap, dpos, dkey, rng):  # fmt: skip
    price = prices[isc[INTERVAL]]
    _general_accept(s, j, fs[T], server_group, mu, pw, price, dist, dparams, occ, hdata, hpos,
                    hbase, hsize, sets, fs, isc, cnt, vwork, tlast, jobs, dheap, dpos, dkey, rng)  # fmt: skip
    isc[PENDING] = -1
