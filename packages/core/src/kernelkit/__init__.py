"""kernelkit: a deep-learning inference runtime with pluggable kernels.

A NumPy reference defines what every op computes; backends (numba, opencl, plugins) register
faster kernels keyed by (op, device, vendor, dtype) and are cross-checked against it.
"""
from __future__ import annotations

import logging

from . import ops as _ops  # noqa: F401  (registers the core op set and its reference kernels)
from . import passes as _passes_pkg  # noqa: F401
from .activation import ACTIVATIONS, apply_activation
from .backends import load_backends
from .builder import GraphBuilder
from .devices import Device, create_device, register_device
from .dtypes import dtype_name
from .errors import (
    BackendUnavailableError,
    ConfigError,
    DeviceError,
    FallbackWarning,
    InputError,
    KernelBuildError,
    KernelExecutionError,
    KernelkitError,
    KernelkitWarning,
    LoaderNotFoundError,
    ModelFormatError,
    OpAttributeError,
    RegistryError,
    ShapeError,
    TensorTooLargeError,
    UnsupportedOpError,
)
from .invoke import KernelContext
from .ir import Graph, Model, Node, TensorSpec, Value
from .loaders import load_model, register_loader
from .passes import PassContext, register_pass, run_passes
from .plan import Plan, Step
from .portable import LazySession, SessionRecipe, cpu_allotment
from .registry import REQUIRED, get_schema, kernels, ops, register_kernel, register_op
from .session import Session
from .shape import InferContext, broadcast_shapes, infer_shapes

__version__ = "0.1.0"

logging.getLogger("kernelkit").addHandler(logging.NullHandler())


def save(model: Model, path) -> None:
    """Write ``model`` to kernelkit's IR file (see ``kernelkit.io``)."""
    from .io import save as _save

    _save(model, path)


def load(path, *, verify: bool = True) -> Model:
    """Read a kernelkit IR file, validating it and mapping its weights read-only
    (``verify=False`` skips the sha256 checks)."""
    from .io import load as _load

    return _load(path, verify=verify)


__all__ = [
    "LazySession", "SessionRecipe", "cpu_allotment",
    "ACTIVATIONS", "BackendUnavailableError", "ConfigError", "Device", "DeviceError",
    "FallbackWarning", "Graph", "GraphBuilder", "InferContext", "InputError", "KernelBuildError",
    "KernelContext", "KernelExecutionError", "KernelkitError", "KernelkitWarning",
    "LoaderNotFoundError", "Model", "ModelFormatError", "Node", "OpAttributeError", "PassContext",
    "Plan", "REQUIRED", "RegistryError", "Session", "ShapeError", "Step", "TensorSpec",
    "TensorTooLargeError", "UnsupportedOpError", "Value", "apply_activation", "broadcast_shapes",
    "create_device",
    "dtype_name", "get_schema", "infer_shapes", "kernels", "load", "load_backends", "load_model",
    "ops", "register_device", "register_kernel", "register_loader", "register_op", "register_pass",
    "run_passes", "save",
]
