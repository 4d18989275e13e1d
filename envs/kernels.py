"""Compiled (numba) event kernels of the farm simulator.

The Python layer (``envs.simulator``) owns configuration, state arrays and metrics; these functions
only do events. Layout of the state (all plain numpy arrays, no per-event allocation):

* ``occ[s]``: jobs on server s.
* Per (group k, level b) an *indexed binary min-heap* of the servers of group k that hold b jobs,
  keyed by server index, stored in ``hdata[hbase[k, b] : hbase[k, b] + hsize[k, b]]`` with
  ``hpos[s]`` the position of s inside its heap. ``hsize[k, b]`` is the histogram m_{k,b}.
  The heap top is the smallest-index server at that level, which is what every built-in dispatcher
  breaks ties by; a uniformly random server at a level is ``hdata[base + randint(size)]``. Moving a
  server between levels costs O(log R_k), independent of the rest of the farm.
* ``fs`` (float64[8]): time, integrated work, energy, energy cost, current total service rate W,
  power P, cost rate C, and the time of the next arrival (general-size kernel only).
* ``isc`` (int64[6]): interval index, departures, decision epochs, pending job type (-1 if none),
  size of the departure heap (general sizes), invalid actions.
* ``cnt`` (int64[3, J]): arrivals, accepted, blocked per job type.

General job sizes (processor sharing, exact): each server keeps a virtual clock ``vwork[s]`` that
advances at mu(n)/n per job (the rate every job on it is served at); a job's finish mark is the
virtual clock at its arrival plus its size, so the next departure of s is its smallest mark and
happens at real time ``tlast + (mark - vwork) * n / mu(n)``. A global indexed min-heap of busy
servers keyed by that time gives the next departure in O(log S).
"""

from __future__ import annotations

import numpy as np
from numba import njit

# indices into fs / isc
T, WORK, ENERGY, COST, WRATE, PRATE, CRATE, NEXT_ARR = range(8)
INTERVAL, DEPARTURES, EPOCHS, PENDING, DHEAP_SIZE, INVALID = range(6)

# policy kinds of the built-in dispatchers
POLICY_EXTERNAL = 0  # stop at the next decision epoch and let the caller decide
POLICY_PRIORITY = 1  # priority table over (group, level); ties to the smallest server index
POLICY_RANDOM = 2  # uniform over the available non-full servers

_JIT = {"cache": True, "nogil": True}


# ---------------------------------------------------------------------------------------------
# indexed min-heaps of server ids (one per (group, level))
# ---------------------------------------------------------------------------------------------
@njit(**_JIT)
def _sift_up(hdata, hpos, base, i):
    x = hdata[base + i]
    while i > 0:
        p = (i - 1) >> 1
        y = hdata[base + p]
        if y <= x:
            break
        hdata[base + i] = y
        hpos[y] = i
        i = p
    hdata[base + i] = x
    hpos[x] = i


@njit(**_JIT)
def _sift_down(hdata, hpos, base, size, i):
    x = hdata[base + i]
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        y = hdata[base + c]
        if c + 1 < size and hdata[base + c + 1] < y:
            c += 1
            y = hdata[base + c]
        if x <= y:
            break
        hdata[base + i] = y
        hpos[y] = i
        i = c
    hdata[base + i] = x
    hpos[x] = i


@njit(**_JIT)
def _heap_remove(hdata, hpos, base, size, s):
    """Remove server s from the heap at ``base`` of size ``size`` (returns nothing; size-1 after)."""
    i = hpos[s]
    last = size - 1
    if i != last:
        x = hdata[base + last]
        hdata[base + i] = x
        hpos[x] = i
        _sift_down(hdata, hpos, base, last, i)
        _sift_up(hdata, hpos, base, hpos[x])


@njit(**_JIT)
def _heap_push(hdata, hpos, base, size, s):
    hdata[base + size] = s
    hpos[s] = size
    _sift_up(hdata, hpos, base, size)


@njit(**_JIT)
def move_server(s, k, b, nb, occ, hdata, hpos, hbase, hsize, mu, pw, price, fs):
    """Move server s of group k from level b to level nb, keeping heaps and rates exact."""
    _heap_remove(hdata, hpos, hbase[k, b], hsize[k, b], s)
    hsize[k, b] -= 1
    _heap_push(hdata, hpos, hbase[k, nb], hsize[k, nb], s)
    hsize[k, nb] += 1
    occ[s] = nb
    dp = pw[k, nb] - pw[k, b]
    fs[WRATE] += mu[k, nb] - mu[k, b]
    fs[PRATE] += dp
    fs[CRATE] += price[k] * dp


# ---------------------------------------------------------------------------------------------
# helpers shared by both kernels
# ---------------------------------------------------------------------------------------------
@njit(**_JIT)
def _integrate(fs, dt):
    fs[WORK] += fs[WRATE] * dt
    fs[ENERGY] += fs[PRATE] * dt
    fs[COST] += fs[CRATE] * dt
    fs[T] += dt


@njit(**_JIT)
def recompute_rates(occ, server_group, mu, pw, price, fs):
    """Recompute W, P, C from scratch (removes floating drift; called at kernel entry)."""
    w = 0.0
    p = 0.0
    c = 0.0
    for s in range(occ.shape[0]):
        k = server_group[s]
        n = occ[s]
        w += mu[k, n]
        p += pw[k, n]
        c += price[k] * pw[k, n]
    fs[WRATE] = w
    fs[PRATE] = p
    fs[CRATE] = c


@njit(**_JIT)
def has_vacancy(j, jg_ptr, jg_idx, buffers, hsize, group_count):
    for q in range(jg_ptr[j], jg_ptr[j + 1]):
        k = jg_idx[q]
        if hsize[k, buffers[k]] < group_count[k]:
            return True
    return False


@njit(**_JIT)
def pick_priority(j, table, jg_ptr, jg_idx, buffers, hdata, hbase, hsize):
    """Server maximising table[k, level] among j's non-full available servers; ties smallest index."""
    best = -np.inf
    best_s = -1
    for q in range(jg_ptr[j], jg_ptr[j + 1]):
        k = jg_idx[q]
        for b in range(buffers[k]):
            if hsize[k, b] > 0:
                v = table[k, b]
                s = hdata[hbase[k, b]]
                if best_s < 0 or v > best or (v == best and s < best_s):
                    best = v
                    best_s = s
    return best_s


@njit(**_JIT)
def pick_random(j, rng, jg_ptr, jg_idx, buffers, hdata, hbase, hsize, group_count):
    """Uniformly random non-full server available to j (there must be one)."""
    total = 0
    for q in range(jg_ptr[j], jg_ptr[j + 1]):
        k = jg_idx[q]
        total += group_count[k] - hsize[k, buffers[k]]
    u = int(rng.random() * total)
    if u >= total:
        u = total - 1
    for q in range(jg_ptr[j], jg_ptr[j + 1]):
        k = jg_idx[q]
        for b in range(buffers[k]):
            m = hsize[k, b]
            if u < m:
                return hdata[hbase[k, b] + u]
            u -= m
    return -1


@njit(**_JIT)
def _pick_type(crates_row, rng):
    total = crates_row[crates_row.shape[0] - 1]
    u = rng.random() * total
    J = crates_row.shape[0]
    for j in range(J):
        if u < crates_row[j]:
            return j
    # floating edge: last type with a positive rate
    for j in range(J - 1, -1, -1):
        if j == 0 or crates_row[j] > crates_row[j - 1]:
            return j
    return J - 1


@njit(**_JIT)
def sample_size(code, p1, p2, rng):
    """One job size with mean 1 (codes as envs.config.DISTRIBUTIONS)."""
    if code == 0:  # exponential
        return rng.standard_exponential()
    if code == 1:  # deterministic
        return 1.0
    if code == 2:  # erlang(k): Gamma(k, 1/k)
        return rng.standard_gamma(p1) / p1
    if code == 3:  # balanced-means hyperexponential, p1 = probability of phase 1
        if rng.random() < p1:
            return rng.standard_exponential() / (2.0 * p1)
        return rng.standard_exponential() / (2.0 * (1.0 - p1))
    if code == 4:  # lognormal with log-mean p1, log-sd p2
        return np.exp(p1 + p2 * rng.standard_normal())
    # pareto: shape p1 = alpha, scale p2 = x_m = (alpha-1)/alpha
    return p2 / (1.0 - rng.random()) ** (1.0 / p1)


@njit(**_JIT)
def _choose(policy, j, table, rng, jg_ptr, jg_idx, buffers, hdata, hbase, hsize, group_count):
    if policy == POLICY_PRIORITY:
        return pick_priority(j, table, jg_ptr, jg_idx, buffers, hdata, hbase, hsize)
    return pick_random(j, rng, jg_ptr, jg_idx, buffers, hdata, hbase, hsize, group_count)


# ---------------------------------------------------------------------------------------------
# exponential job sizes: departures of a server at level n occur at rate mu(n) (PS, memoryless)
# ---------------------------------------------------------------------------------------------
@njit(**_JIT)
def run_exponential(
    # static
    server_group, group_count, buffers, jg_ptr, jg_idx, mu, pw, crates, prices, interval_length,
    # state
    occ, hdata, hpos, hbase, hsize, fs, isc, cnt,
    # control
    rng, policy, table, n_epochs,
):  # fmt: skip
    """Simulate until ``n_epochs`` decision epochs have been dispatched by the built-in ``policy``.

    With ``policy == POLICY_EXTERNAL`` it stops *at* the next decision epoch (time advanced to the
    arrival, integrals up to it) and leaves the job type in ``isc[PENDING]``. Returns the number of
    epochs dispatched.
    """
    K = buffers.shape[0]
    NI = crates.shape[0]
    iv = isc[INTERVAL]
    price = prices[iv]
    recompute_rates(occ, server_group, mu, pw, price, fs)
    done = 0
    while True:
        lam = crates[iv, crates.shape[1] - 1]
        total = lam + fs[WRATE]
        dt = rng.standard_exponential() / total
        if NI > 1:
            boundary = (np.floor(fs[T] / interval_length) + 1.0) * interval_length
            if fs[T] + dt >= boundary:
                # memoryless: jump to the boundary, switch rates/prices, redraw
                _integrate(fs, boundary - fs[T])
                fs[T] = boundary
                iv = int(np.floor(boundary / interval_length + 0.5)) % NI
                isc[INTERVAL] = iv
                price = prices[iv]
                recompute_rates(occ, server_group, mu, pw, price, fs)
                continue
        _integrate(fs, dt)
        u = rng.random() * total
        if u < lam:
            j = _pick_type(crates[iv], rng)
            cnt[0, j] += 1
            if not has_vacancy(j, jg_ptr, jg_idx, buffers, hsize, group_count):
                cnt[2, j] += 1
                continue
            isc[EPOCHS] += 1
            if policy == POLICY_EXTERNAL:
                isc[PENDING] = j
                return done
            s = _choose(
                policy, j, table, rng, jg_ptr, jg_idx, buffers, hdata, hbase, hsize, group_count
            )
            k = server_group[s]
            move_server(s, k, occ[s], occ[s] + 1, occ, hdata, hpos, hbase, hsize, mu, pw, price, fs)
            cnt[1, j] += 1
            done += 1
            if done >= n_epochs:
                return done
        else:
            u -= lam
            # departure: pick (k, b) with probability m_{k,b} mu_k(b) / W, then a uniform server
            chosen_k = -1
            chosen_b = -1
            for k in range(K):
                for b in range(1, buffers[k] + 1):
                    m = hsize[k, b]
                    if m > 0:
                        r = m * mu[k, b]
                        chosen_k = k
                        chosen_b = b
                        if u < r:
                            break
                        u -= r
                else:
                    continue
                break
            if chosen_k < 0:
                continue  # no busy server (W was only rounding noise)
            base = hbase[chosen_k, chosen_b]
            i = int(rng.random() * hsize[chosen_k, chosen_b])
            s = hdata[base + min(i, hsize[chosen_k, chosen_b] - 1)]
            move_server(
                s,
                chosen_k,
                chosen_b,
                chosen_b - 1,
                occ,
                hdata,
                hpos,
                hbase,
                hsize,
                mu,
                pw,
                price,
                fs,
            )
            isc[DEPARTURES] += 1


@njit(**_JIT)
def assign_exponential(
    s, j, server_group, mu, pw, prices, occ, hdata, hpos, hbase, hsize, fs, isc, cnt
):
    """Execute the pending decision: put the pending type-j job on server s (must be non-full)."""
    k = server_group[s]
    price = prices[isc[INTERVAL]]
    move_server(s, k, occ[s], occ[s] + 1, occ, hdata, hpos, hbase, hsize, mu, pw, price, fs)
    cnt[1, j] += 1
    isc[PENDING] = -1


# ---------------------------------------------------------------------------------------------
# general job sizes: exact processor sharing with per-job remaining work (virtual clocks)
# ---------------------------------------------------------------------------------------------
@njit(**_JIT)
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


@njit(**_JIT)
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


@njit(**_JIT)
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


@njit(**_JIT)
def _refresh_server(s, k, t, occ, mu, vwork, tlast, jobs, dheap, dpos, dkey, isc):
    """Bring s's virtual clock to time t (occupancy unchanged since tlast)."""
    n = occ[s]
    if n > 0:
        vwork[s] += (t - tlast[s]) * mu[k, n] / n
    tlast[s] = t


@njit(**_JIT)
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


@njit(**_JIT)
def _general_accept(s, j, t, server_group, mu, pw, price, dist, dparams, occ, hdata, hpos, hbase,
                    hsize, fs, isc, cnt, vwork, tlast, jobs, dheap, dpos, dkey, rng):  # fmt: skip
    k = server_group[s]
    _refresh_server(s, k, t, occ, mu, vwork, tlast, jobs, dheap, dpos, dkey, isc)
    n = occ[s]
    jobs[s, n] = vwork[s] + sample_size(dist[j], dparams[j, 0], dparams[j, 1], rng)
    move_server(s, k, n, n + 1, occ, hdata, hpos, hbase, hsize, mu, pw, price, fs)
    _reschedule(s, k, t, occ, mu, vwork, jobs, dheap, dpos, dkey, isc)
    cnt[1, j] += 1


@njit(**_JIT)
def run_general(
    # static
    server_group, group_count, buffers, jg_ptr, jg_idx, mu, pw, crates, prices, interval_length,
    dist, dparams,
    # state
    occ, hdata, hpos, hbase, hsize, fs, isc, cnt, vwork, tlast, jobs, dheap, dpos, dkey,
    # control
    rng, policy, table, n_epochs,
):  # fmt: skip
    """As :func:`run_exponential`, for any job-size distribution (exact PS)."""
    NI = crates.shape[0]
    iv = isc[INTERVAL]
    price = prices[iv]
    recompute_rates(occ, server_group, mu, pw, price, fs)
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
            t_bnd = (np.floor(t / interval_length) + 1.0) * interval_length
        if t_bnd <= t_arr and t_bnd <= t_dep:
            _integrate(fs, t_bnd - t)
            fs[T] = t_bnd
            iv = int(np.floor(t_bnd / interval_length + 0.5)) % NI
            isc[INTERVAL] = iv
            price = prices[iv]
            recompute_rates(occ, server_group, mu, pw, price, fs)
            fs[NEXT_ARR] = -1.0  # memoryless: redraw with the new rate
            continue
        if t_dep <= t_arr:
            _integrate(fs, t_dep - t)
            s = dheap[0]
            k = server_group[s]
            _refresh_server(s, k, t_dep, occ, mu, vwork, tlast, jobs, dheap, dpos, dkey, isc)
            n = occ[s]
            imin = 0
            for i in range(1, n):
                if jobs[s, i] < jobs[s, imin]:
                    imin = i
            jobs[s, imin] = jobs[s, n - 1]
            move_server(s, k, n, n - 1, occ, hdata, hpos, hbase, hsize, mu, pw, price, fs)
            _reschedule(s, k, t_dep, occ, mu, vwork, jobs, dheap, dpos, dkey, isc)
            isc[DEPARTURES] += 1
            continue
        _integrate(fs, t_arr - t)
        fs[NEXT_ARR] = -1.0
        j = _pick_type(crates[iv], rng)
        cnt[0, j] += 1
        if not has_vacancy(j, jg_ptr, jg_idx, buffers, hsize, group_count):
            cnt[2, j] += 1
            continue
        isc[EPOCHS] += 1
        if policy == POLICY_EXTERNAL:
            isc[PENDING] = j
            return done
        s = _choose(
            policy, j, table, rng, jg_ptr, jg_idx, buffers, hdata, hbase, hsize, group_count
        )
        _general_accept(s, j, t_arr, server_group, mu, pw, price, dist, dparams, occ, hdata, hpos,
                        hbase, hsize, fs, isc, cnt, vwork, tlast, jobs, dheap, dpos, dkey, rng)  # fmt: skip
        done += 1
        if done >= n_epochs:
            return done


@njit(**_JIT)
def assign_general(s, j, server_group, mu, pw, prices, dist, dparams, occ, hdata, hpos, hbase,
                   hsize, fs, isc, cnt, vwork, tlast, jobs, dheap, dpos, dkey, rng):  # fmt: skip
    price = prices[isc[INTERVAL]]
    _general_accept(s, j, fs[T], server_group, mu, pw, price, dist, dparams, occ, hdata, hpos,
                    hbase, hsize, fs, isc, cnt, vwork, tlast, jobs, dheap, dpos, dkey, rng)  # fmt: skip
    isc[PENDING] = -1
