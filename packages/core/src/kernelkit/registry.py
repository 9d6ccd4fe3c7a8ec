"""The op and kernel registry.

An op is declared once (``register_op``): its ports, typed attributes with defaults, and its shape
and dtype rule. Kernels are registered per key ``(op, device, vendor, dtype)`` by any package
(``register_kernel``); the session picks one per node with ``select_kernel``.
"""
from __future__ import annotations

import contextlib
import inspect
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from .dtypes import ALL_TYPES, dtype_name
from .errors import OpAttributeError, RegistryError, UnsupportedOpError, brief

REQUIRED = object()  # default marking a required attribute

_ATTR_TYPES = {int: "int", float: "float", str: "string", bytes: "bytes", np.ndarray: "tensor"}
ATTR_TYPES = ("int", "float", "string", "bytes", "tensor", "ints", "floats", "strings")

_lock = threading.RLock()


def op_id(op: str, domain: str = "") -> str:
    """The qualified name of an op: ``domain::op`` for custom domains, ``op`` otherwise."""
    return f"{domain}::{op}" if domain else op


# -- ops ---------------------------------------------------------------------------------------
@dataclass
class Port:
    name: str
    optional: bool = False
    variadic: bool = False

    @classmethod
    def parse(cls, text: str) -> "Port":
        if text.endswith("*"):
            return cls(text[:-1], optional=True, variadic=True)
        if text.endswith("?"):
            return cls(text[:-1], optional=True)
        return cls(text)


@dataclass
class OpSchema:
    """What an op is: ports, typed attributes with defaults, and its shape/dtype rule."""

    name: str
    domain: str
    inputs: list[Port]
    outputs: list[Port]
    attrs: dict[str, tuple[str, Any]]
    infer: Callable
    dispatch_input: int = 0
    samples: Callable | None = None
    doc: str = ""
    flops: Callable | None = None

    @property
    def id(self) -> str:
        return op_id(self.name, self.domain)

    @property
    def min_inputs(self) -> int:
        return sum(1 for p in self.inputs if not p.optional)

    @property
    def max_inputs(self) -> float:
        return float("inf") if any(p.variadic for p in self.inputs) else len(self.inputs)


_OPS: dict[str, OpSchema] = {}


def _ports(names, qualified: str) -> list[Port]:
    if isinstance(names, str) or not isinstance(names, (list, tuple)) or \
            not all(isinstance(p, str) and p.rstrip("?*") for p in names):
        raise RegistryError(f"op {qualified!r}: ports must be a list of names, got {brief(names)}")
    return [Port.parse(p) for p in names]


def _attr_type(spec) -> str:
    if isinstance(spec, str):
        if spec not in ATTR_TYPES:
            raise RegistryError(f"unknown attribute type {spec!r}; known: {', '.join(ATTR_TYPES)}")
        return spec
    if isinstance(spec, (list, tuple)):  # [int], [float], [str]
        if len(spec) == 1 and spec[0] in (int, float, str):
            return _ATTR_TYPES[spec[0]] + "s"
    elif spec in _ATTR_TYPES:
        return _ATTR_TYPES[spec]
    raise RegistryError(f"unknown attribute type {spec!r}; use one of {', '.join(ATTR_TYPES)}")


def register_op(name: str, *, domain: str = "", inputs: Iterable[str], outputs: Iterable[str],
                attrs: dict[str, tuple] | None = None, infer: Callable, dispatch_input: int = 0,
                samples: Callable | None = None, flops: Callable | None = None, doc: str = "",
                override: bool = False) -> OpSchema:
    """Declare an op.

    ``inputs``/``outputs`` are port names; a trailing ``?`` marks an optional port, ``*`` a variadic
    one. ``attrs`` maps a name to ``(type, default)`` where type is one of ``ATTR_TYPES`` (or
    ``int``, ``float``, ``str``, ``bytes``, ``np.ndarray``, ``[int]``...) and default may be
    ``REQUIRED``. ``infer(ctx)`` returns the output TensorSpecs (see ``shape.InferContext``).
    ``dispatch_input`` is the input whose dtype keys the kernel lookup. ``samples()`` yields
    ``(inputs, attrs)`` cases used to cross-check every kernel against the reference.
    """
    qualified = op_id(name, domain) if isinstance(name, str) and isinstance(domain, str) else repr(name)
    if not isinstance(name, str) or not name or not isinstance(domain, str):
        raise RegistryError(f"op {qualified}: name and domain must be strings, the name non-empty")
    if not callable(infer):
        raise RegistryError(f"op {qualified!r}: infer must be a function of an InferContext, got {brief(infer)}")
    checked = {}
    for key, spec in (attrs or {}).items():
        if not isinstance(key, str) or not isinstance(spec, tuple) or len(spec) != 2:
            raise RegistryError(f"op {qualified!r}: attribute {key!r} must map a name to (type, default)")
        kind, default = _attr_type(spec[0]), spec[1]
        if default is not None and default is not REQUIRED:
            try:
                default = _coerce(kind, default, f"op {qualified!r}", key)
            except OpAttributeError as exc:
                raise RegistryError(f"{exc} (the default)") from None
        checked[key] = (kind, default)
    schema = OpSchema(name, domain, _ports(inputs, qualified), _ports(outputs, qualified),
                      checked, infer, dispatch_input, samples, doc, flops)
    with _lock:
        if schema.id in _OPS and not override:
            raise RegistryError(f"op {schema.id!r} is already registered; pass override=True to replace it")
        _OPS[schema.id] = schema
    return schema


def get_schema(op: str, domain: str = "") -> OpSchema:
    key = op_id(op, domain)
    schema = _OPS.get(key)
    if schema is None:  # a plugin may declare it: load the installed backends, then look again
        from .backends import load_all_backends

        load_all_backends()
        schema = _OPS.get(key)
    if schema is None:
        raise UnsupportedOpError(
            f"op {key!r} is not registered; register it with kernelkit.register_op({op!r}, "
            f"domain={domain!r}, inputs=..., outputs=..., attrs=..., infer=...) "
            f"(see docs/extending.md)"
        )
    return schema


def ops() -> list[str]:
    """Names of all registered ops."""
    return sorted(_OPS)


def _coerce(kind: str, value, where: str, name: str):
    def bad():
        return OpAttributeError(f"{where}: attribute {name!r} expects {kind}, "
                                f"got {type(value).__name__} {brief(value)}")

    if kind == "int":
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            if isinstance(value, bool):
                return int(value)
            raise bad()
        return int(value)
    if kind == "float":
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise bad()
        return float(value)
    if kind == "string":
        if isinstance(value, bytes):
            try:
                return value.decode()
            except UnicodeDecodeError:
                raise bad() from None
        if not isinstance(value, str):
            raise bad()
        return value
    if kind == "bytes":
        if not isinstance(value, (bytes, bytearray)):
            raise bad()
        return bytes(value)
    if kind == "tensor":
        if not isinstance(value, np.ndarray):
            raise bad()
        return value
    # list kinds
    if isinstance(value, np.ndarray) and value.ndim == 1:
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        raise bad()
    return tuple(_coerce(kind[:-1], v, where, name) for v in value)


def normalize_attrs(schema: OpSchema, attrs: dict, where: str) -> dict:
    """Check ``attrs`` against the schema and return them complete, defaults filled in.

    Unknown attributes, missing required ones and wrong types raise OpAttributeError naming
    ``where`` (the node).
    """
    unknown = sorted(set(attrs) - set(schema.attrs))
    if unknown:
        raise OpAttributeError(
            f"{where}: unknown attribute(s) {unknown} for op {schema.id!r}; "
            f"known: {sorted(schema.attrs) or 'none'}"
        )
    out = {}
    for name, (kind, default) in schema.attrs.items():
        if name in attrs and attrs[name] is not None:
            out[name] = _coerce(kind, attrs[name], where, name)
        elif default is REQUIRED:
            raise OpAttributeError(f"{where}: required attribute {name!r} of op {schema.id!r} is missing")
        else:
            out[name] = default
    return out


# -- kernels -----------------------------------------------------------------------------------
class KernelKey(NamedTuple):
    op: str
    device: str
    vendor: str
    dtype: str
    layout: str = ""  # "" for the op's default layout; else the layout variant (docs/architecture.md)


@dataclass
class KernelEntry:
    key: KernelKey
    impl: Any  # a function (*inputs, **attrs) or a class with prepare/resize/execute
    priority: int = 0
    supports: Callable | None = None  # supports(input_specs, attrs) -> bool
    attr_names: frozenset | None = field(default=None, repr=False)  # None: takes **attrs
    scratch: Callable | None = field(default=None, repr=False)  # scratch(input_specs, attrs) -> bytes
    port_layouts: Any = field(default=None, repr=False)  # {port: layout} or f(input_specs, attrs) -> that

    def layouts(self, schema: "OpSchema", input_specs, attrs) -> tuple[list, list]:
        """(layout of each input, of each output) this kernel takes and gives for a node, None for
        the default: a port named in ``port_layouts`` gets that layout, any other rank-4 port the
        key's layout (kernelkit.layout)."""
        named = self.port_layouts(input_specs, attrs) if callable(self.port_layouts) else (self.port_layouts or {})
        default = self.key.layout or None

        def of(ports, ranks):
            return [named.get(p.name, default if r == 4 else None) for p, r in zip(ports, ranks)]

        variadic = [p for p in schema.inputs if p.variadic]
        in_ports = list(schema.inputs) + variadic * max(0, len(input_specs) - len(schema.inputs))
        ins = of(in_ports, [s.rank if s is not None else 0 for s in input_specs])
        return ins, [named.get(p.name, default) for p in schema.outputs]

    @property
    def takes_out(self) -> bool:
        """Whether the kernel writes into a given output (keyword-only ``out``, docs/architecture.md)."""
        return self.attr_names is not None and "out" in self.attr_names

    @property
    def is_class(self) -> bool:
        return inspect.isclass(self.impl)


_KERNELS: dict[KernelKey, KernelEntry] = {}


def _accepted_attrs(fn) -> frozenset | None:
    target = fn.execute if inspect.isclass(fn) else fn
    try:
        params = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return frozenset(p.name for p in params if p.kind is p.KEYWORD_ONLY)


def _kernel_decorator(table: dict, op: str, device: str, vendor: str, dtype, domain: str, priority: int,
                      override: bool, supports: Callable | None, scratch: Callable | None = None,
                      layout: str = "", port_layouts=None):
    qualified = op_id(op, domain)
    if layout or port_layouts:
        from .layout import is_plain, parse

        for name in [layout] + (list(port_layouts.values()) if isinstance(port_layouts, dict) else []):
            if name:
                parse(name)  # a ShapeError for an unknown layout string
        if layout and is_plain(layout):
            layout = ""  # the default layout is keyed as ""
        if port_layouts is not None and not (callable(port_layouts) or isinstance(port_layouts, dict)):
            raise RegistryError(f"kernel for {qualified!r}: port_layouts must be a dict or a function")
    dtypes = (dtype,) if isinstance(dtype, str) else dtype
    if not isinstance(dtypes, (list, tuple)) or not dtypes or not all(isinstance(d, str) for d in dtypes):
        raise RegistryError(f"kernel for {qualified!r}: dtype must be a name, a tuple of names or '*', got {dtype!r}")
    if not all(isinstance(v, str) and v for v in (op, device, vendor)):
        raise RegistryError(f"kernel for {qualified!r}: op, device and vendor must be non-empty strings")
    dtypes = tuple(d if d == "*" else dtype_name(d) for d in dtypes)

    def decorate(impl):
        if not callable(impl):
            raise RegistryError(f"kernel for {qualified!r} must be a function or a class, got {brief(impl)}")
        if inspect.isclass(impl):
            missing = [m for m in ("prepare", "execute") if not hasattr(impl, m)]
            if missing:
                raise RegistryError(f"kernel class {impl.__name__} for {qualified!r} lacks {missing}")
        attrs = _accepted_attrs(impl)  # once per kernel, not per dtype (inspect.signature: import time)
        entries = [KernelEntry(KernelKey(qualified, device, vendor, d, layout), impl, priority, supports,
                               attrs, scratch, port_layouts) for d in dtypes]
        with _lock:
            for e in entries:
                if e.key in table and not override:
                    raise RegistryError(
                        f"a kernel for {tuple(e.key)} is already registered "
                        f"({table[e.key].impl.__module__}.{table[e.key].impl.__qualname__}); "
                        f"pass override=True to replace it"
                    )
            for e in entries:
                table[e.key] = e
        return impl

    return decorate


def register_kernel(op: str, *, device: str, vendor: str, dtype, domain: str = "", priority: int = 0,
                    override: bool = False, supports: Callable | None = None, scratch: Callable | None = None,
                    layout: str = "", port_layouts=None):
    """Decorator registering a kernel for ``(op, device, vendor, dtype)`` (and ``layout``).

    ``dtype`` is one dtype name, a tuple of them, or ``"*"`` for any dtype (used after exact
    matches). The decorated function gets the node's inputs positionally and the attributes it
    names keyword-only; it returns an array or a tuple of arrays. A class instead gets
    ``prepare(input_specs, attrs)`` once per session, ``resize(input_specs)`` when input shapes
    change and ``execute(*inputs)`` per run. ``supports(input_specs, attrs)`` may decline a node,
    so that selection moves on to the next candidate. A kernel taking a keyword-only ``out`` writes
    its output there when given one; ``scratch(input_specs, attrs)`` declares the bytes of scratch
    a function kernel wants as ``scratch=`` (docs/architecture.md, "Memory plan"). ``layout``
    ("NHWC", "NCHW8c", ...) registers a layout variant: its rank-4 inputs and outputs arrive and
    leave in that layout, ports named in ``port_layouts`` (a dict, or a function of the input
    specs and attributes giving one, e.g. ``{"W": "HWIO"}``) in theirs; the layout pass chooses
    it (docs/architecture.md, "Layouts"). The decorated object is returned unchanged.
    """
    return _kernel_decorator(_KERNELS, op, device, vendor, dtype, domain, priority, override, supports, scratch,
                             layout, port_layouts)


class KernelScope:
    """Kernels seen by one session only, on top of the process-wide registry.

    A Session makes one and hands it to the session hooks, so that an option that registers
    kernels (e.g. ``opencl_custom_kernels``) registers them here, and every later session is as if
    the option had never been given. Selection with ``scope=`` sees this scope's kernels and the
    process-wide ones; a scoped kernel shadows a process-wide one of the same key."""

    def __init__(self):
        self.kernels: dict[KernelKey, KernelEntry] = {}

    def register_kernel(self, op: str, *, device: str, vendor: str, dtype, domain: str = "", priority: int = 0,
                        override: bool = False, supports: Callable | None = None, scratch: Callable | None = None,
                        layout: str = "", port_layouts=None):
        """``kernelkit.register_kernel``, into this scope only."""
        return _kernel_decorator(self.kernels, op, device, vendor, dtype, domain, priority, override, supports,
                                 scratch, layout, port_layouts)

    def __repr__(self) -> str:
        return f"KernelScope({sorted(self.kernels)})"


def _visible(scope: KernelScope | None) -> dict[KernelKey, KernelEntry]:
    return {**_KERNELS, **scope.kernels} if scope is not None and scope.kernels else _KERNELS


def unregister_kernel(op: str, *, device: str, vendor: str, dtype, domain: str = "", layout: str = "") -> None:
    dtypes = (dtype,) if isinstance(dtype, str) else tuple(dtype)
    with _lock:
        for d in dtypes:
            _KERNELS.pop(KernelKey(op_id(op, domain), device, vendor, d, layout), None)


@contextlib.contextmanager
def kernel_transaction():
    """Kernel registrations and unregistrations made in the body are all undone if it raises (a
    config file that fails half-way leaves the table as it was). Holds the registry lock."""
    with _lock:
        saved = dict(_KERNELS)
        try:
            yield
        except BaseException:
            _KERNELS.clear()
            _KERNELS.update(saved)
            raise


def kernels(op: str | None = None, device: str | None = None, vendor: str | None = None,
            dtype: str | None = None, layout: str | None = None) -> list[KernelKey]:
    """Registered kernel keys, filtered by any of the five fields, sorted. Asked for one vendor that
    an installed backend is named after, only that backend is loaded."""
    from .backends import backend_names, load_backends

    load_backends(names=[vendor] if vendor is not None and vendor in backend_names() else None)
    want = KernelKey(op, device, vendor, dtype, layout)
    return sorted(k for k in _KERNELS if all(w is None or w == v for w, v in zip(want, k)))


def kernel_entry(key: KernelKey) -> KernelEntry:
    return _KERNELS[key]


def candidates(op: str, device: str, dtype: str, vendors: Iterable[str] | None = None,
               scope: KernelScope | None = None, layout: str | None = "") -> list[KernelEntry]:
    """The kernels that may run ``op`` on ``device`` and ``dtype``, best first (before ``supports``):
    exact dtype before ``"*"``; among vendors, the order of ``vendors`` if given, else highest
    priority first. ``scope``: a session's KernelScope, whose kernels are candidates too.
    ``layout``: only kernels of that layout ("" the default ones; None: every layout)."""
    cands = [e for e in _visible(scope).values() if e.key.op == op and e.key.device == device
             and e.key.dtype in (dtype, "*") and (vendors is None or e.key.vendor in vendors)
             and (layout is None or e.key.layout == layout)]
    order = list(vendors) if vendors is not None else []

    def rank(e: KernelEntry):
        vendor_rank = order.index(e.key.vendor) if vendors is not None else 0
        return (vendor_rank, -e.priority, e.key.dtype == "*", e.key.vendor, e.key.layout)

    return sorted(cands, key=rank)


def select_kernel(op: str, device: str, dtype: str, vendors: Iterable[str] | None = None,
                  input_specs=None, attrs=None, scope: KernelScope | None = None,
                  ranked: list[KernelEntry] | None = None, layout: str | None = "") -> KernelEntry | None:
    """The kernel for ``op`` on ``device`` and ``dtype``: the first of ``candidates(...)`` (or of
    ``ranked``, a list it returned) whose ``supports`` accepts the node. None when nothing fits.
    ``scope``: a session's KernelScope, whose kernels are candidates too."""
    for e in candidates(op, device, dtype, vendors, scope, layout) if ranked is None else ranked:
        if e.supports is None or e.supports(input_specs, attrs):
            return e
    return None


def describe_kernels(op: str, scope: KernelScope | None = None) -> str:
    """One line listing the keys that exist for ``op``, for error messages."""
    keys = sorted(k for k in _visible(scope) if k.op == op)
    if not keys:
        return f"no kernel at all is registered for {op!r}"
    return "registered: " + ", ".join(f"({k.device}, {k.vendor}, {k.dtype}{', ' + k.layout if k.layout else ''})"
                                      for k in keys)


ALL_DTYPES = ALL_TYPES
