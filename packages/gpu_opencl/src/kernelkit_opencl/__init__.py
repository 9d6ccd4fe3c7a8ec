"""kernelkit's OpenCL backend: device ``gpu``, kernel vendor ``opencl`` (pyopencl).

``initialize()`` (the ``kernelkit.backends`` entry point) only registers the device factory and the
kernels; OpenCL is first touched when a session asks for ``device="gpu"``. See docs/opencl.md.
"""
from __future__ import annotations

import threading

_done = False
_lock = threading.Lock()


def initialize() -> None:
    """Register this backend's kernels and the ``gpu`` device with kernelkit (entry point)."""
    global _done
    with _lock:
        if _done:
            return
        from kernelkit import register_device
        from kernelkit.discovery import import_submodules

        from .runtime import create_device

        register_device("gpu", create_device)
        for family in import_submodules(f"{__name__}.kernels"):  # every kernels/<family>.py, sorted
            if hasattr(family, "register"):  # a family registers its kernels; a helper module has none
                family.register()
        from .custom_layers import initialize as _custom_layers

        _custom_layers()  # sessions load configs named by option / $KERNELKIT_OPENCL_CUSTOM_KERNELS
        _done = True


def load_custom_kernels(path):
    """Register the custom OpenCL kernels described by the config(s) at ``path`` (OpenVINO clDNN
    XML or kernelkit YAML; see kernelkit_opencl.custom_layers and docs/extending.md)."""
    from .custom_layers import load_custom_kernels as load

    return load(path)


__all__ = ["initialize", "load_custom_kernels"]


def cache_info() -> dict:
    """The program cache folder and its entry count (``kernelkit bench --json``)."""
    from .programs import cache_root

    folder = cache_root() / "opencl" / "programs"
    entries = [p for p in folder.iterdir() if p.is_file()] if folder.is_dir() else []
    return {"dir": str(folder), "entries": len(entries)}
