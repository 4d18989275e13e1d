"""Compiled env steps: one decision epoch of :class:`~envs.server_farm.ServerFarmEnv` (assign the
action, simulate to the next decision epoch, reward, running eta, mask, observation, info numbers)
in a single call, for one env (``env_step``) or a batch (``vec_step``, used by
:class:`~envs.vector.ServerFarmVectorEnv`).

Both run the same per-env function on the simulator's packed buffers (``ib``/``fb``, see
:mod:`envs.kernels`) plus the env's own packed buffers:

* ``eib`` (int64): settings and counters (``E_*`` slots) followed by small tables (``EO_*``
  offsets): action -> (group, level), observation histogram rows/cols, availability[J, K],
  level offsets and the arrivals/blocked counters at the start of the episode.
* ``efb`` (float64): settings, the running-eta state and the episode's starting integrals
  (``EF_*``), then 1/B_k (float32 values), 1/R_k per histogram entry and the PAS table.
* ``out`` (float64[N_OUT + J], the tail of ``efb``): reward and the numbers of ``info`` (``X_*``
  slots), then the blocking probability per job type.

The entry points take ``ibuf = [ib | eib]`` and ``fbuf = [fb | efb]`` (one env) or 2-D stacks of
them (a batch), plus the observation and mask arrays: every argument costs unboxing time.

Arithmetic follows the Python implementation operation for operation (same float64 products and
quotients, same order), so a step gives bit-identical observations, rewards and infos. The one
intentional difference: in ``action_mode="group"`` a step keeps the rates W, P, C incrementally
instead of re-summing them over all S servers (re-summed at every reset, warm-up and interval
boundary), so a group-mode step costs no O(S) work; that changes results by float rounding only.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from envs import kernels as kn
from envs.config import FarmConfig
from envs.observation import hist_offsets, level_offsets, n_interval_features, obs_size

_JIT = {"cache": True, "nogil": True}

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
    X_REWARD, X_WORK, X_ENERGY, X_TIME, X_THROUGHPUT, X_POWER, X_EFFICIENCY, X_BLOCKING, X_ETA,
    X_COSTEFF, X_INVALID, X_JOB, X_TRUNC,
    N_OUT,
) = range(14)  # fmt: skip

MODE_SERVER, MODE_GROUP = 0, 1
OK, INVALID_RAISE = 0, 1
WARMUP_CHUNK = 1_000_000  # FarmSimulator.run's chunk (re-sum points must match for identical runs)


def pack_env(
    config: FarmConfig,
    action_mode: str,
    invalid_action: str,
    objective: str,
    reward_eta: str | float,
    eta_tau: float,
    reward_scale: float,
    warmup_epochs: int,
    warmup_policy: str,
    max_steps: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """The env buffers ``(eib, efb)`` of one env (arguments as ``ServerFarmEnv``; ``max_steps`` > 0
    makes the vector kernel truncate episodes, the single env leaves that to ``TimeLimit``)."""
    J, B1 = config.n_job_types, config.max_buffer + 1
    act_r = np.concatenate([np.full(g.buffer, k) for k, g in enumerate(config.groups)])
    act_c = np.concatenate([np.arange(g.buffer) for g in config.groups])
    hist_r = np.concatenate([np.full(g.buffer + 1, k) for k, g in enumerate(config.groups)])
    hist_c = np.concatenate([np.arange(g.buffer + 1) for g in config.groups])
    n_hist = int(hist_offsets(config)[-1])
    server = action_mode == "server"
    tables = [
        (EO_ACTR, act_r),
        (EO_ACTC, act_c),
        (EO_HISTR, hist_r),
        (EO_HISTC, hist_c),
        (EO_AVAIL, config.availability.astype(np.int64).ravel()),
        (EO_LOFF, level_offsets(config)),
        (EO_BARR, np.zeros(J)),
        (EO_BBLK, np.zeros(J)),
    ]
    eib = np.zeros(E_HEADER + sum(len(t) for _, t in tables), dtype=np.int64)
    eib[E_MODE] = MODE_SERVER if server else MODE_GROUP
    eib[E_INVALID] = 1 if invalid_action == "raise" else 0
    eib[E_OBJ] = 1 if objective == "cost" else 0
    eib[E_RUNNING] = 1 if reward_eta == "running" else 0
    eib[E_WARMUP] = int(warmup_epochs)
    eib[E_WPOL] = kn.POLICY_PRIORITY if warmup_policy == "pas" else kn.POLICY_RANDOM
    eib[E_JOB] = -1
    eib[E_A] = config.n_servers if server else len(act_r)
    eib[E_L] = n_hist
    eib[E_NIV] = n_interval_features(config)
    eib[E_OBSBASE] = config.n_servers if server else n_hist
    eib[E_MAXSTEPS] = int(max_steps)
    o = E_HEADER
    for field, t in tables:
        eib[field] = o
        eib[o : o + len(t)] = t
        o += len(t)
    # float32 reciprocals exactly as the Python encodings (numpy promotes them to float64)
    inv_b = (1.0 / config.buffers).astype(np.float32).astype(np.float64)
    hist_inv = np.array([1.0 / config.groups[k].count for k in hist_r], np.float32)
    pas = np.repeat(config.group_efficiency[:, None], B1, axis=1).ravel()
    ftables = [
        (EFO_INVB, inv_b),
        (EFO_HINV, hist_inv.astype(np.float64)),
        (EFO_PAS, pas),
        (EFO_OUT, np.zeros(N_OUT + J)),
    ]
    efb = np.zeros(EF_HEADER + sum(len(t) for _, t in ftables), dtype=np.float64)
    efb[EF_FIXETA] = 0.0 if reward_eta == "running" else float(reward_eta)
    efb[EF_TAU] = float(eta_tau)
    efb[EF_SCALE] = float(reward_scale)
    efb[EF_LAM] = config.total_arrival_rate
    o = EF_HEADER
    for field, t in ftables:
        eib[field] = o
        efb[o : o + len(t)] = t
        o += len(t)
    assert obs_size(config, action_mode) == eib[E_OBSBASE] + eib[E_NIV] + J
    return eib, efb


@njit(inline="always", **_JIT)
def _eta(eib, efb):
    if eib[E_RUNNING] == 0:
        return efb[EF_FIXETA]
    return efb[EF_ETAW] / efb[EF_ETAE] if efb[EF_ETAE] > 0 else 0.0


@njit(inline="always", **_JIT)
def _observe(u, eib, efb, obs, mask):
    """Mask and observation at the pending decision epoch (as ServerFarmEnv's Python code)."""
    j = u[kn.U_ISC][kn.PENDING]
    K = u[kn.U_GC].shape[0]
    av = eib[EO_AVAIL]
    if eib[E_MODE] == MODE_SERVER:
        occ, gc, buf = u[kn.U_OCC], u[kn.U_GC], u[kn.U_BUF]
        invb = eib[EFO_INVB]
        lo = 0
        for k in range(K):  # servers are numbered group by group
            hi = lo + gc[k]
            bk = buf[k]
            inv = efb[invb + k]
            if eib[av + j * K + k] != 0:
                for s in range(lo, hi):
                    mask[s] = occ[s] < bk
            else:
                mask[lo:hi] = False
            for s in range(lo, hi):
                obs[s] = np.float32(occ[s] * inv)
            lo = hi
    else:
        hsize = u[kn.U_HSIZE]
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
        obs[base + u[kn.U_ISC][kn.INTERVAL]] = 1.0
    obs[base + niv + j] = 1.0
    eib[E_JOB] = j


@njit(inline="always", **_JIT)
def _info(u, eib, efb, out, work, energy, invalid):
    """The numbers of ``info`` (SimStats since the episode start, same float operations)."""
    fs, cnt = u[kn.U_FS], u[kn.U_CNT]
    t = fs[kn.T] - efb[EF_BT]
    w = fs[kn.WORK] - efb[EF_BW]
    e = fs[kn.ENERGY] - efb[EF_BE]
    c = fs[kn.COST] - efb[EF_BC]
    out[X_WORK] = work
    out[X_ENERGY] = energy
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
def _reset_one(ib, fb, eib, efb, obs, mask, out):
    """ServerFarmEnv.reset after the Generator is set: empty farm, warm-up, first epoch."""
    kn.packed_reset(ib, fb)
    u = kn.unpack(ib, fb)
    rng = kn.packed_rng(ib)
    remaining = eib[E_WARMUP]
    pas = efb[eib[EFO_PAS] : eib[EFO_PAS] + u[kn.U_MU].size].reshape(u[kn.U_MU].shape)
    while remaining > 0:  # FarmSimulator.run: chunks, each re-summing the rates first
        chunk = min(remaining, WARMUP_CHUNK)
        kn.packed_resum(u)
        kn.packed_loop(ib, fb, u, rng, eib[E_WPOL], pas, chunk)
        remaining -= chunk
    fs, cnt = u[kn.U_FS], u[kn.U_CNT]
    efb[EF_BT] = fs[kn.T]
    efb[EF_BW] = fs[kn.WORK]
    efb[EF_BE] = fs[kn.ENERGY]
    efb[EF_BC] = fs[kn.COST]
    for j in range(cnt.shape[1]):
        eib[eib[EO_BARR] + j] = cnt[0, j]
        eib[eib[EO_BBLK] + j] = cnt[2, j]
    eib[E_NINV] = 0
    eib[E_STEPS] = 0
    eib[E_DONE] = 0
    kn.packed_resum(u)  # FarmSimulator.next_epoch
    kn.packed_loop(ib, fb, u, rng, kn.POLICY_EXTERNAL, pas, 1)
    _observe(u, eib, efb, obs, mask)
    out[X_REWARD] = 0.0
    out[X_TRUNC] = 0.0
    _info(u, eib, efb, out, 0.0, 0.0, False)


@njit(inline="always", **_JIT)
def _fallback(u, eib, efb, mask):
    """Where PAS would send the job (highest mu/(eps-eps0), ties to the smallest server)."""
    if eib[E_MODE] == MODE_SERVER:
        sg = u[kn.U_SG]
        pas = eib[EFO_PAS]
        B1 = u[kn.U_MU].shape[1]
        best = -np.inf
        best_s = 0
        for s in range(sg.shape[0]):  # np.argmax(np.where(mask, eff[group], -inf))
            if mask[s]:
                v = efb[pas + sg[s] * B1]
                if v > best:
                    best = v
                    best_s = s
        return best_s
    mu = u[kn.U_MU]
    pas = efb[eib[EFO_PAS] : eib[EFO_PAS] + mu.size].reshape(mu.shape)
    s = kn.pick_priority(
        u[kn.U_ISC][kn.PENDING], pas, u[kn.U_JGP], u[kn.U_JGI], u[kn.U_BUF], u[kn.U_HDATA],
        u[kn.U_HBASE], u[kn.U_HSIZE],
    )  # fmt: skip
    k = u[kn.U_SG][s]
    return eib[eib[EO_LOFF] + k] + u[kn.U_OCC][s]


@njit(**_JIT)
def _step_one(ib, fb, eib, efb, obs, mask, out, action):
    """ServerFarmEnv.step; returns OK or INVALID_RAISE (nothing changed then)."""
    u = kn.unpack(ib, fb)
    a = action
    invalid = not (0 <= a < eib[E_A] and mask[a])
    if invalid:
        if eib[E_INVALID] == 1:
            return INVALID_RAISE
        eib[E_NINV] += 1
        a = _fallback(u, eib, efb, mask)
    if eib[E_MODE] == MODE_SERVER:
        s = a
    else:
        k = eib[eib[EO_ACTR] + a]
        s = u[kn.U_HDATA][u[kn.U_HBASE][k, eib[eib[EO_ACTC] + a]]]  # smallest index at level
    kn.packed_assign_unpacked(ib, u, s)
    fs = u[kn.U_FS]
    ecol = kn.COST if eib[E_OBJ] == 1 else kn.ENERGY
    w0 = fs[kn.WORK]
    e0 = fs[ecol]
    t0 = fs[kn.T]
    if eib[E_MODE] == MODE_SERVER:
        kn.packed_resum(u)  # as FarmSimulator.next_epoch (O(S), like the observation)
    kn.packed_loop(ib, fb, u, kn.packed_rng(ib), kn.POLICY_EXTERNAL, u[kn.U_MU], 1)
    work = fs[kn.WORK] - w0
    energy = fs[ecol] - e0
    out[X_REWARD] = (work - _eta(eib, efb) * energy) / efb[EF_SCALE]
    if eib[E_RUNNING] == 1:
        # exponential forgetting over eta_tau mean inter-arrival times
        decay = math.exp(-(fs[kn.T] - t0) * efb[EF_LAM] / efb[EF_TAU])
        efb[EF_ETAW] = efb[EF_ETAW] * decay + work
        efb[EF_ETAE] = efb[EF_ETAE] * decay + energy
    _observe(u, eib, efb, obs, mask)
    eib[E_STEPS] += 1
    trunc = eib[E_MAXSTEPS] > 0 and eib[E_STEPS] >= eib[E_MAXSTEPS]
    out[X_TRUNC] = 1.0 if trunc else 0.0
    eib[E_DONE] = 1 if trunc else 0
    _info(u, eib, efb, out, work, energy, invalid)
    return OK


@njit(inline="always", **_JIT)
def _split(ibuf, fbuf):
    """(ib, fb, eib, efb, out) views of an env's merged buffers (borrowed, see kernels.borrow)."""
    ibuf = kn.borrow(ibuf)
    fbuf = kn.borrow(fbuf)
    ilen = ibuf[kn.H_ILEN]
    flen = ibuf[kn.H_FLEN]
    eib = ibuf[ilen:]
    efb = fbuf[flen:]
    o = eib[EFO_OUT]
    return ibuf[:ilen], fbuf[:flen], eib, efb, efb[o : o + N_OUT + ibuf[kn.H_J]]


@njit(**_JIT)
def env_reset(ibuf, fbuf, obs, mask):
    """Reset one env (its Generator already set in ``ib``); returns the first job type."""
    ib, fb, eib, efb, out = _split(ibuf, fbuf)
    _reset_one(ib, fb, eib, efb, obs, mask, out)
    return eib[E_JOB]


@njit(**_JIT)
def env_step(ibuf, fbuf, obs, mask, action):
    """Step one env; returns the next job type, or -1 for a masked action with
    ``invalid_action="raise"`` (nothing changed then)."""
    ib, fb, eib, efb, out = _split(ibuf, fbuf)
    if _step_one(ib, fb, eib, efb, obs, mask, out, action) == INVALID_RAISE:
        return -1
    return eib[E_JOB]


@njit(**_JIT)
def vec_reset(IBUF, FBUF, OBS, MASK, which):
    """Reset the envs with ``which[e]`` True."""
    for e in range(IBUF.shape[0]):
        if which[e]:
            ib, fb, eib, efb, out = _split(IBUF[e], FBUF[e])
            _reset_one(ib, fb, eib, efb, OBS[e], MASK[e], out)


def _vec_step(IBUF, FBUF, OBS, MASK, actions, codes):
    # next-step autoreset: an env whose episode ended at the previous step resets now (its
    # action is ignored, reward 0, not done)
    for e in prange(IBUF.shape[0]):
        ib, fb, eib, efb, out = _split(IBUF[e], FBUF[e])
        if eib[E_DONE]:
            _reset_one(ib, fb, eib, efb, OBS[e], MASK[e], out)
            codes[e] = OK
        else:
            codes[e] = _step_one(ib, fb, eib, efb, OBS[e], MASK[e], out, actions[e])


vec_step = njit(**_JIT)(_vec_step)
vec_step_parallel = njit(parallel=True, **_JIT)(_vec_step)
