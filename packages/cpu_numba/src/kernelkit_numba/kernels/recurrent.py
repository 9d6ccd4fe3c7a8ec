"""RNN, GRU and LSTM: core's driver (``kernelkit.ops.rnn.run_rnn``) does the input projection of
all steps in one GEMM; the recurrence runs here, compiled: per step one BLAS GEMM of the hidden
state with R^T (``np.dot``), then one fused loop over (batch, hidden) for the gates, the
``sequence_lens`` masking and the state update. Other activations than the defaults (and Relu
for RNN) are declined: the reference runs those."""
from __future__ import annotations

import numpy as np
from kernelkit.ops.rnn import DEFAULT_ACTIVATIONS, run_rnn
from kernelkit.registry import register_kernel

from .._base import NumbaKernel
from ..config import jit

_OPS = {"RNN": 0, "GRU": 1, "LSTM": 2}


@jit
def _sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


@jit
def _clip(v, c):
    return min(max(v, -c), c) if c > 0 else v


@jit
def _recur(kind, relu, xw, r_t, r_h, rb, p, h0, c0, lens, clip, lbr, couple, y, h, c):
    """kind 0 RNN, 1 GRU, 2 LSTM; xw (seq, batch, G*H) holds X W^T + Wb; r_t is R^T (H, G*H), or
    for GRU without linear_before_reset its z and r columns (H, 2H), r_h then the h columns."""
    seq, batch = xw.shape[0], xw.shape[1]
    hid = h0.shape[1]
    h[:] = h0
    c[:] = c0
    hr = np.empty((batch, hid), xw.dtype)
    for t in range(seq):
        rec = np.dot(h, r_t)
        for b in range(batch):
            live = t < lens[b]
            for j in range(hid):
                if kind == 0:
                    v = _clip(xw[t, b, j] + rec[b, j] + rb[j], clip)
                    hn = max(v, 0.0) if relu else np.tanh(v)
                elif kind == 1:
                    z = _sigmoid(_clip(xw[t, b, j] + rec[b, j] + rb[j], clip))
                    rr = _sigmoid(_clip(xw[t, b, hid + j] + rec[b, hid + j] + rb[hid + j], clip))
                    if lbr:
                        v = xw[t, b, 2 * hid + j] + rr * (rec[b, 2 * hid + j] + rb[2 * hid + j])
                        hn = (1 - z) * np.tanh(_clip(v, clip)) + z * h[b, j]
                    else:
                        hr[b, j] = rr * h[b, j]
                        y[t, b, j] = z  # kept until the reset product's GEMM below
                        continue
                else:
                    ci = c[b, j]
                    i = _sigmoid(_clip(xw[t, b, j] + rec[b, j] + rb[j] + p[j] * ci, clip))
                    if couple:
                        f = 1 - i
                    else:
                        f = _sigmoid(_clip(xw[t, b, 2 * hid + j] + rec[b, 2 * hid + j] + rb[2 * hid + j]
                                           + p[2 * hid + j] * ci, clip))
                    g = np.tanh(_clip(xw[t, b, 3 * hid + j] + rec[b, 3 * hid + j] + rb[3 * hid + j], clip))
                    cn = f * ci + i * g
                    o = _sigmoid(_clip(xw[t, b, hid + j] + rec[b, hid + j] + rb[hid + j] + p[hid + j] * cn,
                                       clip))
                    hn = o * np.tanh(cn)
                    if live:
                        c[b, j] = cn
                y[t, b, j] = hn if live else 0.0
                if live:
                    h[b, j] = hn
        if kind == 1 and lbr == 0:
            hh = np.dot(hr, r_h)  # after r: the reset product
            for b in range(batch):
                live = t < lens[b]
                for j in range(hid):
                    z = y[t, b, j]
                    v = _clip(xw[t, b, 2 * hid + j] + hh[b, j] + rb[2 * hid + j], clip)
                    hn = (1 - z) * np.tanh(v) + z * h[b, j]
                    y[t, b, j] = hn if live else 0.0
                    if live:
                        h[b, j] = hn


def _step(op, xw, r, rb, p, h0, c0, lens, acts, clip, lbr, couple, relu=False):
    y = np.empty(xw.shape[:2] + (h0.shape[1],), xw.dtype)
    h, c = np.empty_like(h0), np.empty_like(c0)
    r_t, r_h = np.ascontiguousarray(r.T), np.zeros((1, 1), xw.dtype)
    if op == "GRU" and not lbr:
        hid = h0.shape[1]
        r_t, r_h = np.ascontiguousarray(r_t[:, :2 * hid]), np.ascontiguousarray(r_t[:, 2 * hid:])
    _recur(_OPS[op], relu, np.ascontiguousarray(xw), r_t, r_h, rb, p, h0, c0,
           lens.astype(np.int64), -1.0 if clip is None else float(clip), int(lbr), int(couple), y, h, c)
    return y, h, (c if op == "LSTM" else None)


def _activations_ok(op):
    def supports(input_specs, attrs) -> bool:
        acts = list(attrs.get("activations") or [])
        n_dir = 2 if attrs.get("direction") == "bidirectional" else 1
        per = DEFAULT_ACTIVATIONS[op]
        allowed = [per * n_dir, []] + ([["Relu"] * n_dir] if op == "RNN" else [])
        return acts in allowed

    return supports


def _kernel(op):
    class Recurrent(NumbaKernel):
        uses_blas = True

        def compute(self, *inputs):
            relu = list(self.attrs.get("activations") or [])[:1] == ["Relu"]

            def step(*args):
                return _step(*args, relu=relu)

            kwargs = {k: v for k, v in self.attrs.items() if k != "output_count"}
            out = run_rnn(op, *inputs, step=step, **kwargs)
            return tuple(o.astype(inputs[0].dtype, copy=False) for o in out)

        def work(self, x, w, *rest):
            return 2.0 * x.size * w.shape[1] * (1 + w.shape[1] / max(x.shape[-1], 1))

    Recurrent.__name__ = Recurrent.__qualname__ = f"{op}Kernel"
    return Recurrent


for _op in _OPS:
    register_kernel(_op, device="cpu", vendor="numba", dtype="float32", supports=_activations_ok(_op))(_kernel(_op))
