"""Detection ops: NonMaxSuppression (greedy per batch and class: boxes by descending score, lower
index first on ties; a box is dropped when its IoU with a kept one exceeds ``iou_threshold``; only
scores above ``score_threshold`` are candidates) and RoiAlign (bilinear samples averaged or maxed
per output bin; samples more than one pixel outside the map count as 0)."""
from __future__ import annotations

import math

import numpy as np

from ..dtypes import FLOAT_TYPES
from ..ir import TensorSpec
from ..limits import check_tensor_bytes
from ..registry import register_kernel, register_op
from ..shape import InferContext
from ._util import random


def _scalar(x, default):
    if x is None or np.asarray(x).size == 0:
        return default
    return np.asarray(x).reshape(-1)[0]


def _corners(boxes: np.ndarray, center_point_box: int) -> np.ndarray:
    """(n, 4) boxes as (y1, x1, y2, x2) with y1 <= y2, x1 <= x2."""
    b = boxes.astype(np.float64)
    if center_point_box:
        xc, yc, w, h = b.T
        return np.stack([yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2], axis=1)
    return np.stack([np.minimum(b[:, 0], b[:, 2]), np.minimum(b[:, 1], b[:, 3]),
                     np.maximum(b[:, 0], b[:, 2]), np.maximum(b[:, 1], b[:, 3])], axis=1)


def _iou(box: np.ndarray, others: np.ndarray) -> np.ndarray:
    h = np.clip(np.minimum(box[2], others[:, 2]) - np.maximum(box[0], others[:, 0]), 0, None)
    w = np.clip(np.minimum(box[3], others[:, 3]) - np.maximum(box[1], others[:, 1]), 0, None)
    inter = h * w
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (others[:, 2] - others[:, 0]) * (others[:, 3] - others[:, 1])
    union = area + areas - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((inter > 0) & (area > 0) & (areas > 0) & (union > 0), inter / union, 0.0)


@register_kernel("NonMaxSuppression", device="cpu", vendor="reference", dtype=("float32", "float64", "float16"),
                 priority=-100)
def non_max_suppression(boxes, scores, max_output_boxes_per_class=None, iou_threshold=None,
                        score_threshold=None, *, center_point_box=0):
    limit = int(_scalar(max_output_boxes_per_class, 0))
    iou_t = float(_scalar(iou_threshold, 0.0))
    score_t = None if score_threshold is None or np.asarray(score_threshold).size == 0 else \
        float(_scalar(score_threshold, 0.0))
    if boxes.shape[0] != scores.shape[0] or boxes.shape[1] != scores.shape[2]:
        raise ValueError(f"boxes {boxes.shape} and scores {scores.shape} disagree")
    out = []
    for n in range(boxes.shape[0]):
        corners = _corners(boxes[n], center_point_box)
        for c in range(scores.shape[1]):
            s = scores[n, c].astype(np.float64)
            order = np.lexsort((np.arange(len(s)), -s))  # descending score, lower index first
            if score_t is not None:
                order = order[s[order] > score_t]
            kept: list[int] = []
            for i in order:
                if len(kept) >= limit:
                    break
                if not kept or not np.any(_iou(corners[i], corners[kept]) > iou_t):
                    kept.append(int(i))
            out.extend((n, c, i) for i in kept)
    return np.array(out, np.int64).reshape(-1, 3)


def _nms_rule(ctx: InferContext) -> TensorSpec:
    boxes, scores = ctx.inputs[:2]
    if boxes.rank != 3 or scores.rank != 3:
        raise ctx.error(f"boxes and scores must be 3-D, got {boxes} and {scores}")
    return TensorSpec((ctx.symbol(), 3), "int64")


def _interp_weights(coords: np.ndarray, size: int):
    """Bilinear (low index, high index, low weight, high weight) per sample coordinate; samples
    beyond [-1, size] get zero weights."""
    outside = (coords < -1.0) | (coords > size)
    c = np.clip(coords, 0, None)
    low = np.floor(c).astype(np.int64)
    edge = low >= size - 1
    low = np.where(edge, size - 1, low)
    high = np.where(edge, size - 1, low + 1)
    c = np.where(edge, low, c)
    frac = c - low
    wl, wh = np.where(outside, 0, 1 - frac), np.where(outside, 0, frac)
    return low, high, wl, wh


@register_kernel("RoiAlign", device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100)
def roi_align(x, rois, batch_indices, *, coordinate_transformation_mode="half_pixel", mode="avg",
              output_height=1, output_width=1, sampling_ratio=0, spatial_scale=1.0):
    if mode not in ("avg", "max"):
        raise ValueError(f"mode must be avg or max, got {mode!r}")
    if x.ndim != 4 or rois.ndim != 2 or rois.shape[1] != 4 or np.shape(batch_indices) != (rois.shape[0],):
        raise ValueError(f"X {x.shape}, rois {rois.shape} and batch_indices {np.shape(batch_indices)} must be "
                         f"(N, C, H, W), (R, 4) and (R,)")
    if batch_indices.size and (batch_indices.min() < 0 or batch_indices.max() >= x.shape[0]):
        raise IndexError(f"a batch index is out of range for {x.shape[0]} images")
    if output_height < 1 or output_width < 1 or sampling_ratio < 0:
        raise ValueError("output_height/width must be >= 1 and sampling_ratio >= 0")
    n_rois, (_, channels, height, width) = rois.shape[0], x.shape
    check_tensor_bytes((n_rois, channels, output_height, output_width), np.float64)
    xc = x.astype(np.float64)
    out = np.zeros((n_rois, channels, output_height, output_width))
    offset = 0.5 if coordinate_transformation_mode == "half_pixel" else 0.0
    for k in range(n_rois):
        x1, y1, x2, y2 = rois[k].astype(np.float64) * spatial_scale - offset
        roi_w, roi_h = x2 - x1, y2 - y1
        if coordinate_transformation_mode != "half_pixel":
            roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
        bin_h, bin_w = roi_h / output_height, roi_w / output_width
        gh = sampling_ratio if sampling_ratio > 0 else int(math.ceil(roi_h / output_height))
        gw = sampling_ratio if sampling_ratio > 0 else int(math.ceil(roi_w / output_width))
        count = max(gh * gw, 1)
        if mode == "avg":  # the samples per bin come from the roi's VALUES: bound their tables
            check_tensor_bytes((output_height * gh + output_width * gw, max(height, width)), np.float64,
                               "RoiAlign's sampling tables")
        else:
            check_tensor_bytes((4, channels, output_height * gh, output_width * gw), np.float64,
                               "RoiAlign's samples")
        ys = y1 + (np.arange(output_height)[:, None] + (np.arange(gh)[None, :] + 0.5) / gh) * bin_h
        xs = x1 + (np.arange(output_width)[:, None] + (np.arange(gw)[None, :] + 0.5) / gw) * bin_w
        yl, yh, wyl, wyh = _interp_weights(ys.reshape(-1), height)
        xl, xh, wxl, wxh = _interp_weights(xs.reshape(-1), width)
        fmap = xc[int(batch_indices[k])]
        if mode == "avg":
            ay = np.zeros((output_height * gh, height))
            ax = np.zeros((output_width * gw, width))
            np.add.at(ay, (np.arange(len(yl)), yl), wyl)
            np.add.at(ay, (np.arange(len(yh)), yh), wyh)
            np.add.at(ax, (np.arange(len(xl)), xl), wxl)
            np.add.at(ax, (np.arange(len(xh)), xh), wxh)
            ay = ay.reshape(output_height, gh, height).sum(1)
            ax = ax.reshape(output_width, gw, width).sum(1)
            out[k] = ay @ fmap @ ax.T / count
        else:
            corners = [fmap[:, yi][:, :, xi] * (wy[:, None] * wx[None, :])
                       for yi, wy in ((yl, wyl), (yh, wyh)) for xi, wx in ((xl, wxl), (xh, wxh))]
            best = np.max(corners, axis=0).reshape(channels, output_height, gh, output_width, gw)
            out[k] = best.max(axis=(2, 4))
    return out.astype(x.dtype)


def _roi_rule(ctx: InferContext) -> TensorSpec:
    x, rois, _ = ctx.inputs
    if x.rank != 4 or rois.rank != 2:
        raise ctx.error(f"X must be 4-D and rois 2-D, got {x} and {rois}")
    return TensorSpec((rois.shape[0], x.shape[1], ctx.attrs["output_height"], ctx.attrs["output_width"]), x.dtype)


def _nms_samples(rng, dtype):
    xy = rng.uniform(0, 10, size=(2, 12, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(1, 4, size=(2, 12, 2))], axis=2).astype(dtype)
    scores = rng.uniform(0, 1, size=(2, 3, 12)).astype(dtype)
    yield [boxes, scores, np.array([4], np.int64), np.array([0.4], np.float32), np.array([0.2], np.float32)], {}
    yield [boxes, scores, np.array([12], np.int64), np.array([0.6], np.float32)], {"center_point_box": 1}


def _roi_samples(rng, dtype):
    x = random(rng, (2, 3, 8, 8), dtype)
    rois = np.array([[0, 0, 7, 7], [1.5, 2.0, 5.5, 6.5], [-2, 3, 4, 9.5]], dtype)
    yield [x, rois, np.array([0, 1, 1], np.int64)], {"output_height": 3, "output_width": 2, "sampling_ratio": 2}
    yield [x, rois, np.array([1, 0, 0], np.int64)], {"mode": "max", "spatial_scale": 0.5}


register_op("NonMaxSuppression", inputs=["boxes", "scores", "max_output_boxes_per_class?", "iou_threshold?",
                                         "score_threshold?"], outputs=["selected_indices"],
            attrs={"center_point_box": ("int", 0)}, infer=_nms_rule, samples=_nms_samples)
register_op("RoiAlign", inputs=["X", "rois", "batch_indices"], outputs=["Y"],
            attrs={"coordinate_transformation_mode": ("string", "half_pixel"), "mode": ("string", "avg"),
                   "output_height": ("int", 1), "output_width": ("int", 1), "sampling_ratio": ("int", 0),
                   "spatial_scale": ("float", 1.0)}, infer=_roi_rule, samples=_roi_samples)
