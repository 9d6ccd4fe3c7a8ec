"""IOBinding: inputs and outputs that stay on the device between runs (onnxruntime's io_binding).

    binding = sess.io_binding()
    binding.bind_input("x", x)                 # a NumPy array, or a device tensor (another
    binding.bind_output("y")                   #   session's output: no trip through the host)
    sess.run_with_iobinding(binding)
    y_dev = binding.get_outputs()[0]           # a device tensor (like an OrtValue on the GPU)
    y = binding.copy_outputs_to_cpu()[0]       # NumPy

A device input is copied once on the device into the session's own buffer (the device's
``adopt``); device outputs are fresh tensors the caller owns (a later run never overwrites them).
On a device that replays captured runs (OpenCL) bound runs are replayed too.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .errors import InputError


class IOBinding:
    """Bound inputs (arrays or device tensors) and outputs (kept on the device or downloaded)."""

    def __init__(self, session):
        self.session = session
        self.inputs: dict[str, Any] = {}
        self.outputs: dict[str, bool] = {}  # name -> keep on the device
        self._results: list | None = None

    def bind_input(self, name: str, value) -> None:
        if name not in self.session.graph.inputs:
            raise InputError(f"bind_input: {name!r} is not an input of model {self.session.graph.name!r}; "
                             f"inputs are {self.session.graph.inputs}")
        self.inputs[name] = value

    def bind_output(self, name: str, on_device: bool = True) -> None:
        if name not in self.session.graph.outputs:
            raise InputError(f"bind_output: {name!r} is not an output of model {self.session.graph.name!r}; "
                             f"outputs are {self.session.graph.outputs}")
        self.outputs[name] = bool(on_device)

    def clear_binding_inputs(self) -> None:
        self.inputs.clear()

    def clear_binding_outputs(self) -> None:
        self.outputs.clear()

    def get_outputs(self) -> list:
        """The last run's outputs in bind order: device tensors for outputs bound on the device."""
        if self._results is None:
            raise InputError("get_outputs: run_with_iobinding has not run with this binding yet")
        return list(self._results)

    def copy_outputs_to_cpu(self) -> list[np.ndarray]:
        return [r if isinstance(r, np.ndarray) else r.device.download(r) for r in self.get_outputs()]

    # -- used by Session.run_with_iobinding --------------------------------------------------------
    def run(self) -> None:
        sess = self.session
        host, device = self.split_feeds()
        names = list(self.outputs) or list(sess.graph.outputs)
        on_device = {n for n in names if self.outputs.get(n, True)}
        feeds = {**host, **device}
        replayer = sess._replayer
        if replayer is not None:
            kind, *result = replayer.start(feeds, names, copy_feeds=True, on_device=on_device)
            if kind == "replayed":
                outs, events = result
                if len(on_device) < len(names):
                    events[-1].wait()
                self._events = events  # pending transfers stay referenced until the next run
                self._results = outs
                return
            started = result[0]
            ex = sess._executor
        else:
            ex = sess._executor  # once: a deferred session's upgrade may swap it (kernelkit.deferred)
            started = ex.start(feeds)
        env, arena, pool = started
        try:
            results = []
            for name in names:
                slot = ex.plan.output_slots[name]
                where = ex.output_device.get(slot)
                if name in on_device and where is not None and where.name != "cpu":
                    # a captured run's buffers belong to its replay: hand out a copy the caller owns
                    adopt = getattr(where, "adopt", None)
                    results.append(adopt(env[slot]) if replayer is not None and adopt is not None else env[slot])
                else:
                    results.append(ex.collect(env, feeds, [name])[0])
        finally:
            pool.give(arena)
        self._results = results

    def split_feeds(self) -> tuple[dict, dict]:
        """(host feeds checked like Session.run's, device feeds) — a device tensor is checked by
        shape and dtype through a zero-cost broadcast stand-in."""
        host, device = {}, {}
        for name, value in self.inputs.items():
            if isinstance(value, np.ndarray) or np.isscalar(value) or isinstance(value, (list, tuple)):
                host[name] = value
            elif hasattr(value, "shape") and hasattr(value, "dtype") and hasattr(value, "device"):
                device[name] = value
                host[name] = np.broadcast_to(np.zeros((), value.dtype), tuple(value.shape))
            else:
                raise InputError(f"bind_input {name!r}: expected an array or a device tensor, "
                                 f"got {type(value).__name__}")
        checked = self.session._check_feeds(host)
        for name in device:
            checked.pop(name)
        return checked, device
