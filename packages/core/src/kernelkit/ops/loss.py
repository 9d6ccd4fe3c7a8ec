"""Losses: NegativeLogLikelihoodLoss(input (N, C, d...), target (N, d...), weight? (C,)) and
SoftmaxCrossEntropyLoss (the NLL of log_softmax over axis 1, optionally returning it). Entries
whose target is ``ignore_index`` weigh 0; ``reduction`` mean divides by the summed weights."""
from __future__ import annotations

import numpy as np

from ..dtypes import FLOAT_TYPES
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ..shape import InferContext
from ._util import random
from .softmax import _log_softmax


def nll(x, target, weight, ignore_index, reduction):
    if reduction not in ("none", "sum", "mean"):
        raise ValueError(f"reduction must be none, sum or mean, got {reduction!r}")
    ct = np.promote_types(x.dtype, np.float32)
    target = np.asarray(target).astype(np.int64)
    if x.ndim < 2 or target.shape != (x.shape[0],) + x.shape[2:]:
        raise ValueError(f"target {target.shape} must be input {x.shape} without its class axis")
    if weight is not None and weight.shape != (x.shape[1],):
        raise ValueError(f"weight {weight.shape} must hold one value per class ({x.shape[1]})")
    keep = np.ones(target.shape, bool) if ignore_index is None else target != ignore_index
    safe = np.where(keep, target, 0)
    if np.any(safe < 0) or np.any(safe >= x.shape[1]):
        raise IndexError(f"a target is out of range for {x.shape[1]} classes")
    picked = np.take_along_axis(x.astype(ct), np.expand_dims(safe, 1), axis=1).squeeze(1)
    w = (np.ones(x.shape[1], ct) if weight is None else weight.astype(ct))[safe] * keep
    loss = -picked * w
    if reduction == "none":
        return loss.astype(x.dtype)
    if reduction == "sum":
        return np.asarray(loss.sum(), x.dtype)
    total = w.sum()
    return np.asarray(loss.sum() / total if total else 0.0, x.dtype)


@register_kernel("NegativeLogLikelihoodLoss", device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100)
def negative_log_likelihood_loss(x, target, weight=None, *, ignore_index=None, reduction="mean"):
    return nll(x, target, weight, ignore_index, reduction)


@register_kernel("SoftmaxCrossEntropyLoss", device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100)
def softmax_cross_entropy_loss(scores, labels, weights=None, *, ignore_index=None, reduction="mean"):
    log_prob = _log_softmax(scores, axis=1)
    return nll(log_prob, labels, weights, ignore_index, reduction), log_prob


def _rule(ctx: InferContext) -> list[TensorSpec]:
    x, target = ctx.inputs[:2]
    if x.rank < 2 or target.rank != x.rank - 1 or target.dtype not in ("int32", "int64"):
        raise ctx.error(f"input {x} needs an int32/int64 target of rank {x.rank - 1}, got {target}")
    reduction = ctx.attrs["reduction"]
    if reduction not in ("none", "sum", "mean"):
        raise ctx.error(f"reduction must be none, sum or mean, got {reduction!r}")
    shape = (x.shape[0],) + x.shape[2:] if reduction == "none" else ()
    return [TensorSpec(shape, x.dtype), x]


def _samples(rng, dtype):
    x = random(rng, (3, 4, 2), dtype)
    t = rng.integers(0, 4, size=(3, 2)).astype(np.int64)
    yield [x, t], {}
    yield [x, t, random(rng, (4,), dtype, 0.5, 2)], {"reduction": "sum", "ignore_index": 1}
    yield [x, t], {"reduction": "none"}


_ATTRS = {"ignore_index": ("int", None), "reduction": ("string", "mean")}
register_op("NegativeLogLikelihoodLoss", inputs=["input", "target", "weight?"], outputs=["loss"], attrs=_ATTRS,
            infer=_rule, samples=_samples)
register_op("SoftmaxCrossEntropyLoss", inputs=["scores", "labels", "weights?"], outputs=["output", "log_prob?"],
            attrs=_ATTRS, infer=_rule, samples=_samples)
