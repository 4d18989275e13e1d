"""Compiled (numba) event kernels of the farm simulator.

The Python layer (``envs.simulator``) owns configuration, state arrays and metrics; these functions
only do events. Layout of the state (all plain numpy arrays, no per-event allocation):

* ``occ[s]``: jobs on server s.
* Per (group k, level b) the *level set* of the servers of group k that hold b jobs: an unordered
  array ``hdata[hbase[k, b] : hbase[k, b] + hsize[k, b]]`` with ``hpos[s]`` the position of s in
  it (a uniformly random server at a level is ``hdata[base + randint(size)]``), and a 64-ary
  bitset tree in ``sets`` that gives the smallest-index server at that level, which is what
  every built-in dispatcher breaks ties by (see "level sets" below; one more tree per group holds
  its non-full servers). ``hsize[k, b]`` is the histogram m_{k,b}. Moving a server between levels
  costs O(1) plus O(log64 R_k) in the worst case, independent of the rest of the farm.
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

Speed (see BENCHMARKS.md): ``FarmSimulator`` keeps every array inside two packed buffers (the
level-set arrays as int32 views, half the cache footprint) and calls the ``packed_*`` entry points,
which pass the Generator as raw pointers (:func:`generator_from_pointers`) and hand borrowed,
reference-count-free views to the loops (:func:`borrow`). The env step (assign, simulate to the
next epoch, reward, mask, observation, info numbers) is one compiled call, ``vec_step``, for a
single env and a batch alike. Every compiled function lives in this file: numba's on-disk cache
does not notice edits to functions a cached function calls from other files.
"""

from __future__ import annotations

import ctypes
import math

import numpy as np
from numba import njit, prange, types
from numba.core import cgutils
from numba.cpython.unsafe.numbers import trailing_zeros
from numba.extending import intrinsic, overload

# indices into fs / isc
T, WORK, ENERGY, COST, WRATE, PRATE, CRATE, NEXT_ARR = range(8)
INTERVAL, DEPARTURES, EPOCHS, PENDING, DHEAP_SIZE, INVALID = range(6)

# policy kinds of the built-in dispatchers
POLICY_EXTERNAL = 0  # stop at the next decision epoch and let the caller decide
POLICY_PRIORITY = 1  # priority table over (group, level); ties to the smallest server index
POLICY_RANDOM = 2  # uniform over the available non-full servers

_JIT = {"cache": True, "nogil": True}


# ---------------------------------------------------------------------------------------------
# level sets: the servers of group k holding b jobs (and the non-full ones), with their minimum
# ---------------------------------------------------------------------------------------------
# Each (group, level) set is kept twice, because the two questions asked of it need different
# structures:
# * "a uniformly random member" (departures, the random dispatcher): an unordered array
#   ``hdata[hbase[k, b] : hbase[k, b] + hsize[k, b]]`` with ``hpos[s]`` the position of s in it;
#   a move is a swap-remove and an append, O(1).
# * "the smallest server index" (every dispatcher's tie-break, the env's group actions): a 64-ary
#   bitset tree over the group's servers. Setting or clearing a bit touches one word per tree
#   level only while a word turns (non-)empty; the minimum is one word per tree level
#   (``ceil(log64 R_k)`` levels: 1 for groups of <= 64 servers, 3 up to 262,144).
# One more tree per group, the last column of ``tbase``, holds the non-full servers (levels
# < B_k), with its minimum cached in ``nfmin[k]`` (NO_SERVER when empty; re-found only when the
# server leaving is the minimum): that is the PAS choice within the group, so a
# priority table that is constant over levels needs one read per group. (Caching the minimum of
# every level too cost more per event than finding it when a general table asks.)
# This replaced indexed binary min-heaps (same minima, O(log R_k) sifts per move): 1.45x fewer
# nanoseconds per event on paper-100 (BENCHMARKS.md). The uniform member drawn for a departure
# now depends on the array order rather than the heap order, so trajectories (not their
# distribution) differ from the heap version's.
#
# ``sets`` (int64, inside ``ib``) = header (S_* slots: dimensions and offsets) | nfmin[K] |
# tbase[K, B1+1] (offset of each tree in ``sets``; the non-full tree last) | nlev[K] (tree levels) |
# lvoff[K, LMAX] (offset of each tree level within a tree; level 0 = leaves) | goff[K] (first
# server of the group) | buffers[K] | the tree words.
NO_SERVER = 1 << 62  # "empty" minimum: above every server index
SET_LMAX = 4  # tree levels: groups of up to 64**4 = 16,777,216 servers
(S_K, S_C, S_LM, S_NFMIN, S_TBASE, S_NLEV, S_LVOFF, S_GOFF, S_BUF, S_WORDS, S_HEADER) = range(11)


@njit(inline="always", **_JIT)
def set_views(sets):
    """(nfmin, tbase, nlev, lvoff, goff, buffers) views of a ``sets`` array (borrowed)."""
    sets = borrow(sets)
    K = sets[S_K]
    C = sets[S_C]
    LM = sets[S_LM]
    return (
        sets[sets[S_NFMIN] : sets[S_NFMIN] + K],
        as2d(sets[sets[S_TBASE] : sets[S_TBASE] + K * C], K, C),
        sets[sets[S_NLEV] : sets[S_NLEV] + K],
        as2d(sets[sets[S_LVOFF] : sets[S_LVOFF] + K * LM], K, LM),
        sets[sets[S_GOFF] : sets[S_GOFF] + K],
        sets[sets[S_BUF] : sets[S_BUF] + K],
    )


@njit(inline="always", **_JIT)
def _tree_set(sets, base, lo, nlev, i):
    """Add local index i to the tree at ``base`` (level offsets ``lo``)."""
    if nlev == 1:  # a group of <= 64 servers: one word (a measured 2-3 ns per event saved)
        sets[base] |= 1 << i
        return
    for lv in range(nlev):
        w = base + lo[lv] + (i >> 6)
        old = sets[w]
        sets[w] = old | (1 << (i & 63))
        if old != 0:  # the word was non-empty: the levels above already know
            return
        i >>= 6


@njit(inline="always", **_JIT)
def _tree_clear(sets, base, lo, nlev, i):
    """Remove local index i from the tree at ``base``."""
    if nlev == 1:
        sets[base] &= ~(1 << i)
        return
    for lv in range(nlev):
        w = base + lo[lv] + (i >> 6)
        new = sets[w] & ~(1 << (i & 63))
        sets[w] = new
        if new != 0:  # the word still has members: the levels above stay set
            return
        i >>= 6


@njit(inline="always", **_JIT)
def _tree_first(sets, base, lo, nlev):
    """Smallest local index in the tree at ``base``, or -1 if it is empty."""
    if nlev == 1:
        w = sets[base]
        return trailing_zeros(w) if w != 0 else -1
    i = 0
    for lv in range(nlev - 1, -1, -1):
        w = sets[base + lo[lv] + i]
        if w == 0:  # only the root can be empty
            return -1
        i = (i << 6) | trailing_zeros(w)
    return i


@njit(inline="always", **_JIT)
def level_min(sets, tbase, lvoff, nlev, goff, k, b):
    """Smallest server of group k at level b (column b of the trees), NO_SERVER if none."""
    f = _tree_first(sets, tbase[k, b], lvoff[k], nlev[k])
    return goff[k] + f if f >= 0 else NO_SERVER


@njit(**_JIT)
def packed_level_min(ib, k, b):
    """:func:`level_min` of a packed simulator (Python side)."""
    sets = borrow(ib)[ib[O_SETS] : ib[O_SETS] + ib[H_NSET]]
    _, tbase, nlev, lvoff, goff, _ = set_views(sets)
    return level_min(sets, tbase, lvoff, nlev, goff, k, b)


@njit(inline="always", **_JIT)
def move_between_levels(s, k, b, nb, hdata, hpos, hbase, hsize, sets, nfmin, tbase, nlev, lvoff,
                        goff, sbuf):  # fmt: skip
    """Move server s of group k from level b's sets to level nb's (b != nb), and into or out of
    the non-full set when it leaves or reaches its buffer."""
    i = hpos[s]
    base = hbase[k, b]
    last = hsize[k, b] - 1
    x = hdata[base + last]
    hdata[base + i] = x
    hpos[x] = i
    hsize[k, b] = last
    n = hsize[k, nb]
    hdata[hbase[k, nb] + n] = s
    hpos[s] = n
    hsize[k, nb] = n + 1
    lo = lvoff[k]
    nl = nlev[k]
    g = goff[k]
    li = s - g
    _tree_clear(sets, tbase[k, b], lo, nl, li)
    _tree_set(sets, tbase[k, nb], lo, nl, li)
    bk = sbuf[k]
    nf = tbase[k, tbase.shape[1] - 1]
    if nb == bk:  # now full
        _tree_clear(sets, nf, lo, nl, li)
        if nfmin[k] == s:
            f = _tree_first(sets, nf, lo, nl)
            nfmin[k] = g + f if f >= 0 else NO_SERVER
    elif b == bk:  # no longer full
        _tree_set(sets, nf, lo, nl, li)
        if s < nfmin[k]:
            nfmin[k] = s


@njit(inline="always", **_JIT)
def move_server(s, k, b, nb, occ, hdata, hpos, hbase, hsize, sets, mu, pw, price, fs):
    """Move server s of group k from level b to level nb, keeping the sets and rates exact."""
    nfmin, tbase, nlev, lvoff, goff, sbuf = set_views(sets)
    move_between_levels(s, k, b, nb, hdata, hpos, hbase, hsize, sets, nfmin, tbase, nlev, lvoff,
                        goff, sbuf)  # fmt: skip
    occ[s] = nb
    dp = pw[k, nb] - pw[k, b]
    fs[WRATE] += mu[k, nb] - mu[k, b]
    fs[PRATE] += dp
    fs[CRATE] += price[k] * dp


# ---------------------------------------------------------------------------------------------
# helpers shared by both kernels
# ---------------------------------------------------------------------------------------------
@njit(inline="always", **_JIT)
def _integrate(fs, dt):
    fs[WORK] += fs[WRATE] * dt
    fs[ENERGY] += fs[PRATE] * dt
    fs[COST] += fs[CRATE] * dt
    fs[T] += dt


@njit(inline="always", **_JIT)
def _next_boundary(t, length):
    """The first interval boundary m * length strictly after t. ``(floor(t / L) + 1) * L`` alone
    can equal t when t is itself a boundary whose quotient rounds down (``(3 * 0.7) / 0.7 < 3``),
    and the loop would then stop advancing; otherwise this is exactly that value."""
    m = np.floor(t / length) + 1.0
    b = m * length
    while b <= t:
        m += 1.0
        b = m * length
    return b


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


@njit(inline="always", **_JIT)
def has_vacancy(j, jg_ptr, jg_idx, buffers, hsize, group_count):
    for q in range(jg_ptr[j], jg_ptr[j + 1]):
        k = jg_idx[q]
        if hsize[k, buffers[k]] < group_count[k]:
            return True
    return False


@njit(**_JIT)
def level_constant(table, buffers):
    """True when ``table[k, b]`` is the same for every level b < B_k of every group (PAS and any
    other group-priority table): the priority pick then needs only the non-full sets."""
    for k in range(buffers.shape[0]):
        for b in range(1, buffers[k]):
            if table[k, b] != table[k, 0]:
                return False
    return True


@njit(inline="always", **_JIT)
def pick_priority_kb(j, table, levelconst, jg_ptr, jg_idx, buffers, hsize, sets, sv, occ):
    """``(server, group, level)`` maximising ``table[k, level]`` among j's non-full available
    servers, ties to the smallest index; (-1, -1, -1) when they are all full (``sv``: the
    :func:`set_views` of ``sets``, made once by the caller, outside its event loop). With
    ``levelconst`` (see :func:`level_constant`) each group's candidate is its smallest non-full
    server (one read per group); otherwise the smallest server of each (group, level)."""
    best = -np.inf
    best_s = -1
    best_k = -1
    best_b = -1
    nfmin, tbase, nlev, lvoff, goff, _ = sv
    if levelconst:
        for q in range(jg_ptr[j], jg_ptr[j + 1]):
            k = jg_idx[q]
            s = nfmin[k]
            if s != NO_SERVER:
                v = table[k, 0]
                if best_s < 0 or v > best or (v == best and s < best_s):
                    best = v
                    best_s = s
                    best_k = k
        if best_s >= 0:
            best_b = occ[best_s]
        return best_s, best_k, best_b
    for q in range(jg_ptr[j], jg_ptr[j + 1]):
        k = jg_idx[q]
        for b in range(buffers[k]):
            if hsize[k, b] > 0:
                v = table[k, b]
                s = level_min(sets, tbase, lvoff, nlev, goff, k, b)
                if best_s < 0 or v > best or (v == best and s < best_s):
                    best = v
                    best_s = s
                    best_k = k
                    best_b = b
    return best_s, best_k, best_b


@njit(inline="always", **_JIT)
def pick_random_kb(j, rng, jg_ptr, jg_idx, buffers, hdata, hbase, hsize, group_count):
    """As :func:`pick_random`, returning ``(server, group, level)``."""
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
                return hdata[hbase[k, b] + u], k, b
            u -= m
    return -1, -1, -1


@njit(inline="always", **_JIT)
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


@njit(inline="always", **_JIT)
def _choose(policy, j, table, levelconst, rng, jg_ptr, jg_idx, buffers, hdata, hbase, hsize,
            group_count, sets, sv, occ):  # fmt: skip
    """(server, group, level) chosen by the built-in ``policy`` for a type-j job."""
    if policy == POLICY_PRIORITY:
        return pick_priority_kb(j, table, levelconst, jg_ptr, jg_idx, buffers, hsize, sets, sv, occ)
    return pick_random_kb(j, rng, jg_ptr, jg_idx, buffers, hdata, hbase, hsize, group_count)


# ---------------------------------------------------------------------------------------------
# exponential job sizes: departures of a server at level n occur at rate mu(n) (PS, memoryless)
# ---------------------------------------------------------------------------------------------
# inlined (numba IR) into each caller: the env step runs it for one epoch at a time, and a call
# with ~20 array arguments cost ~100 ns per step (a sixth of a vector-env step); inlined, the
# step's constant policy and epoch count also prune the dispatcher code it does not use.
@njit(inline="always", **_JIT)
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

    The clock, integrals and rates live in local variables during the loop (registers, not
    memory: ~15% faster) and are written back to ``fs`` on return; the arithmetic is the same
    as :func:`move_server` / :func:`_integrate`, operation for operation."""
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
    while True:
        lam = crates[iv, JL]
        total = lam + W
        # total == 0: no arrivals in this interval and an empty farm; wait for the boundary
        dt = rng.standard_exponential() / total if total > 0.0 else np.inf
        if NI > 1:
            boundary = _next_boundary(t, interval_length)
            if t + dt >= boundary:
                # memoryless: jump to the boundary, switch rates/prices, redraw
                d = boundary - t
                work += W * d
                energy += P * d
                cost += C * d
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
        t += dt
        u = rng.random() * total
        if u < lam:
            j = _pick_type(crates[iv], rng)
            cnt[0, j] += 1
            if fastpick:
                s, k, b = pick_priority_kb(
                    j, table, True, jg_ptr, jg_idx, buffers, hsize, sets, sv, occ
                )
                if s < 0:
                    cnt[2, j] += 1
                    continue
                isc[EPOCHS] += 1
            else:
                if not has_vacancy(j, jg_ptr, jg_idx, buffers, hsize, group_count):
                    cnt[2, j] += 1
                    continue
                isc[EPOCHS] += 1
                if policy == POLICY_EXTERNAL:
                    isc[PENDING] = j
                    break
                s, k, b = _choose(
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
        if nb > b and done >= n_epochs:
            break
    fs[T], fs[WORK], fs[ENERGY], fs[COST] = t, work, energy, cost
    fs[WRATE], fs[PRATE], fs[CRATE] = W, P, C
    return done


@njit(**_JIT)
def assign_exponential(
    s, j, server_group, mu, pw, prices, occ, hdata, hpos, hbase, hsize, sets, fs, isc, cnt
):
    """Execute the pending decision: put the pending type-j job on server s (must be non-full)."""
    k = server_group[s]
    price = prices[isc[INTERVAL]]
    move_server(s, k, occ[s], occ[s] + 1, occ, hdata, hpos, hbase, hsize, sets, mu, pw, price, fs)
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
                    hsize, sets, fs, isc, cnt, vwork, tlast, jobs, dheap, dpos, dkey, rng):  # fmt: skip
    k = server_group[s]
    _refresh_server(s, k, t, occ, mu, vwork, tlast, jobs, dheap, dpos, dkey, isc)
    n = occ[s]
    jobs[s, n] = vwork[s] + sample_size(dist[j], dparams[j, 0], dparams[j, 1], rng)
    move_server(s, k, n, n + 1, occ, hdata, hpos, hbase, hsize, sets, mu, pw, price, fs)
    _reschedule(s, k, t, occ, mu, vwork, jobs, dheap, dpos, dkey, isc)
    cnt[1, j] += 1


@njit(**_JIT)
def loop_general(
    server_group, group_count, buffers, jg_ptr, jg_idx, mu, pw, crates, prices, interval_length,
    dist, dparams, occ, hdata, hpos, hbase, hsize, sets, fs, isc, cnt, vwork, tlast, jobs, dheap,
    dpos, dkey, rng, policy, table, n_epochs,
):  # fmt: skip
    """As :func:`loop_exponential`, for any job-size distribution (exact PS)."""
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
            t_bnd = _next_boundary(t, interval_length)
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
            move_server(s, k, n, n - 1, occ, hdata, hpos, hbase, hsize, sets, mu, pw, price, fs)
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
            policy, j, table, levelconst, rng, jg_ptr, jg_idx, buffers, hdata, hbase, hsize,
            group_count, sets, sv, occ,
        )[0]  # fmt: skip
        _general_accept(s, j, t_arr, server_group, mu, pw, price, dist, dparams, occ, hdata, hpos,
                        hbase, hsize, sets, fs, isc, cnt, vwork, tlast, jobs, dheap, dpos, dkey,
                        rng)  # fmt: skip
        done += 1
        if done >= n_epochs:
            return done


@njit(**_JIT)
def assign_general(s, j, server_group, mu, pw, prices, dist, dparams, occ, hdata, hpos, hbase,
                   hsize, sets, fs, isc, cnt, vwork, tlast, jobs, dheap, dpos, dkey, rng):  # fmt: skip
    price = prices[isc[INTERVAL]]
    _general_accept(s, j, fs[T], server_group, mu, pw, price, dist, dparams, occ, hdata, hpos,
                    hbase, hsize, sets, fs, isc, cnt, vwork, tlast, jobs, dheap, dpos, dkey, rng)  # fmt: skip
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
    H_S, H_K, H_J, H_B1, H_NI, H_GEN, H_NQ, H_ILEN, H_FLEN, H_NSET,
    O_SG, O_GC, O_BUF, O_JGP, O_JGI, O_HBASE, O_DIST, O_OCC, O_HDATA, O_HPOS, O_HSIZE, O_SETS,
    O_ISC, O_CNT, O_DHEAP, O_DPOS, O_RNG,
    P_MU, P_PW, P_CR, P_PR, P_DPAR, P_IVL, P_FS, P_VWORK, P_TLAST, P_JOBS, P_DKEY,
    HEADER_SIZE,
) = range(39)  # fmt: skip
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


@intrinsic
def as2d(typingctx, arr, n0, n1):
    """View of a contiguous 1-D array as C-contiguous ``(n0, n1)`` (the caller guarantees
    ``n0 * n1 <= arr.size``). ``reshape`` would call a C helper every time; this is a few moves."""
    if not (isinstance(arr, types.Array) and arr.ndim == 1 and arr.layout == "C"):
        return None
    ret = types.Array(arr.dtype, 2, "C")
    sig = ret(arr, n0, n1)

    def codegen(context, builder, signature, args):
        src = context.make_array(signature.args[0])(context, builder, value=args[0])
        out = context.make_array(ret)(context, builder)
        intp = context.get_value_type(types.intp)
        d0 = context.cast(builder, args[1], signature.args[1], types.intp)
        d1 = context.cast(builder, args[2], signature.args[2], types.intp)
        itemsize = context.get_constant(
            types.intp, context.get_abi_sizeof(context.get_data_type(arr.dtype))
        )
        context.populate_array(
            out,
            data=src.data,
            shape=cgutils.pack_array(builder, [d0, d1], ty=intp),
            strides=cgutils.pack_array(builder, [builder.mul(d1, itemsize), itemsize], ty=intp),
            itemsize=src.itemsize,
            meminfo=src.meminfo,
            parent=src.parent,
        )
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
    U_DKEY, U_SETS,
) = range(27)  # fmt: skip


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
        as2d(iv(O_HBASE, K * B1), K, B1), iv(O_DIST, J), iv(O_OCC, S),
        ib[ib[O_HDATA] : ib[O_HPOS]].view(np.int32), iv(O_HPOS, (S + 1) // 2).view(np.int32)[:S],
        as2d(iv(O_HSIZE, K * B1), K, B1),
        iv(O_ISC, 6), as2d(iv(O_CNT, 3 * J), 3, J), iv(O_DHEAP, ns), iv(O_DPOS, ns),
        as2d(fv(P_MU, K * B1), K, B1), as2d(fv(P_PW, K * B1), K, B1),
        as2d(fv(P_CR, NI * J), NI, J), as2d(fv(P_PR, NI * K), NI, K),
        as2d(fv(P_DPAR, 2 * J), J, 2), fb[ib[P_IVL]], fv(P_FS, 8), fv(P_VWORK, ns),
        fv(P_TLAST, ns), as2d(fv(P_JOBS, ns * (B1 - 1)), ns, B1 - 1), fv(P_DKEY, ns),
        iv(O_SETS, ib[H_NSET]),
    )  # fmt: skip


@njit(inline="always", **_JIT)
def packed_rng(ib):
    """The simulator's Generator (from the pointers stored in ``ib``)."""
    return generator_from_pointers(borrow(ib)[ib[O_RNG] : ib[O_RNG] + RNG_PTRS])


# Which event loop a packed simulator uses is chosen at compile time by the *type* of a ``tag``
# argument (EXPONENTIAL_TAG, an int, or GENERAL_TAG, a float; see :func:`kind_tag`): each entry
# point is compiled once per tag type and only with the loop it needs, so a farm with
# exponential sizes never compiles the (larger) general kernel. A runtime ``if`` would compile
# both for everyone.
EXPONENTIAL_TAG = 0
GENERAL_TAG = 0.0


def kind_tag(general: bool) -> int | float:
    """The ``tag`` argument of the packed entry points for a farm (see above)."""
    return GENERAL_TAG if general else EXPONENTIAL_TAG


def _loop(tag, ib, u, rng, policy, table, n_epochs):
    """The event loop of an unpacked simulator ``u`` (no re-sum), selected by ``tag``'s type."""
    raise NotImplementedError  # compiled versions below


@overload(_loop, jit_options=_JIT)
def _ol_loop(tag, ib, u, rng, policy, table, n_epochs):
    if isinstance(tag, types.Integer):

        def exponential(tag, ib, u, rng, policy, table, n_epochs):
            return loop_exponential(
                u[U_SG], u[U_GC], u[U_BUF], u[U_JGP], u[U_JGI], u[U_MU], u[U_PW], u[U_CR],
                u[U_PR], u[U_IVL], u[U_OCC], u[U_HDATA], u[U_HPOS], u[U_HBASE], u[U_HSIZE],
                u[U_SETS], u[U_FS], u[U_ISC], u[U_CNT], rng, policy, table, n_epochs,
            )  # fmt: skip

        return exponential

    def general(tag, ib, u, rng, policy, table, n_epochs):
        return loop_general(
            u[U_SG], u[U_GC], u[U_BUF], u[U_JGP], u[U_JGI], u[U_MU], u[U_PW], u[U_CR], u[U_PR],
            u[U_IVL], u[U_DIST], u[U_DPAR], u[U_OCC], u[U_HDATA], u[U_HPOS], u[U_HBASE],
            u[U_HSIZE], u[U_SETS], u[U_FS], u[U_ISC], u[U_CNT], u[U_VWORK], u[U_TLAST],
            u[U_JOBS], u[U_DHEAP], u[U_DPOS], u[U_DKEY], rng, policy, table, n_epochs,
        )  # fmt: skip

    return general


def _assign(tag, ib, u, s):
    """Put the pending job on server ``s`` (validity is the caller's job), by ``tag``'s type."""
    raise NotImplementedError  # compiled versions below


@overload(_assign, jit_options=_JIT)
def _ol_assign(tag, ib, u, s):
    if isinstance(tag, types.Integer):

        def exponential(tag, ib, u, s):
            assign_exponential(
                s, u[U_ISC][PENDING], u[U_SG], u[U_MU], u[U_PW], u[U_PR], u[U_OCC], u[U_HDATA],
                u[U_HPOS], u[U_HBASE], u[U_HSIZE], u[U_SETS], u[U_FS], u[U_ISC], u[U_CNT],
            )  # fmt: skip

        return exponential

    def general(tag, ib, u, s):
        assign_general(
            s, u[U_ISC][PENDING], u[U_SG], u[U_MU], u[U_PW], u[U_PR], u[U_DIST], u[U_DPAR],
            u[U_OCC], u[U_HDATA], u[U_HPOS], u[U_HBASE], u[U_HSIZE], u[U_SETS], u[U_FS],
            u[U_ISC], u[U_CNT], u[U_VWORK], u[U_TLAST], u[U_JOBS], u[U_DHEAP], u[U_DPOS],
            u[U_DKEY], packed_rng(ib),
        )  # fmt: skip

    return general


@njit(inline="always", **_JIT)
def packed_resum(u):
    """Re-sum W, P, C over all servers (O(S); what every ``run_*`` entry does)."""
    recompute_rates(u[U_OCC], u[U_SG], u[U_MU], u[U_PW], u[U_PR][u[U_ISC][INTERVAL]], u[U_FS])


@njit(**_JIT)
def packed_run(ib, fb, policy, table, n_epochs, resum, tag):
    """The event loop (:func:`loop_exponential` / :func:`loop_general`, by ``tag``) of a packed
    simulator (``resum``: re-sum the rates over all servers first; False continues from the
    incremental rates)."""
    u = unpack(ib, fb)
    if resum:
        packed_resum(u)
    return _loop(tag, ib, u, packed_rng(ib), policy, table, n_epochs)


@njit(**_JIT)
def packed_assign(ib, fb, s, tag):
    """Put the pending job on server ``s`` (validity is the caller's job)."""
    _assign(tag, ib, unpack(ib, fb), s)


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
    sets = u[U_SETS]
    nfmin, tbase, nlev, lvoff, goff, _ = set_views(sets)
    u[U_OCC][:] = 0
    hsize[:] = 0
    sets[sets[S_WORDS] :] = 0
    nf = tbase.shape[1] - 1
    for k in range(gc.shape[0]):
        base = hbase[k, 0]
        g = goff[k]
        for i in range(gc[k]):  # every server empty: at level 0 and not full
            hdata[base + i] = g + i
            hpos[g + i] = i
            _tree_set(sets, tbase[k, 0], lvoff[k], nlev[k], i)
            _tree_set(sets, tbase[k, nf], lvoff[k], nlev[k], i)
        hsize[k, 0] = gc[k]
        nfmin[k] = g
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


# ---------------------------------------------------------------------------------------------
# the env step: one decision epoch of ServerFarmEnv in one call (one env or a batch)
# ---------------------------------------------------------------------------------------------
# (Here, not in another module: numba's on-disk cache of a function does not notice changes in
# the functions it calls from *other* files, and a stale copy of this code would read the packed
# layout wrongly. Keep every compiled function of the project in this file.)
#
# A step assigns the action, simulates to the next decision epoch and computes the reward, the
# running eta, the mask, the observation and the numbers of ``info``, for a batch of envs
# (``vec_step``; ServerFarmEnv is a batch of one, ServerFarmVectorEnv of N), on the simulator's
# packed buffers plus the env's own (built by ``envs.server_farm.pack_env``):
#
# * ``eib`` (int64): settings and counters (``E_*`` slots) followed by small tables (``EO_*``
#   offsets): action -> (group, level), observation histogram rows/cols, availability[J, K],
#   level offsets and the arrivals/blocked counters at the start of the episode; the offsets of
#   efb's tables (``EFO_*``).
# * ``efb`` (float64): settings, the running-eta state and the episode's starting integrals
#   (``EF_*``), then 1/B_k (float32 values), 1/R_k per histogram entry, the PAS table and ``out``:
#   reward and the numbers of ``info`` (``X_*`` slots), then the blocking probability per type.
#
# Entry points take 2-D stacks of ``ibuf = [ib | eib]`` and ``fbuf = [fb | efb]`` (one row per
# env), plus the observation and mask arrays: few arguments, since each costs unboxing time.
#
# Arithmetic follows the original Python implementation operation for operation (same float64
# products and quotients, same order), so a step gives bit-identical observations, rewards and
# infos. One intentional difference: a step keeps the rates W, P, C incrementally instead of
# re-summing them over all S servers (they are re-summed at every reset, warm-up chunk and
# interval boundary, and every max(RESUM_STEPS, S) steps), so the dynamics of a step cost no
# O(S) work; that changes rewards by float rounding only.
# eib header slots (E_*) and table offsets (EO_*)
(
    E_MODE, E_INVALID, E_OBJ, E_RUNNING, E_WARMUP, E_WPOL, E_NINV, E_JOB, E_A, E_L, E_NIV,
    E_OBSBASE, E_STEPS, E_MAXSTEPS, E_DONE,
    EO_ACTR, EO_ACTC, EO_HISTR, EO_HISTC, EO_AVAIL, EO_LOFF, EO_BARR, EO_BBLK,
    EFO_INVB, EFO_HINV, EFO_PAS, EFO_OUT,  # offsets of efb's tables (integers: kept in eib)
    E_HEADER,
) = range(28)  # fmt: skip
# efb slots (EF_*), then its tables
(
    EF_FIXETA, EF_TAU, EF_SCALE, EF_LAM, EF_ETAW, EF_ETAE, EF_BT, EF_BW, EF_BE, EF_BC,
    EF_HEADER,
) = range(11)  # fmt: skip
# out slots
(
    X_REWARD, X_WORK, X_ENERGY, X_COST, X_TIME, X_THROUGHPUT, X_POWER, X_EFFICIENCY, X_BLOCKING,
    X_ETA, X_COSTEFF, X_INVALID, X_JOB, X_TRUNC,
    N_OUT,
) = range(15)  # fmt: skip

MODE_SERVER, MODE_GROUP = 0, 1
OK, INVALID_RAISE = 0, 1
WARMUP_CHUNK = 1_000_000  # FarmSimulator.run's chunk (re-sum points must match for identical runs)
# Steps keep W, P, C incrementally; every max(RESUM_STEPS, S) steps of an episode they are
# re-summed over all servers, which bounds floating drift at an amortised O(1) cost per step.
RESUM_STEPS = 65_536


@njit(inline="always", **_JIT)
def _eta(eib, efb):
    if eib[E_RUNNING] == 0:
        return efb[EF_FIXETA]
    return efb[EF_ETAW] / efb[EF_ETAE] if efb[EF_ETAE] > 0 else 0.0


@njit(inline="always", **_JIT)
def _observe(u, eib, efb, obs, mask):
    """Mask and observation at the pending decision epoch (as ServerFarmEnv's Python code)."""
    j = u[U_ISC][PENDING]
    K = u[U_GC].shape[0]
    av = eib[EO_AVAIL]
    if eib[E_MODE] == MODE_SERVER:
        occ, gc, buf = u[U_OCC], u[U_GC], u[U_BUF]
        invb = eib[EFO_INVB]
        lo = 0
        for k in range(K):  # servers are numbered group by group
            hi = lo + gc[k]
            bk = buf[k]
            inv = efb[invb + k]
            # 0-based loops over slices: no negative-index checks, so LLVM vectorises them
            occ_k, mask_k, obs_k = occ[lo:hi], mask[lo:hi], obs[lo:hi]
            if eib[av + j * K + k] != 0:
                for i in range(hi - lo):
                    mask_k[i] = occ_k[i] < bk
            else:
                mask_k[:] = False
            for i in range(hi - lo):
                obs_k[i] = np.float32(occ_k[i] * inv)
            lo = hi
    else:
        hsize = u[U_HSIZE]
        ar, ac = eib[EO_ACTR], eib[EO_ACTC]
        for a in range(eib[E_A]):
            k = eib[ar + a]
            mask[a] = hsize[k, eib[ac + a]] > 0 and eib[av + j * K + k] != 0
        hr, hc, hi = eib[EO_HISTR], eib[EO_HISTC], eib[EFO_HINV]
        for i in range(eib[E_L]):
            obs[i] = np.float32(hsize[eib[hr + i], eib[hc + i]] * efb[hi + i])
    base = eib[E_OBSBASE]
    obs[base:] = 0.0
    niv = eib[E_NIV]
    if niv:
        obs[base + u[U_ISC][INTERVAL]] = 1.0
    obs[base + niv + j] = 1.0
    eib[E_JOB] = j


@njit(inline="always", **_JIT)
def _info(u, eib, efb, out, work, energy, cost, invalid):
    """The numbers of ``info`` (SimStats since the episode start, same float operations)."""
    fs, cnt = u[U_FS], u[U_CNT]
    t = fs[T] - efb[EF_BT]
    w = fs[WORK] - efb[EF_BW]
    e = fs[ENERGY] - efb[EF_BE]
    c = fs[COST] - efb[EF_BC]
    out[X_WORK] = work
    out[X_ENERGY] = energy
    out[X_COST] = cost
    out[X_TIME] = t
    out[X_THROUGHPUT] = w / t if t > 0 else 0.0
    out[X_POWER] = e / t if t > 0 else 0.0
    out[X_EFFICIENCY] = w / e if e > 0 else 0.0
    out[X_COSTEFF] = w / c if c > 0 else 0.0
    J = cnt.shape[1]
    ba, bb = eib[EO_BARR], eib[EO_BBLK]
    arr_sum = 0
    blk_sum = 0
    for j in range(J):
        a = cnt[0, j] - eib[ba + j]
        b = cnt[2, j] - eib[bb + j]
        arr_sum += a
        blk_sum += b
        out[N_OUT + j] = b / max(a, 1) if a > 0 else 0.0
    out[X_BLOCKING] = float(blk_sum) / arr_sum if arr_sum > 0 else 0.0
    out[X_ETA] = _eta(eib, efb)
    out[X_INVALID] = 1.0 if invalid else 0.0
    out[X_JOB] = eib[E_JOB]


@njit(**_JIT)
def _reset_one(ib, fb, eib, efb, obs, mask, out, tag):
    """ServerFarmEnv.reset after the Generator is set: empty farm, warm-up, first epoch."""
    packed_reset(ib, fb)
    u = unpack(ib, fb)
    rng = packed_rng(ib)
    remaining = eib[E_WARMUP]
    mu = u[U_MU]
    pas = as2d(efb[eib[EFO_PAS] : eib[EFO_PAS] + mu.size], mu.shape[0], mu.shape[1])
    while remaining > 0:  # FarmSimulator.run: chunks, each re-summing the rates first
        chunk = min(remaining, WARMUP_CHUNK)
        packed_resum(u)
        _loop(tag, ib, u, rng, eib[E_WPOL], pas, chunk)
        remaining -= chunk
    fs, cnt = u[U_FS], u[U_CNT]
    efb[EF_BT] = fs[T]
    efb[EF_BW] = fs[WORK]
    efb[EF_BE] = fs[ENERGY]
    efb[EF_BC] = fs[COST]
    for j in range(cnt.shape[1]):
        eib[eib[EO_BARR] + j] = cnt[0, j]
        eib[eib[EO_BBLK] + j] = cnt[2, j]
    eib[E_NINV] = 0
    eib[E_STEPS] = 0
    eib[E_DONE] = 0
    packed_resum(u)  # FarmSimulator.next_epoch
    _loop(tag, ib, u, rng, POLICY_EXTERNAL, pas, 1)
    _observe(u, eib, efb, obs, mask)
    out[X_REWARD] = 0.0
    out[X_TRUNC] = 0.0
    _info(u, eib, efb, out, 0.0, 0.0, 0.0, False)


@njit(inline="always", **_JIT)
def _fallback(u, eib, efb):
    """Where PAS would send the job (highest mu/(eps-eps0), ties to the smallest server), as an
    action: the smallest-index non-full server of the most efficient available group (one read
    of each available group's non-full minimum), exactly what the original
    ``np.argmax(np.where(mask, eff[group], -inf))`` over all S servers returns."""
    mu = u[U_MU]
    pas = as2d(efb[eib[EFO_PAS] : eib[EFO_PAS] + mu.size], mu.shape[0], mu.shape[1])
    s, k, b = pick_priority_kb(
        u[U_ISC][PENDING], pas, True, u[U_JGP], u[U_JGI], u[U_BUF], u[U_HSIZE],
        u[U_SETS], set_views(u[U_SETS]), u[U_OCC],
    )  # fmt: skip
    if eib[E_MODE] == MODE_SERVER:
        return s
    return eib[eib[EO_LOFF] + k] + b


@njit(**_JIT)
def _step_one(ib, fb, eib, efb, obs, mask, out, action, tag):
    """ServerFarmEnv.step; returns OK or INVALID_RAISE (nothing changed then)."""
    u = unpack(ib, fb)
    a = action
    invalid = not (0 <= a < eib[E_A] and mask[a])
    if invalid:
        if eib[E_INVALID] == 1:
            return INVALID_RAISE
        eib[E_NINV] += 1
        a = _fallback(u, eib, efb)
    if eib[E_MODE] == MODE_SERVER:
        s = a
    else:
        k = eib[eib[EO_ACTR] + a]
        sets = u[U_SETS]
        _, tbase, nlev, lvoff, goff, _ = set_views(sets)
        s = level_min(sets, tbase, lvoff, nlev, goff, k, eib[eib[EO_ACTC] + a])  # smallest
    _assign(tag, ib, u, s)
    fs = u[U_FS]
    w0 = fs[WORK]
    e0 = fs[ENERGY]
    c0 = fs[COST]
    t0 = fs[T]
    if eib[E_STEPS] > 0 and eib[E_STEPS] % max(RESUM_STEPS, ib[H_S]) == 0:
        packed_resum(u)
    _loop(tag, ib, u, packed_rng(ib), POLICY_EXTERNAL, u[U_MU], 1)
    work = fs[WORK] - w0
    energy = fs[ENERGY] - e0
    cost = fs[COST] - c0
    like = cost if eib[E_OBJ] == 1 else energy  # what the objective divides work by
    out[X_REWARD] = (work - _eta(eib, efb) * like) / efb[EF_SCALE]
    if eib[E_RUNNING] == 1:
        # exponential forgetting over eta_tau mean inter-arrival times
        decay = math.exp(-(fs[T] - t0) * efb[EF_LAM] / efb[EF_TAU])
        efb[EF_ETAW] = efb[EF_ETAW] * decay + work
        efb[EF_ETAE] = efb[EF_ETAE] * decay + like
    _observe(u, eib, efb, obs, mask)
    eib[E_STEPS] += 1
    trunc = eib[E_MAXSTEPS] > 0 and eib[E_STEPS] >= eib[E_MAXSTEPS]
    out[X_TRUNC] = 1.0 if trunc else 0.0
    eib[E_DONE] = 1 if trunc else 0
    _info(u, eib, efb, out, work, energy, cost, invalid)
    return OK


@njit(inline="always", **_JIT)
def _split(ibuf, fbuf):
    """(ib, fb, eib, efb, out) views of an env's merged buffers (borrowed, see kernels.borrow)."""
    ibuf = borrow(ibuf)
    fbuf = borrow(fbuf)
    ilen = ibuf[H_ILEN]
    flen = ibuf[H_FLEN]
    eib = ibuf[ilen:]
    efb = fbuf[flen:]
    o = eib[EFO_OUT]
    return ibuf[:ilen], fbuf[:flen], eib, efb, efb[o : o + N_OUT + ibuf[H_J]]


@njit(**_JIT)
def vec_reset(IBUF, FBUF, OBS, MASK, which, tag):
    """Reset the envs with ``which[e]`` True (Generators already set). A single env is a batch of
    one: ServerFarmEnv uses these two entry points too (one compiled path, compiled once)."""
    for e in range(IBUF.shape[0]):
        if which[e]:
            ib, fb, eib, efb, out = _split(IBUF[e], FBUF[e])
            _reset_one(ib, fb, eib, efb, OBS[e], MASK[e], out, tag)


@njit(inline="always", **_JIT)
def _vec_step_env(IBUF, FBUF, OBS, MASK, actions, codes, tag, e):
    """Step env ``e`` of a batch (see :func:`vec_step`); returns 1 if its action was refused."""
    ib, fb, eib, efb, out = _split(IBUF[e], FBUF[e])
    if eib[E_DONE]:
        _reset_one(ib, fb, eib, efb, OBS[e], MASK[e], out, tag)
        codes[e] = OK
        return 0
    code = _step_one(ib, fb, eib, efb, OBS[e], MASK[e], out, actions[e], tag)
    codes[e] = code
    return 0 if code == OK else 1


# Two functions, not ``njit(parallel=True)`` applied to the same Python function: numba's disk
# cache keys a function by its name and line, not its compile options, so the parallel
# dispatcher used to load the serial machine code from the cache and never ran threads.
@njit(**_JIT)
def vec_step(IBUF, FBUF, OBS, MASK, actions, codes, tag):
    """Step every env: ``codes[e]`` is OK or INVALID_RAISE (env e unchanged); returns how many
    were refused. Next-step autoreset: an env whose episode ended at the previous step resets
    now (its action is ignored, reward 0, not done); a single env (``max_steps`` 0) never ends."""
    refused = 0
    for e in range(IBUF.shape[0]):
        refused += _vec_step_env(IBUF, FBUF, OBS, MASK, actions, codes, tag, e)
    return refused


@njit(parallel=True, **_JIT)
def vec_step_parallel(IBUF, FBUF, OBS, MASK, actions, codes, tag):
    """:func:`vec_step` with the envs spread over numba's thread pool (``prange``)."""
    refused = 0
    for e in prange(IBUF.shape[0]):
        refused += _vec_step_env(IBUF, FBUF, OBS, MASK, actions, codes, tag, e)
    return refused
