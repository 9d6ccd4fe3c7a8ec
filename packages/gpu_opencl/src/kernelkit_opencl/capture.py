"""Capture and replay: a run recorded once per input shape, then replayed as pre-bound launches.

The session records its second run of a given set of input shapes (the first one builds programs,
tunes tiles and uploads constants). Every launch of that run is kept as its own ``cl.Kernel`` with
its arguments set once (``_Kernel.bind``), every device-to-device copy as a bound call, and every
buffer the run touched is reserved for the replay (the pool never hands it to anyone else). A
replay then writes the new feeds into the recorded input buffers, enqueues the recorded launches
in order on an in-order queue (no wait lists: the queue orders them) and reads the outputs back:
a few microseconds of host time per node instead of the full Python dispatch (issue 12). It is
CUDA graphs' idea with OpenCL's ordinary objects.

A run is not replayable when a kernel read device data on the host during the capture (a
download, or the host copy of a feed: such a kernel takes decisions from the data, e.g. Gather
checking its indices); the session then keeps dispatching node by node.
"""
from __future__ import annotations

import functools
import logging
import threading

import numpy as np

from .buffers import _note_use

log = logging.getLogger("kernelkit.opencl")


def _cl():
    import pyopencl as cl

    return cl


class Capture:
    """The launches and copies of one run, recorded by ``OpenCLDevice.launch``/``copy``."""

    def __init__(self, device):
        self.device = device
        self.thread = threading.get_ident()
        self.steps: list[tuple] = []  # ("kernel", _Kernel, args, gws, lws, label) | ("copy", ...)
        self.host_reads: set[int] = set()  # id() of allocations whose host copy a kernel read
        self.uploads: list[tuple] = []  # (source array or tensor, device tensor) of this run's uploads
        self.broken: str | None = None

    def uploaded(self, source):
        """The device tensor this run made from ``source`` (a feed), by identity; None if none."""
        for src, tensor in self.uploads:
            if src is source:
                return tensor
        return None

    def launch(self, kernel, args, gws, lws, label, inputs, outputs) -> None:
        if threading.get_ident() == self.thread:
            self.steps.append(("kernel", kernel, list(args), gws, lws, label))

    def copy(self, dst, src, nbytes, src_offset, dst_offset) -> None:
        if threading.get_ident() == self.thread:
            self.steps.append(("copy", dst, src, nbytes, src_offset, dst_offset))

    def finish(self, feeds: dict, outputs: dict, buffers: list) -> "Replay | None":
        dev = self.device
        if self.broken is None:
            reads = [n for n, t in feeds.items() if id(t.alloc) in self.host_reads]
            if reads:
                self.broken = f"a kernel read the values of input(s) {reads} on the host"
        if self.broken is None and not all(dev.owns(t) for t in (*feeds.values(), *outputs.values())):
            self.broken = "an input or output is not a device tensor of this run"
        if self.broken is not None:
            log.info("run not captured for replay: %s", self.broken)
            return None
        dev.queue.finish()  # the captured run (and the constants' uploads) are done before any replay
        return Replay(dev, self.steps, feeds, outputs, buffers)


class Replay:
    """A captured run: ``enqueue(feeds)`` writes the feeds, replays the launches and starts the
    output reads; holds every buffer the run used."""

    def __init__(self, device, steps, feeds: dict, outputs: dict, buffers: list):
        cl = _cl()
        self.device = device
        self.feeds = dict(feeds)
        self.outputs = dict(outputs)
        self.buffers = buffers  # reserved in the pool: only this replay uses them
        self.queue = device.replay_queue()
        self.lock = threading.Lock()
        self.labels: list[str] = []
        calls = []
        enqueue_kernel = cl.enqueue_nd_range_kernel
        for step in steps:
            if step[0] == "kernel":
                _, kernel, args, gws, lws, label = step
                calls.append(functools.partial(enqueue_kernel, self.queue, kernel.bind(args), gws, lws))
                self.labels.append(label)
            else:
                _, dst, src, nbytes, src_offset, dst_offset = step
                calls.append(functools.partial(cl.enqueue_copy, self.queue, dst, src, byte_count=nbytes,
                                               src_offset=src_offset, dst_offset=dst_offset))
                self.labels.append("copy")
        self.calls = calls
        self.launches = sum(1 for s in steps if s[0] == "kernel")

    def __len__(self) -> int:
        return len(self.calls)

    def enqueue(self, feeds: dict, names, copy_feeds: bool = True, on_device=()):
        """Write ``feeds`` (name -> host array of the captured shape and dtype), replay, and start
        reading ``names``; returns (host arrays being filled, the events to wait for: the last one
        completes after all others). With
        ``copy_feeds=False`` the feeds are written straight from the caller's arrays, which must
        then stay unchanged until the event completes. A feed may be a device tensor of this
        context (copied on the device); outputs named in ``on_device`` come back as fresh device
        tensors instead of host arrays."""
        cl = _cl()
        q = self.queue
        results, events = [], []  # pyopencl's transfer events wait when dropped early: keep them all
        with self.lock:  # one replay at a time per capture: its buffers are shared
            for name, tensor in self.feeds.items():
                value = feeds[name]
                if not isinstance(value, np.ndarray):  # a device tensor (io_binding)
                    if value.size:
                        size = value.dtype.itemsize
                        ev = cl.enqueue_copy(q, tensor.buffer, value.buffer, byte_count=value.nbytes,
                                             src_offset=value.offset * size, dst_offset=tensor.offset * size,
                                             wait_for=value.events or None)
                        _note_use(value.alloc, ev)
                    continue
                host = np.ascontiguousarray(value)
                if copy_feeds:
                    host = host.copy()
                if host.nbytes:
                    events.append(cl.enqueue_copy(q, tensor.buffer, host, is_blocking=False,
                                                  dst_offset=tensor.offset * tensor.dtype.itemsize))
            profiling = self.device.profiling
            for call, label in zip(self.calls, self.labels):
                ev = call()
                if profiling and label != "copy":
                    self.device._events.append((label, ev, None))
            for name in names:
                tensor = self.outputs[name]
                if name in on_device:
                    out = self.device.empty(tensor.shape, tensor.dtype)
                    if out.size:
                        size = tensor.dtype.itemsize
                        ev = cl.enqueue_copy(q, out.buffer, tensor.buffer, byte_count=tensor.nbytes,
                                             src_offset=tensor.offset * size, wait_for=out.alloc.uses or None)
                        out.events, out.alloc.uses = [ev], [ev]
                    results.append(out)
                    continue
                host = np.empty(tensor.shape, tensor.dtype)
                if host.nbytes:
                    events.append(cl.enqueue_copy(q, host, tensor.buffer, is_blocking=False,
                                                  src_offset=tensor.offset * tensor.dtype.itemsize))
                results.append(host)
            events.append(cl.enqueue_marker(q))
        return results, events
