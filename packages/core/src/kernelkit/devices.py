"""Devices: where a kernel's tensors live, and how tensors move between host and device.

The CPU device is built in (its tensors are NumPy arrays). A backend adds another device with
``register_device(name, factory)``; the session calls ``factory(options)`` once when a model asks
for that device, and moves tensors with ``upload``/``download`` at device boundaries.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import numpy as np

from .errors import BackendUnavailableError

# the node a profiling session is running now: devices tag their timing events with it
profiled_node: ContextVar[str | None] = ContextVar("kernelkit_profiled_node", default=None)


class Device:
    """Base class: a place tensors live. Subclasses override the four methods."""

    name = "cpu"
    asynchronous = False  # True: kernels only enqueue work, and download() is where a run waits

    def upload(self, array: np.ndarray) -> Any:
        """Host array -> this device's tensor (may be asynchronous)."""
        return array

    def download(self, tensor: Any) -> np.ndarray:
        """This device's tensor -> host array; blocks until the data is ready."""
        return np.asarray(tensor)

    def owns(self, tensor: Any) -> bool:
        """Whether ``tensor`` is this device's native tensor type."""
        return isinstance(tensor, np.ndarray)

    def synchronize(self) -> None:
        """Wait for all work queued on this device."""

    def describe(self) -> str:
        return self.name

    def event_times(self, reset: bool = False) -> dict[str, tuple[int, float]]:
        """Device-side time per node from the device's own events: node -> (events, ms). Devices
        without event timing return {}; ``reset`` forgets what was collected."""
        return {}


class CPUDevice(Device):
    name = "cpu"

    def describe(self) -> str:
        import platform

        return f"cpu ({platform.processor() or platform.machine()})"


_FACTORIES: dict[str, Callable[[dict], Device]] = {"cpu": lambda options: CPUDevice()}
_lock = threading.Lock()


def register_device(name: str, factory: Callable[[dict], Device]) -> None:
    """Make ``name`` available as a Session device; ``factory(options)`` builds it lazily."""
    with _lock:
        _FACTORIES[name] = factory


def device_names() -> list[str]:
    from .backends import load_backends

    load_backends()
    return sorted(_FACTORIES)


def create_device(name: str, options: dict | None = None) -> Device:
    from .backends import load_all_backends, load_backends

    load_backends()  # inside a Session build that names its vendors: those vendors' backends
    factory = _FACTORIES.get(name)
    if factory is None:  # a backend not selected may provide it
        load_all_backends()
        factory = _FACTORIES.get(name)
    if factory is None:
        raise BackendUnavailableError(
            f"no installed backend provides device {name!r}; available: {', '.join(sorted(_FACTORIES))} "
            f"(for 'gpu' install the opencl extra: pip install '.[opencl]')"
        )
    return factory(dict(options or {}))
