"""One way to call a kernel, used by the Session and by constant folding alike.

``bind(entry, node, attrs, device, input_specs)`` turns a registry entry into something callable
with the node's inputs: a function kernel gets the attributes it names bound as keywords (plus
``output_count`` when it asks for it); a class kernel is instantiated, given its ``context`` and
prepared. ``outputs(result)`` makes a kernel's return value a tuple. ``invoke`` does both for one
call, as constant folding needs.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

from .devices import Device
from .errors import KernelBuildError, KernelkitError
from .ir import Node
from .registry import KernelEntry


@dataclass
class KernelContext:
    """Handed to class kernels (as ``self.context``) before ``prepare``: the node, the device
    object (for OpenCL: context, queue, events) and the session options."""

    node: Node
    device: Device
    options: dict = field(default_factory=dict)
    threads: int | None = None
    vendors: tuple | None = None  # the session's vendor list (None: any), e.g. for a backend's stand-ins


def kernel_attrs(entry: KernelEntry, attrs: dict, n_outputs: int) -> dict:
    """The attributes a kernel function is called with: those it names (all if it takes
    ``**attrs``), and ``output_count`` if it names that (so it may skip outputs nobody reads)."""
    if entry.attr_names is None:
        return dict(attrs)
    kwargs = {k: v for k, v in attrs.items() if k in entry.attr_names}
    if "output_count" in entry.attr_names:
        kwargs["output_count"] = n_outputs
    return kwargs


def bind(entry: KernelEntry, node: Node, attrs: dict, device: Device, input_specs: list,
         options: dict | None = None, threads: int | None = None) -> Callable:
    """A function kernel as ``call(*inputs)`` (``out=``/``scratch=`` pass through where it takes
    them), or a class kernel prepared for ``input_specs`` (call its ``execute(*inputs)``). A
    failing ``prepare`` is a KernelBuildError naming the node."""
    if not entry.is_class:
        fn, kwargs = entry.impl, kernel_attrs(entry, attrs, len(node.outputs))
        return functools.partial(fn, **kwargs) if kwargs else fn  # out=/scratch= pass through; no Python frame
    kernel = entry.impl()
    kernel.context = KernelContext(node, device, options if options is not None else {}, threads)
    try:
        kernel.prepare(input_specs, dict(attrs))
    except KernelkitError:
        raise
    except Exception as exc:
        raise KernelBuildError(f"node {node.name!r} ({node.op_id}): prepare failed in {entry.key}: "
                               f"{type(exc).__name__}: {exc}") from exc
    return kernel


def outputs(result) -> tuple:
    """A kernel's return value as a tuple of outputs."""
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


def invoke(entry: KernelEntry, node: Node, attrs: dict, args: list, input_specs: list,
           device: Device | None = None) -> tuple:
    """Bind and call a kernel once (a class kernel on the cpu device unless given); returns its outputs."""
    if device is None and entry.is_class:
        from .devices import create_device

        device = create_device("cpu")
    call = bind(entry, node, attrs, device, input_specs)
    return outputs(call.execute(*args) if entry.is_class else call(*args))
