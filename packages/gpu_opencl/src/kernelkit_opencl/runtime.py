"""The OpenCL device: selection, context and queue, kernel objects and launches.

A session's ``gpu`` device is an :class:`OpenCLDevice`. Its tensors are ``buffers.CLTensor`` (a
pooled device allocation plus shape, dtype and the events that must finish before the data is
ready). Every launch waits on its inputs' events and returns its own event; only
:meth:`OpenCLDevice.download` blocks (STYLE.md #8).

One :class:`_Platform` per OpenCL device (context, program cache) is shared by every session; each
session gets its own queue, buffer pool and kernel objects.
"""
from __future__ import annotations

import logging
import math
import os
import threading

import numpy as np
from kernelkit import BackendUnavailableError, Device, DeviceError, KernelExecutionError
from kernelkit.devices import profiled_node
from kernelkit.limits import MIN_TENSOR_BYTES, check_tensor_bytes

from .buffers import BufferPool, CLTensor, _note_use
from .caches import prepare as prepare_caches
from .programs import ProgramCache

log = logging.getLogger("kernelkit.opencl")

ENV_DEVICE = "KERNELKIT_OPENCL_DEVICE"
ASYNC_UPLOAD_BYTES = 1 << 20
MAX_ELEMENTS = 1 << 31


# -- device selection ------------------------------------------------------------------------------
def _cl():
    try:
        import pyopencl as cl
    except ImportError as exc:  # pragma: no cover - pyopencl is a dependency of this package
        raise BackendUnavailableError(f"device 'gpu' needs pyopencl: pip install '.[opencl]' ({exc})") from exc
    prepare_caches(cl)  # once: read-only home or cache folders must not break OpenCL
    return cl


def list_devices() -> list:
    """Every OpenCL device of every platform, in platform order (empty when no platform exists)."""
    cl = _cl()
    try:
        platforms = cl.get_platforms()
    except cl.Error:
        return []
    devices = []
    for p in platforms:
        try:
            devices.extend(p.get_devices())
        except cl.Error:
            continue
    return devices


def _label(dev) -> str:
    return f"{dev.platform.name} / {dev.name} (OpenCL {dev.version.split()[1]}, driver {dev.driver_version})"


def select_device(spec: str | None = None):
    """Pick a ``pyopencl.Device``: ``spec`` is ``NAME[:INDEX]`` matched case-insensitively against the
    platform's and device's names, vendors and versions (``NVIDIA:0``, ``pocl``), or an index into
    all devices. None: the first GPU, else the first device of any type."""
    cl = _cl()
    devices = list_devices()
    if not devices:
        raise BackendUnavailableError(
            "device 'gpu' was requested but no OpenCL platform is installed; install a driver "
            "(e.g. pip install pocl-binary-distribution for the CPU one) or use device='cpu'")
    if spec is None or str(spec).strip() == "":
        gpus = [d for d in devices if d.type & cl.device_type.GPU]
        return (gpus or devices)[0]
    spec = str(spec).strip()
    if spec.isdigit():
        matches, idx = devices, int(spec)
    else:
        name, sep, index = spec.rpartition(":")
        if not (sep and index.isdigit()):
            name, index = spec, "0"
        needle = name.lower()
        matches = [d for d in devices if needle in " ".join(
            (d.platform.name, d.platform.vendor, d.platform.version, d.name, d.vendor)).lower()]
        idx = int(index)
    if idx >= len(matches):
        raise BackendUnavailableError(
            f"OpenCL device {spec!r} (from option 'opencl_device' or ${ENV_DEVICE}) matches "
            f"{len(matches)} device(s); available: {'; '.join(_label(d) for d in devices)}")
    return matches[idx]


# -- shared per-device state ---------------------------------------------------------------------
class _Platform:
    """Context and program cache of one OpenCL device, shared by all sessions using it."""

    def __init__(self, dev):
        cl = _cl()
        self.cl_device = dev
        self.context = cl.Context([dev])
        self.programs = ProgramCache(self.context, dev)
        self.label = _label(dev)
        self.fp16 = "cl_khr_fp16" in dev.extensions
        self.is_gpu = bool(dev.type & cl.device_type.GPU)
        self.identity = self.programs.key("", "")[:16]  # names this device + driver in tuning keys
        self.out_of_order_ok = bool(dev.queue_properties & cl.command_queue_properties.OUT_OF_ORDER_EXEC_MODE_ENABLE)


_platforms: dict[int, _Platform] = {}
_platforms_lock = threading.Lock()


def _platform_for(dev) -> _Platform:
    key = dev.int_ptr
    with _platforms_lock:
        if key not in _platforms:
            _platforms[key] = _Platform(dev)
            log.info("OpenCL device: %s", _platforms[key].label)
        return _platforms[key]


class _Kernel:
    """A ``cl.Kernel`` with its lock (set_args + enqueue must not interleave between threads) and
    its scalar argument types, fixed at the first launch from the NumPy scalars given: pyopencl
    then packs plain Python numbers (~4 us for 20 arguments instead of ~300 us)."""

    __slots__ = ("knl", "lock", "typed", "program", "name", "dtypes", "pending")

    def __init__(self, knl, program=None, name: str = "", pending=None):
        self.knl = knl
        self.lock = threading.Lock()
        self.typed = False
        self.program, self.name, self.dtypes = program, name, None
        self.pending = pending  # Future of the program while it builds in the background

    def ready(self) -> bool:
        """Whether the program is built (and the ``cl.Kernel`` made); never blocks."""
        if self.knl is None and self.pending.done():
            self.wait_built()
        return self.knl is not None

    def wait_built(self) -> None:
        """Block until the program is built (a build error is raised here)."""
        if self.knl is not None or self.pending is None:
            return
        program = self.pending.result()
        with self.lock:
            if self.knl is None:
                self.program = program
                self.knl = _cl().Kernel(program, self.name)

    def set_args(self, args) -> list:
        """Set ``args`` (buffers, NumPy scalars); returns them as set (plain Python numbers)."""
        if not self.typed:
            self.dtypes = [a.dtype if isinstance(a, np.generic) else None for a in args]
            self.knl.set_scalar_arg_dtypes(self.dtypes)
            self.typed = True
        plain = [a.item() if isinstance(a, np.generic) else a for a in args]
        self.knl.set_args(*plain)
        return plain

    def bind(self, args):
        """A new ``cl.Kernel`` of the same program with ``args`` set once: a pre-bound launch
        (capture.py replays these without touching arguments again)."""
        knl = _cl().Kernel(self.program, self.name)
        knl.set_scalar_arg_dtypes(self.dtypes)
        knl.set_args(*args)
        return knl


# -- the device ----------------------------------------------------------------------------------
class _Launcher:
    """Launches whose program is still compiling (background builds, first run of a session).

    ``launch`` hands such a launch a user event (the "gate") and returns it as the launch's event, so
    everything after it is enqueued at once and waits for the gate on the device. This thread takes
    the deferred launches in program order, waits for each one's build, enqueues it on its own
    in-order queue (after the launch's own wait list), waits for it and opens the gate. Program
    order on that queue means a deferred launch only ever waits for earlier ones: no deadlock.
    A build error is kept and raised by ``drain`` (download, synchronize, capture); its gate opens
    anyway, so nothing waits forever."""

    def __init__(self, device):
        import queue as queue_mod

        cl = _cl()
        self.device = device
        self.queue = cl.CommandQueue(device.context, device.cl_device)
        self.items: queue_mod.Queue = queue_mod.Queue()
        self.errors: list[BaseException] = []
        threading.Thread(target=self._work, name="kernelkit-launcher", daemon=True).start()

    def put(self, item) -> None:
        self.items.put(item)

    def _work(self) -> None:
        cl = _cl()
        while True:
            kernel, gws, lws, args, wait, gate, label = self.items.get()
            try:
                kernel.wait_built()
                with kernel.lock:
                    kernel.set_args(args)
                    ev = cl.enqueue_nd_range_kernel(self.queue, kernel.knl, gws, lws, wait_for=wait or None)
                self.device.queue.flush()  # what it waits for on the device queue must be submitted
                ev.wait()
            except BaseException as exc:  # noqa: BLE001 - raised to the caller by drain()
                self.errors.append(exc if not isinstance(exc, cl.Error) else KernelExecutionError(
                    f"OpenCL launch of {label} over {gws}/{lws} failed: {exc}"))
            finally:
                gate.set_status(cl.command_execution_status.COMPLETE)
                self.items.task_done()

    def drain(self) -> None:
        self.items.join()
        if self.errors:
            exc, self.errors = self.errors[0], []
            raise exc


class OpenCLDevice(Device):
    """The session's ``gpu`` device. Options: ``opencl_device`` (selector, else $KERNELKIT_OPENCL_DEVICE),
    ``opencl_out_of_order`` (default: when the device supports it), ``opencl_profile`` (event
    timestamps per kernel), ``opencl_tune`` (GEMM/conv tile search: default on GPUs only),
    ``opencl_async_build`` (programs not yet cached compile in the background while the run goes
    on, ``_Launcher``: default on GPUs only, off with profiling; also $KERNELKIT_OPENCL_ASYNC_BUILD),
    ``opencl_pointwise_gemm`` (1x1 convolutions on large images as a batched plain GEMM, conv.py:
    default off; also $KERNELKIT_OPENCL_POINTWISE_GEMM)."""

    name = "gpu"
    asynchronous = True  # launches only enqueue: Session.run_async need not wait for them

    def __init__(self, options: dict | None = None):
        cl = _cl()
        options = dict(options or {})
        spec = options.get("opencl_device", os.environ.get(ENV_DEVICE))
        self.platform = _platform_for(select_device(spec))
        self.context = self.platform.context
        self.cl_device = self.platform.cl_device
        self.programs = self.platform.programs
        want_ooo = options.get("opencl_out_of_order", True)
        self.out_of_order = bool(want_ooo) and self.platform.out_of_order_ok
        self.profiling = bool(options.get("opencl_profile", False))
        tune = options.get("opencl_tune", os.environ.get("KERNELKIT_OPENCL_TUNE"))
        self.tune = self.platform.is_gpu if tune is None else str(tune).lower() not in ("0", "false", "off", "")
        pw = options.get("opencl_pointwise_gemm", os.environ.get("KERNELKIT_OPENCL_POINTWISE_GEMM", "0"))
        self.pointwise_gemm = str(pw).lower() not in ("0", "false", "off", "")
        ab = options.get("opencl_async_build", os.environ.get("KERNELKIT_OPENCL_ASYNC_BUILD"))
        self.async_build = (self.platform.is_gpu if ab is None else str(ab).lower() not in ("0", "false", "off", "")) \
            and not self.profiling
        self._launcher: _Launcher | None = None
        props = 0
        if self.out_of_order:
            props |= cl.command_queue_properties.OUT_OF_ORDER_EXEC_MODE_ENABLE
        if self.profiling:
            props |= cl.command_queue_properties.PROFILING_ENABLE
        self.queue = cl.CommandQueue(self.context, self.cl_device, properties=props)
        self.pool = BufferPool(self.context)
        self._kernels: dict[tuple, tuple] = {}
        self._kernels_lock = threading.Lock()
        self._meta: dict[tuple, object] = {}
        self._memo: dict = {}
        self._events: list[tuple[str, object, str | None]] = []  # (label, event, node) when profiling
        self._capture = None  # a capture.Capture while a run is being recorded
        self._replay_queue = None
        self._timing: list | None = None  # events of the launches time_launches is timing
        self._timing_queue = None
        log.info("gpu device %s (out-of-order queue: %s)", self.platform.label, self.out_of_order)

    # -- Device interface ------------------------------------------------------------------------
    def empty(self, shape, dtype, idle: bool = False) -> CLTensor:
        dtype = np.dtype(dtype)
        size = math.prod(shape)
        nbytes = size * dtype.itemsize  # the one bound every vendor applies (limits.py)
        if nbytes > MIN_TENSOR_BYTES:  # smaller ones are under every limit: no call on the hot path
            check_tensor_bytes(shape, dtype, "OpenCL buffer")
        if size >= MAX_ELEMENTS:  # kernels index with 32-bit ints: refuse rather than overflow
            raise DeviceError(f"OpenCL tensor of shape {tuple(shape)} has {size} elements; the opencl "
                              f"kernels index with 32-bit ints (limit {MAX_ELEMENTS - 1}): use device='cpu'")
        return CLTensor(self.pool.allocate(max(nbytes, 1), idle), tuple(shape), dtype, self)

    def upload(self, array: np.ndarray) -> CLTensor:
        """Host -> device. Up to ``ASYNC_UPLOAD_BYTES`` the data is copied to a private host array
        and written without blocking; larger arrays are written straight from the caller's memory
        and the call returns when that transfer is done (cheaper than a host copy, and equally
        safe against the caller changing the array afterwards)."""
        cl = _cl()
        host = np.asarray(array, order="C")
        if host.dtype.kind not in "iufb":
            raise DeviceError(f"OpenCL device cannot hold dtype {host.dtype.name}")
        small = host.nbytes <= ASYNC_UPLOAD_BYTES
        if small:
            host = host.copy()  # private: the caller may change theirs while the copy is queued
        out = self.empty(host.shape, host.dtype, idle=True)
        if host.nbytes:
            ev = cl.enqueue_copy(self.queue, out.buffer, host, is_blocking=not small,
                                 wait_for=out.alloc.uses or None)
            out.events = [ev]
            out.alloc.uses = [ev]
        if host.size <= 4096:
            host = host if small else host.copy()
            host.flags.writeable = False
            out.host = host
        if self._capture is not None:
            self._capture.uploads.append((array, out))
        return out

    def download(self, tensor: CLTensor) -> np.ndarray:
        cl = _cl()
        self.drain()
        if self._capture is not None:
            self._capture.broken = f"a kernel read device data on the host ({tensor!r})"
        host = np.empty(tensor.shape, tensor.dtype)
        if host.nbytes:
            cl.enqueue_copy(self.queue, host, tensor.buffer, src_offset=tensor.offset * tensor.dtype.itemsize,
                            is_blocking=True, wait_for=tensor.events or None)
        return host

    def owns(self, tensor) -> bool:
        return isinstance(tensor, CLTensor) and tensor.device is self

    def drain(self) -> None:
        """Wait until every launch deferred behind a background build is enqueued and done;
        raises a build error it met."""
        if self._launcher is not None:
            self._launcher.drain()

    def synchronize(self) -> None:
        self.drain()
        self.queue.finish()
        if self._replay_queue is not None:
            self._replay_queue.finish()
        if self._timing_queue is not None:
            self._timing_queue.finish()

    def describe(self) -> str:
        return f"gpu: {self.platform.label}" + (" [out-of-order queue]" if self.out_of_order else "")

    # -- programs and launches ------------------------------------------------------------------
    def kernel(self, source: str, name: str, defines: dict | None = None, options: tuple = ()):
        """The ``cl.Kernel`` ``name`` of ``source`` built with ``-D`` ``defines``, created once per
        device and reused (as a ``_Kernel``, what :meth:`launch` takes)."""
        key = (source, name, tuple(sorted((defines or {}).items())), tuple(options))
        with self._kernels_lock:
            hit = self._kernels.get(key)
        if hit is not None:
            return hit
        if self.async_build and self._capture is None and not self.programs.cached(source, defines or {}, options):
            made = _Kernel(None, None, name, self.programs.submit(source, defines or {}, options, label=name))
        else:
            program = self.programs.get(source, defines or {}, options, label=name)
            made = _Kernel(_cl().Kernel(program, name), program, name)
        with self._kernels_lock:
            return self._kernels.setdefault(key, made)

    def memo(self, key, make):
        """``make()`` once per ``key`` for this device (kernel choices, tuned parameters): keeps
        per-launch Python work to a dict lookup."""
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo.setdefault(key, make())
        return hit

    def meta(self, values) -> object:
        """A small read-only int32 buffer of ``values`` (shapes, strides), cached per content."""
        key = tuple(int(v) for v in values)
        with self._kernels_lock:
            buf = self._meta.get(key)
        if buf is None:
            cl = _cl()
            host = np.asarray(key or (0,), np.int32)
            buf = cl.Buffer(self.context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR, hostbuf=host)
            with self._kernels_lock:
                buf = self._meta.setdefault(key, buf)
        return buf

    def launch(self, kernel, gws, lws, args, inputs=(), outputs=(), label: str = ""):
        """Enqueue ``kernel`` over ``gws`` (work-group ``lws`` or None) after the events of
        ``inputs`` and the hazards of ``outputs``; ``args`` are buffers/numpy scalars in kernel
        order. The outputs' events become this launch's event, which is returned."""
        cl = _cl()
        wait = [e for t in inputs if t is not None for e in t.events]
        for t in outputs:
            wait.extend(t.alloc.uses)
        gws = tuple(int(g) for g in gws)
        lws = tuple(int(x) for x in lws) if lws else None
        timing = self._timing
        if kernel.knl is None and not kernel.ready():
            if self._capture is not None or not self.async_build or timing is not None:
                kernel.wait_built()
            else:  # its program still compiles: the launcher enqueues it when built (first runs)
                return self._defer(kernel, gws, lws, args, wait, inputs, outputs, label)
        knl = kernel.knl
        try:
            with kernel.lock:
                plain = kernel.set_args(args)
                ev = cl.enqueue_nd_range_kernel(self.queue if timing is None else self._timing_queue, knl, gws, lws,
                                                wait_for=wait or None)
        except cl.Error as exc:
            raise KernelExecutionError(f"OpenCL launch of {label or knl.function_name} over {tuple(gws)}"
                                       f"/{lws} on {self.platform.label} failed: {exc}") from exc
        for t in inputs:
            if t is not None:
                _note_use(t.alloc, ev)
        for t in outputs:
            t.events = [ev]
            t.alloc.uses = [ev]
        if timing is not None:
            timing.append(ev)
        elif self.profiling:
            self._events.append((label or knl.function_name, ev, profiled_node.get()))
        if self._capture is not None:
            self._capture.launch(kernel, plain, gws, lws, label or knl.function_name, inputs, outputs)
        return ev

    def time_launches(self, fn) -> float:
        """Device seconds of the kernels ``fn()`` launches on this device: they go to a
        profiling-enabled in-order queue (the session's own queue need not have profiling on) and
        their events' start-to-end times are summed; waits for them. What the tile search ranks
        candidates by: the host's wall time of a short launch is mostly enqueue and wait overhead,
        which would decide between small kernels (ResNet-18 batch 1) instead of the kernels."""
        cl = _cl()
        if self._timing_queue is None:
            self._timing_queue = cl.CommandQueue(self.context, self.cl_device,
                                                 properties=cl.command_queue_properties.PROFILING_ENABLE)
        outer, capture = self._timing, self._capture
        events: list = []
        self._timing, self._capture = events, None  # nothing timed is recorded into a capture
        try:
            fn()
        finally:
            self._timing, self._capture = outer, capture
        if not events:
            return 0.0
        cl.wait_for_events(events)
        return sum(ev.profile.end - ev.profile.start for ev in events) * 1e-9

    def _defer(self, kernel, gws, lws, args, wait, inputs, outputs, label):
        """The launch of a kernel whose program is compiling: its gate stands for it (see _Launcher)."""
        gate = _cl().UserEvent(self.context)
        if self._launcher is None:
            self._launcher = _Launcher(self)
        self._launcher.put((kernel, gws, lws, list(args), wait, gate, label or kernel.name))
        for t in inputs:
            if t is not None:
                _note_use(t.alloc, gate)
        for t in outputs:
            t.events = [gate]
            t.alloc.uses = [gate]
        return gate

    def adopt(self, tensor) -> CLTensor | None:
        """A copy of another session's device tensor (same OpenCL context) in a fresh buffer of
        this device, made on the device (io_binding); None for anything else."""
        if not isinstance(tensor, CLTensor) or tensor.device.context is not self.context:
            return None
        out = self.empty(tensor.shape, tensor.dtype)
        if out.size:
            out.events = [self.copy(out, tensor, tensor.size, record=False)]
        if self._capture is not None:
            self._capture.uploads.append((tensor, out))
        return out

    def copy(self, dst: CLTensor, src: CLTensor, nelems: int, dst_offset: int = 0, src_offset: int = 0,
             record: bool = True):
        """Device-to-device copy of ``nelems`` elements (offsets in elements, on top of the tensors')."""
        cl = _cl()
        size = src.dtype.itemsize
        ev = cl.enqueue_copy(self.queue, dst.buffer, src.buffer, byte_count=nelems * size,
                             src_offset=(src.offset + src_offset) * size, dst_offset=(dst.offset + dst_offset) * size,
                             wait_for=(src.events + dst.alloc.uses) or None)
        _note_use(src.alloc, ev)
        _note_use(dst.alloc, ev)
        if self._capture is not None and record:
            self._capture.copy(dst.buffer, src.buffer, nelems * size, (src.offset + src_offset) * size,
                               (dst.offset + dst_offset) * size)
        return ev

    # -- capture and replay (capture.py) --------------------------------------------------------
    def replay_queue(self):
        """The queue replays run on: in-order, so recorded launches need no wait lists."""
        if not self.out_of_order:
            return self.queue
        if self._replay_queue is None:
            cl = _cl()
            props = cl.command_queue_properties.PROFILING_ENABLE if self.profiling else 0
            self._replay_queue = cl.CommandQueue(self.context, self.cl_device, properties=props)
        return self._replay_queue

    def begin_capture(self):
        """Start recording every launch and copy (the session's second run of a shape); see
        ``kernelkit_opencl.capture``."""
        from .capture import Capture

        self.drain()
        self._capture = Capture(self)
        self.pool.begin_capture()
        return self._capture

    def end_capture(self, capture, feeds: dict | None, outputs: dict | None):
        """Stop recording; a :class:`capture.Replay` of the run, or None when it cannot be replayed
        (the reason is logged). ``feeds``/``outputs``: name -> the run's device tensor."""
        self._capture = None
        buffers = self.pool.end_capture()
        if feeds is None or outputs is None:
            return None
        return capture.finish(feeds, outputs, buffers)

    def kernel_profile(self, reset: bool = True) -> list[dict]:
        """Per-kernel device time from OpenCL event timestamps (``opencl_profile=True``):
        rows of label, calls, total_ms, sorted by total time. Waits for pending work."""
        self.queue.finish()
        rows: dict[str, list] = {}
        for label, ev, _ in self._events:
            ms = (ev.profile.end - ev.profile.start) * 1e-6
            row = rows.setdefault(label, [0, 0.0])
            row[0] += 1
            row[1] += ms
        if reset:
            self._events.clear()
        return sorted(({"kernel": k, "calls": c, "total_ms": t} for k, (c, t) in rows.items()),
                      key=lambda r: -r["total_ms"])

    def event_times(self, reset: bool = False) -> dict[str, tuple[int, float]]:
        """Device time per session node from the launches' event timestamps (``opencl_profile``):
        node -> (launches, ms). Waits for pending work; ``reset`` forgets the events."""
        if not self._events:
            return {}
        self.queue.finish()
        out: dict[str, tuple[int, float]] = {}
        for _, ev, node in self._events:
            if node is not None:
                n, ms = out.get(node, (0, 0.0))
                out[node] = (n + 1, ms + (ev.profile.end - ev.profile.start) * 1e-6)
        if reset:
            self._events.clear()
        return out


def create_device(options: dict) -> OpenCLDevice:
    """Factory registered for device ``gpu``."""
    return OpenCLDevice(options)
