"""numba intrinsics of the packed simulator: borrowed (reference-count-free) views, 2-D views
of 1-D buffers, and a ``Generator`` built from raw pointers; the shared jit options."""

from __future__ import annotations

import ctypes

import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


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
