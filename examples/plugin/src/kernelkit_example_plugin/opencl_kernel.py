"""The OpenCL kernel of ``com.example::ChannelPoly``, built on kernelkit_opencl's device helpers:
``device.kernel`` (program cache, KERNELKIT_DUMP_KERNELS), ``device.upload``/``device.empty``
(pooled buffers) and ``device.launch`` (ordered by events with the session's other kernels)."""
from __future__ import annotations

from pathlib import Path

import kernelkit as kk
import numpy as np

from . import DOMAIN, OP
from .op import bias_values

SOURCE = Path(__file__).with_name("channel_poly.cl").read_text()


@kk.register_kernel(OP, domain=DOMAIN, device="gpu", vendor="opencl", dtype="float32")
class ChannelPolyOpenCL:
    """prepare: build the program and upload the coefficients and bias once; execute: one launch."""

    def prepare(self, input_specs, attrs):
        device = self.context.device
        x = input_specs[0]
        self.axis = attrs["axis"] % x.rank
        self.scale = np.float32(attrs["scale"])
        coefficients = np.asarray(attrs["coefficients"], np.float32)
        bias = bias_values(attrs["bias"]).astype(np.float32) if attrs["bias"] else np.zeros(1, np.float32)
        self.has_bias = bool(attrs["bias"])
        self.coefficients = device.upload(coefficients)
        self.bias = device.upload(bias)
        self.kernel = device.kernel(SOURCE, "channel_poly", {"DEGREE": len(coefficients) - 1,
                                                             "RELU": int(attrs["activation"] == "relu")})

    def execute(self, x):
        device = self.context.device
        channels = x.shape[self.axis] if self.has_bias else 1
        inner = int(np.prod(x.shape[self.axis + 1:], dtype=np.int64))
        y = device.empty(x.shape, x.dtype)
        if x.size:
            device.launch(self.kernel, (x.size,), None,
                          [x.buffer, y.buffer, self.coefficients.buffer, self.bias.buffer, np.int32(channels),
                           np.int32(inner), self.scale, np.int32(x.offset)],
                          inputs=[x, self.coefficients, self.bias], outputs=[y], label="channel_poly")
        return y
