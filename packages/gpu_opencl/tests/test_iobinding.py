"""io_binding on the OpenCL device: a pipeline of two models whose tensors stay on the device."""
from __future__ import annotations

import kernelkit as kk
import numpy as np
import pytest
from kernelkit.testing import assert_close
from kernelkit_opencl.buffers import CLTensor


def _linear(name, n_in, n_out, seed, act=""):
    rng = np.random.default_rng(seed)
    g = kk.GraphBuilder(name)
    x = g.input("x", (4, n_in), "float32")
    w = rng.standard_normal((n_out, n_in)).astype(np.float32) * 0.3
    y = g.op("Gemm", x, w, rng.standard_normal(n_out).astype(np.float32), transB=1, activation=act)
    g.output(y)
    return g.build()


def test_two_model_pipeline_stays_on_device(rng):
    first, second = _linear("a", 6, 5, 1, "Relu"), _linear("b", 5, 3, 2)
    opts = {"opencl_tune": False}
    sa = kk.Session(first, device="gpu", fallback=False, options=opts)
    sb = kk.Session(second, device="gpu", fallback=False, options=opts)
    ra, rb = kk.Session(first, device="cpu"), kk.Session(second, device="cpu")
    ba, bb = sa.io_binding(), sb.io_binding()
    ya_name, yb_name = sa.get_outputs()[0].name, sb.get_outputs()[0].name
    kept = []
    for _ in range(4):  # plain, captured, replayed twice
        x = rng.standard_normal((4, 6)).astype(np.float32)
        ba.bind_input("x", x)
        ba.bind_output(ya_name)
        sa.run_with_iobinding(ba)
        (mid,) = ba.get_outputs()
        assert isinstance(mid, CLTensor)
        bb.bind_input("x", mid)
        bb.bind_output(yb_name, on_device=False)
        sb.run_with_iobinding(bb)
        want_mid = ra.run(None, {"x": x})[0]
        want = rb.run(None, {"x": want_mid})[0]
        assert_close(bb.get_outputs()[0], want)
        assert_close(ba.copy_outputs_to_cpu()[0], want_mid)
        kept.append((mid, want_mid))
    for mid, want_mid in kept:  # device outputs are the caller's: later runs never overwrote them
        assert_close(mid.device.download(mid), want_mid)


def test_binding_errors_are_typed(rng):
    sess = kk.Session(_linear("a", 6, 5, 1), device="gpu", fallback=False, options={"opencl_tune": False})
    binding = sess.io_binding()
    with pytest.raises(kk.InputError, match="not an input"):
        binding.bind_input("nope", np.zeros((4, 6), np.float32))
    with pytest.raises(kk.InputError, match="has not run"):
        binding.get_outputs()
    binding.bind_input("x", np.zeros((3, 6), np.float32))
    with pytest.raises(kk.InputError, match="shape"):
        sess.run_with_iobinding(binding)
