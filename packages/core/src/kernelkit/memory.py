"""The memory plan: intermediates with known shapes live in one arena, at offsets planned from
their lifetimes (best fit in greedy-by-size and greedy-by-breadth order, the smaller arena kept:
the planners of TFLite's arena and onnxruntime's memory patterns).

Which values get a place in the arena: each single output of a host kernel that takes ``out=``,
whose shape is known for the run's input shapes, and that is not a graph output (outputs are
fresh arrays the caller owns). Every other value is allocated by its kernel, as before.

Aliasing rules the planner keeps:
- a value a kernel made itself may be a view of its inputs (Reshape, Flatten, Identity...): it
  extends the lifetime of every arena block its inputs live in, transitively;
- an elementwise op (``INPLACE_OPS``) whose input dies at that step, with the output's shape and
  dtype, writes over that input's block, unless another input of the step reads the same block;
- feeds and constants are never in the arena, so never written.

A kernel's declared scratch is one more block that lives for its step only.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

import numpy as np

from .errors import KernelExecutionError, TensorTooLargeError
from .ir import TensorSpec
from .layout import physical_shape
from .limits import check_tensor_bytes

ALIGN = 64  # bytes: every block starts on a cache line (and an AVX-512 vector)

# ops whose kernels may write their output over an input of the same shape and dtype
INPLACE_OPS = frozenset({
    "Relu", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Elu", "Selu", "Softplus", "Gelu",
    "Erf", "Exp", "Log", "Sqrt", "Reciprocal", "Neg", "Abs", "Floor", "Ceil", "Clip", "Swish",
    "Add", "Sub", "Mul", "Div",
})


def _aligned(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


@dataclass(eq=False)
class Block:
    """A region of the arena: one value (or a chain of in-place values), or one step's scratch."""

    nbytes: int
    start: int  # first step that writes it
    end: int  # last step that reads it (or a view of it)
    offset: int = -1


def by_size(blocks: list[Block]) -> list[Block]:
    """Largest first (TFLite's and onnxruntime's greedy-by-size order)."""
    return sorted(blocks, key=lambda b: (-b.nbytes, b.start, b.end))


def by_breadth(blocks: list[Block]) -> list[Block]:
    """Steps with the most bytes alive first, and at each step its blocks largest first (TFLite's
    greedy-by-breadth order): the crowded moments are packed before anything constrains them."""
    steps = max((b.end for b in blocks), default=-1) + 1
    alive: list[list[Block]] = [[] for _ in range(steps)]
    for b in blocks:
        for t in range(b.start, b.end + 1):
            alive[t].append(b)
    order, seen = [], set()
    for t in sorted(range(steps), key=lambda t: -sum(b.nbytes for b in alive[t])):
        for b in sorted(alive[t], key=lambda b: -b.nbytes):
            if id(b) not in seen:
                seen.add(id(b))
                order.append(b)
    return order


def place_blocks(blocks: list[Block], order=by_size) -> int:
    """Give each block an offset so that blocks alive at the same step never overlap: in ``order``,
    each into the smallest gap between the blocks that overlap it in time (else on top). Returns
    the arena size. Cost: sort + sum over blocks of the blocks alive in their span."""
    alive: dict[int, list[Block]] = {}  # step -> placed blocks alive there
    top = 0
    for block in order(blocks):
        seen: dict[int, Block] = {}
        for t in range(block.start, block.end + 1):
            for other in alive.get(t, ()):
                seen[id(other)] = other
        best, best_gap, cursor = None, None, 0
        for other in sorted(seen.values(), key=lambda b: b.offset):
            gap = other.offset - cursor
            if gap >= block.nbytes and (best_gap is None or gap < best_gap):
                best, best_gap = cursor, gap
            cursor = max(cursor, other.offset + other.nbytes)
        block.offset = cursor if best is None else best
        top = max(top, block.offset + block.nbytes)
        for t in range(block.start, block.end + 1):
            alive.setdefault(t, []).append(block)
    return top


def place_best(blocks: list[Block]) -> int:
    """``place_blocks`` in each order, keeping the smaller arena (offsets set accordingly)."""
    best = None
    for order in (by_size, by_breadth):
        top = place_blocks(blocks, order)
        if best is None or top < best[0]:
            best = (top, [b.offset for b in blocks])
    for b, offset in zip(blocks, best[1]):
        b.offset = offset
    return best[0]


def live_peak(blocks: list[Block], steps: int) -> int:
    """The most bytes of blocks alive at one step: the lower bound of any arena."""
    delta = [0] * (steps + 2)
    for b in blocks:
        delta[b.start] += b.nbytes
        delta[b.end + 1] -= b.nbytes
    peak = run = 0
    for d in delta:
        run += d
        peak = max(peak, run)
    return peak


@dataclass
class MemoryPlan:
    """Where each planned slot lives in the arena, for one set of input shapes."""

    key: tuple | None
    arena_bytes: int = 0
    live_peak_bytes: int = 0
    scratch_bytes: int = 0  # the largest scratch one step asked for
    placed: dict[int, tuple[int, tuple, np.dtype]] = field(default_factory=dict)  # slot -> (offset, shape, dtype)
    scratch: dict[int, tuple[int, int]] = field(default_factory=dict)  # scratch slot -> (offset, nbytes)
    inplace: dict[int, int] = field(default_factory=dict)  # step index -> input slot written over
    allocated: int = 0  # intermediates left to their kernels (unknown shape, no out=, off the host)

    def summary(self) -> dict:
        return {"arena_bytes": self.arena_bytes, "live_peak_bytes": self.live_peak_bytes,
                "scratch_bytes": self.scratch_bytes, "planned_values": len(self.placed),
                "inplace_steps": len(self.inplace), "kernel_allocated_values": self.allocated}


def plan_memory(plan, specs: dict[int, TensorSpec | None], scratch: dict[int, int], key=None) -> MemoryPlan:
    """The memory plan of ``plan`` for concrete ``specs`` (slot -> spec) and ``scratch`` (step index
    -> bytes the step's kernel declared)."""
    steps = plan.steps
    n = len(steps)
    outputs = set(plan.output_slots.values())
    last: dict[int, int] = {}
    for i, step in enumerate(steps):
        for s in step.input_slots:
            last[s] = i
    for s in outputs:
        last[s] = n  # read by the caller after the last step
    mem = MemoryPlan(key)
    block_of: dict[int, Block] = {}
    roots: dict[int, set] = {}  # slot of a kernel-made value -> blocks it may be a view of
    blocks: list[Block] = []

    def blocks_read(s: int) -> set:
        return {id(block_of[s])} if s in block_of else roots.get(s, set())

    by_id: dict[int, Block] = {}
    for i, step in enumerate(steps):
        outs = [s for s in step.output_slots if s is not None]
        if step.kind == "copy":  # an upload or download makes a copy: no aliasing
            continue
        spec = specs.get(outs[0]) if step.takes_out and len(outs) == 1 else None
        size = math.prod(spec.shape) if spec is not None and spec.is_static else 0
        dtype = np.dtype(spec.dtype) if size else None
        if size and outs[0] not in outputs and dtype.kind in "biufc":
            o = outs[0]
            nbytes = size * dtype.itemsize
            try:  # a shape inferred from a constant's values (Expand, Pad, ...) is bounded like a run-time one
                check_tensor_bytes(spec.shape, dtype)
            except TensorTooLargeError as exc:
                raise KernelExecutionError(f"node {step.name!r} ({step.op}): {exc}") from exc
            reuse = _inplace_input(step, i, o, specs, block_of, blocks_read) if step.op in INPLACE_OPS else None
            if reuse is not None:
                block = block_of[reuse]
                block.end = max(block.end, last.get(o, i))
                mem.inplace[i] = reuse
            else:
                block = Block(_aligned(nbytes), i, last.get(o, i))
                blocks.append(block)
                by_id[id(block)] = block
            block_of[o] = block
            mem.placed[o] = (block, physical_shape(spec.shape, spec.layout), dtype)  # arrays are physical
        else:
            mem.allocated += sum(1 for o in outs if o not in outputs)
            read = set().union(*(blocks_read(s) for s in step.input_slots)) if step.input_slots else set()
            for o in outs:
                if read:
                    roots[o] = read
                    for b in read:
                        by_id[b].end = max(by_id[b].end, last.get(o, i))
        nbytes = scratch.get(i, 0)
        if nbytes > 0 and step.scratch_slot is not None:
            block = Block(_aligned(nbytes), i, i)
            blocks.append(block)
            mem.scratch[step.scratch_slot] = (block, nbytes)
            mem.scratch_bytes = max(mem.scratch_bytes, nbytes)
    mem.arena_bytes = place_best(blocks)
    mem.live_peak_bytes = live_peak(blocks, n)
    mem.placed = {s: (b.offset, shape, dtype) for s, (b, shape, dtype) in mem.placed.items()}
    mem.scratch = {s: (b.offset, nbytes) for s, (b, nbytes) in mem.scratch.items()}
    return mem


def _inplace_input(step, i: int, out: int, specs, block_of: dict, blocks_read) -> int | None:
    """The input slot whose block ``step`` may write its output over, if any."""
    want = specs[out]
    for s in step.input_slots:
        block = block_of.get(s)
        if block is None or block.end != i or specs.get(s) != want:
            continue
        others = [t for t in step.input_slots if t != s]
        if any(id(block) in blocks_read(t) for t in others):
            continue  # another input reads the same memory in another arrangement
        return s
    return None


class Arena:
    """One run's memory: a bytes buffer and the value list template with views into it."""

    def __init__(self, mem: MemoryPlan, base: list):
        self.buffer = np.empty(mem.arena_bytes + ALIGN, np.uint8)
        start = (-self.buffer.ctypes.data) % ALIGN
        self.template = list(base)
        views: dict[tuple, np.ndarray] = {}
        for slot, (offset, shape, dtype) in mem.placed.items():
            # values placed alike (an in-place chain) share one view: a ufunc handed the same
            # object as input and ``out`` skips its overlap check (~0.25 us a call)
            view = views.get((offset, shape, dtype))
            if view is None:
                at = start + offset
                view = views[offset, shape, dtype] = (
                    self.buffer[at:at + int(np.prod(shape)) * dtype.itemsize].view(dtype).reshape(shape))
            self.template[slot] = view
        for slot, (offset, nbytes) in mem.scratch.items():
            self.template[slot] = self.buffer[start + offset:start + offset + nbytes]


class ArenaPool:
    """Arenas of one memory plan: a run takes one (made on demand) and gives it back, so that
    concurrent runs never share one and a steady state allocates none."""

    def __init__(self, mem: MemoryPlan, base: list):
        self.mem, self._base = mem, base
        self._free: list[Arena] = []
        self._lock = threading.Lock()

    def take(self) -> Arena:
        with self._lock:
            if self._free:
                return self._free.pop()
        return Arena(self.mem, self._base)

    def give(self, arena: Arena) -> None:
        with self._lock:
            self._free.append(arena)
