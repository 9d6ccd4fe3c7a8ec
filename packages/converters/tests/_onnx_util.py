"""Small helpers shared by the converter tests: one-node ONNX models and two runners."""
from __future__ import annotations

import kernelkit
import numpy as np
import onnx
import onnxruntime as ort
from kernelkit_converters.onnx import convert
from onnx import TensorProto, helper, numpy_helper


def value_info(name: str, array_or_dtype, shape=None):
    if isinstance(array_or_dtype, np.ndarray):
        dtype, shape = array_or_dtype.dtype, array_or_dtype.shape if shape is None else shape
    else:
        dtype = np.dtype(array_or_dtype)
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(dtype), shape)


def node_model(op: str, feeds: dict, outputs, *, opset: int, initializers: dict | None = None,
               domain: str = "", extra_opsets=(), input_shapes: dict | None = None, **attrs) -> onnx.ModelProto:
    """A model with one node reading ``feeds`` (graph inputs) then ``initializers`` (constants);
    an initializer named "" is an absent optional input."""
    initializers = initializers or {}
    names = list(feeds) + list(initializers)
    node = helper.make_node(op, names, list(outputs), domain=domain, **attrs)
    inputs = [value_info(n, a, (input_shapes or {}).get(n)) for n, a in feeds.items()]
    outs = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs]
    inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in initializers.items() if n]
    graph = helper.make_graph([node], f"{op}_test", inputs, outs, inits)
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    if not domain:  # give the outputs their types, as exporters do
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        del model.graph.output[:]
        model.graph.output.extend(inferred.graph.output)
    return model


def run_kernelkit(model: onnx.ModelProto, feeds: dict, **session_kwargs) -> list[np.ndarray]:
    return kernelkit.Session(convert(model.SerializeToString()), **session_kwargs).run(None, feeds)


def run_ort(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)
