"""The class kernel behind every custom layer, and its registration.

``prepare`` builds the program for the node's input shapes (through the device's program cache, so
``KERNELKIT_DUMP_KERNELS`` and the disk cache apply), ``resize`` rebuilds it for new shapes (a
cache hit when seen before), ``execute`` launches it on the session's queue after its inputs'
events and returns output tensors carrying the launch's event, so custom and built-in kernels are
ordered by events alone. Tensors bound with a format other than BFYX are reordered on the device
before (inputs) and after (outputs) the user's kernel.
"""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
from kernelkit.errors import KernelBuildError, KernelExecutionError, KernelkitError, UnsupportedOpError, brief
from kernelkit.ir import TensorSpec
from kernelkit.limits import checked_count
from kernelkit.registry import get_schema, register_kernel
from kernelkit.shape import infer_node

from .config import LayerConfig, config_error
from .formula import FormulaError
from .jit import bfyx, pitches, program_source

log = logging.getLogger("kernelkit.opencl.custom")

_REORDER = (Path(__file__).with_name("reorder.cl")).read_text()
MAX_WORK_DIM = (1 << 31) - 1  # work items per dimension (the runtime's element limit)
MAX_WORK_ITEMS = 1 << 40  # work items in all
_ATTR_KINDS = {"int": ("int",), "float": ("float", "int"), "int[]": ("ints",), "float[]": ("floats", "ints")}


def _work_size(formulas, dims, layer: LayerConfig, where: str) -> tuple[int, ...]:
    env = dict(zip("BFYX", dims))
    try:
        sizes = tuple(f.evaluate(env) for f in formulas)
    except FormulaError as exc:
        raise KernelBuildError(f"{where}: work size of {layer.where} for B,F,Y,X={dims}: {exc}") from None
    if any(s <= 0 for s in sizes):
        raise KernelBuildError(f"{where}: work size {sizes} from {layer.where} is not positive for "
                               f"B,F,Y,X={dims}")
    if any(s > MAX_WORK_DIM for s in sizes) or checked_count(sizes, MAX_WORK_ITEMS) is None:
        raise KernelBuildError(f"{where}: work size {brief(sizes)} from {layer.where} is too large for "
                               f"B,F,Y,X={dims} (at most {MAX_WORK_DIM} per dimension, {MAX_WORK_ITEMS} in all)")
    return sizes


def _make_kernel_class(layer: LayerConfig, data_inputs: dict[str, int]) -> type:
    class CustomLayerKernel:
        """A config-driven OpenCL kernel (see kernelkit_opencl.custom_layers)."""

        config = layer

        def prepare(self, input_specs, attrs):
            self._attrs = dict(attrs)
            self._variants: dict[tuple, tuple] = {}
            self._where = f"node {self.context.node.name!r} ({layer.op_id}, custom layer {layer.where})"
            if not hasattr(self.context.device, "launch"):
                raise KernelBuildError(f"{self._where}: custom OpenCL layers run on the 'gpu' device only")
            self.resize(input_specs)

        def resize(self, input_specs):
            shapes = tuple((tuple(s.shape), s.dtype) if s is not None else None for s in input_specs)
            if all(s is None or all(isinstance(d, int) for d in s[0]) for s in shapes):
                self._variant(shapes, (0,) * len(shapes))  # build now: errors surface at session build

        def _variant(self, shapes, offsets):
            key = (shapes, offsets)
            hit = self._variants.get(key)
            if hit is not None:
                return hit
            node, device = self.context.node, self.context.device
            specs = [TensorSpec(s[0], s[1]) if s is not None else None for s in shapes]
            outs = infer_node(node, specs, [None] * len(specs))
            if not all(o.is_static for o in outs):
                raise KernelBuildError(f"{self._where}: output shapes {[o.shape for o in outs]} do not follow from "
                                       f"the input shapes alone, which custom OpenCL layers need")
            ins = []
            for b in layer.tensors("input"):
                if b.port >= len(shapes) or shapes[b.port] is None:
                    raise KernelExecutionError(f"{self._where}: input port {b.port} ({b.where}) is absent")
                ins.append((b.port, bfyx(shapes[b.port][0], self._where), shapes[b.port][1], b.format))
            outputs = []
            for b in layer.tensors("output"):
                if b.port >= len(outs):
                    raise KernelBuildError(f"{self._where}: output port {b.port} ({b.where}) does not exist")
                outputs.append((b.port, bfyx(outs[b.port].shape, self._where), outs[b.port].dtype, b.format))
            dims = outputs[0][1]
            gws = _work_size(layer.global_ws, dims, layer, self._where)
            lws = _work_size(layer.local_ws, dims, layer, self._where) if layer.local_ws else ()
            source = program_source(layer, node.name, ins, outputs, self._attrs, gws, lws)
            for i, off in enumerate(offsets):
                if off:
                    source = source.replace(f"#define INPUT{i}_OFFSET 0\n", f"#define INPUT{i}_OFFSET {off}\n", 1)
            try:
                kernel = device.kernel(source, layer.entry, None, tuple(layer.compiler_options))
            except KernelBuildError as exc:
                from . import forget_layer

                forget_layer(layer)  # later sessions that never named this config must not pick it
                raise KernelBuildError(f"{self._where}: {exc}") from exc
            variant = (kernel, gws, lws or None, [tuple(o.shape) for o in outs], [o.dtype for o in outs])
            self._variants[key] = variant
            return variant

        def _reorder(self, src, fmt_from: str, fmt_to: str, dims):
            device = self.context.device
            dst = device.empty(src.shape, src.dtype)
            meta = device.meta(tuple(dims) + pitches(dims, fmt_from) + pitches(dims, fmt_to) + (src.offset,))
            kernel = device.kernel(_REORDER, "kk_custom_reorder", {"T": _cl_type(src.dtype)})
            device.launch(kernel, (int(np.prod(dims)),), None, [src.buffer, dst.buffer, meta],
                          inputs=[src], outputs=[dst], label="kk_custom_reorder")
            return dst

        def execute(self, *inputs):
            device = self.context.device
            shapes = tuple((tuple(x.shape), np.dtype(x.dtype).name) if x is not None else None for x in inputs)
            offsets = [0] * len(inputs)
            args: list = [None] * len(layer.buffers)
            reads = []
            for b in layer.buffers:
                if b.kind == "output":
                    continue
                index = b.port if b.kind == "input" else data_inputs[b.name]
                x = inputs[index] if index < len(inputs) else None
                if x is None:
                    raise KernelExecutionError(f"{self._where}: {b.kind} {b.port if b.kind == 'input' else b.name!r}"
                                               f" ({b.where}) is absent")
                if b.format != "BFYX" or (b.kind == "data" and x.offset):
                    x = self._reorder(x, "BFYX", b.format, bfyx(x.shape, self._where))
                elif b.kind == "input":
                    offsets[index] = x.offset
                args[b.arg] = x.buffer
                reads.append(x)
            kernel, gws, lws, out_shapes, out_dtypes = self._variant(shapes, tuple(offsets))
            results = [device.empty(s, d) for s, d in zip(out_shapes, out_dtypes)]
            writes = []
            for b in layer.tensors("output"):
                target = results[b.port] if b.format == "BFYX" else device.empty(out_shapes[b.port],
                                                                                  out_dtypes[b.port])
                args[b.arg] = target.buffer
                writes.append((b, target))
            device.launch(kernel, gws, lws, args, inputs=reads, outputs=[t for _, t in writes], label=layer.entry)
            for b, target in writes:
                if b.format != "BFYX":
                    results[b.port] = self._reorder(target, b.format, "BFYX", bfyx(target.shape, self._where))
            return tuple(results)

    CustomLayerKernel.__name__ = CustomLayerKernel.__qualname__ = f"CustomLayer_{layer.op}_{layer.entry}"
    return CustomLayerKernel


def _cl_type(dtype) -> str:
    from .jit import CL_TYPES

    return CL_TYPES[np.dtype(dtype).name]


def _check_against_schema(layer: LayerConfig) -> dict[str, int]:
    """Ports and define params must exist in the op's schema; returns data name -> input index."""
    try:
        schema = get_schema(layer.op, layer.domain)
    except UnsupportedOpError:
        raise config_error(layer.where, f"op {layer.op_id!r} is not registered; declare it with "
                                        f"kernelkit.register_op (or install the plugin that does) before "
                                        f"loading its custom kernels") from None
    n_in = float("inf") if any(p.variadic for p in schema.inputs) else len(schema.inputs)
    for b in layer.buffers:
        if b.kind == "input" and b.port >= n_in:
            raise config_error(b.where, f"input port-index {b.port} is out of range: op {layer.op_id!r} "
                                        f"has inputs {[p.name for p in schema.inputs]}")
        if b.kind == "output" and b.port >= len(schema.outputs):
            raise config_error(b.where, f"output port-index {b.port} is out of range: op {layer.op_id!r} "
                                        f"has outputs {[p.name for p in schema.outputs]}")
    names = [p.name for p in schema.inputs]
    data = {}
    for b in (b for b in layer.buffers if b.kind == "data"):
        if b.name not in names:
            raise config_error(b.where, f"data {b.name!r} names no input of op {layer.op_id!r}; "
                                        f"its inputs are {names}")
        data[b.name] = names.index(b.name)
    for d in layer.defines:
        if d.param is None:
            continue
        if d.param not in schema.attrs:
            raise config_error(d.where, f"define {d.name!r} is bound to param {d.param!r}, which op "
                                        f"{layer.op_id!r} does not have; its attributes are {sorted(schema.attrs)}")
        kind = schema.attrs[d.param][0]
        if kind not in _ATTR_KINDS[d.type]:
            raise config_error(d.where, f"define {d.name!r} has type {d.type} but attribute {d.param!r} of "
                                        f"{layer.op_id!r} is {kind}")
    return data


def _supports(input_specs, attrs) -> bool:
    return all(s is None or s.rank <= 4 for s in (input_specs or ()))


def register_layer(layer: LayerConfig, replace: bool = False, registry=None) -> type:
    """Register ``layer`` as the kernel (op, "gpu", layer.vendor, dtypes) with layer.priority, in
    ``registry`` (a session's ``KernelScope``) or else process-wide."""
    data = _check_against_schema(layer)
    cls = _make_kernel_class(layer, data)
    register = registry.register_kernel if registry is not None else register_kernel
    try:
        register(layer.op, domain=layer.domain, device="gpu", vendor=layer.vendor, dtype=layer.dtypes,
                 priority=layer.priority, override=replace, supports=_supports)(cls)
    except KernelkitError as exc:
        raise config_error(layer.where, str(exc)) from None
    log.info("custom OpenCL kernel %s for %s registered from %s", layer.entry, layer.op_id, layer.where)
    return cls
