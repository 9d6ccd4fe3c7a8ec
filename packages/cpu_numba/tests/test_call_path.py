"""The two-thread call path's Python, made cheaper without changing what it does (issue 11, session 16, out16; docs/
numba.md, "ResNet-50's time outside the kernels at one and two threads"): conv_serial._same_memory's bounds test
before its addresses (the same answer on every kind of pair of arrays), rnpair's pair writing a bias's address into
its descriptor only when another bias comes (a new bias at the bound call still reaches the halves: the output of a
pair bound with that bias first, bit for bit, before, after and back; fdirect's pairs the one-thread path's too)."""
from __future__ import annotations

import numpy as np
import pytest
from _conv_layers import _at, _kernel, _layer, _one_thread, _out_shape, _pair_of, _ro
from kernelkit.testing import assert_close
from kernelkit_numba.kernels import conv_serial, ftile, pairs, rnpair


def _addresses(a, b) -> bool:
    """_same_memory before session 16 (out16): the shapes and the first bytes' addresses."""
    return a.shape == b.shape and a.__array_interface__["data"][0] == b.__array_interface__["data"][0]


def test_same_memory_as_the_addresses():
    """Every pair of arrays gets the answer of the two addresses: the same array, views at one start (a view, a
    reshape of another shape, a transpose: same start, other strides), overlapping views at other starts, disjoint
    buffers, empty arrays at one start and at two."""
    base = np.zeros(3 * 32 * 6 * 6, np.float32)
    a = base[: 32 * 36].reshape(1, 32, 6, 6)
    flat = base[: 32 * 36]
    cases = [
        (a, a), (a, a[:]), (a, base[: 32 * 36].reshape(1, 32, 6, 6)), (a, _ro(a.copy())), (a, np.zeros_like(a)),
        (a, base[1:1 + a.size].reshape(a.shape)), (a, base[36:36 + a.size].reshape(a.shape)),
        (a, flat.reshape(32, 36)), (a[0, :6, :, :], a[0, :6, :, :].transpose(0, 2, 1)),
        (a[0, :6], a[0, :6].transpose(0, 2, 1)), (base[:0], base[:0]), (base[:0], base[5:5]),
        (base[:0].reshape(0, 3), base[:0].reshape(0, 3)), (a, base[a.size:2 * a.size].reshape(a.shape)),
    ]
    seen = set()
    for x, y in cases:
        for p, q in ((x, y), (y, x)):
            got, want = conv_serial._same_memory(p, q), _addresses(p, q)
            assert got == want, (p.shape, q.shape, p.__array_interface__["data"], q.__array_interface__["data"])
            seen.add(want)
    assert seen == {True, False}


@pytest.mark.skipif(not pairs.X86, reason="pairs need x86-64 (pause, the cycle counter)")
@pytest.mark.skipif(ftile.choice()[0] != rnpair.KIND or not rnpair.enabled(),
                    reason="the pairs run on the AVX-512 tiles")
@pytest.mark.parametrize("case", [
    ((1, 64, 7, 7), (64, 64, 3, 3), {"pads": [1, 1, 1, 1], "activation": "Relu"}, True, rnpair.OP_DIRECT),
    ((1, 33, 28, 28), (80, 33, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}, False, rnpair.OP_DIRECT),
    ((1, 64, 14, 14), (64, 64, 3, 3), {"pads": [1, 1, 1, 1]}, True, None),
], ids=["direct-7x7-z", "direct-s2", "wino-14"])
def test_a_new_bias_reaches_the_pair(case, quiet_server):
    """rnpair.Pair.__call__ writes the bias's address when the bound call hands it another bias (a new one taken up by
    _Constants): a bound two-thread call (the helper 'spinning' but never coming: the caller takes both halves)
    equals, bit for bit, a pair bound with each bias first, with the first bias, a second (other values, the same
    weight) and the first again; the descriptor then holds the bias the call was handed."""
    xs, ws, attrs, res, op = case
    inputs, shape, one = _one_thread(case, 3)
    srv = quiet_server
    srv.ctl[pairs.AWAKE] = 1
    b2 = _ro(_layer(case, 4)[2])
    other = [inputs[0], inputs[1], b2] + inputs[3:]
    one2 = _at(1, _kernel(xs, ws, attrs, 1, res).compute, other, _out_shape(xs, ws, attrs))
    # each bias's output from a pair bound with it first (its address written at its first call)
    want = _at(2, conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res)), inputs, shape)
    want2 = _at(2, conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res)), other, shape)
    if op == rnpair.OP_DIRECT:  # (fdirect's halves: the one-thread path's driver and cut, bit for bit)
        np.testing.assert_array_equal(want, one)
        np.testing.assert_array_equal(want2, one2)
    else:  # (the Winograd pair's halves: another cut of the transforms than one thread's)
        assert_close(want, one, np.float32)
        assert_close(want2, one2, np.float32)
    assert not np.array_equal(want, want2)
    fn = conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res))
    pair = _pair_of(fn)
    assert pair is not None
    for args, expect in ((inputs, want), (other, want2), (inputs, want), (inputs, want)):
        alone = srv.stats["alone"]
        np.testing.assert_array_equal(_at(2, fn, args, shape), expect)
        assert srv.stats["alone"] == alone + 1  # (the pair's path: both halves on the caller)
        assert pair.desc[rnpair.BIAS] == pair.bias.ctypes.data
        np.testing.assert_array_equal(pair.bias, args[2])
