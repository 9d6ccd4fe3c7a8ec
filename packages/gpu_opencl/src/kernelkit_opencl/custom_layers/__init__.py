"""Custom OpenCL kernels from configuration files, no host code (OpenVINO's GPU custom layers).

A config names an op, the kernel's entry point, its ``.cl`` sources, defines (static or bound to
the op's attributes), the tensors and data blobs bound to each kernel argument, compiler options
and the work sizes as formulas over the output's B, F, Y, X. Two formats are read: OpenVINO's clDNN
custom-layer XML (``.xml``, unchanged) and kernelkit's YAML (``.yml``/``.yaml``). Before the user's
sources come the built-in defines OpenVINO documents (NUM_INPUTS, GLOBAL_WORKSIZE, INPUT0_DIMS,
OUTPUT0_PITCHES, ...; see :mod:`.jit`).

Three ways to load, as OpenVINO has a global file and a per-session config:

- ``kernelkit_opencl.load_custom_kernels(path)`` in Python (for the process);
- ``Session(model, device="gpu", options={"opencl_custom_kernels": path})`` (for that session only:
  the kernels go into the session's ``KernelScope``, and later sessions never see them);
- ``KERNELKIT_OPENCL_CUSTOM_KERNELS=path`` (several joined with ``os.pathsep``), read when a
  session on the gpu device is built (for the process).

Each layer becomes a kernel ``(op, "gpu", vendor "custom", dtypes)`` with priority 10, so it wins
over the built-in opencl kernel; process-wide kernels stay registered (loading the same unchanged
file again is a no-op, a changed file replaces its kernels). A process-wide load that fails leaves the
registry as it was, and a layer whose program fails to build unregisters its file's kernels.
"""
from __future__ import annotations

import hashlib
import logging
import os
import threading
from pathlib import Path

from kernelkit.errors import ConfigError
from kernelkit.untrusted import read_regular

from .config import Buffer, Define, LayerConfig
from .formula import Formula, FormulaError
from .kernel import register_layer
from .xml_format import read_xml
from .yaml_format import read_yaml

log = logging.getLogger("kernelkit.opencl.custom")

ENV_VAR = "KERNELKIT_OPENCL_CUSTOM_KERNELS"
OPTION = "opencl_custom_kernels"
_READERS = {".xml": read_xml, ".yml": read_yaml, ".yaml": read_yaml}
_loaded: dict[Path, tuple[str, list[LayerConfig]]] = {}  # resolved file -> (content hash, layers)
_lock = threading.RLock()


def read_config(path) -> list[LayerConfig]:
    """Parse and check one config file without registering anything."""
    file = Path(path)
    reader = _READERS.get(file.suffix.lower())
    if reader is None:
        raise ConfigError(f"{file}: unknown custom-kernel config type {file.suffix!r}; use .xml (OpenVINO "
                          f"clDNN format) or .yml/.yaml (kernelkit format)")
    if not file.is_file():
        raise ConfigError(f"{file}: custom-kernel config file not found")
    return reader(file.resolve())


def _paths(spec) -> list[Path]:
    if isinstance(spec, (str, os.PathLike)):
        return [Path(p) for p in str(spec).split(os.pathsep) if p.strip()]
    return [Path(p) for p in spec]


def load_custom_kernels(path, scope=None) -> list[LayerConfig]:
    """Read the config(s) at ``path`` (a file, or a list of files, or files joined with os.pathsep)
    and register a gpu kernel for each layer; returns the layers. Malformed configs raise
    ConfigError naming the file and the place in it. ``scope``: a session's ``KernelScope`` to
    register into instead of the process-wide registry."""
    if scope is not None:
        layers = [layer for file in _paths(path) for layer in read_config(file)]
        for layer in layers:
            register_layer(layer, registry=scope)
        return layers
    from kernelkit.registry import kernel_transaction, unregister_kernel

    layers: list[LayerConfig] = []
    with _lock, kernel_transaction():  # all files or none: a failure leaves the registry as it was
        before = dict(_loaded)
        try:
            for file in _paths(path):
                resolved = file.resolve()
                digest = _digest(resolved)
                known = _loaded.get(resolved)
                if known is not None and known[0] == digest:
                    layers += known[1]
                    continue
                found = read_config(file)
                for layer in known[1] if known is not None else ():  # a changed file replaces its kernels
                    unregister_kernel(layer.op, domain=layer.domain, device="gpu", vendor=layer.vendor,
                                      dtype=layer.dtypes)
                for layer in found:
                    register_layer(layer)
                _loaded[resolved] = (digest, found)
                layers += found
        except BaseException:
            _loaded.clear()
            _loaded.update(before)
            raise
    return layers


def _digest(file: Path) -> str:
    try:
        return hashlib.sha256(read_regular(file)).hexdigest()
    except (OSError, ValueError):  # missing, a FIFO, ...: read_config names the problem
        return ""


def forget_layer(layer: LayerConfig) -> None:
    """Unregister every kernel of the config file ``layer`` came from (its program failed to build),
    so later sessions that never named the file are not broken by it."""
    from kernelkit.registry import unregister_kernel

    with _lock:
        for file, (_, layers) in list(_loaded.items()):
            if any(item is layer for item in layers):
                del _loaded[file]
                for item in layers:
                    unregister_kernel(item.op, domain=item.domain, device="gpu", vendor=item.vendor,
                                      dtype=item.dtypes)
                log.warning("custom OpenCL kernels of %s unregistered: %s failed to build", file, layer.entry)


def unload_custom_kernels(path=None) -> None:
    """Unregister the kernels loaded from ``path`` (None: from every file loaded so far)."""
    from kernelkit.registry import unregister_kernel

    with _lock:
        files = list(_loaded) if path is None else [p.resolve() for p in _paths(path)]
        for file in files:
            _, layers = _loaded.pop(file, ("", []))
            for layer in layers:
                unregister_kernel(layer.op, domain=layer.domain, device="gpu", vendor=layer.vendor,
                                  dtype=layer.dtypes)


def _session_hook(device: str, options: dict, scope) -> None:
    """Before a gpu session selects kernels: load $KERNELKIT_OPENCL_CUSTOM_KERNELS for the process
    (a no-op once loaded and unchanged) and the files named by its ``opencl_custom_kernels`` option
    into the session's scope."""
    if device != "gpu":
        return
    spec = os.environ.get(ENV_VAR)
    if spec:
        try:
            load_custom_kernels(spec)
        except ConfigError as exc:
            raise ConfigError(f"${ENV_VAR}: {exc}") from exc
    spec = options.get(OPTION)
    if spec:
        load_custom_kernels(spec, scope=scope)


def initialize() -> None:
    """Called by the opencl backend's entry point: sessions on the gpu device then load the
    configs named by ``$KERNELKIT_OPENCL_CUSTOM_KERNELS`` and their ``opencl_custom_kernels`` option."""
    from kernelkit.backends import register_session_hook

    register_session_hook(_session_hook)


__all__ = ["Buffer", "Define", "ENV_VAR", "Formula", "FormulaError", "LayerConfig", "OPTION", "initialize",
           "load_custom_kernels", "read_config", "unload_custom_kernels"]
