"""Concat and Split: every tensor is seen as an (outer, axis * inner) row-major matrix and each
input (output) is one column block of the result (source), copied by a parallel row loop."""
from __future__ import annotations

import math

import numba
import numpy as np
from kernelkit import memory as kmemory
from kernelkit.ops.split import split_sizes
from kernelkit.registry import register_kernel
from llvmlite import ir
from numba.core import cgutils
from numba.extending import intrinsic

from .._base import threaded
from ..config import jit, shard_count
from ._copy import _copy_cols, as_matrix, copy_cols
from .ftile import _data


def concat(*inputs, axis, out=None):
    first = inputs[0]
    axis = axis % max(first.ndim, 1)
    for x in inputs:
        if x.ndim != first.ndim or x.shape[:axis] + x.shape[axis + 1:] != first.shape[:axis] + first.shape[axis + 1:]:
            raise ValueError(f"Concat on axis {axis}: shapes {[t.shape for t in inputs]} differ off the axis")
    total = sum(x.shape[axis] for x in inputs)
    y = np.empty(first.shape[:axis] + (total,) + first.shape[axis + 1:], first.dtype) if out is None else out
    dst = as_matrix(y, axis)
    col = 0
    for x in inputs:
        m = as_matrix(x.astype(y.dtype, copy=False), axis)
        if not (kmemory.NEST_CONCAT and _in_place(m, dst[:, col:col + m.shape[1]])):
            copy_cols(m, dst, 0, col, m.shape[1])
        col += m.shape[1]
    return y


def _in_place(x, part) -> bool:
    """Whether ``x`` already is ``part`` of the output (the memory plan nested its block there:
    ``kernelkit.memory.NEST_CONCAT``): the same first byte and the same arrangement."""
    return x.shape == part.shape and x.__array_interface__["data"][0] == part.__array_interface__["data"][0] and \
        all(a == b for a, b, n in zip(x.strides, part.strides, x.shape) if n > 1)


def split(x, split=None, *, axis=0, num_outputs=None):
    axis = axis % x.ndim
    sizes = split_sizes(x.shape[axis], None if split is None else [int(s) for s in split], num_outputs)
    if shard_count(math.prod(x.shape[:axis]), 2.0 * x.size) <= 1:
        # one thread: views, as the reference returns (the memory plan keeps x alive while they
        # are read). A copy here only moved the next node's strided read: GPT-2's Q/K/V parts go to
        # Reshape (a view) and Transpose (a copy either way), the detection head's to NumPy ufuncs
        # (Xeon: 12 Splits of GPT-2 slower than the reference, 0.17 vs 0.04 ms the head's)
        return tuple(np.split(x, np.cumsum(sizes)[:-1], axis=axis))
    src = as_matrix(x, axis)
    inner = math.prod(x.shape[axis + 1:])
    outs, col = [], 0
    for s in sizes:
        y = np.empty(x.shape[:axis] + (s,) + x.shape[axis + 1:], x.dtype)
        copy_cols(src, as_matrix(y, axis), col, 0, s * inner)
        col += s * inner
        outs.append(y)
    return tuple(outs)


# A Concat that writes a graph output (out=None: a fresh array the caller owns, Concat_285 of the detection
# head, 2.1 MB) with at least this many bytes copies its contiguous parts with non-temporal stores (no read
# for ownership of the fresh array's lines, which in a numba session come from memory: the reference's
# malloc hands it a chunk its own intermediates freed a moment before, numba's arena leaves malloc only older
# ones; issue 11, sessions 12 and 15). 0: NumPy's concatenate, as the reference. Read when a node is bound.
OUTPUT_NT = 1 << 20
# The same streamed copy for a Concat that writes an arena block (out= from the memory plan, not nested:
# kernelkit.memory.NEST_CONCAT off or an input the plan could not nest), at least this many bytes. The detection
# head's Concat_153 (2.5 MB) writes its block at 1.16-1.20x the reference's fresh array alone on the Xeon; streamed
# it ran 1.39x faster (issue 11, session 15), but its reader (Conv_156) then finds the output in memory, not in the
# caches, and lost as much (0.93). 0: off (NumPy's concatenate into out). Read when a node is bound.
ARENA_NT = 0


@intrinsic
def _nt_line(typingctx, dst, d_off, src, s_off):
    """``dst[d_off:d_off + 16] = src[s_off:s_off + 16]`` (float32) as two 32-byte non-temporal stores;
    ``dst`` at ``d_off`` 32-byte aligned."""
    sig = numba.types.void(dst, d_off, src, s_off)

    def codegen(context, builder, sig, args):
        pd = builder.bitcast(_data(context, builder, sig.args[0], args[0]), ir.FloatType().as_pointer())
        ps = builder.bitcast(_data(context, builder, sig.args[2], args[2]), ir.FloatType().as_pointer())
        vf = ir.VectorType(ir.FloatType(), 8)
        nontemporal = builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)])
        for half in (0, 8):
            at_s = builder.add(args[3], ir.Constant(args[3].type, half))
            at_d = builder.add(args[1], ir.Constant(args[1].type, half))
            v = builder.load(builder.bitcast(builder.gep(ps, [at_s]), vf.as_pointer()), align=4)
            store = builder.store(v, builder.bitcast(builder.gep(pd, [at_d]), vf.as_pointer()), align=32)
            store.set_metadata("nontemporal", nontemporal)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _sfence(typingctx):
    """The store fence that orders the non-temporal stores before whatever follows."""
    sig = numba.types.void()

    def codegen(context, builder, sig, args):
        fence = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []),
                                               "llvm.x86.sse.sfence")
        builder.call(fence, [])
        return context.get_dummy_value()

    return sig, codegen


@jit
def _nt_copy(src, dst, d0):
    """``dst[d0:d0 + src.size] = src`` (1-D float32, contiguous): the scalars up to dst's first 32-byte
    boundary, then 64-byte lines with non-temporal stores, then the tail; a store fence after."""
    n = np.int64(src.shape[0])
    d0 = np.int64(d0)
    head = np.int64(((32 - ((dst.ctypes.data + d0 * 4) & 31)) & 31) >> 2)
    if head > n:
        head = n
    for j in range(head):
        dst[d0 + j] = src[j]
    i = head
    while i + 16 <= n:
        _nt_line(dst, d0 + i, src, i)
        i += 16
    for j in range(i, n):
        dst[d0 + j] = src[j]
    _sfence()


def _concat_serial(input_specs, axis=0):
    """``fn.serial`` of Concat (``_base.FunctionKernel``): for static shapes of one dtype on one
    thread, NumPy's concatenate straight into the output, as the reference (the general path's
    checks and one Numba row copy per input: 0.06 vs 0.10 ms for the detection head's 2 + 2 + 81
    channel decode)."""
    if not input_specs or any(s is None or not s.is_static or s.layout or s.dtype != input_specs[0].dtype
                              for s in input_specs):
        return None
    rank = len(input_specs[0].shape)
    if rank == 0 or any(len(s.shape) != rank for s in input_specs):
        return None
    ax = axis % rank
    # the plan nests inputs only along an axis with nothing but 1s before it (kernelkit.memory._nest_concat)
    nestable = math.prod(input_specs[0].shape[:ax]) == 1
    lead = (slice(None),) * ax
    ends = np.cumsum([0] + [s.shape[ax] for s in input_specs]).tolist()
    parts = [lead + (slice(a, b),) for a, b in zip(ends[:-1], ends[1:])]
    shape = tuple(input_specs[0].shape[:ax]) + (ends[-1],) + tuple(input_specs[0].shape[ax + 1:])
    sizes = [math.prod(s.shape) for s in input_specs]
    offsets = np.cumsum([0] + sizes).tolist()
    # read when the node is bound, as the plan it runs in (built under the same setting) was: a variant's
    # session in nodes_ab.py keeps its setting after the switch is put back (read on each call, its nested
    # inputs went through NumPy's overlap copies: call 1 of session 15 timed that as the nesting's cost)
    nest = nestable and kmemory.NEST_CONCAT
    def streams(at_least: int) -> bool:  # (OUTPUT_NT, ARENA_NT: float32 parts of at least that many bytes in all)
        return bool(at_least and nestable and input_specs[0].dtype == "float32" and not numba.config.DISABLE_JIT
                    and 4 * offsets[-1] >= at_least)

    streamed, arena_nt = streams(OUTPUT_NT), streams(ARENA_NT)

    def stream(inputs, y):  # each part's non-temporal copy into its place in y (C order)
        flat = y.reshape(-1)
        for x, at in zip(inputs, offsets):
            _nt_copy(x.reshape(-1), flat, at)
        return y

    def call(*inputs, out=None):
        if out is None:
            if streamed and all(x.flags.c_contiguous for x in inputs):  # a graph output (fresh array)
                return stream(inputs, np.empty(shape, np.float32))
            return np.concatenate(inputs, axis=ax)
        if not nest:  # no input can be in place: the check's ~3 us an input
            if arena_nt and out.flags.c_contiguous and all(x.flags.c_contiguous and not np.may_share_memory(x, out)
                                                           for x in inputs):
                return stream(inputs, out)
            return np.concatenate(inputs, axis=ax, out=out)  # saved (NumPy copies any overlap right)
        moved = 0
        for x, part in zip(inputs, parts):
            if _in_place(x, out[part]):  # written there by its producer (the plan nested its block)
                moved += 1
        if moved == 0:
            return np.concatenate(inputs, axis=ax, out=out)
        for x, part in zip(inputs, parts):
            dst = out[part]
            if not _in_place(x, dst):
                np.copyto(dst, x)
        return out

    return call


SPLIT_SERIAL = True  # Split's serial call (False: the general path; ops_switch_ab.py's switch)
# A part whose rows are shorter than this many bytes (the detection head's xy and wh: 2 of 85 values a
# row) is copied into an array of its own by the serial call, the other parts stay views. Its readers
# (the decode's Mul, Pow) then read a few contiguous lines instead of one line per row, cold by the time
# they run: Mul_263 read its (1, 3, 10, 10, 2) view at 28-36 us against the reference's 11-15 (issue 11,
# session 14). 0: every part a view (read when a node is bound). Parts larger than SPLIT_NARROW_MAX bytes
# stay views: the level-0 parts, 38 KB gathered from a 1.6 MB input, made the Xeon's Split_182 73 against
# the reference's 51 us.
SPLIT_NARROW = 64
SPLIT_NARROW_MAX = 16384


def _split_serial(input_specs, axis=0, num_outputs=None):
    """``fn.serial`` of Split: for a static input on one thread, its parts as views (basic slices
    along the axis, made once per ``split`` constant), as the one-thread general path returns them
    but without ``np.split`` (its swapaxes per part) and the general path's per-call decisions
    (GPT-2's Q/K/V Split: 0.09 against the reference's 0.07-0.11 ms inside the model on the Xeon);
    a part whose rows are narrower than ``SPLIT_NARROW`` bytes, of at most ``SPLIT_NARROW_MAX`` bytes, is
    copied (one row copy loop)."""
    spec = input_specs[0] if input_specs else None
    if not SPLIT_SERIAL or spec is None or not spec.is_static or spec.layout or not spec.shape:
        return None
    shape = tuple(spec.shape)
    ax = axis % len(shape)
    lead = (slice(None),) * ax
    outer, inner = math.prod(shape[:ax]), math.prod(shape[ax + 1:])
    itemsize, narrowest, largest = np.dtype(spec.dtype).itemsize, SPLIT_NARROW, SPLIT_NARROW_MAX  # (at bind)
    kept: list = [None, None, None]  # (the split input the slices were made for, the slices, the narrow parts)

    def call(x, split=None, *, out=None):
        hit = kept
        if hit[1] is None or hit[0] is not split or (split is not None and split.flags.writeable):
            sizes = split_sizes(shape[ax], None if split is None else [int(s) for s in split], num_outputs)
            bounds = np.cumsum([0] + list(sizes)).tolist()
            narrow = [(k, a * inner, (b - a) * inner, shape[:ax] + (b - a,) + shape[ax + 1:])
                      for k, (a, b) in enumerate(zip(bounds[:-1], bounds[1:]))
                      if 0 < (b - a) * inner * itemsize < narrowest and outer > 1 and len(sizes) > 1
                      and outer * (b - a) * inner * itemsize <= largest]
            hit = kept[:] = [split, [lead + (slice(a, b),) for a, b in zip(bounds[:-1], bounds[1:])], narrow]
        parts = tuple(x[part] for part in hit[1])
        if not hit[2] or not x.flags.c_contiguous:
            return parts
        rows, parts = x.reshape(outer, -1), list(parts)
        for k, col, width, part_shape in hit[2]:
            y = np.empty(part_shape, x.dtype)
            _copy_cols(rows, y.reshape(outer, width), col, 0, width, 0, outer)
            parts[k] = y
        return tuple(parts)

    return call


concat.serial = _concat_serial
concat_kernel = threaded(concat)
concat_kernel.inputs_in_place = True  # skips inputs already at their part of out (kernelkit.memory.NEST_CONCAT)
split.serial = _split_serial
register_kernel("Concat", device="cpu", vendor="numba", dtype=("float32", "int8", "uint8"))(concat_kernel)
register_kernel("Split", device="cpu", vendor="numba", dtype="float32")(threaded(split))
