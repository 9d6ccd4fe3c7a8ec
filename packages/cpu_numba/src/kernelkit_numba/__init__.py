"""kernelkit's Numba CPU backend: kernels for device "cpu", vendor "numba".

``initialize`` (the ``kernelkit.backends`` entry point) only imports the kernel modules, whose
``register_kernel`` decorators register them; nothing is compiled until a kernel first runs
(compiled code is cached on disk, see ``config``).
"""
from __future__ import annotations

import importlib

KERNEL_MODULES = ("argminmax", "binary", "compare", "concat", "conv", "conv_transpose", "cumsum", "gather", "gemm",
                  "lrn", "movement", "norm", "pad", "pool", "reduce", "resize", "softmax", "topk", "unary", "where",
                  "typed_index", "recurrent", "einsum")


def initialize() -> None:
    """Register this backend's kernels with kernelkit (entry point)."""
    for name in KERNEL_MODULES:
        importlib.import_module(f"{__name__}.kernels.{name}")
