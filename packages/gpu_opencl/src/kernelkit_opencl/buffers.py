"""Device memory: pooled buffers and the device tensor type.

A :class:`CLTensor` is a pooled allocation plus shape, dtype, element offset and the events that
must complete before its data is readable. An allocation returns to its :class:`BufferPool` when
the last tensor using it goes away, with the events of every command that touched it, so that the
next writer waits for them (which keeps reuse correct on out-of-order queues).
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass

import numpy as np
from kernelkit import DeviceError


def _cl():
    import pyopencl as cl

    return cl


class _Allocation:
    """One pooled ``cl.Buffer``. ``uses`` holds the events of every command touching it; when the
    last tensor referring to it goes away the buffer returns to the pool with those events as
    hazards, so its next writer waits for them (needed on out-of-order queues)."""

    __slots__ = ("buffer", "nbytes", "pool", "uses", "__weakref__")

    def __init__(self, buffer, nbytes: int, pool: "BufferPool | None", hazards=()):
        self.buffer = buffer
        self.nbytes = nbytes
        self.pool = pool
        self.uses = list(hazards)

    def __del__(self):
        pool = self.pool
        if pool is not None:
            pool.give_back(self.buffer, self.nbytes, self.uses)


def _all_complete(events) -> bool:
    done = _cl().command_execution_status.COMPLETE
    return all(e.command_execution_status == done for e in events)


class BufferPool:
    """Device buffers reused across runs, bucketed by size (rounded up to a power-of-two quarter)."""

    def __init__(self, context):
        self.context = context
        self._free: dict[int, list] = {}
        self._lock = threading.RLock()
        self.allocated = 0   # buffers created
        self.allocated_bytes = 0  # their bytes: the device memory this pool holds
        self.reused = 0      # allocations served from the pool
        self._captured: dict[int, object] | None = None  # buffers handed out while capturing
        self._reserved: set[int] = set()  # id() of buffers a replay owns: never pooled again

    @staticmethod
    def bucket(nbytes: int) -> int:
        n = max(int(nbytes), 64)
        top = 1 << (n - 1).bit_length()
        step = max(top // 8, 64)
        return -(-n // step) * step

    def allocate(self, nbytes: int, idle: bool = False) -> _Allocation:
        """A buffer of at least ``nbytes``; with ``idle`` only one no pending command touches
        (host writes into a busy buffer would block the caller on some drivers)."""
        cl = _cl()
        size = self.bucket(nbytes)
        with self._lock:
            free = self._free.get(size)
            for i in range(len(free) - 1, -1, -1) if free else ():
                buffer, hazards = free[i]
                if idle and not _all_complete(hazards):
                    continue
                del free[i]
                self.reused += 1
                if self._captured is not None:
                    self._captured[id(buffer)] = buffer
                return _Allocation(buffer, size, self, hazards)
            self.allocated += 1
            self.allocated_bytes += size
        try:
            buffer = cl.Buffer(self.context, cl.mem_flags.READ_WRITE, size)
        except cl.Error as exc:
            raise DeviceError(f"OpenCL: cannot allocate {size} bytes: {exc}") from exc
        with self._lock:
            if self._captured is not None:
                self._captured[id(buffer)] = buffer
        return _Allocation(buffer, size, self)

    def give_back(self, buffer, nbytes: int, hazards) -> None:
        with self._lock:
            if id(buffer) in self._reserved:
                return
            self._free.setdefault(nbytes, []).append((buffer, [e for e in hazards if e is not None]))

    def begin_capture(self) -> None:
        with self._lock:
            self._captured = {}

    def end_capture(self) -> list:
        """Every buffer handed out since ``begin_capture``, now reserved for a replay: taken out
        of the free lists, and dropped instead of pooled when their tensors go away."""
        with self._lock:
            captured, self._captured = self._captured or {}, None
            self._reserved.update(captured)
            for size, free in self._free.items():
                self._free[size] = [(b, h) for b, h in free if id(b) not in captured]
        return list(captured.values())

    def release(self, buffers) -> None:
        """Return a dropped replay's buffers to the pool."""
        with self._lock:
            for b in buffers:
                if id(b) in self._reserved:
                    self._reserved.discard(id(b))
                    self._free.setdefault(b.size, []).append((b, []))

    def clear(self) -> None:
        with self._lock:
            self._free.clear()


def _note_use(alloc: _Allocation, ev) -> None:
    """Record that ``ev`` reads ``alloc``; completed events are dropped so that long-lived
    buffers (weights) do not collect one event per run."""
    uses = alloc.uses
    uses.append(ev)
    if len(uses) > 8:
        done = _cl().command_execution_status.COMPLETE
        alloc.uses = [e for e in uses if e.command_execution_status != done]


@dataclass(eq=False)
class CLTensor:
    """A device tensor: ``alloc`` (pooled buffer) holds ``shape``/``dtype`` data from element
    ``offset``; ``events`` must complete before it is readable. Views share the allocation."""

    alloc: _Allocation
    shape: tuple
    dtype: np.dtype
    device: object  # the OpenCLDevice holding it
    offset: int = 0
    events: list = None
    host: np.ndarray | None = None  # a host copy of small uploaded tensors (shape/axes inputs)

    def __post_init__(self):
        self.shape = tuple(int(s) for s in self.shape)
        self.dtype = np.dtype(self.dtype)
        self.events = list(self.events or [])

    @property
    def buffer(self):
        return self.alloc.buffer

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def view(self, shape) -> "CLTensor":
        """The same data under another shape (Reshape, Flatten, Squeeze...): no copy, no wait."""
        host = None if self.host is None else self.host.reshape(shape)
        return CLTensor(self.alloc, tuple(shape), self.dtype, self.device, self.offset, self.events, host)

    def values(self) -> np.ndarray:
        """The data on the host: the kept copy of a small upload, else a (blocking) download."""
        if self.host is None:
            return self.device.download(self)
        capture = getattr(self.device, "_capture", None)
        if capture is not None:  # a run being captured: a feed read here cannot be replayed
            capture.host_reads.add(id(self.alloc))
        return self.host

    def __repr__(self) -> str:
        return f"CLTensor({self.dtype.name}{list(self.shape)}, {len(self.events)} pending)"
