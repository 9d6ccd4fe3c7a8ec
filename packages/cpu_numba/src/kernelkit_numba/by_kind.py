"""Jitted drivers compiled for one micro-kernel variant only (the int8 drivers' ``kind``).

The int8 drivers (qpack.py, qconv.py) take the variant as a run-time argument ``kind`` (0 generic,
1 avx2, 2 vnni512, ...) and branch on it down to the tiles of qtile.py. Numba types and compiles
every branch of a function, so each driver compiled the drivers, tiles and LLVM IR of every variant
(qtile.gemm_kind: 5-6 s cold on the Xeon against 1.5-3 s for the one it runs). ``by_kind(fn)``
instead compiles, at the first call with a given ``kind``, a copy of ``fn`` in which ``kind`` is
that constant: Numba prunes branches on a global constant before typing them, so only that
variant's code is typed and compiled. The copy is the function's own source with its first
parameter removed and ``kind`` bound in its globals, and every call ``g(kind, ...)`` in it of
another kind-taking function (one wrapped by ``by_kind`` or declared with ``kind_taking``) goes to
``g``'s copy for the same kind, so the constant reaches the tiles. Each copy is cached on disk under
its own name (``cache.CLOSURE_KEY``: ``"qpack.int32_blocks.kind2"``), as ftile's variant drivers are.

Python callers keep calling ``fn(kind, *args)``: the wrapper looks up the copy (a dict lookup and
one Python call, ~0.2 us). Under ``NUMBA_DISABLE_JIT=1`` the wrapper calls the plain function.
"""
from __future__ import annotations

import ast
import inspect
import textwrap
import threading

PARAM = "kind"
_lock = threading.RLock()
_takers: dict[int, object] = {}  # id(dispatcher) -> the dispatcher: functions whose first parameter is kind
_copies: dict[tuple[int, int], object] = {}  # (id(dispatcher), kind) -> its compiled copy


def kind_taking(*dispatchers) -> None:
    """Declare jitted functions whose first parameter is ``kind`` (qtile's tiles, gemm_kind): the
    copies made by ``by_kind`` call their copies for the same kind."""
    with _lock:
        for d in dispatchers:
            _takers[id(d)] = d


class ByKind:
    """``fn(kind, *args)`` running ``fn``'s copy for ``kind`` (see the module doc)."""

    def __init__(self, dispatcher):
        self.dispatcher = dispatcher
        self._by: dict = {}
        self.__wrapped__ = dispatcher
        for name in ("__doc__", "__name__", "__qualname__", "__module__"):
            setattr(self, name, getattr(dispatcher, name, None))
        kind_taking(dispatcher)

    @property
    def py_func(self):
        """The plain Python function (as a Numba dispatcher's ``py_func``)."""
        return getattr(self.dispatcher, "py_func", self.dispatcher)

    def __call__(self, kind, *args):
        try:
            fn = self._by[kind]
        except KeyError:
            fn = self._by[kind] = specialize(self.dispatcher, kind)
        return fn(*args)

    def __repr__(self) -> str:
        return f"by_kind({self.__module__}.{self.__qualname__})"


def by_kind(dispatcher) -> ByKind:
    """Wrap a jitted function whose first parameter is ``kind`` (see the module doc)."""
    return ByKind(dispatcher)


def _typeof_by_kind() -> None:
    """Jitted code that calls a wrapped driver with a run-time kind (a driver not wrapped itself)
    calls the original dispatcher (every variant compiled, as before): Numba types the wrapper as it.
    (Before, such a call failed to type: the wrapper is a Python object.)"""
    from numba.core import types
    from numba.extending import typeof_impl

    @typeof_impl.register(ByKind)
    def _typeof(val, c):
        return types.Dispatcher(val.dispatcher)


_typeof_by_kind()


def _target(fn):
    return fn.dispatcher if isinstance(fn, ByKind) else fn


def specialize(dispatcher, kind: int):
    """``dispatcher``'s copy for ``kind``: a new dispatcher of the other arguments, made once."""
    dispatcher = _target(dispatcher)
    key = (id(dispatcher), int(kind))
    with _lock:
        hit = _copies.get(key)
        if hit is None:
            hit = _copies[key] = _make(dispatcher, int(kind))
        return hit


def _make(dispatcher, kind: int):
    py = getattr(dispatcher, "py_func", None)
    if py is None:  # NUMBA_DISABLE_JIT=1: the plain function
        return lambda *args: dispatcher(kind, *args)
    import numba

    from .cache import CLOSURE_KEY, checked
    from .config import CACHE
    from .tiered import hook

    tree = ast.parse(textwrap.dedent(inspect.getsource(py)))
    fdef = tree.body[0]
    if not isinstance(fdef, ast.FunctionDef) or not fdef.args.args or fdef.args.args[0].arg != PARAM:
        raise TypeError(f"by_kind: {py.__qualname__} must be a function whose first parameter is {PARAM!r}")
    fdef.decorator_list = []
    fdef.args.args = fdef.args.args[1:]
    ns = dict(py.__globals__)
    ns[PARAM] = kind
    _Calls(ns, kind).visit(tree)
    ast.fix_missing_locations(tree)
    ast.increment_lineno(tree, py.__code__.co_firstlineno - 1)
    exec(compile(tree, py.__code__.co_filename, "exec"), ns)  # noqa: S102 - the package's own source
    fn = ns[py.__name__]
    fn.__qualname__ = py.__qualname__
    module = py.__module__.removeprefix("kernelkit_numba.kernels.").removeprefix("kernelkit_numba.")
    setattr(fn, CLOSURE_KEY, f"{module}.{py.__qualname__}.kind{kind}")
    options = {k: v for k, v in dispatcher.targetoptions.items() if k != "nopython"}
    return hook(checked(numba.njit(**options)(fn), CACHE))


class _Calls(ast.NodeTransformer):
    """``g(kind, ...)`` -> ``g``'s copy for the constant kind, when ``g`` takes a kind."""

    def __init__(self, ns: dict, kind: int):
        self.ns, self.kind, self.count = ns, kind, 0

    def visit_Call(self, node: ast.Call):
        self.generic_visit(node)
        if not (node.args and isinstance(node.args[0], ast.Name) and node.args[0].id == PARAM):
            return node
        if not isinstance(node.func, (ast.Name, ast.Attribute)):
            return node
        try:
            target = eval(compile(ast.Expression(node.func), "<by_kind>", "eval"), self.ns)  # noqa: S307
        except Exception:  # noqa: BLE001 - not a name this module resolves: left as it is
            return node
        target = _target(target)
        if id(target) not in _takers:
            return node
        self.count += 1
        name = f"_kk_kind_{self.count}"
        self.ns[name] = specialize(target, self.kind)
        return ast.copy_location(ast.Call(ast.Name(name, ast.Load()), node.args[1:], node.keywords), node)
