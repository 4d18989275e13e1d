"""Compiled (numba) event kernels of the farm simulator.

The Python layer (``serverfarm_gym.envs.simulator``) owns configuration, state arrays and metrics; these functions
only do events. Layout of the state (all plain numpy arrays, no per-event allocation):

* ``occ[s]``: jobs on server s.
* Per (group k, level b) the *level set* of the servers of group k that hold b jobs: an unordered
  array ``hdata[hbase[k, b] : hbase[k, b] + hsize[k, b]]`` with ``hpos[s]`` the position of s in
  it (a uniformly random server at a level is ``hdata[base + randint(size)]``), and a 64-ary
  bitset tree in ``sets`` that gives the smallest-index server at that level, which is what
  every built-in dispatcher breaks ties by (see :mod:`serverfarm_gym.envs.kernels.level_sets`; one more tree per
  group holds its non-full servers). ``hsize[k, b]`` is the histogram m_{k,b}. Moving a server between levels
  costs O(1) plus O(log64 R_k) in the worst case, independent of the rest of the farm.
* ``fs`` (float64[10]): time, integrated work, energy, energy cost, current total service rate W,
  power P, cost rate C, the time of the next arrival (general-size kernel only), the number of
  jobs in the system and its time integral (mean response time by Little's law).
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
single env and a batch alike.

Modules, by concern: :mod:`~serverfarm_gym.envs.kernels.schema` (the packed buffers' layout, declared once) and
:mod:`~serverfarm_gym.envs.kernels.layout` (generated from it: slot constants, ``unpack``, ``set_views``),
:mod:`~serverfarm_gym.envs.kernels.intrinsics` (borrowed views, raw-pointer Generator),
:mod:`~serverfarm_gym.envs.kernels.level_sets`, :mod:`~serverfarm_gym.envs.kernels.dispatch` (shared helpers, built-in
dispatchers), the event loops :mod:`~serverfarm_gym.envs.kernels.exponential` and :mod:`~serverfarm_gym.envs.kernels.general`,
:mod:`~serverfarm_gym.envs.kernels.sleep` (the event loop with right-sizing),
:mod:`~serverfarm_gym.envs.kernels.packed` (the simulator's entry points) and :mod:`~serverfarm_gym.envs.kernels.env_step`.
Helpers are inlined across modules (``inline="always"``) exactly as within one. Every compiled
function is decorated by :func:`serverfarm_gym.envs.kernels.cache.kernel_njit`, so numba's disk cache is keyed on
the whole package's source: editing any kernel recompiles everything that depends on it.

This package exports only what the rest of the project uses (``serverfarm_gym.envs.simulator``,
``serverfarm_gym.envs.server_farm``, ``serverfarm_gym.envs.vector``: ``from serverfarm_gym.envs import kernels as kn; kn.vec_step``): the entry
points, the policy / mode / kind codes and the buffer slots those modules read. Everything else
(the other slots of ``layout``, the event loops, the level sets, the dispatch helpers) is the
kernels' own; a test or benchmark that needs it imports the submodule
(``from serverfarm_gym.envs.kernels.layout import NJOBS``).
"""

from __future__ import annotations

from serverfarm_gym.envs.kernels.dispatch import (
    POLICY_EXTERNAL,
    POLICY_PRIORITY,
    POLICY_RANDOM,
)
from serverfarm_gym.envs.kernels.env_step import (
    MODE_GROUP,
    MODE_SERVER,
    WARMUP_CHUNK,
    vec_reset,
    vec_step,
    vec_step_parallel,
)
from serverfarm_gym.envs.kernels.intrinsics import (
    rng_pointers,
)
from serverfarm_gym.envs.kernels.layout import (
    COST,
    DEPARTURES,
    E_DONE,
    E_JOB,
    E_MAXSTEPS,
    E_NINV,
    E_NIV,
    E_OBSBASE,
    E_STEPS,
    E_WARMUP,
    EF_ETAE,
    EF_ETAW,
    EFO_OUT,
    ENERGY,
    EPOCHS,
    H_FLEN,
    H_ILEN,
    INTERVAL,
    JOBTIME,
    N_OUT,
    NO_SERVER,
    PENDING,
    S_C,
    S_K,
    S_LM,
    S_WORDS,
    SET_LMAX,
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
)
from serverfarm_gym.envs.kernels.packed import (
    can_take,
    kind_tag,
    packed_assign,
    packed_level_min,
    packed_reset,
    packed_run,
)
from serverfarm_gym.envs.kernels.sleep import (
    MODE_OFF,
    MODE_ON,
    MODE_SETUP,
)

__all__ = [
    "COST",
    "DEPARTURES",
    "EFO_OUT",
    "EF_ETAE",
    "EF_ETAW",
    "ENERGY",
    "EPOCHS",
    "E_DONE",
    "E_JOB",
    "E_MAXSTEPS",
    "E_NINV",
    "E_NIV",
    "E_OBSBASE",
    "E_STEPS",
    "E_WARMUP",
    "H_FLEN",
    "H_ILEN",
    "INTERVAL",
    "JOBTIME",
    "MODE_GROUP",
    "MODE_OFF",
    "MODE_ON",
    "MODE_SERVER",
    "MODE_SETUP",
    "NO_SERVER",
    "N_OUT",
    "PENDING",
    "POLICY_EXTERNAL",
    "POLICY_PRIORITY",
    "POLICY_RANDOM",
    "SET_LMAX",
    "S_C",
    "S_K",
    "S_LM",
    "S_WORDS",
    "WARMUP_CHUNK",
    "WORK",
    "X_BLOCKING",
    "X_COST",
    "X_COSTEFF",
    "X_EFFICIENCY",
    "X_ENERGY",
    "X_ETA",
    "X_INVALID",
    "X_JOB",
    "X_JOBAREA",
    "X_POWER",
    "X_RESPONSE",
    "X_REWARD",
    "X_THROUGHPUT",
    "X_TIME",
    "X_TRUNC",
    "X_WORK",
    "T",
    "can_take",
    "kind_tag",
    "packed_assign",
    "packed_level_min",
    "packed_reset",
    "packed_run",
    "rng_pointers",
    "vec_reset",
    "vec_step",
    "vec_step_parallel",
]
