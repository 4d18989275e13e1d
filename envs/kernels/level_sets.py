"""Level sets: the servers of group k holding b jobs (and the non-full ones), with their minimum."""

from __future__ import annotations

from numba.cpython.unsafe.numbers import trailing_zeros

from serverfarm_gym.envs.kernels.cache import kernel_njit
from serverfarm_gym.envs.kernels.layout import CRATE, NJOBS, NO_SERVER, PRATE, WRATE, set_views

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
# Why not indexed binary min-heaps (same minima): their O(log R_k) sifts per move cost more
# per event than swap-remove and append (BENCHMARKS.md). The uniform member drawn for a
# departure depends on the array order, so trajectories (not their distribution) depend on it.
#
# ``sets`` (int64, inside ``ib``) = header (S_* slots: dimensions and offsets) | nfmin[K] |
# tbase[K, B1+1] (offset of each tree in ``sets``; the non-full tree last) | nlev[K] (tree levels) |
# lvoff[K, LMAX] (offset of each tree level within a tree; level 0 = leaves) | goff[K] (first
# server of the group) | buffers[K] | the tree words.


@kernel_njit(inline="always")
def tree_set(sets, base, lo, nlev, i):
    """Add local index i to the tree at ``base`` (level offsets ``lo``)."""
    if nlev == 1:  # a group of <= 64 servers: one word, no tree walk on the hot path
        sets[base] |= 1 << i
        return
    for lv in range(nlev):
        w = base + lo[lv] + (i >> 6)
        old = sets[w]
        sets[w] = old | (1 << (i & 63))
        if old != 0:  # the word was non-empty: the levels above already know
            return
        i >>= 6


@kernel_njit(inline="always")
def tree_clear(sets, base, lo, nlev, i):
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


@kernel_njit(inline="always")
def tree_first(sets, base, lo, nlev):
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


@kernel_njit(inline="always")
def level_min(sets, tbase, lvoff, nlev, goff, k, b):
    """Smallest server of group k at level b (column b of the trees), NO_SERVER if none."""
    f = tree_first(sets, tbase[k, b], lvoff[k], nlev[k])
    return goff[k] + f if f >= 0 else NO_SERVER


@kernel_njit(inline="always")
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
    tree_clear(sets, tbase[k, b], lo, nl, li)
    tree_set(sets, tbase[k, nb], lo, nl, li)
    bk = sbuf[k]
    nf = tbase[k, tbase.shape[1] - 1]
    if nb == bk:  # now full
        tree_clear(sets, nf, lo, nl, li)
        if nfmin[k] == s:
            f = tree_first(sets, nf, lo, nl)
            nfmin[k] = g + f if f >= 0 else NO_SERVER
    elif b == bk:  # no longer full
        tree_set(sets, nf, lo, nl, li)
        if s < nfmin[k]:
            nfmin[k] = s


@kernel_njit(inline="always")
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
    fs[NJOBS] += nb - b
