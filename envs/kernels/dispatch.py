"""Helpers shared by both event loops: integrals, interval boundaries, rate re-sums and the
built-in dispatchers (priority table, uniform random)."""

from __future__ import annotations

import numpy as np

from serverfarm_gym.envs.kernels.cache import kernel_njit
from serverfarm_gym.envs.kernels.layout import (
    COST,
    CRATE,
    ENERGY,
    JOBTIME,
    NJOBS,
    NO_SERVER,
    PRATE,
    WORK,
    WRATE,
    T,
)
from serverfarm_gym.envs.kernels.level_sets import level_min

# policy kinds of the built-in dispatchers
POLICY_EXTERNAL = 0  # stop at the next decision epoch and let the caller decide
POLICY_PRIORITY = 1  # priority table over (group, level); ties to the smallest server index
POLICY_RANDOM = 2  # uniform over the available non-full servers


@kernel_njit(inline="always")
def integrate(fs, dt):
    fs[WORK] += fs[WRATE] * dt
    fs[ENERGY] += fs[PRATE] * dt
    fs[COST] += fs[CRATE] * dt
    fs[JOBTIME] += fs[NJOBS] * dt
    fs[T] += dt


@kernel_njit(inline="always")
def next_boundary(t, length):
    """The first interval boundary m * length strictly after t. ``(floor(t / L) + 1) * L`` alone
    can equal t when t is itself a boundary whose quotient rounds down (``(3 * 0.7) / 0.7 < 3``),
    and the loop would then stop advancing; otherwise this is exactly that value."""
    m = np.floor(t / length) + 1.0
    b = m * length
    while b <= t:
        m += 1.0
        b = m * length
    return b


@kernel_njit()
def recompute_rates(occ, server_group, mu, pw, price, fs):
    """Recompute W, P, C and the number of jobs from scratch (removes floating drift; called at
    kernel entry)."""
    w = 0.0
    p = 0.0
    c = 0.0
    nj = 0
    for s in range(occ.shape[0]):
        k = server_group[s]
        n = occ[s]
        w += mu[k, n]
        p += pw[k, n]
        c += price[k] * pw[k, n]
        nj += n
    fs[WRATE] = w
    fs[PRATE] = p
    fs[CRATE] = c
    fs[NJOBS] = nj


@kernel_njit(inline="always")
def has_vacancy(j, jg_ptr, jg_idx, buffers, hsize, group_count):
    for q in range(jg_ptr[j], jg_ptr[j + 1]):
        k = jg_idx[q]
        if hsize[k, buffers[k]] < group_count[k]:
            return True
    return False


@kernel_njit()
def level_constant(table, buffers):
    """True when ``table[k, b]`` is the same for every level b < B_k of every group (PAS and any
    other group-priority table): the priority pick then needs only the non-full sets."""
    for k in range(buffers.shape[0]):
        for b in range(1, buffers[k]):
            if table[k, b] != table[k, 0]:
                return False
    return True


@kernel_njit(inline="always")
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


@kernel_njit(inline="always")
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


@kernel_njit(inline="always")
def pick_type(crates_row, rng):
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


@kernel_njit()
def sample_size(code, p1, p2, rng):
    """One job size with mean 1 (codes as serverfarm_gym.envs.config.DISTRIBUTIONS)."""
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


@kernel_njit(inline="always")
def choose_server(policy, j, table, levelconst, rng, jg_ptr, jg_idx, buffers, hdata, hbase, hsize,
            group_count, sets, sv, occ):  # fmt: skip
    """(server, group, level) chosen by the built-in ``policy`` for a type-j job."""
    if policy == POLICY_PRIORITY:
        return pick_priority_kb(j, table, levelconst, jg_ptr, jg_idx, buffers, hsize, sets, sv, occ)
    return pick_random_kb(j, rng, jg_ptr, jg_idx, buffers, hdata, hbase, hsize, group_count)
