"""Entry points of a packed simulator: event loop and assignment chosen by the farm's kind tag,
re-sum, reset and checks (what ``FarmSimulator`` calls)."""

from __future__ import annotations

import numpy as np
from numba import types
from numba.extending import overload

from serverfarm_gym.envs.kernels.cache import OVERLOAD_JIT, kernel_njit
from serverfarm_gym.envs.kernels.dispatch import recompute_rates
from serverfarm_gym.envs.kernels.exponential import assign_exponential, loop_exponential
from serverfarm_gym.envs.kernels.general import assign_general, loop_general
from serverfarm_gym.envs.kernels.intrinsics import borrow, generator_from_pointers
from serverfarm_gym.envs.kernels.layout import (
    BLOCKED_LEFT,
    H_NSET,
    H_S,
    INTERVAL,
    NEXT_ARR,
    O_BUF,
    O_JGI,
    O_JGP,
    O_OCC,
    O_RNG,
    O_SETS,
    O_SG,
    PENDING,
    RNG_PTRS,
    S_WORDS,
    U_BUF,
    U_CNT,
    U_CR,
    U_DHEAP,
    U_DIST,
    U_DKEY,
    U_DPAR,
    U_DPOS,
    U_FS,
    U_GC,
    U_HBASE,
    U_HDATA,
    U_HPOS,
    U_HSIZE,
    U_ISC,
    U_IVL,
    U_JGI,
    U_JGP,
    U_JOBS,
    U_MCNT,
    U_MLIST,
    U_MODE,
    U_MPOS,
    U_MU,
    U_OCC,
    U_PR,
    U_PW,
    U_SCNT,
    U_SETS,
    U_SG,
    U_TLAST,
    U_VWORK,
    U_ZPAR,
    set_views,
    unpack,
)
from serverfarm_gym.envs.kernels.level_sets import level_min, tree_set
from serverfarm_gym.envs.kernels.sleep import assign_sleep, loop_sleep, sleep_rates, sleep_reset


@kernel_njit()
def packed_level_min(ib, k, b):
    """:func:`level_min` of a packed simulator (Python side)."""
    sets = borrow(ib)[ib[O_SETS] : ib[O_SETS] + ib[H_NSET]]
    _, tbase, nlev, lvoff, goff, _ = set_views(sets)
    return level_min(sets, tbase, lvoff, nlev, goff, k, b)


@kernel_njit(inline="always")
def packed_rng(ib):
    """The simulator's Generator (from the pointers stored in ``ib``)."""
    return generator_from_pointers(borrow(ib)[ib[O_RNG] : ib[O_RNG] + RNG_PTRS])


# Which event loop a packed simulator uses is chosen at compile time by the *type* of a ``tag``
# argument (EXPONENTIAL_TAG, an int, GENERAL_TAG, a float, or SLEEP_TAG, a bool: right-sizing,
# :mod:`serverfarm_gym.envs.kernels.sleep`; see :func:`kind_tag`): each entry
# point is compiled once per tag type and only with the loop it needs, so a farm with
# exponential sizes never compiles the (larger) general kernel. A runtime ``if`` would compile
# both for everyone.
EXPONENTIAL_TAG = 0
GENERAL_TAG = 0.0
SLEEP_TAG = True


def kind_tag(general: bool, sleep: bool = False) -> int | float | bool:
    """The ``tag`` argument of the packed entry points for a farm (see above)."""
    if sleep:
        return SLEEP_TAG
    return GENERAL_TAG if general else EXPONENTIAL_TAG


def event_loop(tag, ib, u, rng, policy, table, n_epochs):
    """The event loop of an unpacked simulator ``u`` (no re-sum), selected by ``tag``'s type."""
    raise NotImplementedError  # compiled versions below


@overload(event_loop, jit_options=OVERLOAD_JIT)
def _ol_loop(tag, ib, u, rng, policy, table, n_epochs):
    if isinstance(tag, types.Integer):

        def exponential(tag, ib, u, rng, policy, table, n_epochs):
            return loop_exponential(
                u[U_SG], u[U_GC], u[U_BUF], u[U_JGP], u[U_JGI], u[U_MU], u[U_PW], u[U_CR],
                u[U_PR], u[U_IVL], u[U_OCC], u[U_HDATA], u[U_HPOS], u[U_HBASE], u[U_HSIZE],
                u[U_SETS], u[U_FS], u[U_ISC], u[U_CNT], rng, policy, table, n_epochs,
            )  # fmt: skip

        return exponential
    if isinstance(tag, types.Boolean):

        def sleep(tag, ib, u, rng, policy, table, n_epochs):
            return loop_sleep(
                u[U_SG], u[U_GC], u[U_BUF], u[U_JGP], u[U_JGI], u[U_MU], u[U_PW], u[U_CR],
                u[U_PR], u[U_IVL], u[U_OCC], u[U_HDATA], u[U_HPOS], u[U_HBASE], u[U_HSIZE],
                u[U_SETS], u[U_FS], u[U_ISC], u[U_CNT], u[U_MODE], u[U_MLIST], u[U_MPOS],
                u[U_MCNT], u[U_SCNT], u[U_ZPAR], rng, policy, table, n_epochs,
            )  # fmt: skip

        return sleep

    def general(tag, ib, u, rng, policy, table, n_epochs):
        return loop_general(
            u[U_SG], u[U_GC], u[U_BUF], u[U_JGP], u[U_JGI], u[U_MU], u[U_PW], u[U_CR], u[U_PR],
            u[U_IVL], u[U_DIST], u[U_DPAR], u[U_OCC], u[U_HDATA], u[U_HPOS], u[U_HBASE],
            u[U_HSIZE], u[U_SETS], u[U_FS], u[U_ISC], u[U_CNT], u[U_VWORK], u[U_TLAST],
            u[U_JOBS], u[U_DHEAP], u[U_DPOS], u[U_DKEY], rng, policy, table, n_epochs,
        )  # fmt: skip

    return general


def assign_pending(tag, ib, u, s):
    """Put the pending job on server ``s`` (validity is the caller's job), by ``tag``'s type."""
    raise NotImplementedError  # compiled versions below


@overload(assign_pending, jit_options=OVERLOAD_JIT)
def _ol_assign(tag, ib, u, s):
    if isinstance(tag, types.Integer):

        def exponential(tag, ib, u, s):
            assign_exponential(
                s, u[U_ISC][PENDING], u[U_SG], u[U_MU], u[U_PW], u[U_PR], u[U_OCC], u[U_HDATA],
                u[U_HPOS], u[U_HBASE], u[U_HSIZE], u[U_SETS], u[U_FS], u[U_ISC], u[U_CNT],
            )  # fmt: skip

        return exponential
    if isinstance(tag, types.Boolean):

        def sleep(tag, ib, u, s):
            assign_sleep(
                s, u[U_ISC][PENDING], u[U_SG], u[U_MU], u[U_PW], u[U_PR], u[U_OCC], u[U_HDATA],
                u[U_HPOS], u[U_HBASE], u[U_HSIZE], u[U_SETS], u[U_FS], u[U_ISC], u[U_CNT],
                u[U_MODE], u[U_MLIST], u[U_MPOS], u[U_MCNT], u[U_SCNT], u[U_ZPAR],
            )  # fmt: skip

        return sleep

    def general(tag, ib, u, s):
        assign_general(
            s, u[U_ISC][PENDING], u[U_SG], u[U_MU], u[U_PW], u[U_PR], u[U_DIST], u[U_DPAR],
            u[U_OCC], u[U_HDATA], u[U_HPOS], u[U_HBASE], u[U_HSIZE], u[U_SETS], u[U_FS],
            u[U_ISC], u[U_CNT], u[U_VWORK], u[U_TLAST], u[U_JOBS], u[U_DHEAP], u[U_DPOS],
            u[U_DKEY], packed_rng(ib),
        )  # fmt: skip

    return general


@kernel_njit(inline="always")
def packed_resum(u):
    """Re-sum W, P, C over all servers (O(S); what every ``run_*`` entry does); by mode with
    right-sizing (per-server modes allocated)."""
    price = u[U_PR][u[U_ISC][INTERVAL]]
    if u[U_MODE].shape[0] > 0:
        sleep_rates(u[U_OCC], u[U_SG], u[U_MU], u[U_PW], price, u[U_MODE], u[U_ZPAR], u[U_FS])
    else:
        recompute_rates(u[U_OCC], u[U_SG], u[U_MU], u[U_PW], price, u[U_FS])


@kernel_njit()
def packed_run(ib, fb, policy, table, n_epochs, resum, tag, max_blocked):
    """The event loop (:func:`loop_exponential` / :func:`loop_general`, by ``tag``) of a packed
    simulator (``resum``: re-sum the rates over all servers first; False continues from the
    incremental rates). Returns the epochs dispatched: fewer than ``n_epochs`` when it stopped
    after ``max_blocked`` blocked arrivals (call again with ``resum`` False to continue)."""
    u = unpack(ib, fb)
    if resum:
        packed_resum(u)
    isc = u[U_ISC]
    isc[BLOCKED_LEFT] = max_blocked
    done = event_loop(tag, ib, u, packed_rng(ib), policy, table, n_epochs)
    isc[BLOCKED_LEFT] = 0  # no bound for others stepping these buffers (an env)
    return done


@kernel_njit()
def packed_assign(ib, fb, s, tag):
    """Put the pending job on server ``s`` (validity is the caller's job)."""
    assign_pending(tag, ib, unpack(ib, fb), s)


@kernel_njit()
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


@kernel_njit()
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
            tree_set(sets, tbase[k, 0], lvoff[k], nlev[k], i)
            tree_set(sets, tbase[k, nf], lvoff[k], nlev[k], i)
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
    if u[U_MODE].shape[0] > 0:
        sleep_reset(u[U_SG], u[U_OCC], u[U_MODE], u[U_MLIST], u[U_MPOS], u[U_MCNT], u[U_SCNT],
                    u[U_ZPAR])  # fmt: skip
