"""kernelkit-example-plugin: the custom op ``com.example::ChannelPoly`` and its kernels.

``initialize`` is the ``kernelkit.backends`` entry point. It only registers: the op and its
reference kernel always, the Numba kernel when numba imports, the OpenCL kernel when
kernelkit_opencl imports (no device is touched until a session asks for one).
"""
from __future__ import annotations

import importlib.util
import logging

DOMAIN = "com.example"
OP = "ChannelPoly"

log = logging.getLogger("kernelkit.plugin.example")


def initialize() -> None:
    from . import op  # noqa: F401  schema, shape rule, samples, reference kernel

    if importlib.util.find_spec("numba") is not None:
        from . import numba_kernel  # noqa: F401
    else:
        log.info("numba is not installed: %s::%s has no numba kernel", DOMAIN, OP)
    if importlib.util.find_spec("kernelkit_opencl") is not None:
        from . import opencl_kernel  # noqa: F401
    else:
        log.info("kernelkit-opencl is not installed: %s::%s has no gpu kernel", DOMAIN, OP)


__all__ = ["DOMAIN", "OP", "initialize"]
