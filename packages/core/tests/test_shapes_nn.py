"""Shape rules of the neural-network ops: symbolic batch dims stay symbolic, static dims are exact,
unknown sizes become fresh symbols; FLOP counts for Conv, ConvTranspose, Gemm and MatMul."""
from __future__ import annotations

import numpy as np
import pytest
from kernelkit import GraphBuilder, ShapeError, get_schema
from kernelkit.ir import Node, TensorSpec
from kernelkit.registry import normalize_attrs
from kernelkit.shape import InferContext


def out_spec(op, inputs, outputs=None, **attrs):
    """Infer through GraphBuilder: ``inputs`` are (shape, dtype) pairs (graph inputs), arrays
    (constants) or None."""
    g = GraphBuilder("t")
    args = []
    for i, x in enumerate(inputs):
        if x is None or isinstance(x, np.ndarray):
            args.append(None if x is None else g.constant(x))
        else:
            args.append(g.input(f"x{i}", x[0], x[1] if len(x) > 1 else "float32"))
    out = g.op(op, *args, outputs=outputs, **attrs)
    return [v.spec for v in out] if isinstance(out, tuple) else out.spec


def f(*shape):
    return (shape, "float32")


def sym(d):
    return isinstance(d, str)


N = "N"
SHAPES = [
    ("Conv", [f(N, 3, 32, 32), np.zeros((8, 3, 3, 3), np.float32)], {"pads": [1, 1, 1, 1], "strides": [2, 2]},
     (N, 8, 16, 16)),
    ("Conv", [f(N, 4, 10), np.zeros((6, 2, 3), np.float32)], {"group": 2, "dilations": [2]}, (N, 6, 6)),
    ("Conv", [f(N, 3, 7, 9), np.zeros((4, 3, 3, 3), np.float32)], {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
     (N, 4, 4, 5)),
    ("Conv", [f(N, 2, 5, 5, 5), np.zeros((2, 2, 3, 3, 3), np.float32)], {"auto_pad": "VALID"}, (N, 2, 3, 3, 3)),
    ("ConvTranspose", [f(N, 4, 5, 5), np.zeros((4, 3, 3, 3), np.float32)], {"strides": [2, 2], "pads": [1, 1, 1, 1],
     "output_padding": [1, 1]}, (N, 3, 10, 10)),
    ("ConvTranspose", [f(N, 4, 5, 6), np.zeros((4, 1, 3, 3), np.float32)], {"group": 4, "strides": [2, 2],
     "output_shape": [10, 13]}, (N, 4, 10, 13)),
    ("ConvTranspose", [f(N, 2, 5), np.zeros((2, 2, 4), np.float32)], {"strides": [3], "auto_pad": "SAME_LOWER"},
     (N, 2, 15)),
    ("Gemm", [f(N, 16), np.zeros((10, 16), np.float32), np.zeros(10, np.float32)], {"transB": 1}, (N, 10)),
    ("MatMul", [f(N, 7, 16), np.zeros((16, 4), np.float32)], {}, (N, 7, 4)),
    ("MatMul", [f(N, 1, 7, 16), f(3, 16, 2)], {}, (N, 3, 7, 2)),
    ("MatMul", [f(16), f(N, 16, 2)], {}, (N, 2)),
    ("MatMul", [f(N, 4, 16), f(16)], {}, (N, 4)),
    ("BatchNormalization", [f(N, 3, 8, 8)] + [np.ones(3, np.float32)] * 4, {}, (N, 3, 8, 8)),
    ("InstanceNormalization", [f(N, 3, 8), np.ones(3, np.float32), np.ones(3, np.float32)], {}, (N, 3, 8)),
    ("LayerNormalization", [f(N, 5, 8), np.ones(8, np.float32)], {}, (N, 5, 8)),
    ("LRN", [f(N, 5, 4, 4)], {"size": 3}, (N, 5, 4, 4)),
    ("PRelu", [f(N, 3, 4, 4), np.ones((3, 1, 1), np.float32)], {}, (N, 3, 4, 4)),
    ("Clip", [f(N, 3), np.array(0, np.float32), np.array(1, np.float32)], {}, (N, 3)),
    ("MaxPool", [f(N, 3, 32, 32)], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
     (N, 3, 16, 16)),
    ("MaxPool", [f(N, 3, 7, 8)], {"kernel_shape": [2, 3], "strides": [2, 3], "ceil_mode": 1}, (N, 3, 4, 3)),
    ("AveragePool", [f(N, 3, 8, 9)], {"kernel_shape": [2, 2], "strides": [2, 2], "auto_pad": "SAME_LOWER"},
     (N, 3, 4, 5)),
    ("AveragePool", [f(N, 2, 9)], {"kernel_shape": [3], "dilations": [2]}, (N, 2, 5)),
    ("GlobalAveragePool", [f(N, 8, 7, 7)], {}, (N, 8, 1, 1)),
    ("GlobalMaxPool", [f(N, 8, 7)], {}, (N, 8, 1)),
    ("Softmax", [f(N, 10)], {}, (N, 10)),
    ("LogSoftmax", [f(N, 10, 3)], {"axis": 1}, (N, 10, 3)),
    ("Resize", [f(N, 3, 8, 8), None, np.array([1, 1, 2, 0.5], np.float32)], {}, (N, 3, 16, 4)),
    ("Resize", [f(N, 3, 8, 8), None, None, np.array([5, 6], np.int64)], {"axes": [2, 3]}, (N, 3, 5, 6)),
    ("Pad", [f(N, 3, 4), np.array([1, 2, 0, 1], np.int64), None, np.array([1, 2], np.int64)], {}, (N, 4, 7)),
    ("Pad", [f(N, 3), np.array([0, 1, 0, -1], np.int64)], {"mode": "edge"}, (N, 3)),
    ("Dropout", [f(N, 3)], {}, (N, 3)),
    ("DepthToSpace", [f(N, 8, 3, 4)], {"blocksize": 2}, (N, 2, 6, 8)),
    ("SpaceToDepth", [f(N, 2, 6, 8)], {"blocksize": 2}, (N, 8, 3, 4)),
]


@pytest.mark.parametrize("op, inputs, attrs, shape", SHAPES, ids=[f"{s[0]}-{i}" for i, s in enumerate(SHAPES)])
def test_symbolic_batch_stays_symbolic(op, inputs, attrs, shape):
    spec = out_spec(op, inputs, **attrs)
    assert spec.shape == shape
    assert spec.dtype == "float32"


def test_unknown_spatial_sizes_become_fresh_symbols():
    spec = out_spec("Conv", [f(N, 3, "H", "W"), np.zeros((4, 3, 3, 3), np.float32)], pads=[1, 1, 1, 1])
    assert spec.shape[:2] == (N, 4) and all(sym(d) for d in spec.shape[2:]) and spec.shape[2] != spec.shape[3]
    spec = out_spec("MaxPool", [f(N, 3, "H", 8)], kernel_shape=[2, 2], strides=[2, 2])
    assert spec.shape[:2] == (N, 3) and sym(spec.shape[2]) and spec.shape[3] == 4
    spec = out_spec("ConvTranspose", [f(N, 3, "H", 4), np.zeros((3, 2, 3, 3), np.float32)], strides=[2, 2])
    assert spec.shape[:2] == (N, 2) and sym(spec.shape[2]) and spec.shape[3] == 9
    # parameters only known at run time: the affected axes become symbols
    spec = out_spec("Resize", [f(N, 3, 8, 8), None, f(4)])
    assert all(sym(d) for d in spec.shape)
    spec = out_spec("Resize", [f(1, 3, 8, 8), None, f(2)], axes=[2, 3])
    assert spec.shape[:2] == (1, 3) and all(sym(d) for d in spec.shape[2:])
    spec = out_spec("Pad", [f(N, 3), ((4,), "int64")])
    assert spec.rank == 2 and all(sym(d) for d in spec.shape)


def test_multi_output_specs():
    y, idx = out_spec("MaxPool", [f(N, 2, 6, 6)], outputs=2, kernel_shape=[2, 2], strides=[2, 2])
    assert y == TensorSpec((N, 2, 3, 3), "float32") and idx == TensorSpec((N, 2, 3, 3), "int64")
    y, mean, inv = out_spec("LayerNormalization", [f(N, 5, 8), np.ones((5, 8), np.float32)], outputs=3, axis=1)
    assert y.shape == (N, 5, 8) and mean.shape == inv.shape == (N, 1, 1)
    out, mask = out_spec("Dropout", [f(N, 4)], outputs=2)
    assert mask == TensorSpec((N, 4), "bool")


@pytest.mark.parametrize("op, inputs, attrs, message", [
    ("Conv", [f(N, 4, 8, 8), np.zeros((4, 3, 3, 3), np.float32)], {}, "channels"),
    ("Conv", [f(N, 3, 8, 8), np.zeros((4, 3, 3, 3), np.float32)], {"kernel_shape": [2, 2]}, "kernel_shape"),
    ("Conv", [f(N, 3, 8, 8), np.zeros((4, 3, 3, 3), np.float32), np.zeros(3, np.float32)], {}, "B"),
    ("Conv", [f(N, 3, 8, 8), np.zeros((4, 3, 3, 3), np.float64)], {}, "dtype"),
    ("MaxPool", [f(N, 3, 8)], {"kernel_shape": [2, 2]}, "spatial"),
    ("MaxPool", [f(N, 3, 8, 8)], {"kernel_shape": [2, 2], "pads": [-1, 0, 0, 0]}, "pads"),
    ("ConvTranspose", [f(N, 3, 8), np.zeros((3, 2, 3), np.float32)], {"output_padding": [3], "strides": [2]},
     "output_padding"),
    ("Gemm", [f(N, 4), np.zeros((4, 5), np.float32), np.zeros(4, np.float32)], {}, "broadcast"),
    ("MatMul", [f(N, 4), ((4, 3), "float64")], {}, "dtype"),
    ("LayerNormalization", [f(N, 8), np.ones(7, np.float32)], {}, "broadcast"),
    ("InstanceNormalization", [f(N, 3, 4), np.ones(2, np.float32), np.ones(2, np.float32)], {}, "scale"),
    ("Clip", [f(N, 3), np.zeros(2, np.float32)], {}, "scalar"),
    ("Resize", [f(1, 3, 8, 8), None, np.ones(4, np.float32), np.ones(4, np.int64)], {}, "exactly one"),
    ("Resize", [f(1, 3, 8, 8), None, np.ones(3, np.float32)], {}, "one value per axis"),
    ("Pad", [f(N, 3), np.array([1, 1, 1], np.int64)], {}, "pads"),
    ("Pad", [f(N, 3), np.array([1, 1], np.int64), None, np.array([1, 1], np.int64)], {}, "distinct"),
    ("SpaceToDepth", [f(N, 3, 5, 4)], {"blocksize": 2}, "multiples"),
    ("DepthToSpace", [f(N, 8, 3, 4)], {"blocksize": 2, "mode": "XYZ"}, "mode"),
    ("LRN", [f(N, 3, 4, 4)], {"size": 0}, "size"),
])
def test_shape_errors_name_the_node(op, inputs, attrs, message):
    with pytest.raises(ShapeError, match=f"{op}_0.*{message}"):
        out_spec(op, inputs, **attrs)


def flops(op, specs, attrs, constants=()):
    schema = get_schema(op)
    node = Node(op, [f"i{i}" for i in range(len(specs))], ["y"], attrs, "n")
    ctx = InferContext(node, specs, normalize_attrs(schema, attrs, "n"), list(constants))
    return schema.flops(ctx)


def test_flops():
    x, w = TensorSpec((1, 3, 32, 32), "float32"), TensorSpec((8, 3, 3, 3), "float32")
    assert flops("Conv", [x, w, None], {"pads": [1, 1, 1, 1]}) == 2 * 8 * 32 * 32 * 3 * 9
    x, w = TensorSpec((2, 8, 16, 16), "float32"), TensorSpec((8, 2, 3, 3), "float32")
    assert flops("Conv", [x, w], {"group": 4, "strides": [2, 2], "pads": [1, 1, 1, 1]}) == 2 * 2 * 8 * 64 * 2 * 9
    assert flops("Conv", [TensorSpec(("N", 3, 32, 32), "float32"), TensorSpec((8, 3, 3, 3), "float32")], {}) is None
    x, w = TensorSpec((1, 4, 5, 5), "float32"), TensorSpec((4, 3, 3, 3), "float32")
    assert flops("ConvTranspose", [x, w], {"strides": [2, 2]}) == 2 * 4 * 25 * 3 * 9
    a, b = TensorSpec((6, 4), "float32"), TensorSpec((5, 4), "float32")
    assert flops("Gemm", [a, b], {"transB": 1}) == 2 * 6 * 4 * 5
    a, b = TensorSpec((3, 1, 6, 4), "float32"), TensorSpec((2, 4, 5), "float32")
    assert flops("MatMul", [a, b], {}) == 2 * 3 * 2 * 6 * 4 * 5
    assert flops("MatMul", [TensorSpec(("N", 6, 4), "float32"), TensorSpec((4, 5), "float32")], {}) is None
    for op in ("Conv", "ConvTranspose", "Gemm", "MatMul"):
        assert "activation" in get_schema(op).attrs and "activation_params" in get_schema(op).attrs
