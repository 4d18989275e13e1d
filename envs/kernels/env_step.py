"""The env step: one decision epoch of ServerFarmEnv in one call (one env or a batch)."""

from __future__ import annotations

import math

import numpy as np
from numba import prange

from serverfarm_gym.envs.kernels.cache import kernel_njit
from serverfarm_gym.envs.kernels.dispatch import POLICY_EXTERNAL, pick_priority_kb
from serverfarm_gym.envs.kernels.intrinsics import as2d, borrow
from serverfarm_gym.envs.kernels.layout import (
    COST,
    E_A,
    E_DONE,
    E_INVALID,
    E_JOB,
    E_L,
    E_MAXSTEPS,
    E_MODE,
    E_NINV,
    E_NIV,
    E_OBJ,
    E_OBSBASE,
    E_RUNNING,
    E_SLEEP,
    E_STEPS,
    E_WARMUP,
    E_WPOL,
    EF_BC,
    EF_BE,
    EF_BN,
    EF_BT,
    EF_BW,
    EF_ETAE,
    EF_ETAW,
    EF_FIXETA,
    EF_LAM,
    EF_SCALE,
    EF_TAU,
    EFO_HINV,
    EFO_INVB,
    EFO_OUT,
    EFO_PAS,
    ENERGY,
    EO_ACTC,
    EO_ACTR,
    EO_AVAIL,
    EO_BARR,
    EO_BBLK,
    EO_HISTC,
    EO_HISTR,
    EO_LOFF,
    H_FLEN,
    H_ILEN,
    H_J,
    H_S,
    INTERVAL,
    JOBTIME,
    N_OUT,
    PENDING,
    U_BUF,
    U_CNT,
    U_FS,
    U_GC,
    U_HSIZE,
    U_ISC,
    U_JGI,
    U_JGP,
    U_MCNT,
    U_MODE,
    U_MU,
    U_OCC,
    U_SETS,
    WORK,
    X_BLOCKING,
    X_COST,
    X_COSTEFF,
    X_EFFICIENCY,
    X_ENERGY,
    X_ETA,
    X_INVALID,
    X_JOB,
    X_JOBAREA,
    X_POWER,
    X_RESPONSE,
    X_REWARD,
    X_THROUGHPUT,
    X_TIME,
    X_TRUNC,
    X_WORK,
    T,
    set_views,
    unpack,
)
from serverfarm_gym.envs.kernels.level_sets import level_min
from serverfarm_gym.envs.kernels.packed import (
    assign_pending,
    event_loop,
    packed_reset,
    packed_resum,
    packed_rng,
)

# A step assigns the action, simulates to the next decision epoch and computes the reward, the
# running eta, the mask, the observation and the numbers of ``info``, for a batch of envs
# (``vec_step``; ServerFarmEnv is a batch of one, ServerFarmVectorEnv of N), on the simulator's
# packed buffers plus the env's own (built by ``serverfarm_gym.envs.server_farm.pack_env``):
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

MODE_SERVER, MODE_GROUP = 0, 1
OK, INVALID_RAISE = 0, 1
WARMUP_CHUNK = 1_000_000  # FarmSimulator.run's chunk (re-sum points must match for identical runs)
# Steps keep W, P, C incrementally; every max(RESUM_STEPS, S) steps of an episode they are
# re-summed over all servers, which bounds floating drift at an amortised O(1) cost per step.
RESUM_STEPS = 65_536


@kernel_njit(inline="always")
def _eta(eib, efb):
    if eib[E_RUNNING] == 0:
        return efb[EF_FIXETA]
    return efb[EF_ETAW] / efb[EF_ETAE] if efb[EF_ETAE] > 0 else 0.0


@kernel_njit()
def _observe_modes(u, eib, obs):
    """The right-sizing block after the occupancies (``serverfarm_gym.envs.observation``): per server its mode
    / 2 (0 on, 0.5 setup, 1 off), or per group the shares of its servers off and in setup."""
    gc = u[U_GC]
    if eib[E_MODE] == MODE_SERVER:
        mode = u[U_MODE]
        S = mode.shape[0]
        for s in range(S):
            obs[S + s] = np.float32(mode[s] * 0.5)
    else:
        mcnt = u[U_MCNT]
        lo = eib[E_L]
        for k in range(gc.shape[0]):
            obs[lo + 2 * k] = np.float32(mcnt[k, 2] / gc[k])
            obs[lo + 2 * k + 1] = np.float32(mcnt[k, 0] / gc[k])


@kernel_njit(inline="always")
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
    if eib[E_SLEEP]:
        _observe_modes(u, eib, obs)
    base = eib[E_OBSBASE]
    obs[base:] = 0.0
    niv = eib[E_NIV]
    if niv:
        obs[base + u[U_ISC][INTERVAL]] = 1.0
    obs[base + niv + j] = 1.0
    eib[E_JOB] = j


@kernel_njit(inline="always")
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
    # Little's law: the time integral of the jobs in the system over the jobs accepted (the
    # arrival waiting for this step's decision is counted in arr_sum but not yet accepted)
    acc_sum = arr_sum - blk_sum - (1 if u[U_ISC][PENDING] >= 0 else 0)
    out[X_RESPONSE] = (fs[JOBTIME] - efb[EF_BN]) / acc_sum if acc_sum > 0 else 0.0
    out[X_ETA] = _eta(eib, efb)
    out[X_INVALID] = 1.0 if invalid else 0.0
    out[X_JOB] = eib[E_JOB]


@kernel_njit()
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
        event_loop(tag, ib, u, rng, eib[E_WPOL], pas, chunk)
        remaining -= chunk
    fs, cnt = u[U_FS], u[U_CNT]
    efb[EF_BT] = fs[T]
    efb[EF_BW] = fs[WORK]
    efb[EF_BE] = fs[ENERGY]
    efb[EF_BC] = fs[COST]
    efb[EF_BN] = fs[JOBTIME]
    for j in range(cnt.shape[1]):
        eib[eib[EO_BARR] + j] = cnt[0, j]
        eib[eib[EO_BBLK] + j] = cnt[2, j]
    eib[E_NINV] = 0
    eib[E_STEPS] = 0
    eib[E_DONE] = 0
    packed_resum(u)  # FarmSimulator.next_epoch
    event_loop(tag, ib, u, rng, POLICY_EXTERNAL, pas, 1)
    _observe(u, eib, efb, obs, mask)
    out[X_REWARD] = 0.0
    out[X_JOBAREA] = 0.0
    out[X_TRUNC] = 0.0
    _info(u, eib, efb, out, 0.0, 0.0, 0.0, False)


@kernel_njit(inline="always")
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


@kernel_njit()
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
    assign_pending(tag, ib, u, s)
    fs = u[U_FS]
    w0 = fs[WORK]
    e0 = fs[ENERGY]
    c0 = fs[COST]
    t0 = fs[T]
    n0 = fs[JOBTIME]
    if eib[E_STEPS] > 0 and eib[E_STEPS] % max(RESUM_STEPS, ib[H_S]) == 0:
        packed_resum(u)
    event_loop(tag, ib, u, packed_rng(ib), POLICY_EXTERNAL, u[U_MU], 1)
    work = fs[WORK] - w0
    energy = fs[ENERGY] - e0
    cost = fs[COST] - c0
    like = cost if eib[E_OBJ] == 1 else energy  # what the objective divides work by
    out[X_REWARD] = (work - _eta(eib, efb) * like) / efb[EF_SCALE]
    # the interval's integral of the jobs in the system: the SLO's Lagrangian term (the env)
    out[X_JOBAREA] = fs[JOBTIME] - n0
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


@kernel_njit(inline="always")
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


@kernel_njit()
def vec_reset(IBUF, FBUF, OBS, MASK, which, tag):
    """Reset the envs with ``which[e]`` True (Generators already set). A single env is a batch of
    one: ServerFarmEnv uses these two entry points too (one compiled path, compiled once)."""
    for e in range(IBUF.shape[0]):
        if which[e]:
            ib, fb, eib, efb, out = _split(IBUF[e], FBUF[e])
            _reset_one(ib, fb, eib, efb, OBS[e], MASK[e], out, tag)


@kernel_njit(inline="always")
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
@kernel_njit()
def vec_step(IBUF, FBUF, OBS, MASK, actions, codes, tag):
    """Step every env: ``codes[e]`` is OK or INVALID_RAISE (env e unchanged); returns how many
    were refused. Next-step autoreset: an env whose episode ended at the previous step resets
    now (its action is ignored, reward 0, not done); a single env (``max_steps`` 0) never ends."""
    refused = 0
    for e in range(IBUF.shape[0]):
        refused += _vec_step_env(IBUF, FBUF, OBS, MASK, actions, codes, tag, e)
    return refused


@kernel_njit(parallel=True)
def vec_step_parallel(IBUF, FBUF, OBS, MASK, actions, codes, tag):
    """:func:`vec_step` with the envs spread over numba's thread pool (``prange``)."""
    refused = 0
    for e in prange(IBUF.shape[0]):
        refused += _vec_step_env(IBUF, FBUF, OBS, MASK, actions, codes, tag, e)
    return refused
