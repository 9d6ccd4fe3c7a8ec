"""Recurrent layers: RNN, GRU, LSTM (ONNX opset 14+ form, ``layout`` 0 or 1).

The input projection of every step is one GEMM up front; the recurrence then runs step by step
(one GEMM of the hidden state per step). Gate orders are ONNX's: LSTM i, o, f, c; GRU z, r, h.
Batch entries shorter than the sequence (``sequence_lens``) stop updating their state and get
zeros in Y past their end; the reverse direction runs over each entry's valid steps only.
"""
from __future__ import annotations

import numpy as np

from ..dtypes import FLOAT_TYPES
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ..shape import InferContext
from ._util import random


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


# name: (fn(x, alpha, beta), number of parameters it takes, default alpha, default beta)
ACTIVATIONS = {
    "Sigmoid": (lambda x, a, b: _sigmoid(x), 0, None, None),
    "Tanh": (lambda x, a, b: np.tanh(x), 0, None, None),
    "Relu": (lambda x, a, b: np.maximum(x, 0), 0, None, None),
    "Affine": (lambda x, a, b: a * x + b, 2, 1.0, 0.0),
    "LeakyRelu": (lambda x, a, b: np.where(x >= 0, x, a * x), 1, 0.01, None),
    "ThresholdedRelu": (lambda x, a, b: np.where(x > a, x, 0), 1, 1.0, None),
    "ScaledTanh": (lambda x, a, b: a * np.tanh(b * x), 2, 1.0, 1.0),
    "HardSigmoid": (lambda x, a, b: np.clip(a * x + b, 0, 1), 2, 0.2, 0.5),
    "Elu": (lambda x, a, b: np.where(x >= 0, x, a * np.expm1(x)), 1, 1.0, None),
    "Softsign": (lambda x, a, b: x / (1 + np.abs(x)), 0, None, None),
    "Softplus": (lambda x, a, b: np.logaddexp(x, 0), 0, None, None),
}
DEFAULT_ACTIVATIONS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def activation_functions(op, activations, alphas, betas, n_dir):
    """The activation callables per direction: a list of n_dir lists (ONNX gives them flat)."""
    names = list(activations) or DEFAULT_ACTIVATIONS[op] * n_dir
    per_dir = len(DEFAULT_ACTIVATIONS[op])
    if len(names) == per_dir and n_dir == 2 and activations:
        names = names * 2
    if len(names) != per_dir * n_dir:
        raise ValueError(f"{op} takes {per_dir} activations per direction, got {list(activations)}")
    alphas, betas = list(alphas or []), list(betas or [])
    fns = []
    for name in names:
        if name not in ACTIVATIONS:
            raise ValueError(f"activation {name!r} is not supported (known: {', '.join(ACTIVATIONS)})")
        fn, n_params, a, b = ACTIVATIONS[name]
        if n_params >= 1 and alphas:
            a = alphas.pop(0)
        if n_params >= 2 and betas:
            b = betas.pop(0)
        fns.append(lambda x, fn=fn, a=a, b=b: fn(x, a, b))
    return [fns[i * per_dir:(i + 1) * per_dir] for i in range(n_dir)]


def _reverse_valid(x, lens):
    """Each batch entry's first lens[b] steps reversed (time axis 0, batch axis 1)."""
    out = x.copy()
    for b, n in enumerate(lens):
        out[:n, b] = x[:n, b][::-1]
    return out


def _cell_step(op, gates, h, c, r, rb, p, acts, clip, linear_before_reset, input_forget):
    """One step: ``gates`` holds X_t W^T + Wb (batch, G*H); returns (h, c)."""
    hidden = h.shape[-1]
    if op == "GRU":
        rec = h @ r[:2 * hidden].T + rb[:2 * hidden]
        zr = gates[:, :2 * hidden] + rec
        if clip is not None:
            zr = np.clip(zr, -clip, clip)
        z, rr = acts[0](zr[:, :hidden]), acts[0](zr[:, hidden:])
        if linear_before_reset:
            hh = gates[:, 2 * hidden:] + rr * (h @ r[2 * hidden:].T + rb[2 * hidden:])
        else:
            hh = gates[:, 2 * hidden:] + (rr * h) @ r[2 * hidden:].T + rb[2 * hidden:]
        if clip is not None:
            hh = np.clip(hh, -clip, clip)
        return (1 - z) * acts[1](hh) + z * h, None
    g = gates + h @ r.T + rb
    if op == "RNN":
        return acts[0](np.clip(g, -clip, clip) if clip is not None else g), None
    gi, go, gf, gc = (g[:, k * hidden:(k + 1) * hidden] for k in range(4))
    pi, po, pf = (p[k * hidden:(k + 1) * hidden] for k in range(3))
    cl = (lambda v: np.clip(v, -clip, clip)) if clip is not None else (lambda v: v)
    i = acts[0](cl(gi + pi * c))
    f = 1 - i if input_forget else acts[0](cl(gf + pf * c))
    c_new = f * c + i * acts[1](cl(gc))
    o = acts[0](cl(go + po * c_new))
    return o * acts[2](c_new), c_new


def run_rnn(op, x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None, *,
            activation_alpha=None, activation_beta=None, activations=None, clip=None, direction="forward",
            hidden_size=None, layout=0, linear_before_reset=0, input_forget=0, step=None):
    """The shared driver. ``step`` replaces ``_cell_step`` (an accelerated recurrence) when given:
    step(op, xw (seq, batch, G*H), r, rb, p, h0, c0, lens, acts, clip, lbr, input_forget) -> (Y, h, c)."""
    ct = np.float32 if x.dtype == np.float16 else x.dtype
    if layout:
        x = np.swapaxes(x, 0, 1)
        initial_h = None if initial_h is None else np.swapaxes(initial_h, 0, 1)
        initial_c = None if initial_c is None else np.swapaxes(initial_c, 0, 1)
    x, w, r = x.astype(ct), w.astype(ct), r.astype(ct)
    seq, batch, _ = x.shape
    n_dir, hidden = w.shape[0], r.shape[-1]
    if direction not in ("forward", "reverse", "bidirectional") or n_dir != (2 if direction == "bidirectional" else 1):
        raise ValueError(f"direction {direction!r} does not match W's {n_dir} directions")
    g = GATES[op]
    b = np.zeros((n_dir, 2 * g * hidden), ct) if b is None else b.astype(ct)
    lens = np.full(batch, seq, np.int64) if sequence_lens is None else np.asarray(sequence_lens, np.int64)
    if np.any(lens < 0) or np.any(lens > seq):
        raise ValueError(f"sequence_lens {lens.tolist()} out of range for {seq} steps")
    h0 = np.zeros((n_dir, batch, hidden), ct) if initial_h is None else initial_h.astype(ct)
    c0 = np.zeros((n_dir, batch, hidden), ct) if initial_c is None else initial_c.astype(ct)
    pp = np.zeros((n_dir, 3 * hidden), ct) if p is None else p.astype(ct)
    acts = activation_functions(op, activations or [], activation_alpha, activation_beta, n_dir)
    y = np.zeros((seq, n_dir, batch, hidden), ct)
    y_h, y_c = np.empty_like(h0), np.empty_like(c0)
    for d in range(n_dir):
        reverse = direction == "reverse" or d == 1
        xd = _reverse_valid(x, lens) if reverse else x
        xw = (xd.reshape(seq * batch, -1) @ w[d].T + b[d, :g * hidden]).reshape(seq, batch, -1)
        rb = b[d, g * hidden:]
        if step is not None:
            yd, h, c = step(op, xw, r[d], rb, pp[d], h0[d], c0[d], lens, acts[d], clip,
                            linear_before_reset, input_forget)
        else:
            h, c = h0[d].copy(), c0[d].copy()
            yd = np.zeros((seq, batch, hidden), ct)
            for t in range(seq):
                h_new, c_new = _cell_step(op, xw[t], h, c, r[d], rb, pp[d], acts[d], clip,
                                          linear_before_reset, input_forget)
                live = (t < lens)[:, None]
                h = np.where(live, h_new, h)
                if c_new is not None:
                    c = np.where(live, c_new, c)
                yd[t] = np.where(live, h_new, 0)
        y[:, d] = _reverse_valid(yd, lens) if reverse else yd
        y_h[d], y_c[d] = h, c
    if layout:
        y, y_h, y_c = np.transpose(y, (2, 0, 1, 3)), np.swapaxes(y_h, 0, 1), np.swapaxes(y_c, 0, 1)
    return tuple(np.ascontiguousarray(o) for o in (y, y_h, y_c)[:3 if op == "LSTM" else 2])


def _make_kernel(op):
    def kernel(*inputs, **attrs):
        out = run_rnn(op, *inputs, **attrs)
        return tuple(o.astype(inputs[0].dtype, copy=False) for o in out)

    kernel.__name__ = op.lower()
    return kernel


def _rule_for(op):
    def rule(ctx: InferContext) -> list[TensorSpec]:
        x, w = ctx.inputs[0], ctx.inputs[1]
        if x.rank != 3 or w.rank != 3:
            raise ctx.error(f"X and W must be 3-D, got {x} and {w}")
        n_dir, hidden = w.shape[0], ctx.attrs["hidden_size"]
        if hidden is None:
            hidden = ctx.inputs[2].shape[-1]
        direction = ctx.attrs["direction"]
        if direction not in ("forward", "reverse", "bidirectional"):
            raise ctx.error(f"direction must be forward, reverse or bidirectional, got {direction!r}")
        if isinstance(n_dir, int) and n_dir != (2 if direction == "bidirectional" else 1):
            raise ctx.error(f"W has {n_dir} directions, direction is {direction!r}")
        if ctx.attrs["layout"]:
            batch, seq = x.shape[:2]
            y, h = TensorSpec((batch, seq, n_dir, hidden), x.dtype), TensorSpec((batch, n_dir, hidden), x.dtype)
        else:
            seq, batch = x.shape[:2]
            y, h = TensorSpec((seq, n_dir, batch, hidden), x.dtype), TensorSpec((n_dir, batch, hidden), x.dtype)
        return [y, h, h] if op == "LSTM" else [y, h]

    return rule


def _samples_for(op):
    def samples(rng, dtype):
        g, hidden, inp = GATES[op], 4, 3
        for direction, n_dir, layout in (("forward", 1, 0), ("bidirectional", 2, 0), ("reverse", 1, 1)):
            seq, batch = 5, 2
            x = random(rng, (batch, seq, inp) if layout else (seq, batch, inp), dtype, -1, 1)
            w = random(rng, (n_dir, g * hidden, inp), dtype, -0.5, 0.5)
            r = random(rng, (n_dir, g * hidden, hidden), dtype, -0.5, 0.5)
            b = random(rng, (n_dir, 2 * g * hidden), dtype, -0.5, 0.5)
            lens = np.array([5, 3], np.int32)
            attrs = {"hidden_size": hidden, "direction": direction, "layout": layout}
            yield [x, w, r, b, lens], attrs
        yield [x, w, r], {"hidden_size": hidden, "direction": "reverse", "layout": 1}

    return samples


_COMMON = {"activation_alpha": ("floats", None), "activation_beta": ("floats", None),
           "activations": ("strings", None), "clip": ("float", None), "direction": ("string", "forward"),
           "hidden_size": ("int", None), "layout": ("int", 0)}
_PORTS = ["X", "W", "R", "B?", "sequence_lens?", "initial_h?"]
register_op("RNN", inputs=_PORTS, outputs=["Y?", "Y_h?"], attrs=_COMMON, infer=_rule_for("RNN"),
            samples=_samples_for("RNN"))
register_op("GRU", inputs=_PORTS, outputs=["Y?", "Y_h?"], attrs={**_COMMON, "linear_before_reset": ("int", 0)},
            infer=_rule_for("GRU"), samples=_samples_for("GRU"))
register_op("LSTM", inputs=_PORTS + ["initial_c?", "P?"], outputs=["Y?", "Y_h?", "Y_c?"],
            attrs={**_COMMON, "input_forget": ("int", 0)}, infer=_rule_for("LSTM"), samples=_samples_for("LSTM"))
for _op in GATES:
    register_kernel(_op, device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100)(_make_kernel(_op))
