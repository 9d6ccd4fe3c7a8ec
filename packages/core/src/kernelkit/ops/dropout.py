"""Dropout (ONNX opset 13+) for inference: the output is the input; the optional mask is all True.
Training mode (training_mode input true) is refused."""
from __future__ import annotations

import numpy as np

from ..dtypes import FLOAT_TYPES
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ._util import random


def _infer(ctx) -> list[TensorSpec]:
    x = ctx.inputs[0]
    ratio, training = (ctx.inputs[i] if ctx.has(i) else None for i in (1, 2))
    if ratio is not None and (ratio.dtype not in FLOAT_TYPES or ratio.size != 1):
        raise ctx.error(f"ratio {ratio} must be a float scalar")
    if training is not None and (training.dtype != "bool" or training.size != 1):
        raise ctx.error(f"training_mode {training} must be a bool scalar")
    if ctx.has(2) and ctx.value(2) is not None and bool(np.asarray(ctx.value(2)).reshape(())):
        raise ctx.error("training_mode=True is not supported (inference only)")
    return [x, TensorSpec(x.shape, "bool")]


@register_kernel("Dropout", device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100)
def dropout(x, ratio=None, training_mode=None):
    if training_mode is not None and bool(np.asarray(training_mode).reshape(())):
        raise ValueError("training_mode=True is not supported (inference only)")
    return np.array(x, copy=True), np.ones(x.shape, bool)


def _samples(rng, dtype):
    yield [random(rng, (2, 3, 4), dtype)], {}
    yield [random(rng, (5,), dtype), np.array(0.3, dtype)], {"seed": 3}
    yield [random(rng, (2, 2), dtype), np.array(0.5, dtype), np.array(False)], {}, {"n_outputs": 2}
    yield [random(rng, (3, 2), dtype), None, np.array(False)], {}, {"n_outputs": 2, "constants": (2,)}


register_op("Dropout", inputs=["data", "ratio?", "training_mode?"], outputs=["output", "mask?"],
            attrs={"seed": ("int", 0)}, infer=_infer, samples=_samples)
