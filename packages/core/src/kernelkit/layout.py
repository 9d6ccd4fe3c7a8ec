"""Tensor layouts: what a layout string means, how an array is re-laid, which ops run in any layout.

A layout string names a tensor's physical axes, outermost first (TVM's notation): an upper-case
letter is a logical axis, a number and a lower-case letter an inner block of that axis.

    NCHW      plain images (the default)        OIHW      plain Conv weights (the default)
    NHWC      channels last                     HWIO      (kh, kw, in/group, out)
    NCHW8c    (N, C/8, H, W, 8): blocked        OIHW8i8o  (O/8, I/8, kh, kw, 8 in, 8 out)
    NCHW16c   (N, C/16, H, W, 16)               OIHW8o    (O/8, I, kh, kw, 8 out): depthwise

A value's ``TensorSpec`` keeps its logical shape (NCHW order) and names its layout; the array a
kernel gets is physical (``physical_shape``). ``to_layout``/``from_layout`` convert a logical
array, ``reorder`` goes between two layouts of the same letters. Blocked axes must divide evenly.
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from .errors import ShapeError

# the plain (default) order of each set of axis letters; a layout's letters must be one of these
PLAIN = {frozenset("NCHW"): "NCHW", frozenset("OIHW"): "OIHW", frozenset("NCW"): "NCW",
         frozenset("NCDHW"): "NCDHW"}
IMAGE_LAYOUTS = ("NCHW", "NHWC", "NCHW8c", "NCHW16c")  # the activation layouts kernels may declare

_TOKEN = re.compile(r"([A-Z])|(\d+)([a-z])")


class Layout(NamedTuple):
    name: str
    plain: str  # the default order of the same letters
    axes: tuple  # physical axes: (letter, block) — block 0 for a whole (outer) axis, else the inner size

    @property
    def is_plain(self) -> bool:
        return self.name == self.plain

    def block(self, letter: str) -> int:
        """The inner block size of logical axis ``letter`` (0 when not blocked)."""
        return next((b for a, b in self.axes if a == letter and b), 0)


@lru_cache(maxsize=256)
def parse(name: str) -> Layout:
    """The Layout of ``name``; a ShapeError for a string that is not one."""
    if not isinstance(name, str) or not name:
        raise ShapeError(f"layout must be a non-empty string like 'NHWC' or 'NCHW8c', got {name!r:.40}")
    axes, pos = [], 0
    for m in _TOKEN.finditer(name):
        if m.start() != pos:
            break
        pos = m.end()
        axes.append((m.group(1), 0) if m.group(1) else (m.group(3).upper(), int(m.group(2))))
    letters = [a for a, b in axes if not b]
    blocked = [(a, b) for a, b in axes if b]
    plain = PLAIN.get(frozenset(letters))
    if pos != len(name) or plain is None or len(set(letters)) != len(letters) or \
            any(b < 2 or a not in letters for a, b in blocked) or len({a for a, _ in blocked}) != len(blocked):
        raise ShapeError(f"layout {name!r} is not one kernelkit knows: upper-case axes of one of "
                         f"{sorted(PLAIN.values())} in any order, each optionally blocked once "
                         f"by a number and its lower-case letter (e.g. 'NCHW8c', 'OIHW8i8o')")
    return Layout(name, plain, tuple(axes))


def is_plain(name: str | None) -> bool:
    """Whether ``name`` is a default layout (None, '' or a plain order such as 'NCHW')."""
    return not name or parse(name).is_plain


def physical_shape(shape: tuple, name: str | None) -> tuple:
    """The shape of an array holding a tensor of logical ``shape`` in layout ``name``."""
    if not name:
        return tuple(shape)
    lay = parse(name)
    if len(shape) != len(lay.plain):
        raise ShapeError(f"layout {name!r} is for rank {len(lay.plain)}, the tensor has shape {tuple(shape)}")
    dims = dict(zip(lay.plain, shape))
    out = []
    for a, b in lay.axes:
        d, block = dims[a], lay.block(a)
        if b:
            out.append(b)
        elif block:
            if not isinstance(d, int) or d % block:
                raise ShapeError(f"layout {name!r}: axis {a} of size {d} is not a multiple of {block}")
            out.append(d // block)
        else:
            out.append(d)
    return tuple(out)


def logical_shape(shape: tuple, name: str | None) -> tuple:
    """The logical (plain-order) shape of an array of ``shape`` held in layout ``name``."""
    if not name:
        return tuple(shape)
    lay = parse(name)
    if len(shape) != len(lay.axes):
        raise ShapeError(f"an array in layout {name!r} has rank {len(lay.axes)}, got shape {tuple(shape)}")
    dims = {a: d for (a, b), d in zip(lay.axes, shape) if not b}
    return tuple(dims[a] * (lay.block(a) or 1) for a in lay.plain)


def _split(lay: Layout) -> list[tuple[str, int]]:
    """The plain axes with each blocked one split in two: [(letter, 0 outer / block inner), ...]."""
    out = []
    for a in lay.plain:
        out.append((a, 0))
        if lay.block(a):
            out.append((a, lay.block(a)))
    return out


def to_layout(x: np.ndarray, name: str | None) -> np.ndarray:
    """A new C-contiguous array holding logical (plain-order) ``x`` in layout ``name``."""
    if is_plain(name):
        return np.ascontiguousarray(x)
    lay = parse(name)
    split = _split(lay)
    shape = []
    for a, d in zip(lay.plain, physical_shape(x.shape, None)):
        shape.extend([d // lay.block(a), lay.block(a)] if lay.block(a) else [d])
    physical_shape(x.shape, name)  # checks rank and divisibility
    return np.ascontiguousarray(x.reshape(shape).transpose([split.index(t) for t in lay.axes]))


def from_layout(y: np.ndarray, name: str | None) -> np.ndarray:
    """The logical (plain-order) array of ``y`` held in layout ``name`` (a new contiguous array)."""
    if is_plain(name):
        return np.ascontiguousarray(y)
    lay = parse(name)
    split = _split(lay)
    if y.ndim != len(lay.axes):
        raise ShapeError(f"an array in layout {name!r} has rank {len(lay.axes)}, got shape {y.shape}")
    t = y.transpose([lay.axes.index(s) for s in split])
    dims = [y.shape[lay.axes.index((a, 0))] * (lay.block(a) or 1) for a in lay.plain]
    return np.ascontiguousarray(t.reshape(dims))


def reorder(x: np.ndarray, src: str, dst: str) -> np.ndarray:
    """``x`` held in layout ``src`` re-laid into ``dst`` (same letters)."""
    s, d = parse(src), parse(dst)
    if s.plain != d.plain:
        raise ShapeError(f"cannot reorder between layouts {src!r} and {dst!r}: different axes")
    if s.is_plain:
        return to_layout(x, dst)
    return to_layout(from_layout(x, src), dst)


def physical_axis(name: str, axis: int) -> int | None:
    """The physical axis holding logical ``axis`` (of the plain order) in layout ``name`` — the
    outer part for a blocked axis; None when ``axis`` is out of range."""
    lay = parse(name)
    if not -len(lay.plain) <= axis < len(lay.plain):
        return None
    return lay.axes.index((lay.plain[axis], 0))


# -- ops that run unchanged in any layout ----------------------------------------------------------
def _concat_axis(attrs: dict, name: str, shapes) -> dict | None:
    """Concat along a logical axis: the same concat along its physical axis (whole blocks only)."""
    rank = len(parse(name).plain)
    axis = attrs["axis"] + rank if attrs["axis"] < 0 else attrs["axis"]
    letter = parse(name).plain[axis] if 0 <= axis < rank else None
    block = parse(name).block(letter) if letter else 0
    if letter is None or (block and any(not isinstance(s[axis], int) or s[axis] % block for s in shapes)):
        return None
    return {**attrs, "axis": physical_axis(name, axis)}


def _same(attrs: dict, name: str, shapes) -> dict:
    return attrs


# op -> how its attributes read in a layout (None: this node cannot run in it). Elementwise ops
# compute the same whatever the order of the elements, provided every full-size operand is laid
# out alike; the layout pass keeps broadcast operands of all-ones shape (scalars) as they are.
LAYOUT_FREE: dict[str, object] = {
    **{op: _same for op in (
        "Relu", "LeakyRelu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Elu", "Selu", "Celu",
        "Gelu", "Softplus", "Softsign", "Mish", "Swish", "Exp", "Log", "Abs", "Neg", "Sqrt", "Reciprocal", "Erf",
        "Floor", "Ceil", "Round", "Sign", "Identity", "Add", "Sub", "Mul", "Div", "Max", "Min", "Sum",
        "Mean", "Pow", "Where", "LayoutReorder")},
    "Concat": _concat_axis,  # axis remapped to the physical one
}


def layout_attrs(op: str, attrs: dict, name: str | None, shapes=()) -> dict | None:
    """``attrs`` of a LAYOUT_FREE node running in layout ``name`` (logical input ``shapes``), or
    None when the node cannot run in it. LayoutReorder's own attributes never change."""
    if is_plain(name) or op == "LayoutReorder":
        return attrs
    rule = LAYOUT_FREE.get(op)
    return rule(attrs, name, shapes) if rule is not None else None


def node_layout(op: str, out_specs, in_specs, attrs: dict, where: str) -> tuple[str, dict]:
    """(layout key to select the node's kernel with, attributes to bind) from the layouts the
    layout pass wrote into the specs: a layout variant is keyed by its first laid-out output (else
    input); a LAYOUT_FREE op runs its default kernel with remapped attributes."""
    specs = [s for s in (*out_specs, *in_specs) if s is not None]
    name = next((s.layout for s in specs if not is_plain(s.layout)), "")
    if not name or op == "LayoutReorder":
        return "", attrs
    if op not in LAYOUT_FREE:
        return name, attrs
    remapped = layout_attrs(op, attrs, name, [s.shape for s in in_specs if s is not None])
    if remapped is None:
        raise ShapeError(f"{where}: cannot run in layout {name!r}")
    return "", remapped
