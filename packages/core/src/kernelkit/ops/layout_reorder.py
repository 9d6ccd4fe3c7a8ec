"""LayoutReorder: the same tensor re-laid from layout ``src`` to ``dst`` (kernelkit.layout).

Not an ONNX op: the layout pass inserts it where a value's producer and reader want different
layouts. The spec keeps the logical shape and names ``dst``; the array changes shape
(``physical_shape``)."""
from __future__ import annotations

from ..errors import ShapeError
from ..ir import TensorSpec
from ..layout import is_plain, parse, physical_shape, reorder
from ..registry import REQUIRED, register_kernel, register_op
from ._util import random


def _infer(ctx) -> TensorSpec:
    x = ctx.inputs[0]
    src, dst = ctx.attrs["src"], ctx.attrs["dst"]
    try:
        s, d = parse(src), parse(dst)
        if s.plain != d.plain:
            raise ShapeError(f"src {src!r} and dst {dst!r} name different axes")
        if x.rank != len(s.plain):
            raise ShapeError(f"X {x} has rank {x.rank}, layouts {src!r}/{dst!r} are for rank {len(s.plain)}")
        physical_shape(x.shape, dst)  # blocked axes must divide evenly
    except ShapeError as exc:
        raise ctx.error(str(exc)) from None
    if (x.layout or s.plain) != src and not (is_plain(src) and is_plain(x.layout)):
        raise ctx.error(f"X is in layout {x.layout!r}, not src {src!r}")
    return TensorSpec(x.shape, x.dtype, None if is_plain(dst) else dst)


@register_kernel("LayoutReorder", device="cpu", vendor="reference", dtype="*", priority=-100)
def layout_reorder(x, *, src="NCHW", dst):
    return reorder(x, src, dst)


def _samples(rng, dtype):
    for shape, src, dst in [((2, 16, 3, 4), "NCHW", "NHWC"), ((1, 16, 5, 2), "NCHW", "NCHW8c"),
                            ((2, 32, 3, 3), "NCHW", "NCHW16c"), ((16, 8, 3, 3), "OIHW", "HWIO"),
                            ((16, 8, 3, 3), "OIHW", "OIHW8i8o"), ((8, 3, 1, 1), "NCHW", "NCHW")]:
        yield [random(rng, shape, dtype)], {"src": src, "dst": dst}


register_op("LayoutReorder", inputs=["X"], outputs=["Y"],
            attrs={"src": ("string", "NCHW"), "dst": ("string", REQUIRED)}, infer=_infer, samples=_samples,
            doc="X re-laid from layout src to dst; inserted by the layout pass (kernelkit.layout)")
