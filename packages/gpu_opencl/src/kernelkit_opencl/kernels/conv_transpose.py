"""ConvTranspose (1-D and 2-D, float32) with the fused activation: a direct kernel of conv.cl, one
output element per work-item gathering its inputs. Geometry (pads, auto_pad, output_shape,
output_padding) is resolved by the core's rule, the one definition of it; 3-D declines."""
from __future__ import annotations

import numpy as np
from kernelkit import ShapeError, register_kernel
from kernelkit.geometry import conv_transpose_geometry as _resolve

from ._common import activation as act_source
from ._common import launch_1d, source


def _supports(specs, attrs) -> bool:
    x, w = specs[0], specs[1]
    return x is not None and w is not None and x.rank in (3, 4) and all(isinstance(d, int) for d in w.shape)


def conv_transpose(x, w, b=None, *, auto_pad: str = "NOTSET", dilations=(), group: int = 1, kernel_shape=(),
                   pads=(), strides=(), output_padding=(), output_shape=(), activation: str = "",
                   activation_params=()):
    dev = x.device
    one_d = x.ndim == 3
    xs, ws = (x.shape[:2] + (1,) + x.shape[2:], w.shape[:2] + (1,) + w.shape[2:]) if one_d else (x.shape, w.shape)

    def geometry():
        try:
            geo = _resolve(x.shape[2:], tuple(kernel_shape) or w.shape[2:], strides=strides, dilations=dilations,
                           pads=pads, auto_pad=auto_pad, output_padding=output_padding, output_shape=output_shape)
        except ValueError as exc:
            raise ShapeError(f"ConvTranspose: {exc}") from None
        st, dil, begin, _, out = geo
        if one_d:  # as 2-D with a height of 1
            st, dil, begin, out = [1, *st], [1, *dil], [0, *begin], [1, *out]
        return st, dil, begin, out

    st, dil, begin, out = dev.memo(("convT-geometry", x.shape, w.shape, tuple(kernel_shape), tuple(strides),
                                    tuple(dilations), tuple(pads), auto_pad, tuple(output_padding),
                                    tuple(output_shape)), geometry)
    n, c, H, W = xs
    _, mg, kh, kw = ws
    m = mg * group
    y = dev.empty((n, m, *out[-2:]) if not one_d else (n, m, out[-1]), x.dtype)
    if y.size:
        def make():
            act, defines = act_source(activation, activation_params)
            return dev.kernel(act + source("conv.cl"), "conv_transpose", dict(defines, HAS_BIAS=int(b is not None)))

        kernel = dev.memo(("conv_transpose", activation, tuple(activation_params), b is not None), make)
        g = dev.meta((c, H, W, m, out[0], out[1], kh, kw, st[0], st[1], begin[0], begin[1], dil[0], dil[1],
                      c // group, mg))
        launch_1d(dev, kernel, y.size, (x.buffer, w.buffer, (b if b is not None else y).buffer, y.buffer,
                                        np.int32(y.size), g), [x, w, b], [y], "conv_transpose")
    return y


def register() -> None:
    register_kernel("ConvTranspose", device="gpu", vendor="opencl", dtype="float32", supports=_supports)(conv_transpose)
