"""Helpers shared by the kernel families: reading ``.cl`` sources, fused activations, launches."""
from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np
from kernelkit.activation import resolve

HERE = Path(__file__).parent
WG = 256  # work-group size of 1-D elementwise launches

# The fused ``activation`` attribute as OpenCL C over a float ``v``, one line per entry of core's
# table (kernelkit/activation.py); ACT_P0/ACT_P1 are the activation_params (core's defaults filled
# in), passed as defines.
ACTIVATION_CL = {
    "": "(v)",
    "Relu": "((v) < 0.0f ? 0.0f : (v))",  # NaN stays NaN (fmax would drop it)
    "Clip": "((v) != (v) ? (v) : fmin(fmax(v, ACT_P0), ACT_P1))",
    "LeakyRelu": "((v) >= 0.0f ? (v) : ACT_P0 * (v))",
    "Sigmoid": "(1.0f / (1.0f + exp(-(v))))",
    "HardSwish": "((v) * clamp((v) / 6.0f + 0.5f, 0.0f, 1.0f))",
    "Tanh": "tanh(v)",
    "Gelu": "(ACT_P0 != 0.0f ? 0.5f * (v) * (1.0f + tanh(0.7978845608028654f * ((v) + 0.044715f * (v) * (v) * (v))))"
            " : 0.5f * (v) * (1.0f + erf((v) * 0.7071067811865476f)))",
}


@functools.cache
def source(name: str) -> str:
    """The text of the ``.cl`` file ``name`` beside this module, with each line ``#include "X.cl"``
    replaced by the text of X.cl beside it (inlined here, so the program cache key covers it)."""
    lines = (HERE / name).read_text().splitlines(keepends=True)
    return "".join(source(line.split('"')[1]) if line.startswith('#include "') else line for line in lines)


def activation(activation: str, params, where: str = "") -> tuple[str, dict]:
    """Source line defining ACT(v) and the defines ACT_P0/ACT_P1 (the activation_params, core's
    defaults filled in) for a fused activation; an unknown name is an OpAttributeError."""
    p = resolve(activation, params, where) + (0.0, 0.0) if activation else (0.0, 0.0)
    return f"#define ACT(v) {ACTIVATION_CL[activation]}\n", {"ACT_P0": p[0], "ACT_P1": p[1]}


def storage_defines(dtype) -> dict:
    """STORAGE_HALF for float16 tensors, with HALF_WIDE (storage.cl: 4 halves as one 64-bit
    integer access, issue 12 session 5; NVIDIA splits vloada_half4 into 16-bit accesses) unless
    KERNELKIT_OPENCL_HALF_WIDE=0."""
    if np.dtype(dtype) != np.float16:
        return {}
    return {"STORAGE_HALF": 1} if os.environ.get("KERNELKIT_OPENCL_HALF_WIDE") == "0" else {
        "STORAGE_HALF": 1, "HALF_WIDE": 1}


def round_up(n: int, m: int) -> int:
    return -(-int(n) // m) * m


def contiguous_strides(shape) -> list[int]:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= int(d)
    return strides[::-1]


def launch_1d(device, kernel, n: int, args, inputs, outputs, label: str):
    return device.launch(kernel, (round_up(max(n, 1), WG),), (WG,), args, inputs, outputs, label)


EW_VEC = 4  # elements per work-item of elementwise.cl's unary, binary, clip and to_float kernels


def launch_vec(device, kernel, n: int, args, inputs, outputs, label: str):
    """A 1-D launch of a kernel doing ``EW_VEC`` consecutive elements of ``n`` per work-item."""
    return launch_1d(device, kernel, -(-int(n) // EW_VEC), args, inputs, outputs, label)
