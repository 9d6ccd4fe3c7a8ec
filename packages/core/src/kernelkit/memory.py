"""The memory plan: intermediates with known shapes live in one arena, at offsets planned from
their lifetimes (best fit in greedy-by-size and greedy-by-breadth order, the smaller arena kept:
the planners of TFLite's arena and onnxruntime's memory patterns). With ``HOT`` on, a third,
chronological plan places each block where the arena was touched most recently (``place_hot``:
a value written into memory its neighbours just read finds its lines in L1/L2, as a freshly
malloc'ed chunk does); of the three, the plan whose writers find their destinations warmest is kept
among those whose arena is at most ``HOT_MAX_GROWTH`` times the smallest (``place_best``).

Which values get a place in the arena: each single output of a host kernel that takes ``out=``,
whose shape is known for the run's input shapes, and that is not a graph output (outputs are
fresh arrays the caller owns). Every other value is allocated by its kernel, as before.

Aliasing rules the planner keeps:
- a value a kernel made itself may be a view of its inputs (Reshape, Flatten, Identity...): it
  extends the lifetime of every arena block its inputs live in, transitively;
- an elementwise op (``INPLACE_OPS``) whose input dies at that step, with the output's shape and
  dtype, writes over that input's block, unless another input of the step reads the same block;
  a MatMul with a fused residual (``INPLACE_INPUT``) the same, over that residual only, and so a step whose
  kernel names the input it may write over (``output_over_input(input_specs)``: its position, or None);
- a Concat whose kernel opts in (``inputs_in_place``; ``NEST_CONCAT``), along an axis with nothing
  but 1s before it, gets its inputs' blocks nested in its own where they die at the Concat: each
  input's producer writes straight into its part of the output, and the Concat finds its inputs in
  place (its copy skipped);
- feeds and constants are never in the arena, so never written.

A kernel's declared scratch is one more block that lives for its step only.
"""
from __future__ import annotations

import bisect
import math
import threading
from dataclasses import dataclass, field

import numpy as np

from .errors import KernelExecutionError, TensorTooLargeError
from .ir import TensorSpec
from .layout import physical_shape
from .limits import check_tensor_bytes

ALIGN = 64  # bytes: every block starts on a cache line (and an AVX-512 vector)

# the hot plan (issue 11, session 12): on (True) or off (False: session 11's plans, by size only)
HOT = True
HOT_MAX_GROWTH = 1.25  # with HOT, a plan is kept only if its arena is at most this times the smallest


def _l2_bytes(default: int = 1 << 20) -> int:
    """The L2 cache of CPU 0 (Linux sysfs), else ``default``."""
    try:
        with open("/sys/devices/system/cpu/cpu0/cache/index2/size") as f:
            text = f.read().strip().upper()
        scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:], 1)
        return int(text.rstrip("KM")) * scale or default
    except (OSError, ValueError):
        return default


# bytes touched (read or written) by the steps since a region's last use, beyond which it counts as cold:
# the L2 of a core (1 MiB on the Zen 4 box, 2 MiB on the Xeon). A byte written costs its age over this,
# 1 at most; a byte the arena grows by (never held) costs HOT_GROW: a cold gap is taken before the top
HOT_CACHE_BYTES = _l2_bytes()
HOT_GROW = 1.05

# Beyond the L2 (issue 11, session 15): in the choice among the plans (``place_best``), a byte older than
# HOT_CACHE_BYTES costs 1 plus HOT_FAR times its age past the L2 over HOT_FAR_BYTES (HOT_FAR more at most; a byte
# never held: HOT_GROW times 1 + HOT_FAR), so that of two plans whose writers meet bytes colder than the L2 the one
# that used them more recently (still in the L3) is kept; ``place_hot`` places as before. On the Xeon (2 MiB L2) the
# detection head's hot plan put Concat_153 (2.5 MB) over bytes last used 53 MB of traffic earlier, best fit over
# bytes used 0-7 MB earlier; with HOT_FAR = 1 best fit is kept (the only plan of the ten models that changes).
# The node then ran at the reference's time, the whole model no faster (docs/numba.md). 0: off. Read when a plan
# is made.
HOT_FAR = 0.0
HOT_FAR_BYTES = 32 << 20

# ops whose kernels may write their output over an input of the same shape and dtype
INPLACE_OPS = frozenset({
    "Relu", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Elu", "Selu", "Softplus", "Gelu",
    "Erf", "Exp", "Log", "Sqrt", "Reciprocal", "Neg", "Abs", "Floor", "Ceil", "Clip", "Swish",
    "Add", "Sub", "Mul", "Div",
})


# ops whose kernels may write their output over one input only, by position, under the same rule: a
# MatMul's fused residual Z (passes.matmul_bias.fuse_matmul_residual; the residual Add it replaced
# ran in place over it)
INPLACE_INPUT = {"MatMul": 3}


# Concat in place (issue 11, session 13): a Concat's inputs written by their producers into their parts of
# the Concat's own block (``_nest_concat``), where the Concat's kernel says it skips inputs already in place
# (``inputs_in_place``: numba's; the reference's copies, and its sessions keep their plan). False: off
NEST_CONCAT = False


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


def place_best(blocks: list[Block], clock: list[int] | None = None, info: dict | None = None) -> int:
    """``place_blocks`` in each order, keeping the smaller arena (offsets set accordingly). With
    ``HOT`` and ``clock`` (bytes touched before each step, see ``_clock``), also ``place_hot``'s plan,
    and the plan kept is the one whose writers find their destinations warmest (the least
    ``write_cost``, with ``HOT_FAR``'s cost of the bytes older than the L2) among those whose arena is at
    most ``HOT_MAX_GROWTH`` times the smallest.
    ``info``, if given, gets the smallest arena (``best_fit_bytes``), whether the hot plan was kept
    (``hot``), each plan's arena (``size_bytes``, ``breadth_bytes``, ``hot_bytes``) and, with ``HOT``
    and ``clock``, each plan's ``write_cost`` (``size_cost``...)."""
    plans = {}
    for order in (by_size, by_breadth):
        top = place_blocks(blocks, order)
        plans[order.__name__[3:]] = (top, [b.offset for b in blocks])
    smallest = min(top for top, _ in plans.values())
    info = {} if info is None else info
    info.update(best_fit_bytes=smallest, hot=False, **{name + "_bytes": top for name, (top, _) in plans.items()})
    if HOT and clock is not None and blocks:
        top = place_hot(blocks, clock)
        plans["hot"] = (top, [b.offset for b in blocks])
        info["hot_bytes"] = top
        costs = {}
        for name, (_top, offsets) in plans.items():
            for b, offset in zip(blocks, offsets):
                b.offset = offset
            costs[name] = write_cost(blocks, clock, far=HOT_FAR)
            info[name + "_cost"] = costs[name]
        kept = min((name for name, (top, _) in plans.items() if top <= smallest * HOT_MAX_GROWTH),
                   key=lambda name: (costs[name], plans[name][0]))
        info["hot"] = kept == "hot"
    else:
        kept = min(plans, key=lambda name: plans[name][0])
    top, offsets = plans[kept]
    for b, offset in zip(blocks, offsets):
        b.offset = offset
    return top


class _History:
    """Which step last held each byte of an arena: segments ``[lo, hi)`` (sorted, disjoint, covering
    ``[0, top)``) with that step (-1: never), and the cost of writing a block over them."""

    def __init__(self, clock: list[int], cache: int | None = None, far: float = 0.0):
        self.clock, self.cache, self.grow = clock, cache or HOT_CACHE_BYTES, HOT_GROW
        self.far, self.far_bytes = far, HOT_FAR_BYTES
        self.los: list[int] = []
        self.his: list[int] = []
        self.last: list[int] = []
        self.top = 0

    def cost(self, o: int, n: int, t: int) -> float:
        """Writing ``[o, o + n)`` at step ``t``: the sum over its bytes of ``min(age / cache, 1)``, a
        byte's age being the bytes the steps touched since the last step that held it (``grow`` a
        byte never held, beyond the arena's top); with ``HOT_FAR``, a byte older than ``cache`` costs
        ``HOT_FAR * min((age - cache) / HOT_FAR_BYTES, 1)`` more (one never held ``grow * HOT_FAR``)."""
        los, his, last, clock, cache, grow = self.los, self.his, self.last, self.clock, self.cache, self.grow
        far, far_bytes = self.far, self.far_bytes
        now, total, end = clock[t], 0.0, o + n
        k = max(bisect.bisect_right(los, o) - 1, 0)
        while k < len(los) and los[k] < end:
            w = min(his[k], end) - max(los[k], o)
            if w > 0:
                if last[k] < 0:
                    total += w * grow * (1.0 + far)
                else:
                    age = now - clock[last[k] + 1]
                    total += w * min(age / cache, 1.0)
                    if far and age > cache:
                        total += w * far * min((age - cache) / far_bytes, 1.0)
            k += 1
        if end > self.top:
            total += (end - max(self.top, o)) * grow * (1.0 + far)
        return total

    def mark(self, o: int, n: int, step: int) -> None:
        """``[o, o + n)`` held until ``step``."""
        los, his, last, end = self.los, self.his, self.last, o + n
        if end > self.top:  # the arena grows: the new bytes were never held
            los.append(self.top)
            his.append(end)
            last.append(-1)
            self.top = end
        k = j = bisect.bisect_right(his, o)  # the first segment that ends after o
        head, tail = [], []
        while j < len(los) and los[j] < end:
            if los[j] < o:
                head = [(los[j], o, last[j])]
            if his[j] > end:
                tail = [(end, his[j], last[j])]
            j += 1
        pieces = [*head, (o, end, step), *tail]
        los[k:j] = [p[0] for p in pieces]
        his[k:j] = [p[1] for p in pieces]
        last[k:j] = [p[2] for p in pieces]


def _chronological(blocks: list[Block]) -> list[Block]:
    return sorted(blocks, key=lambda b: (b.start, -b.nbytes, b.end))


def write_cost(blocks: list[Block], clock: list[int], cache: int | None = None, far: float = 0.0) -> float:
    """The placed blocks' cost of writing each over what the arena held before (``_History.cost``),
    in bytes of cold memory: a plan's measure of how cold its writers' destinations are (``far``: the
    extra cost of the bytes older than the cache, ``_History.cost``)."""
    hist, total = _History(clock, cache, far), 0.0
    for b in _chronological(blocks):
        total += hist.cost(b.offset, b.nbytes, b.start)
        hist.mark(b.offset, b.nbytes, b.end)
    return total


def place_hot(blocks: list[Block], clock: list[int], cache: int | None = None) -> int:
    """Chronological placement (onnxruntime's allocation planner hands out the most recently freed
    buffer): blocks in order of their first step, larger first at one step, each at the offset where
    the bytes it covers were used most recently, so that its writer finds them in cache. ``clock[t]``
    is the bytes all steps touched before step ``t``; the cost of an offset is ``_History.cost``
    (memory no block held yet, the arena's growth: ``HOT_GROW`` a byte). Candidates: the ends of
    every gap between the blocks alive in its span and the edges of the earlier blocks' regions
    inside it; ties go to the smaller gap, then the lower offset. Returns the arena size."""
    hist = _History(clock, cache)
    los, his = hist.los, hist.his
    active: list[Block] = []  # placed blocks that may still overlap the next ones in time
    for block in _chronological(blocks):
        t, n = block.start, block.nbytes
        active = [b for b in active if b.end >= t]  # (every placed block starts at t or before)
        best = None  # (cost, gap, offset)
        cursor = 0
        for other in sorted(active, key=lambda b: b.offset) + [None]:
            hi = None if other is None else other.offset
            if hi is None or hi - cursor >= n:
                gap = math.inf if hi is None else hi - cursor
                limit = (max(hist.top, cursor + n) if hi is None else hi) - n
                offsets = {cursor, limit}
                k = max(bisect.bisect_right(los, cursor) - 1, 0)
                while k < len(los) and los[k] < limit + n:
                    for c in (los[k], his[k], los[k] - n, his[k] - n):
                        if cursor <= c <= limit:
                            offsets.add(c)
                    k += 1
                for o in offsets:
                    key = (hist.cost(o, n, t), gap, o)
                    if best is None or key < best:
                        best = key
            if other is not None:
                cursor = max(cursor, other.offset + other.nbytes)
        block.offset = best[2]
        hist.mark(block.offset, n, block.end)
        active.append(block)
    return hist.top


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
    hot: bool = False  # the chronological plan (``place_hot``) was kept
    best_fit_bytes: int = 0  # the smaller best-fit arena (greedy by size or breadth)
    cost: dict = field(default_factory=dict)  # ``write_cost`` of the plans computed: best_fit, hot
    blocks: list = field(default_factory=list, repr=False)  # the placed blocks (benchmarks/arena_hot.py)
    nested: int = 0  # input blocks nested in a Concat's (NEST_CONCAT)
    clock: list = field(default_factory=list, repr=False)  # ``_clock``: bytes touched before each step

    def summary(self) -> dict:
        return {"arena_bytes": self.arena_bytes, "live_peak_bytes": self.live_peak_bytes,
                "scratch_bytes": self.scratch_bytes, "planned_values": len(self.placed),
                "inplace_steps": len(self.inplace), "kernel_allocated_values": self.allocated,
                "hot_plan": self.hot, "best_fit_arena_bytes": self.best_fit_bytes, "nested_blocks": self.nested}


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
    nested: list[tuple[Block, Block, int]] = []  # (child, parent, byte offset in it), in the order nested

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
            reuse = None
            if step.op in INPLACE_OPS:
                reuse = _inplace_input(step, i, o, specs, block_of, blocks_read)
            elif (at := _input_over(step, specs)) is not None and at < len(step.input_slots):
                only = step.input_slots[at]
                reuse = _inplace_input(step, i, o, specs, block_of, blocks_read, only) if only is not None else None
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
        if NEST_CONCAT and step.op == "Concat" and outs and outs[0] in block_of and \
                getattr(step.kernel, "inputs_in_place", False):
            _nest_concat(step, i, specs, block_of, blocks, nested)
        nbytes = scratch.get(i, 0)
        if nbytes > 0 and step.scratch_slot is not None:
            block = Block(_aligned(nbytes), i, i)
            blocks.append(block)
            mem.scratch[step.scratch_slot] = (block, nbytes)
            mem.scratch_bytes = max(mem.scratch_bytes, nbytes)
    info: dict = {}
    mem.blocks, mem.clock = blocks, _clock(steps, specs, scratch)
    mem.arena_bytes = place_best(blocks, mem.clock, info)
    for child, parent, at in reversed(nested):  # a parent nested later (a Concat of Concats) is placed first
        child.offset = parent.offset + at
    mem.nested = len(nested)
    mem.hot, mem.best_fit_bytes = info["hot"], info["best_fit_bytes"]
    mem.cost = {k[:-5]: v for k, v in info.items() if k.endswith("_cost")}
    mem.live_peak_bytes = live_peak(blocks, n)
    mem.placed = {s: (b.offset, shape, dtype) for s, (b, shape, dtype) in mem.placed.items()}
    mem.scratch = {s: (b.offset, nbytes) for s, (b, nbytes) in mem.scratch.items()}
    return mem


def _clock(steps, specs, scratch: dict[int, int]) -> list[int]:
    """Bytes touched before each step (and after the last, twice): the sum over the steps before of
    their inputs' and outputs' bytes (constants included, where their specs are static) and their
    scratch: ``place_hot``'s measure of how long ago a region was used."""
    clock = [0]
    for i, step in enumerate(steps):
        touched = scratch.get(i, 0)
        for s in (*step.input_slots, *step.output_slots):
            spec = specs.get(s) if s is not None else None
            if spec is not None and spec.is_static:
                touched += math.prod(spec.shape) * np.dtype(spec.dtype).itemsize
        clock.append(clock[-1] + touched)
    return clock + [clock[-1]]


def _nest_concat(step, i: int, specs, block_of: dict, blocks: list, nested: list) -> None:
    """Nest the blocks of ``step``'s (a Concat's) inputs in its output's block, each at its part of the
    output: inputs in the arena, each in a block of its own (not shared with another input) that holds
    exactly that value and dies at this step, of the output's dtype and default layout; the axis must
    have only 1s before it (each input then one contiguous run of the output's bytes). The output's
    block then lives from the first nested input's producer on."""
    out = step.output_slots[0]
    spec = specs.get(out)
    axis = (step.node.attrs if step.node is not None else step.attrs).get("axis")  # step.attrs: bound ones
    if axis is None or spec is None or spec.layout or not spec.is_static or not spec.shape:
        return
    shape = tuple(spec.shape)
    axis %= len(shape)
    if math.prod(shape[:axis]) != 1:
        return
    parent = block_of[out]
    itemsize = np.dtype(spec.dtype).itemsize
    at, picked, seen = 0, [], set()
    for s in step.input_slots:
        ispec = specs.get(s)
        if ispec is None or not ispec.is_static or len(ispec.shape) != len(shape):
            return
        nbytes = math.prod(ispec.shape) * itemsize
        block = block_of.get(s)
        if block is not None and block is not parent and id(block) not in seen and block.end == i \
                and block.nbytes == _aligned(nbytes) and ispec.dtype == spec.dtype and not ispec.layout \
                and any(b is block for b in blocks):
            picked.append((block, at))
        seen.add(id(block))
        at += nbytes
    if at != math.prod(shape) * itemsize:
        return
    for block, offset in picked:
        if offset % ALIGN:
            continue  # a block starts on a cache line (the views' alignment)
        blocks.remove(block)
        nested.append((block, parent, offset))
        parent.start = min(parent.start, block.start)


def _input_over(step, specs) -> int | None:
    """The input position ``step`` may write its output over: its op's (``INPLACE_INPUT``, a MatMul's fused
    residual), else the one its kernel names (``output_over_input(specs)``, the specs of its inputs for this plan's
    shapes), else None (no such method, or it declines: numba's Conv but for its serial rows tiles under
    kernels.conv_serial.RESIDUAL_IN_PLACE)."""
    if step.op in INPLACE_INPUT:
        return INPLACE_INPUT[step.op]
    over = getattr(step.kernel, "output_over_input", None)
    return over([specs.get(s) for s in step.input_slots]) if callable(over) else None


def _inplace_input(step, i: int, out: int, specs, block_of: dict, blocks_read, only=None) -> int | None:
    """The input slot whose block ``step`` may write its output over, if any (``only``: that slot or none)."""
    want = specs[out]
    for s in step.input_slots if only is None else (only,):
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
