"""Event loop for exponential job sizes: departures of a server at level n occur at rate mu(n)
(processor sharing, memoryless)."""

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
    recompute_rates,
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
from serverfarm_gym.envs.kernels.level_sets import move_between_levels, move_server


# inlined (numba IR) into each caller: the env step runs it for one epoch at a time, and a call
# with ~20 array arguments cost ~100 ns per step (a sixth of a vector-env step); inlined, the
# step's constant policy and epoch count also prune the dispatcher code it does not use.
@kernel_njit(inline="always")
def loop_exponential(
    server_group, group_count, buffers, jg_ptr, jg_idx, mu, pw, crates, prices, interval_length,
    occ, hdata, hpos, hbase, hsize, sets, fs, isc, cnt, rng, policy, table, n_epochs,
):  # fmt: skip
    """Simulate (exponential job sizes: a server at level n finishes a job at rate mu(n), PS and
    memoryless) until ``n_epochs`` decision epochs have been dispatched by the built-in
    ``policy``; returns the number dispatched. With ``policy == POLICY_EXTERNAL`` it stops *at*
    the next decision epoch (time advanced to the arrival, integrals up to it) and leaves the
    job type in ``isc[PENDING]``. Continues from the rates W, P, C in ``fs`` (the caller re-sums
    them when it wants, see :func:`recompute_rates`), so a step costs no O(S) work.

    It also returns (early, fewer dispatched) when the countdown ``isc[BLOCKED_LEFT]`` of blocked
    arrivals reaches 0 (:func:`packed_run` sets it; 0 at a reset, i.e. no bound: the env step
    counts down from 0 and never reaches it again), so that one call on a farm that blocks almost
    everything stays short and the caller can loop in Python, where Ctrl-C is seen (blocked
    arrivals are not epochs: without a bound a call could process unboundedly many events). The
    state is then exactly that of the uninterrupted loop at that event, so calling again
    (without a re-sum) continues the same trajectory bit for bit. The countdown lives in memory
    and only the blocked-arrival path touches it: no register or work per event.

    The clock, integrals and rates live in local variables during the loop (registers, not
    memory: the loop's hottest values) and are written back to ``fs`` on return; the arithmetic is the same
    as :func:`move_server` / :func:`integrate`, operation for operation."""
    # borrowed arrays: the views and inlined helpers below then do no reference counting
    server_group, group_count, buffers = borrow(server_group), borrow(group_count), borrow(buffers)
    jg_ptr, jg_idx, mu, pw = borrow(jg_ptr), borrow(jg_idx), borrow(mu), borrow(pw)
    crates, prices, occ, hdata = borrow(crates), borrow(prices), borrow(occ), borrow(hdata)
    hpos, hbase, hsize, fs = borrow(hpos), borrow(hbase), borrow(hsize), borrow(fs)
    isc, cnt, table, sets = borrow(isc), borrow(cnt), borrow(table), borrow(sets)
    sv = set_views(sets)
    nfmin, tbase, nlev, lvoff, goff, sbuf = sv
    # PAS and other level-constant tables: the pick reads one minimum per group, and "is there a
    # non-full server" is the same reads (no separate vacancy check)
    fastpick = policy == POLICY_PRIORITY and level_constant(table, buffers)
    K = buffers.shape[0]
    NI = crates.shape[0]
    JL = crates.shape[1] - 1
    iv = isc[INTERVAL]
    price = prices[iv]
    done = 0
    t, work, energy, cost = fs[T], fs[WORK], fs[ENERGY], fs[COST]
    W, P, C = fs[WRATE], fs[PRATE], fs[CRATE]
    nj, jobtime = fs[NJOBS], fs[JOBTIME]  # jobs in the system and its integral (Little's law)
    while True:
        lam = crates[iv, JL]
        total = lam + W
        # total == 0: no arrivals in this interval and an empty farm; wait for the boundary
        dt = rng.standard_exponential() / total if total > 0.0 else np.inf
        if NI > 1:
            boundary = next_boundary(t, interval_length)
            if t + dt >= boundary:
                # memoryless: jump to the boundary, switch rates/prices, redraw
                d = boundary - t
                work += W * d
                energy += P * d
                cost += C * d
                jobtime += nj * d
                t = boundary
                iv = int(np.floor(boundary / interval_length + 0.5)) % NI
                isc[INTERVAL] = iv
                price = prices[iv]
                recompute_rates(occ, server_group, mu, pw, price, fs)
                W, P, C = fs[WRATE], fs[PRATE], fs[CRATE]
                continue
        work += W * dt
        energy += P * dt
        cost += C * dt
        jobtime += nj * dt
        t += dt
        u = rng.random() * total
        if u < lam:
            j = pick_type(crates[iv], rng)
            cnt[0, j] += 1
            if fastpick:
                s, k, b = pick_priority_kb(
                    j, table, True, jg_ptr, jg_idx, buffers, hsize, sets, sv, occ
                )
                if s < 0:
                    cnt[2, j] += 1
                    isc[BLOCKED_LEFT] -= 1
                    if isc[BLOCKED_LEFT] == 0:
                        break
                    continue
                isc[EPOCHS] += 1
            else:
                if not has_vacancy(j, jg_ptr, jg_idx, buffers, hsize, group_count):
                    cnt[2, j] += 1
                    isc[BLOCKED_LEFT] -= 1
                    if isc[BLOCKED_LEFT] == 0:
                        break
                    continue
                isc[EPOCHS] += 1
                if policy == POLICY_EXTERNAL:
                    isc[PENDING] = j
                    break
                s, k, b = choose_server(
                    policy, j, table, False, rng, jg_ptr, jg_idx, buffers, hdata, hbase, hsize,
                    group_count, sets, sv, occ,
                )  # fmt: skip
            nb = b + 1
            cnt[1, j] += 1
            done += 1
        else:
            u -= lam
            # departure: pick (k, b) with probability m_{k,b} mu_k(b) / W, then a uniform server
            k = -1
            b = -1
            for kk in range(K):
                for bb in range(1, buffers[kk] + 1):
                    m = hsize[kk, bb]
                    if m > 0:
                        r = m * mu[kk, bb]
                        k = kk
                        b = bb
                        if u < r:
                            break
                        u -= r
                else:
                    continue
                break
            if k < 0:
                continue  # no busy server (W was only rounding noise)
            i = int(rng.random() * hsize[k, b])
            s = hdata[hbase[k, b] + min(i, hsize[k, b] - 1)]
            nb = b - 1
            isc[DEPARTURES] += 1
        # move server s of group k from level b to nb (as move_server, rates kept locally)
        move_between_levels(s, k, b, nb, hdata, hpos, hbase, hsize, sets, nfmin, tbase, nlev,
                            lvoff, goff, sbuf)  # fmt: skip
        occ[s] = nb
        dp = pw[k, nb] - pw[k, b]
        W += mu[k, nb] - mu[k, b]
        P += dp
        C += price[k] * dp
        nj += nb - b
        if nb > b and done >= n_epochs:
            break
    fs[T], fs[WORK], fs[ENERGY], fs[COST] = t, work, energy, cost
    fs[WRATE], fs[PRATE], fs[CRATE] = W, P, C
    fs[NJOBS], fs[JOBTIME] = nj, jobtime
    return done


@kernel_njit()
def assign_exponential(
    s, j, server_group, mu, pw, prices, occ, hdata, hpos, hbase, hsize, sets, fs, isc, cnt
):
    """Execute the pending decision: put the pending type-j job on server s (must be non-full)."""
    k = server_group[s]
    price = prices[isc[INTERVAL]]
    move_server(s, k, occ[s], occ[s] + 1, occ, hdata, hpos, hbase, hsize, sets, mu, pw, price, fs)
    cnt[1, j] += 1
    isc[PENDING] = -1
