"""The declared layout of the packed buffers, written once.

Calling a compiled function costs ~70 ns per array argument (unboxing) and ~7 us for a numpy
Generator (numba rebuilds its ctypes function pointers on every call), and an env step is a few
microseconds of work. So a simulator keeps every array in two flat buffers, ``ib`` (int64) and
``fb`` (float64), and its Generator as four raw pointers in ``ib`` (the simulator's public arrays
are views into them); an env appends its own ``eib``/``efb`` (see :mod:`serverfarm_gym.envs.kernels.env_step`).
``ib`` starts with a header: dimensions, the lengths of ib and fb, then the offset of every field
(float fields' offsets point into fb). This module declares them:
for the simulator, the header's dimensions and each field's name, dtype and shape (expressions in
the dimensions); the sub-layout of the level-set field ``sets``; the env's slots and tables.

* The numba side is **generated** from it: ``python -m serverfarm_gym.envs.kernels.schema`` writes
  ``envs/kernels/layout.py`` (slot numbers as module-level int constants, which numba compiles
  as literals, and ``unpack`` / ``set_views`` as plain code). The file is checked in;
  ``tests/envs/kernels/test_kernels.py`` checks it is exactly what this module writes.
* The Python side reads it at run time: :func:`pack_simulator` / :func:`simulator_views`
  (``FarmSimulator``), :func:`pack_level_sets`'s layout (``serverfarm_gym.envs.simulator``) and
  :func:`pack_env_buffers` (``serverfarm_gym.envs.server_farm.pack_env``).

To add a field: declare it here, run ``python -m serverfarm_gym.envs.kernels.schema``, fill it in the packing
function that builds the buffers (a missing value is refused) and use ``u[U_<NAME>]`` in kernels.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

LAYOUT_FILE = Path(__file__).resolve().parent / "layout.py"


@dataclass(frozen=True)
class Field:
    """One array of a packed buffer."""

    name: str  # slot suffix: O_<name> (ints) / P_<name> (floats) offsets, U_<name> in unpack
    dtype: str  # "int64", "int32" (two per int64 slot) or "float64" (in fb)
    shape: tuple[str, ...]  # dimension expressions (Python, over the header names); () = scalar
    doc: str
    unpacked: bool = True  # part of unpack's tuple
    trim: bool = True  # int32 in the kernels: cut to the exact length (False: may be one longer)

    @property
    def floating(self) -> bool:
        return self.dtype == "float64"


# ---- the simulator: ib = header | int fields; fb = float fields --------------------------------
#: header dimensions (H_<name>) and their meaning
DIMS = (
    ("S", "servers"),
    ("K", "groups"),
    ("J", "job types"),
    ("B1", "largest buffer + 1 (levels 0..B)"),
    ("NI", "intervals of the rate/price schedule"),
    ("GEN", "1: general job sizes (per-server arrays allocated)"),
    ("NQ", "(job type, group) availability pairs"),
    ("NH", "level-set slots (sum over groups of count x (buffer + 1))"),
    ("ILEN", "length of ib"),
    ("FLEN", "length of fb"),
    ("NSET", "length of the sets field"),
    ("SLP", "1: dynamic right-sizing (per-server modes allocated)"),
)
#: expressions derived from the dimensions (locals of unpack)
DERIVED = (
    ("ns", "S if GEN else 0"),  # per-server arrays of the general kernel
    ("nz", "S if SLP else 0"),  # per-server arrays of the right-sizing kernel
    ("kz", "K if SLP else 0"),  # its per-group arrays
)
# NJOBS: jobs in the system now (a float: it multiplies dt); JOBTIME: its time integral (Little's
# law: mean response time = JOBTIME / accepted jobs, mean jobs in system = JOBTIME / time)
FS_SLOTS = (
    "T",
    "WORK",
    "ENERGY",
    "COST",
    "WRATE",
    "PRATE",
    "CRATE",
    "NEXT_ARR",
    "NJOBS",
    "JOBTIME",
)
# BLOCKED_LEFT: countdown of blocked arrivals before the running packed_run returns (0: no bound)
ISC_SLOTS = ("INTERVAL", "DEPARTURES", "EPOCHS", "PENDING", "DHEAP_SIZE", "INVALID", "BLOCKED_LEFT")
RNG_PTRS = 4  # state address, next_uint64, next_uint32, next_double
FIELDS = (
    Field("SG", "int64", ("S",), "group of each server"),
    Field("GC", "int64", ("K",), "servers per group"),
    Field("BUF", "int64", ("K",), "buffer B_k per group"),
    Field("JGP", "int64", ("J + 1",), "CSR pointers: groups available to each job type"),
    Field("JGI", "int64", ("NQ",), "CSR indices: the groups"),
    Field("HBASE", "int64", ("K", "B1"), "start of each (group, level) array in hdata"),
    Field("DIST", "int64", ("J",), "job-size distribution code per type"),
    Field("OCC", "int64", ("S",), "jobs on each server"),
    Field(
        "HDATA", "int32", ("NH",), "level-set arrays (servers per (group, level))", trim=False
    ),  # only indexed: no bound to compute
    Field("HPOS", "int32", ("S",), "position of each server in its level array"),
    Field("HSIZE", "int64", ("K", "B1"), "level-set sizes m_{k,b}"),
    Field("SETS", "int64", ("NSET",), "bitset trees and minima (layout: SETS_DIMS/FIELDS)"),
    Field("ISC", "int64", (str(len(ISC_SLOTS)),), "integer state (ISC_SLOTS)"),
    Field("CNT", "int64", ("3", "J"), "arrivals, accepted, blocked per job type"),
    Field("DHEAP", "int64", ("ns",), "departure heap of busy servers (general sizes)"),
    Field("DPOS", "int64", ("ns",), "position of each server in the heap"),
    Field("RNG", "int64", (str(RNG_PTRS),), "Generator pointers", unpacked=False),
    Field("MU", "float64", ("K", "B1"), "service rate mu_k(n)"),
    Field("PW", "float64", ("K", "B1"), "power at n jobs"),
    Field("CR", "float64", ("NI", "J"), "cumulative arrival rates per interval"),
    Field("PR", "float64", ("NI", "K"), "price per interval and group"),
    Field("DPAR", "float64", ("J", "2"), "job-size distribution parameters"),
    Field("IVL", "float64", (), "interval length"),
    Field("FS", "float64", (str(len(FS_SLOTS)),), "float state (FS_SLOTS)"),
    Field("VWORK", "float64", ("ns",), "virtual clock per server (general sizes)"),
    Field("TLAST", "float64", ("ns",), "time of the clock's last update"),
    Field("JOBS", "float64", ("ns", "B1 - 1"), "finish marks of each server's jobs"),
    Field("DKEY", "float64", ("ns",), "next departure time per server (heap key)"),
    Field("MODE", "int64", ("nz",), "mode of each server: 0 on, 1 setup, 2 off (right-sizing)"),
    Field(
        "MLIST",
        "int64",
        ("2", "nz"),
        "per group (from its first server): servers in setup, "
        "idle servers with a finite positive timeout",
    ),
    Field("MPOS", "int64", ("nz",), "position of each server in its MLIST row"),
    Field("MCNT", "int64", ("kz", "3"), "per group: servers in setup, listed idle, off"),
    Field("SCNT", "int64", ("kz", "B1"), "per (group, level): servers in setup"),
    Field(
        "ZPAR",
        "float64",
        ("kz", "4"),
        "per group: off power, setup rate, setup power, idle-timeout rate (inf: at once)",
    ),
)

# ---- the level-set field ``sets``: header (S_*) | tables | tree words ------------------------
SETS_DIMS = (("K", "groups"), ("C", "tree columns: levels 0..Bmax, then the non-full tree"),
             ("LM", "most tree levels"))  # fmt: skip
SETS_FIELDS = (
    Field("NFMIN", "int64", ("K",), "smallest non-full server per group (NO_SERVER: none)"),
    Field("TBASE", "int64", ("K", "C"), "offset of each tree in sets (-1: unused level)"),
    Field("NLEV", "int64", ("K",), "tree levels per group"),
    Field("LVOFF", "int64", ("K", "LM"), "offset of each tree level within a tree"),
    Field("GOFF", "int64", ("K",), "first server of each group"),
    Field("BUF", "int64", ("K",), "buffer B_k per group"),
)

# ---- the env: eib = E_* slots | EO_* tables; efb = EF_* slots | EFO_* tables ---------------------
ENV_ISLOTS = (
    "MODE", "INVALID", "OBJ", "RUNNING", "WARMUP", "WPOL", "NINV", "JOB", "A", "L", "NIV",
    "OBSBASE", "STEPS", "MAXSTEPS", "DONE", "SLEEP",
)  # fmt: skip
ENV_ITABLES = ("ACTR", "ACTC", "HISTR", "HISTC", "AVAIL", "LOFF", "BARR", "BBLK")
ENV_FTABLES = ("INVB", "HINV", "PAS", "OUT")  # offsets into efb, kept in eib (integers)
ENV_FSLOTS = ("FIXETA", "TAU", "SCALE", "LAM", "ETAW", "ETAE", "BT", "BW", "BE", "BC", "BN")
OUT_SLOTS = (
    "REWARD", "WORK", "ENERGY", "COST", "TIME", "THROUGHPUT", "POWER", "EFFICIENCY", "BLOCKING",
    "ETA", "COSTEFF", "INVALID", "JOB", "TRUNC", "RESPONSE", "JOBAREA",
)  # fmt: skip


# ---- slot numbers ----------------------------------------------------------------------------
def _numbered(names: list[str]) -> dict[str, int]:
    return {n: i for i, n in enumerate(names)}


def simulator_slots() -> dict[str, int]:
    """H_*, O_* (int fields), P_* (float fields) and HEADER_SIZE: the header of ``ib``."""
    names = [f"H_{d}" for d, _ in DIMS]
    names += [f"O_{f.name}" for f in FIELDS if not f.floating]
    names += [f"P_{f.name}" for f in FIELDS if f.floating]
    return _numbered([*names, "HEADER_SIZE"])


def sets_slots() -> dict[str, int]:
    names = [f"S_{d}" for d, _ in SETS_DIMS] + [f"S_{f.name}" for f in SETS_FIELDS]
    return _numbered([*names, "S_WORDS", "S_HEADER"])


def env_slots() -> dict[str, int]:
    names = [f"E_{n}" for n in ENV_ISLOTS] + [f"EO_{n}" for n in ENV_ITABLES]
    return _numbered([*names, *(f"EFO_{n}" for n in ENV_FTABLES), "E_HEADER"])


SIM = simulator_slots()
SETS = sets_slots()
ENV = env_slots()
ENV_F = _numbered([*(f"EF_{n}" for n in ENV_FSLOTS), "EF_HEADER"])
OUT = _numbered([*(f"X_{n}" for n in OUT_SLOTS), "N_OUT"])
#: the order of unpack's tuple (U_*): the ints, the floats, then SETS (the order of the code
#: measured in BENCHMARKS.md; any order compiles to about the same code)
UNPACK_ORDER = ("SG", "GC", "BUF", "JGP", "JGI", "HBASE", "DIST", "OCC", "HDATA", "HPOS", "HSIZE",
                "ISC", "CNT", "DHEAP", "DPOS", "MU", "PW", "CR", "PR", "DPAR", "IVL", "FS", "VWORK",
                "TLAST", "JOBS", "DKEY", "SETS", "MODE", "MLIST", "MPOS", "MCNT", "SCNT",
                "ZPAR")  # fmt: skip
UNPACKED = [next(f for f in FIELDS if f.name == n) for n in UNPACK_ORDER]
assert {f.name for f in UNPACKED} == {f.name for f in FIELDS if f.unpacked}


# ---- the Python side at run time -------------------------------------------------------------
def _dims_of(values: dict[str, int]) -> dict[str, int]:
    d = dict(values)
    for name, expr in DERIVED:
        d[name] = eval(expr, {"__builtins__": {}}, d)  # our own expressions (above)
    return d


def _shape(f: Field, dims: dict[str, int]) -> tuple[int, ...]:
    return tuple(int(eval(e, {"__builtins__": {}}, dims)) for e in f.shape)


def _slots(f: Field, dims: dict[str, int]) -> int:
    """int64 / float64 slots the field takes (int32: two per slot, rounded up)."""
    n = math.prod(_shape(f, dims))
    return (n + 1) // 2 if f.dtype == "int32" else n


def pack_simulator(
    dims: dict[str, int], values: dict[str, np.ndarray | float]
) -> tuple[np.ndarray, np.ndarray]:
    """``(ib, fb)`` with the header (``dims``: every DIMS name but ILEN, FLEN) and each field
    filled from ``values`` (by name; a field without a value starts as zeros)."""
    unknown = set(values) - {f.name for f in FIELDS}
    if unknown:
        raise ValueError(f"values: no such fields {sorted(unknown)}; declared: see FIELDS")
    d = _dims_of({**dims, "ILEN": 0, "FLEN": 0})
    ib = np.zeros(SIM["HEADER_SIZE"] + sum(_slots(f, d) for f in FIELDS if not f.floating),
                  dtype=np.int64)  # fmt: skip
    fb = np.zeros(sum(_slots(f, d) for f in FIELDS if f.floating), dtype=np.float64)
    d["ILEN"], d["FLEN"] = len(ib), len(fb)
    for name, _ in DIMS:
        ib[SIM[f"H_{name}"]] = d[name]
    offsets = {False: SIM["HEADER_SIZE"], True: 0}
    for f in FIELDS:
        o = offsets[f.floating]
        ib[SIM[("P_" if f.floating else "O_") + f.name]] = o
        offsets[f.floating] = o + _slots(f, d)
        if f.name in values:
            _view(ib, fb, f, d)[...] = np.asarray(values[f.name]).reshape(_shape(f, d))
    return ib, fb


def _view(ib: np.ndarray, fb: np.ndarray, f: Field, d: dict[str, int]) -> np.ndarray:
    shape = _shape(f, d)
    o = int(ib[SIM[("P_" if f.floating else "O_") + f.name]])
    n = math.prod(shape)
    if f.floating:
        return fb[o : o + n].reshape(shape) if shape else fb[o : o + 1]
    raw = ib[o : o + _slots(f, d)]
    return (raw.view(np.int32)[:n] if f.dtype == "int32" else raw).reshape(shape)


def simulator_views(ib: np.ndarray, fb: np.ndarray) -> dict[str, np.ndarray]:
    """Every field of a packed simulator as a numpy view (shaped; a scalar as a 1-element
    array), by field name: what ``unpack`` gives the kernels, plus ``RNG``."""
    d = _dims_of({name: int(ib[SIM[f"H_{name}"]]) for name, _ in DIMS})
    return {f.name: _view(ib, fb, f, d) for f in FIELDS}


def sets_layout(dims: dict[str, int]) -> dict[str, int]:
    """Offsets of the tables of ``sets`` (by field name, and WORDS: the first tree word)."""
    o = SETS["S_HEADER"]
    out = {}
    for f in SETS_FIELDS:
        out[f.name] = o
        o += math.prod(_shape(f, dims))
    out["WORDS"] = o
    return out


def pack_env_buffers(
    islots: dict[str, int], itables: dict[str, np.ndarray], fslots: dict[str, float],
    ftables: dict[str, np.ndarray],
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:  # fmt: skip
    """``(eib, efb)`` of one env from its slot values and tables (by the names above; every
    table must be given, slots not given start at 0)."""
    for what, given, declared in (("itables", itables, ENV_ITABLES),
                                  ("ftables", ftables, ENV_FTABLES)):  # fmt: skip
        if set(given) != set(declared):
            raise ValueError(f"{what}: expected the tables {list(declared)}, got {list(given)}")
    eib = np.zeros(ENV["E_HEADER"] + sum(len(itables[n]) for n in ENV_ITABLES), dtype=np.int64)
    efb = np.zeros(ENV_F["EF_HEADER"] + sum(len(ftables[n]) for n in ENV_FTABLES))
    for n, v in islots.items():
        eib[ENV[f"E_{n}"]] = v
    for n, fv in fslots.items():
        efb[ENV_F[f"EF_{n}"]] = fv
    for buf, prefix, start, names, tables in (
        (eib, "EO_", ENV["E_HEADER"], ENV_ITABLES, itables),
        (efb, "EFO_", ENV_F["EF_HEADER"], ENV_FTABLES, ftables),
    ):
        o = start
        for n in names:
            t = np.asarray(tables[n])
            eib[ENV[prefix + n]] = o
            buf[o : o + len(t)] = t
            o += len(t)
    return eib, efb


# ---- the generated module --------------------------------------------------------------------
def _constants(slots: dict[str, int], comment: str) -> str:
    names = list(slots)
    lines, line = [], "   "
    for n in names:
        item = f" {n},"
        if len(line) + len(item) > 99:
            lines.append(line)
            line = "   "
        line += item
    lines.append(line)
    body = "\n".join(lines)
    return f"# {comment}\n(\n{body}\n) = range({len(names)})  # fmt: skip\n"


def _view_expr(buf: str, base: str, slot: str, f: Field, dim_of: dict[str, str]) -> str:
    shape = [dim_of.get(e, e) for e in f.shape]
    if not shape:
        return f"{buf}[{base}[{slot}]]"
    n = " * ".join(s if s.isidentifier() or s.isdigit() else f"({s})" for s in shape)
    if f.dtype == "int32":
        raw = f"{base}[{base}[{slot}] : {base}[{slot}] + ({n} + 1) // 2].view(np.int32)"
        raw += f"[:{n}]" if f.trim else ""
    else:
        raw = f"{buf}[{base}[{slot}] : {base}[{slot}] + {n}]"
    if len(shape) == 1:
        return raw
    return f"as2d({raw}, {', '.join(shape)})"


def _unpack_code() -> str:
    used = {n for f in UNPACKED for e in f.shape for n in _names(e)}
    used |= {n for _, e in DERIVED for n in _names(e)}
    dims = [d for d, _ in DIMS if d in used]
    body = [f"    {d} = ib[H_{d}]" for d in dims]
    body += [f"    {n} = {e}" for n, e in DERIVED]
    items = []
    for f in UNPACKED:
        slot = ("P_" if f.floating else "O_") + f.name
        items.append(_view_expr("fb" if f.floating else "ib", "ib", slot, f, {}) + ",")
    doc = ('    """Views of every field of a packed simulator, in the order of the ``U_*`` constants\n'
           "    (borrowed: valid while ``ib`` and ``fb`` are alive, i.e. within the calling entry"
           ' point)."""')  # fmt: skip
    return (
        '@kernel_njit(inline="always")\ndef unpack(ib, fb):\n' + doc + "\n"
        "    ib = borrow(ib)\n    fb = borrow(fb)\n" + "\n".join(body) + "\n    return (\n"
        + "\n".join(f"        {x}" for x in items) + "\n    )  # fmt: skip\n"
    )  # fmt: skip


def _set_views_code() -> str:
    body = [f"    {d} = sets[S_{d}]" for d, _ in SETS_DIMS]
    items = [_view_expr("sets", "sets", f"S_{f.name}", f, {}) + "," for f in SETS_FIELDS]
    names = ", ".join(f.name.lower() for f in SETS_FIELDS)
    return (
        '@kernel_njit(inline="always")\ndef set_views(sets):\n'
        f'    """({names}) views of a ``sets`` array (borrowed)."""\n'
        "    sets = borrow(sets)\n" + "\n".join(body) + "\n    return (\n"
        + "\n".join(f"        {x}" for x in items) + "\n    )  # fmt: skip\n"
    )  # fmt: skip


def _names(expr: str) -> set[str]:
    return {n.id for n in ast.walk(ast.parse(expr, mode="eval")) if isinstance(n, ast.Name)}


def generate() -> str:
    """The text of ``envs/kernels/layout.py``."""
    parts = [
        "# generated by python -m serverfarm_gym.envs.kernels.schema; do not edit (edit envs/kernels/schema.py)\n"
        '"""Slot numbers and views of the packed buffers, generated from :mod:`serverfarm_gym.envs.kernels.schema`.\n\n'
        "Module-level int constants are compile-time constants in numba: ``u[U_OCC]`` and\n"
        "``ib[H_S]`` compile to the same code as literal indices.\n"
        '"""\n\n'
        "from __future__ import annotations\n\n"
        "import numpy as np\n\n"
        "from serverfarm_gym.envs.kernels.cache import kernel_njit\n"
        "from serverfarm_gym.envs.kernels.intrinsics import as2d, borrow\n\n"
        'NO_SERVER = 1 << 62  # "empty" minimum: above every server index\n'
        "SET_LMAX = 4  # tree levels: groups of up to 64**4 = 16,777,216 servers\n"
        f"RNG_PTRS = {RNG_PTRS}  # state address, next_uint64, next_uint32, next_double\n",
        _constants(_numbered(list(FS_SLOTS)), "slots of fs (float64 state)"),
        _constants(_numbered(list(ISC_SLOTS)), "slots of isc (int64 state)"),
        _constants(
            SIM, "header of ib: dimensions (H_*), offsets of int (O_*) and float (P_*) fields"
        ),
        _constants(_numbered([f"U_{f.name}" for f in UNPACKED]), "positions in unpack's tuple"),
        _constants(SETS, "header of the sets field: dimensions, table offsets, first tree word"),
        _constants(ENV, "eib: env slots (E_*), offsets of its tables (EO_*) and of efb's (EFO_*)"),
        _constants(ENV_F, "efb: env float slots (EF_*), then its tables"),
        _constants(
            OUT, "the env's out table: reward and info numbers (X_*), then blocking per type"
        ),
        "\n" + _unpack_code(),
        "\n" + _set_views_code(),
    ]
    return "\n".join(parts)


def main() -> None:
    LAYOUT_FILE.write_text(generate())
    print(f"wrote {LAYOUT_FILE}")


if __name__ == "__main__":
    main()
