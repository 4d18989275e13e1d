"""Slots and views of the packed buffers (the simulator's ``ib``/``fb``, the env's ``eib``/``efb``)."""

from __future__ import annotations

import numpy as np
from numba import njit

from envs.kernels.intrinsics import JIT, as2d, borrow

# indices into fs / isc
T, WORK, ENERGY, COST, WRATE, PRATE, CRATE, NEXT_ARR = range(8)
INTERVAL, DEPARTURES, EPOCHS, PENDING, DHEAP_SIZE, INVALID = range(6)

NO_SERVER = 1 << 62  # "empty" minimum: above every server index
SET_LMAX = 4  # tree levels: groups of up to 64**4 = 16,777,216 servers
(S_K, S_C, S_LM, S_NFMIN, S_TBASE, S_NLEV, S_LVOFF, S_GOFF, S_BUF, S_WORDS, S_HEADER) = range(11)

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

# positions in the tuple returned by :func:`unpack`
(
    U_SG, U_GC, U_BUF, U_JGP, U_JGI, U_HBASE, U_DIST, U_OCC, U_HDATA, U_HPOS, U_HSIZE, U_ISC,
    U_CNT, U_DHEAP, U_DPOS, U_MU, U_PW, U_CR, U_PR, U_DPAR, U_IVL, U_FS, U_VWORK, U_TLAST, U_JOBS,
    U_DKEY, U_SETS,
) = range(27)  # fmt: skip


@njit(inline="always", **JIT)
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
