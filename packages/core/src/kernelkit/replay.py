"""Record and replay: runs on a device that can capture its work (OpenCL) skip the executor.

A session whose kernel steps all run on one such device records its second run of each set of
input shapes (``Device.begin_capture``/``end_capture``; the first run builds and tunes) and
replays it from then on: the device re-enqueues the recorded, pre-bound launches, writing the new
feeds into the recorded input buffers. The device decides what can be replayed (see
``kernelkit_opencl.capture``); anything else keeps running through the executor.
"""
from __future__ import annotations

import threading


class Replayer:
    def __init__(self, session, device):
        self.session, self.device = session, device
        self.state: dict[tuple, object] = {}  # key -> "capture" (next run records), a replay, or False
        self.lock = threading.Lock()

    @classmethod
    def for_session(cls, session, profile: bool) -> "Replayer | None":
        devices = {id(s.device): s.device for s in session.plan.steps}
        if len(devices) != 1 or profile or not session.options.get("replay", True):
            return None
        device = next(iter(devices.values()))
        return cls(session, device) if hasattr(device, "begin_capture") else None

    def start(self, feeds: dict, names: list[str], copy_feeds: bool, on_device=()):
        """("replayed", outputs, events) or ("plain", the executor's started run)."""
        key = (tuple((n, tuple(a.shape), str(a.dtype)) for n, a in feeds.items()), tuple(names))
        state = self.state.get(key)
        if state is not None and state != "capture":
            if state:
                return ("replayed", *state.enqueue(feeds, names, copy_feeds, on_device))
            return ("plain", self.session._executor.start(feeds))
        if state is None:  # first run: builds programs and tunes; record the next one
            self.state[key] = "capture"
            return ("plain", self.session._executor.start(feeds))
        if not self.lock.acquire(blocking=False):
            return ("plain", self.session._executor.start(feeds))
        try:
            return ("plain", self._capture(key, feeds, names))
        finally:
            self.lock.release()

    def _capture(self, key, feeds: dict, names: list[str]):
        ex, dev = self.session._executor, self.device
        capture = dev.begin_capture()
        started = None
        try:
            started = ex.start(feeds)
        finally:
            inputs = outputs = None
            if started is not None:
                env = started[0]
                outputs = {n: env[ex.plan.output_slots[n]] for n in names}
                inputs = {n: capture.uploaded(a) for n, a in feeds.items()}
                if any(t is None for t in inputs.values()):
                    inputs = None
            replay = dev.end_capture(capture, inputs, outputs)
            if started is not None:
                self.state[key] = replay or False  # False: not replayable, the executor runs it
        return started
