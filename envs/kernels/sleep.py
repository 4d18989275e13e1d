"""Event loop with dynamic right-sizing (groups with a ``sleep`` mapping; exponential job sizes).

Per-server modes ``mode[s]``: ON (serving by PS), SETUP (woken by a job, waiting for the
exponential setup at rate gamma_k; its jobs wait, none is served) and OFF (no jobs). ``occ[s]``
counts the jobs of every mode, so the level sets, masks and dispatchers of the base model apply
unchanged (an off server is at level 0: available, "n = 0"). Transitions (docs/latency.md):

* a job sent to an OFF server makes it SETUP with 1 job; to a SETUP server, one more waiting job;
* SETUP -> ON at rate gamma_k (uniform over the group's servers in setup);
* ON with n jobs: departures at rate mu_k(n); reaching 0 jobs it switches OFF at once when the
  idle-timeout rate alpha_k is inf, else waits idle and switches OFF at rate alpha_k (never when
  alpha_k = 0; groups without ``sleep`` have alpha_k = 0 and never leave ON);
* power: OFF p_off, SETUP p_setup, ON eps_k(n).

Bookkeeping besides the base model's (fields of :mod:`serverfarm_gym.envs.kernels.schema`): ``mcnt[k]``
(servers in setup, listed idle, off), ``scnt[k, b]`` (servers in setup holding b jobs: the ON
servers at level b are ``hsize[k, b] - scnt[k, b]``), and two lists per group (``mlist`` rows 0:
servers in setup, 1: idle servers with a finite positive timeout, from the group's first server;
``mpos[s]`` the position) from which the server of a setup completion or a timeout is drawn
uniformly. A departure draws (group, level) by ON rate, then a uniform server of that level set
until it is ON (rejection: levels hold ON and SETUP servers alike).

The farm-wide rates live in ``fs`` as in the base loop (W: service of ON servers, P, C by mode)
kept in local variables during a call as there, with the setup and timeout totals G, A summed
from ``mcnt`` (O(K)) after each event that changes it. The base model's
loops do not contain any of this: a farm without ``sleep`` never runs this module's code.
"""

from __future__ import annotations

import numpy as np

from serverfarm_gym.envs.kernels.cache import kernel_njit
from serverfarm_gym.envs.kernels.dispatch import (
    POLICY_EXTERNAL,
    POLICY_PRIORITY,
    choose_server,
    has_vacancy,
    level_constant,
    next_boundary,
    pick_priority_kb,
    pick_type,
)
from serverfarm_gym.envs.kernels.intrinsics import borrow
from serverfarm_gym.envs.kernels.layout import (
    BLOCKED_LEFT,
    COST,
    CRATE,
    DEPARTURES,
    ENERGY,
    EPOCHS,
    INTERVAL,
    JOBTIME,
    NJOBS,
    PENDING,
    PRATE,
    WORK,
    WRATE,
    T,
    set_views,
)
from serverfarm_gym.envs.kernels.level_sets import move_between_levels

MODE_ON, MODE_SETUP, MODE_OFF = 0, 1, 2
Z_OFF, Z_GAMMA, Z_SETUP, Z_ALPHA = 0, 1, 2, 3  # columns of zpar
L_SETUP, L_IDLE = 0, 1  # rows of mlist / the first two columns of mcnt
C_OFF = 2  # mcnt column: servers off


@kernel_njit(inline="always")
def _list_add(s, row, k, goff, mlist, mpos, mcnt):
    i = mcnt[k, row]
    mlist[row, goff[k] + i] = s
    mpos[s] = i
    mcnt[k, row] = i + 1


@kernel_njit(inline="always")
def _list_remove(s, row, k, goff, mlist, mpos, mcnt):
    last = mcnt[k, row] - 1
    i = mpos[s]
    y = mlist[row, goff[k] + last]
    mlist[row, goff[k] + i] = y
    mpos[y] = i
    mcnt[k, row] = last


@kernel_njit(inline="always")
def server_power(mode, k, n, pw, zpar):
    if mode == MODE_ON:
        return pw[k, n]
    if mode == MODE_SETUP:
        return zpar[k, Z_SETUP]
    return zpar[k, Z_OFF]


@kernel_njit()
def sleep_rates(occ, server_group, mu, pw, price, mode, zpar, fs):
    """Re-sum W (ON servers), P, C (by mode) and the jobs in the system."""
    w = 0.0
    p = 0.0
    c = 0.0
    nj = 0
    for s in range(occ.shape[0]):
        k = server_group[s]
        n = occ[s]
        m = mode[s]
        if m == MODE_ON:
            w += mu[k, n]
        q = server_power(m, k, n, pw, zpar)
        p += q
        c += price[k] * q
        nj += n
    fs[WRATE] = w
    fs[PRATE] = p
    fs[CRATE] = c
    fs[NJOBS] = nj


@kernel_njit(inline="always")
def _totals(mcnt, zpar):
    """(G, A): total setup-completion and idle-timeout rates."""
    g = 0.0
    a = 0.0
    for k in range(mcnt.shape[0]):
        g += zpar[k, Z_GAMMA] * mcnt[k, L_SETUP]
        if mcnt[k, L_IDLE] > 0:
            a += zpar[k, Z_ALPHA] * mcnt[k, L_IDLE]
    return g, a


@kernel_njit(inline="always")
def sleep_accept(s, k, occ, hdata, hpos, hbase, hsize, sets, sv, mu, pw, zpar, mode, mlist,
                 mpos, mcnt, scnt):  # fmt: skip
    """A job joins server s of group k: returns the changes (dW, dP) of the rates."""
    nfmin, tbase, nlev, lvoff, goff, sbuf = sv
    b = occ[s]
    nb = b + 1
    move_between_levels(s, k, b, nb, hdata, hpos, hbase, hsize, sets, nfmin, tbase, nlev, lvoff,
                        goff, sbuf)  # fmt: skip
    occ[s] = nb
    m = mode[s]
    if m == MODE_ON:
        if b == 0 and mpos[s] >= 0:  # a listed idle server: its timeout is off
            _list_remove(s, L_IDLE, k, goff, mlist, mpos, mcnt)
            mpos[s] = -1
        return mu[k, nb] - mu[k, b], pw[k, nb] - pw[k, b]
    if m == MODE_SETUP:
        scnt[k, b] -= 1
        scnt[k, nb] += 1
        return 0.0, 0.0
    # OFF: the job wakes it
    mode[s] = MODE_SETUP
    mcnt[k, C_OFF] -= 1
    scnt[k, nb] += 1
    _list_add(s, L_SETUP, k, goff, mlist, mpos, mcnt)
    return 0.0, zpar[k, Z_SETUP] - zpar[k, Z_OFF]


@kernel_njit(inline="always")
def _idle(s, k, goff, pw, zpar, mode, mlist, mpos, mcnt):
    """ON server s just became empty: switch it off at once (alpha inf) or list it for its
    timeout (alpha > 0); returns the change of power."""
    alpha = zpar[k, Z_ALPHA]
    if alpha == np.inf:
        mode[s] = MODE_OFF
        mcnt[k, C_OFF] += 1
        return zpar[k, Z_OFF] - pw[k, 0]
    if alpha > 0.0:
        _list_add(s, L_IDLE, k, goff, mlist, mpos, mcnt)
    return 0.0


@kernel_njit(inline="always")
def loop_sleep(
    server_group, group_count, buffers, jg_ptr, jg_idx, mu, pw, crates, prices, interval_length,
    occ, hdata, hpos, hbase, hsize, sets, fs, isc, cnt, mode, mlist, mpos, mcnt, scnt, zpar, rng,
    policy, table, n_epochs,
):  # fmt: skip
    """As :func:`serverfarm_gym.envs.kernels.exponential.loop_exponential` (same arguments and return, same
    stopping rules) for a farm with right-sizing."""
    server_group, group_count, buffers = borrow(server_group), borrow(group_count), borrow(buffers)
    jg_ptr, jg_idx, mu, pw = borrow(jg_ptr), borrow(jg_idx), borrow(mu), borrow(pw)
    crates, prices, occ, hdata = borrow(crates), borrow(prices), borrow(occ), borrow(hdata)
    hpos, hbase, hsize, fs = borrow(hpos), borrow(hbase), borrow(hsize), borrow(fs)
    isc, cnt, table, sets = borrow(isc), borrow(cnt), borrow(table), borrow(sets)
    mode, mlist, mpos, mcnt = borrow(mode), borrow(mlist), borrow(mpos), borrow(mcnt)
    scnt, zpar = borrow(scnt), borrow(zpar)
    sv = set_views(sets)
    nfmin, tbase, nlev, lvoff, goff, sbuf = sv
    levelconst = level_constant(table, buffers)
    fastpick = policy == POLICY_PRIORITY and levelconst
    K = buffers.shape[0]
    NI = crates.shape[0]
    JL = crates.shape[1] - 1
    iv = isc[INTERVAL]
    price = prices[iv]
    done = 0
    # the clock, integrals and rates in local variables (registers) during the loop, written
    # back to fs at an interval boundary and on return, as in the base loop
    t, work, energy, cost, jobtime = fs[T], fs[WORK], fs[ENERGY], fs[COST], fs[JOBTIME]
    W, P, C, nj = fs[WRATE], fs[PRATE], fs[CRATE], fs[NJOBS]
    # setup and timeout totals, summed afresh (O(K)) only after an event that changed the
    # counts they are summed from: the same values as summing at every event, no drift
    G, A = _totals(mcnt, zpar)
    while True:
        lam = crates[iv, JL]
        total = lam + W + G + A
        dt = rng.standard_exponential() / total if total > 0.0 else np.inf
        if NI > 1:
            boundary = next_boundary(t, interval_length)
            if t + dt >= boundary:
                d = boundary - t
                work += W * d
                energy += P * d
                cost += C * d
                jobtime += nj * d
                t = boundary
                iv = int(np.floor(boundary / interval_length + 0.5)) % NI
                isc[INTERVAL] = iv
                price = prices[iv]
                sleep_rates(occ, server_group, mu, pw, price, mode, zpar, fs)
                W, P, C = fs[WRATE], fs[PRATE], fs[CRATE]
                continue
        work += W * dt
        energy += P * dt
        cost += C * dt
        jobtime += nj * dt
        t += dt
        u = rng.random() * total
        dw = 0.0
        dp = 0.0
        if u < lam:
            j = pick_type(crates[iv], rng)
            cnt[0, j] += 1
            if fastpick:  # PAS-like tables: the pick is also the vacancy check
                s, k, b = pick_priority_kb(
                    j, table, True, jg_ptr, jg_idx, buffers, hsize, sets, sv, occ
                )
                blocked = s < 0
            else:
                blocked = not has_vacancy(j, jg_ptr, jg_idx, buffers, hsize, group_count)
            if blocked:
                cnt[2, j] += 1
                isc[BLOCKED_LEFT] -= 1
                if isc[BLOCKED_LEFT] == 0:
                    break
                continue
            isc[EPOCHS] += 1
            if policy == POLICY_EXTERNAL:
                isc[PENDING] = j
                break
            if not fastpick:
                s, k, b = choose_server(
                    policy, j, table, levelconst, rng, jg_ptr, jg_idx, buffers, hdata, hbase,
                    hsize, group_count, sets, sv, occ,
                )  # fmt: skip
            dw, dp = sleep_accept(s, k, occ, hdata, hpos, hbase, hsize, sets, sv, mu, pw, zpar,
                                  mode, mlist, mpos, mcnt, scnt)  # fmt: skip
            if b == 0:  # an off server woke up, or a listed idle one left the list
                G, A = _totals(mcnt, zpar)
            nj += 1.0
            cnt[1, j] += 1
            done += 1
        elif u < lam + W:
            u -= lam
            k, b = _pick_on_level(u, K, buffers, hsize, scnt, mu)
            if k < 0:
                continue  # no serving server (W was only rounding noise)
            while True:  # a uniform ON server of the level set (rejection over SETUP ones)
                i = int(rng.random() * hsize[k, b])
                s = hdata[hbase[k, b] + min(i, hsize[k, b] - 1)]
                if mode[s] == MODE_ON:
                    break
            nb = b - 1
            move_between_levels(s, k, b, nb, hdata, hpos, hbase, hsize, sets, nfmin, tbase,
                                nlev, lvoff, goff, sbuf)  # fmt: skip
            occ[s] = nb
            dw = mu[k, nb] - mu[k, b]
            dp = pw[k, nb] - pw[k, b]
            if nb == 0:
                dp += _idle(s, k, goff, pw, zpar, mode, mlist, mpos, mcnt)
                G, A = _totals(mcnt, zpar)
            nj -= 1.0
            isc[DEPARTURES] += 1
        elif u < lam + W + G:
            k = _pick_group(u - lam - W, zpar, mcnt, Z_GAMMA, L_SETUP)
            if k < 0:
                continue
            i = int(rng.random() * mcnt[k, L_SETUP])
            s = mlist[L_SETUP, goff[k] + min(i, mcnt[k, L_SETUP] - 1)]
            _list_remove(s, L_SETUP, k, goff, mlist, mpos, mcnt)
            mpos[s] = -1
            mode[s] = MODE_ON
            n = occ[s]
            scnt[k, n] -= 1
            dw = mu[k, n]
            dp = pw[k, n] - zpar[k, Z_SETUP]
            G, A = _totals(mcnt, zpar)
        else:
            k = _pick_group(u - lam - W - G, zpar, mcnt, Z_ALPHA, L_IDLE)
            if k < 0:
                continue
            i = int(rng.random() * mcnt[k, L_IDLE])
            s = mlist[L_IDLE, goff[k] + min(i, mcnt[k, L_IDLE] - 1)]
            _list_remove(s, L_IDLE, k, goff, mlist, mpos, mcnt)
            mpos[s] = -1
            mode[s] = MODE_OFF
            mcnt[k, C_OFF] += 1
            dp = zpar[k, Z_OFF] - pw[k, 0]
            G, A = _totals(mcnt, zpar)
        W += dw
        P += dp
        C += price[k] * dp
        if done >= n_epochs:
            break
    fs[T], fs[WORK], fs[ENERGY], fs[COST], fs[JOBTIME] = t, work, energy, cost, jobtime
    fs[WRATE], fs[PRATE], fs[CRATE], fs[NJOBS] = W, P, C, nj
    return done


@kernel_njit(inline="always")
def _pick_on_level(u, K, buffers, hsize, scnt, mu):
    """(group, level) with probability (ON servers there) x mu_k(b) / W; (-1, -1) if none."""
    k = -1
    b = -1
    for kk in range(K):
        for bb in range(1, buffers[kk] + 1):
            m = hsize[kk, bb] - scnt[kk, bb]
            if m > 0:
                r = m * mu[kk, bb]
                k = kk
                b = bb
                if u < r:
                    return k, b
                u -= r
    return k, b


@kernel_njit(inline="always")
def _pick_group(u, zpar, mcnt, col, row):
    """Group with probability zpar[k, col] x mcnt[k, row] / total; -1 if none."""
    k = -1
    for kk in range(mcnt.shape[0]):
        m = mcnt[kk, row]
        if m > 0:
            r = zpar[kk, col] * m
            k = kk
            if u < r:
                return k
            u -= r
    return k


@kernel_njit()
def assign_sleep(s, j, server_group, mu, pw, prices, occ, hdata, hpos, hbase, hsize, sets, fs,
                 isc, cnt, mode, mlist, mpos, mcnt, scnt, zpar):  # fmt: skip
    """Execute the pending decision: put the pending type-j job on server s (must be non-full)."""
    k = server_group[s]
    price = prices[isc[INTERVAL]]
    sv = set_views(sets)
    dw, dp = sleep_accept(s, k, occ, hdata, hpos, hbase, hsize, sets, sv, mu, pw, zpar,
                                mode, mlist, mpos, mcnt, scnt)  # fmt: skip
    fs[WRATE] += dw
    fs[PRATE] += dp
    fs[CRATE] += price[k] * dp
    fs[NJOBS] += 1.0
    cnt[1, j] += 1
    isc[PENDING] = -1


@kernel_njit()
def sleep_reset(server_group, occ, mode, mlist, mpos, mcnt, scnt, zpar):
    """Every server empty; servers of groups with right-sizing start OFF (their steady state
    does not depend on it), the others ON and unlisted (alpha = 0)."""
    mcnt[:] = 0
    scnt[:] = 0
    mpos[:] = -1
    mlist[:] = 0
    for s in range(occ.shape[0]):
        k = server_group[s]
        if zpar[k, Z_ALPHA] > 0.0:
            mode[s] = MODE_OFF
            mcnt[k, C_OFF] += 1
        else:
            mode[s] = MODE_ON
