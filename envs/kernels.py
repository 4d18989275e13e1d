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

import ctypes

import numpy as np
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

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
    epochs dispatched. The rates W, P, C are re-summed over all servers first (removes drift).
    """
    recompute_rates(occ, server_group, mu, pw, prices[isc[INTERVAL]], fs)
    return loop_exponential(
        server_group, group_count, buffers, jg_ptr, jg_idx, mu, pw, crates, prices,
        interval_length, occ, hdata, hpos, hbase, hsize, fs, isc, cnt, rng, policy, table, n_epochs,
    )  # fmt: skip


@njit(**_JIT)
def loop_exponential(
    server_group, group_count, buffers, jg_ptr, jg_idx, mu, pw, crates, prices, interval_length,
    occ, hdata, hpos, hbase, hsize, fs, isc, cnt, rng, policy, table, n_epochs,
):  # fmt: skip
    """The event loop of :func:`run_exponential` with the current rates in ``fs`` (no re-sum: the
    caller keeps W, P, C exact, so a step of the size-independent env costs no O(S) work)."""
    K = buffers.shape[0]
    NI = crates.shape[0]
    iv = isc[INTERVAL]
    price = prices[iv]
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
    recompute_rates(occ, server_group, mu, pw, prices[isc[INTERVAL]], fs)
    return loop_general(
        server_group, group_count, buffers, jg_ptr, jg_idx, mu, pw, crates, prices,
        interval_length, dist, dparams, occ, hdata, hpos, hbase, hsize, fs, isc, cnt, vwork, tlast,
        jobs, dheap, dpos, dkey, rng, policy, table, n_epochs,
    )  # fmt: skip


@njit(**_JIT)
def loop_general(
    server_group, group_count, buffers, jg_ptr, jg_idx, mu, pw, crates, prices, interval_length,
    dist, dparams, occ, hdata, hpos, hbase, hsize, fs, isc, cnt, vwork, tlast, jobs, dheap, dpos,
    dkey, rng, policy, table, n_epochs,
):  # fmt: skip
    """The event loop of :func:`run_general` with the current rates in ``fs`` (no re-sum)."""
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


# ---------------------------------------------------------------------------------------------
# packed state: every array of one simulator inside two flat buffers
# ---------------------------------------------------------------------------------------------
# Calling a compiled function costs ~70 ns per array argument (unboxing) and ~7 us for a
# numpy Generator (numba rebuilds its ctypes function pointers on every call). The env's step is
# a few microseconds of work, so the step path passes one int64 buffer ``ib`` and one float64
# buffer ``fb`` holding every array (the simulator's public arrays are views into them) and the
# Generator as four raw pointers stored in ``ib`` (see :func:`rng_pointers`). ``ib`` starts with
# a header: dimensions, the lengths of ib and fb (an env appends its own fields to both, see
# envs.vector_kernels), then the offset of every field (float fields' offsets point into fb).
(
    H_S, H_K, H_J, H_B1, H_NI, H_GEN, H_NQ, H_ILEN, H_FLEN,
    O_SG, O_GC, O_BUF, O_JGP, O_JGI, O_HBASE, O_DIST, O_OCC, O_HDATA, O_HPOS, O_HSIZE, O_ISC,
    O_CNT, O_DHEAP, O_DPOS, O_RNG,
    P_MU, P_PW, P_CR, P_PR, P_DPAR, P_IVL, P_FS, P_VWORK, P_TLAST, P_JOBS, P_DKEY,
    HEADER_SIZE,
) = range(37)  # fmt: skip
RNG_PTRS = 4  # state address, next_uint64, next_uint32, next_double


@intrinsic
def generator_from_pointers(typingctx, ptrs):
    """A numba ``Generator`` built from ``int64[4]`` raw pointers (see :func:`rng_pointers`).

    It draws exactly what the Python Generator would (same bit generator state, same numba
    distribution code), without the per-call unboxing cost. The Python object must stay alive
    while this is used (the simulator holds it); no reference is taken here (null meminfo).
    """
    sig = types.npy_rng(ptrs)

    def codegen(context, builder, signature, args):
        arrty = signature.args[0]
        arr = context.make_array(arrty)(context, builder, args[0])
        ll_uintp = context.get_value_type(types.uintp)

        def load(i):
            idx = context.get_constant(types.intp, i)
            v = builder.load(cgutils.get_item_pointer(context, builder, arrty, arr, [idx]))
            return v if v.type == ll_uintp else builder.bitcast(v, ll_uintp)

        bg = cgutils.create_struct_proxy(types.NumPyRandomBitGeneratorType("bit_generator"))(
            context, builder
        )
        bg.parent = cgutils.get_null_value(bg.parent.type)
        bg.state_address = load(0)
        bg.state = load(0)
        bg.fnptr_next_uint64 = load(1)
        bg.fnptr_next_uint32 = load(2)
        bg.fnptr_next_double = load(3)
        bg.bit_generator = cgutils.get_null_value(bg.bit_generator.type)
        gen = cgutils.create_struct_proxy(signature.return_type)(context, builder)
        gen.bit_generator = bg._getvalue()
        gen.meminfo = cgutils.get_null_value(gen.meminfo.type)
        gen.parent = cgutils.get_null_value(gen.parent.type)
        return gen._getvalue()

    return sig, codegen


@intrinsic
def borrow(typingctx, arr):
    """The same array without its reference count (null meminfo).

    Every array passed between compiled functions is reference counted with atomic operations;
    the step path hands ~30 views of the packed buffers around and that counting cost more than
    the simulation itself. Views of a borrowed array are not counted at all. Only for arrays that
    outlive the call (arguments of the entry point) and never returned or stored.
    """
    if not isinstance(arr, types.Array):
        return None
    sig = arr(arr)

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, value=args[0])
        out = context.make_array(signature.return_type)(context, builder)
        for name in ("nitems", "itemsize", "data", "shape", "strides"):
            setattr(out, name, getattr(ary, name))
        out.meminfo = cgutils.get_null_value(out.meminfo.type)
        out.parent = cgutils.get_null_value(out.parent.type)
        return out._getvalue()

    return sig, codegen


def rng_pointers(gen: np.random.Generator, out: np.ndarray) -> None:
    """Write ``gen``'s bit-generator state address and function pointers into ``out[:4]``."""
    c = gen.bit_generator.ctypes
    out[0] = c.state_address
    out[1] = ctypes.cast(c.next_uint64, ctypes.c_void_p).value
    out[2] = ctypes.cast(c.next_uint32, ctypes.c_void_p).value
    out[3] = ctypes.cast(c.next_double, ctypes.c_void_p).value


# positions in the tuple returned by :func:`unpack`
(
    U_SG, U_GC, U_BUF, U_JGP, U_JGI, U_HBASE, U_DIST, U_OCC, U_HDATA, U_HPOS, U_HSIZE, U_ISC,
    U_CNT, U_DHEAP, U_DPOS, U_MU, U_PW, U_CR, U_PR, U_DPAR, U_IVL, U_FS, U_VWORK, U_TLAST, U_JOBS,
    U_DKEY,
) = range(26)  # fmt: skip


@njit(inline="always", **_JIT)
def unpack(ib, fb):
    """Views of every field of a packed simulator, in the order of the ``U_*`` constants (borrowed:
    valid while ``ib`` and ``fb`` are alive, i.e. within the calling entry point)."""
    ib = borrow(ib)
    fb = borrow(fb)
    S = ib[H_S]
    K = ib[H_K]
    J = ib[H_J]
    B1 = ib[H_B1]
    NI = ib[H_NI]
    ns = S if ib[H_GEN] else 0  # per-server arrays of the general kernel (empty otherwise)

    def iv(field, n):
        return ib[ib[field] : ib[field] + n]

    def fv(field, n):
        return fb[ib[field] : ib[field] + n]

    return (
        iv(O_SG, S), iv(O_GC, K), iv(O_BUF, K), iv(O_JGP, J + 1), iv(O_JGI, ib[H_NQ]),
        iv(O_HBASE, K * B1).reshape((K, B1)), iv(O_DIST, J), iv(O_OCC, S),
        ib[ib[O_HDATA] : ib[O_HPOS]], iv(O_HPOS, S), iv(O_HSIZE, K * B1).reshape((K, B1)),
        iv(O_ISC, 6), iv(O_CNT, 3 * J).reshape((3, J)), iv(O_DHEAP, ns), iv(O_DPOS, ns),
        fv(P_MU, K * B1).reshape((K, B1)), fv(P_PW, K * B1).reshape((K, B1)),
        fv(P_CR, NI * J).reshape((NI, J)), fv(P_PR, NI * K).reshape((NI, K)),
        fv(P_DPAR, 2 * J).reshape((J, 2)), fb[ib[P_IVL]], fv(P_FS, 8), fv(P_VWORK, ns),
        fv(P_TLAST, ns), fv(P_JOBS, ns * (B1 - 1)).reshape((ns, B1 - 1)), fv(P_DKEY, ns),
    )  # fmt: skip


@njit(inline="always", **_JIT)
def packed_rng(ib):
    """The simulator's Generator (from the pointers stored in ``ib``)."""
    return generator_from_pointers(borrow(ib)[ib[O_RNG] : ib[O_RNG] + RNG_PTRS])


@njit(inline="always", **_JIT)
def packed_loop(ib, fb, u, rng, policy, table, n_epochs):
    """The event loop (exponential or general) of an unpacked simulator ``u``, no re-sum."""
    if ib[H_GEN]:
        return loop_general(
            u[U_SG], u[U_GC], u[U_BUF], u[U_JGP], u[U_JGI], u[U_MU], u[U_PW], u[U_CR], u[U_PR],
            u[U_IVL], u[U_DIST], u[U_DPAR], u[U_OCC], u[U_HDATA], u[U_HPOS], u[U_HBASE],
            u[U_HSIZE], u[U_FS], u[U_ISC], u[U_CNT], u[U_VWORK], u[U_TLAST], u[U_JOBS],
            u[U_DHEAP], u[U_DPOS], u[U_DKEY], rng, policy, table, n_epochs,
        )  # fmt: skip
    return loop_exponential(
        u[U_SG], u[U_GC], u[U_BUF], u[U_JGP], u[U_JGI], u[U_MU], u[U_PW], u[U_CR], u[U_PR],
        u[U_IVL], u[U_OCC], u[U_HDATA], u[U_HPOS], u[U_HBASE], u[U_HSIZE], u[U_FS], u[U_ISC],
        u[U_CNT], rng, policy, table, n_epochs,
    )  # fmt: skip


@njit(inline="always", **_JIT)
def packed_resum(u):
    """Re-sum W, P, C over all servers (O(S); what every ``run_*`` entry does)."""
    recompute_rates(u[U_OCC], u[U_SG], u[U_MU], u[U_PW], u[U_PR][u[U_ISC][INTERVAL]], u[U_FS])


@njit(**_JIT)
def packed_run(ib, fb, policy, table, n_epochs, resum):
    """:func:`run_exponential` / :func:`run_general` on a packed simulator (``resum``: re-sum the
    rates over all servers first, as those do; False continues from the incremental rates)."""
    u = unpack(ib, fb)
    if resum:
        packed_resum(u)
    return packed_loop(ib, fb, u, packed_rng(ib), policy, table, n_epochs)


@njit(inline="always", **_JIT)
def packed_assign_unpacked(ib, u, s):
    """Put the pending job on server ``s`` (validity is the caller's job)."""
    j = u[U_ISC][PENDING]
    if ib[H_GEN]:
        assign_general(
            s, j, u[U_SG], u[U_MU], u[U_PW], u[U_PR], u[U_DIST], u[U_DPAR], u[U_OCC], u[U_HDATA],
            u[U_HPOS], u[U_HBASE], u[U_HSIZE], u[U_FS], u[U_ISC], u[U_CNT], u[U_VWORK],
            u[U_TLAST], u[U_JOBS], u[U_DHEAP], u[U_DPOS], u[U_DKEY], packed_rng(ib),
        )  # fmt: skip
    else:
        assign_exponential(
            s, j, u[U_SG], u[U_MU], u[U_PW], u[U_PR], u[U_OCC], u[U_HDATA], u[U_HPOS], u[U_HBASE],
            u[U_HSIZE], u[U_FS], u[U_ISC], u[U_CNT],
        )  # fmt: skip


@njit(**_JIT)
def packed_assign(ib, fb, s):
    """Put the pending job on server ``s`` (validity is the caller's job)."""
    packed_assign_unpacked(ib, unpack(ib, fb), s)


@njit(**_JIT)
def can_take(ib, s, j):
    """True when server ``s`` exists, is available to type ``j`` and is not full (O(|K_j|))."""
    if s < 0 or s >= ib[H_S]:
        return False
    k = ib[ib[O_SG] + s]
    if ib[ib[O_OCC] + s] >= ib[ib[O_BUF] + k]:
        return False
    o = ib[O_JGP]
    for q in range(ib[o + j], ib[o + j + 1]):  # noqa: SIM110 (numba: no generator any())
        if ib[ib[O_JGI] + q] == k:
            return True
    return False


@njit(**_JIT)
def packed_reset(ib, fb):
    """Empty farm at time 0 with zeroed counters (what ``FarmSimulator.reset`` does)."""
    u = unpack(ib, fb)
    gc, hbase, hdata, hpos, hsize = u[U_GC], u[U_HBASE], u[U_HDATA], u[U_HPOS], u[U_HSIZE]
    u[U_OCC][:] = 0
    hsize[:] = 0
    lo = 0
    for k in range(gc.shape[0]):
        base = hbase[k, 0]
        # servers in increasing index order form a valid min-heap
        for i in range(gc[k]):
            hdata[base + i] = lo + i
            hpos[lo + i] = i
        hsize[k, 0] = gc[k]
        lo += gc[k]
    fs, isc = u[U_FS], u[U_ISC]
    fs[:] = 0.0
    fs[NEXT_ARR] = -1.0
    isc[:] = 0
    isc[PENDING] = -1
    u[U_CNT][:] = 0
    u[U_VWORK][:] = 0.0
    u[U_TLAST][:] = 0.0
    u[U_DPOS][:] = -1
    u[U_DKEY][:] = np.inf
