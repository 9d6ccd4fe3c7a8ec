"""What the class kernels share: attributes kept from ``prepare``, the session's thread count
applied around ``compute``, outputs written into the plan's arena (``out=``), a pre-bound call
for the session's plan (``bind``), and errors that name the node."""
from __future__ import annotations

import functools
import inspect

import numpy as np
from kernelkit.errors import OpAttributeError
from kernelkit.layout import physical_shape

from . import config, progress, tiered


def readonly(a):
    """``a`` as a read-only array (a read-only view when it is writable): Numba compiles a separate
    copy of a kernel for read-only arguments, and model inputs and constants are read-only while
    intermediate results are not, so kernels see every input read-only and each is compiled once.
    (``config.readonly``, with ``setflags``: half the cost of setting ``flags.writeable``.)"""
    if a.__class__ is np.ndarray and a.flags.writeable:
        a = a.view()
        a.setflags(write=False)
    return a


def same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a`` and ``b`` are the same memory in the same arrangement (shape, strides, first byte): an
    output the memory plan placed over an input's block."""
    return a.shape == b.shape and a.strides == b.strides and \
        a.__array_interface__["data"][0] == b.__array_interface__["data"][0]


def _names_out(fn) -> bool:
    """Whether ``fn`` takes a keyword-only ``out``."""
    try:
        p = inspect.signature(fn).parameters.get("out")
    except (TypeError, ValueError):
        return False
    return p is not None and p.kind is p.KEYWORD_ONLY


class NumbaKernel:
    """Base of the backend's class kernels.

    ``prepare`` keeps the complete attributes, the input specs and the session's thread count
    (``Session(threads=...)`` arrives as ``self.context.threads``); subclasses implement
    ``setup(input_specs)`` (checks, derived sizes, scratch buffers) and ``compute(*inputs)``.

    Outputs: a kernel whose ``compute`` takes a keyword-only ``out=None`` writes its (single)
    output there when given one (the session's memory plan hands it a view of the arena, of the
    planned shape and dtype, C-contiguous, possibly one of its own inputs for elementwise ops) and
    allocates it otherwise; its ``execute`` then takes ``out`` too, which is how the registry and the plan see
    it (``takes_out``). A kernel without it allocates per call: the session hands results to
    callers and concurrent runs, so a buffer of its own reused across calls would be overwritten
    under them. Scratch buffers (im2col) are reused, which is safe because the session serialises
    ``execute`` per node (unless ``thread_safe``).

    ``bind(step)`` is what the session's plan calls (``execute`` stays for direct use): everything
    that depends only on static shapes is decided there once (the thread budget of small calls),
    and a kernel that defines ``serial_call(step)`` gets its own fast path for calls that run on
    the calling thread alone.
    """

    context = None
    uses_blas = False  # kernels that call BLAS (np.dot/np.matmul): BLAS at one thread, shards in parallel
    takes_out = False  # set per class from ``compute``'s signature
    input_specs: list = []
    _tier_mode = _tier_trial = _tier_ref = None  # tiered start (tiered.py): mode, pending trial, reference
    _tier_count = 0
    _tier_ok = False  # a guarded call ran numba without a miss (tiered.bound's ``settled``)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "execute" in cls.__dict__:  # a kernel with its own execute declares out there
            return
        if "takes_out" not in cls.__dict__:
            cls.takes_out = _names_out(cls.compute)
        cls.execute = _execute_out if cls.takes_out else _execute

    def prepare(self, input_specs, attrs) -> None:
        self.attrs = dict(attrs)
        self.threads = getattr(self.context, "threads", None)
        self.input_specs = list(input_specs)
        self.setup(input_specs)

    def resize(self, input_specs) -> None:
        tiered.settle(self)  # a background trial of this node ends before its state changes
        self.input_specs = list(input_specs)
        self.setup(input_specs)

    def setup(self, input_specs) -> None:  # overridden where something can be derived up front
        pass

    def execute(self, *inputs):  # replaced per subclass by _execute / _execute_out
        return tiered.call(self, self.run, inputs, None)

    def run(self, inputs: tuple, out):
        """``compute`` on read-only ``inputs`` at this call's thread budget."""
        progress.install()  # once: a line on stderr while kernels compile (terminals only)
        inputs = tuple(map(readonly, inputs))  # one compiled signature for inputs and constants
        threads = self.threads_for(inputs)
        if self.uses_blas:
            config.blas_single()
        local = config._local  # the budget set by hand: two context managers cost ~5 us a node
        was = getattr(local, "threads", None)
        local.threads = threads
        try:
            return self.compute(*inputs, out=out) if self.takes_out else self.compute(*inputs)
        finally:
            local.threads = was

    def threads_for(self, inputs) -> int:
        """The thread budget of one call: 1 when the session says so or the work is small."""
        if self.threads == 1 or self.work(*inputs) < config.SERIAL_WORK:  # no thread woken
            return 1
        return self.threads or config.default_threads()

    def static_threads(self) -> int | None:
        """The thread budget every call gets, when the input shapes are known now (the work
        estimate of shape-only stand-ins for the inputs): 1 for small work, else the session's
        count; None when it is decided per call (unknown shapes, no count: the CPUs at call time)."""
        if self.threads == 1:
            return 1
        try:
            stand_ins = []
            for spec in self.input_specs:
                if spec is not None and not spec.is_static:
                    return None
                stand_ins.append(None if spec is None else np.broadcast_to(
                    np.zeros((), spec.dtype), physical_shape(spec.shape, spec.layout)))
            return 1 if self.work(*stand_ins) < config.SERIAL_WORK else self.threads
        except Exception:  # a work estimate that reads values: decided per call
            return None

    def bind(self, step):
        """The plan's call for this node: ``call(*inputs, out=None)``. Static shapes decide the
        thread budget now; a call that runs on this thread alone takes ``serial_call(step)``
        when the kernel has one."""
        progress.install()
        fixed = self.static_threads()
        # a multi-thread session's nodes, serial ones too, keep the pool's workers awake through a
        # run (shards.ShardPool.beat; issue 11, session 7)
        several = self.threads != 1 and (self.threads or config.default_threads()) > 1
        beat = config._POOL.beat if config.HEARTBEAT and several else None
        if fixed == 1:
            fast = self.serial_call(step)
            if fast is not None:
                if getattr(step, "quiet", False):  # the executor set NumPy's error state for the run
                    fast = getattr(fast, "bare", fast)
                if beat is not None:
                    fast = _beating(fast, beat)
                return tiered.bound(self, fast)  # never compiles on this thread (tiered.py)
        compute, takes_out, blas, local = self.bound_compute(), self.takes_out, self.uses_blas, config._local
        threads_for = self.threads_for

        def call(*inputs, out=None):
            if beat is not None:
                beat()
            inputs = tuple(map(readonly, inputs))
            threads = fixed or threads_for(inputs)
            if blas:
                config.blas_single()
            was = getattr(local, "threads", None)
            local.threads = threads
            try:
                return compute(*inputs, out=out) if takes_out else compute(*inputs)
            finally:
                local.threads = was

        return tiered.bound(self, call)  # never compiles on this thread (tiered.py)

    def serial_call(self, step):
        """A call ``(*inputs, out=None)`` for inputs of the prepared shapes that runs on the
        calling thread alone without consulting the thread budget (no shards), or None. A kernel
        that calls BLAS (``uses_blas``) sets it to one thread in that call (config.blas_single). A
        call that switches NumPy's error state to "ignore" around its work may carry the call
        without the switch as ``call.bare``: ``bind`` takes it for a plan's step (``step.quiet``:
        the executor sets that state once a run)."""
        return None

    def bound_compute(self):
        """``compute`` as the bound call runs it (a function kernel: its attributes pre-bound)."""
        return self.compute

    def work(self, *inputs) -> float:
        """Rough operation count of one call (default: 8 per input element); small calls run serially."""
        return 8.0 * sum(x.size for x in inputs if x is not None)

    def compute(self, *inputs):
        raise NotImplementedError

    @property
    def where(self) -> str:
        node = getattr(self.context, "node", None)
        return f"node {node.name!r} ({node.op_id})" if node is not None else type(self).__name__

    def fused_activation(self, input_specs) -> tuple:
        """(code, p0, p1) of the node's fused ``activation`` attribute, in the input's dtype."""
        from .kernels.epilogue import activation_code

        a = self.attrs
        return activation_code(a.get("activation", ""), a.get("activation_params", ()), input_specs[0].dtype,
                               self.where)

    def attr_error(self, message: str) -> OpAttributeError:
        return OpAttributeError(f"{self.where}: {message}")


def _beating(fast, beat):
    """The serial fast path ``fast`` with the pool's heartbeat first (the name kept: it says which
    path the plan took)."""
    @functools.wraps(fast)
    def beating(*inputs, out=None):
        beat()
        return fast(*inputs, out=out)

    return beating


def _execute(self, *inputs):
    """Run the kernel on ``inputs``; returns its output(s), allocated."""
    return tiered.call(self, self.run, inputs, None)


def _execute_out(self, *inputs, out=None):
    """Run the kernel on ``inputs``, writing its output into ``out`` when given; returns it."""
    return tiered.call(self, self.run, inputs, out)


class FunctionKernel(NumbaKernel):
    """A plain kernel function run as a class kernel, so that it too follows the session's thread
    count. ``fn`` gets the attributes its signature names, as the session would pass them, and
    ``out=`` when it names that. A function with a ``serial`` attribute, ``fn.serial(input_specs,
    **attrs) -> call or None``, provides the serial fast path (``NumbaKernel.serial_call``)."""

    fn = staticmethod(lambda *xs: None)
    attr_names: frozenset = frozenset()
    takes_out = False
    thread_safe = True  # no per-call state: the session calls it without a per-node lock

    def setup(self, input_specs):
        self.kwargs = {k: v for k, v in self.attrs.items() if k in self.attr_names and k != "out"}

    def compute(self, *inputs, out=None):
        if out is None:
            return self.fn(*inputs, **self.kwargs)
        return self.fn(*inputs, out=out, **self.kwargs)

    def bound_compute(self):
        if type(self).compute is not FunctionKernel.compute:  # a subclass computes its own way
            return self.compute
        return functools.partial(self.fn, **self.kwargs) if self.kwargs else self.fn

    def serial_call(self, step):
        make = getattr(self.fn, "serial", None)
        return make(self.input_specs, **self.kwargs) if make is not None else None


def threaded(fn) -> type:
    """A FunctionKernel class running ``fn``, for ``register_kernel``: the function itself stays
    plain and directly callable."""
    names = frozenset(p.name for p in inspect.signature(fn).parameters.values() if p.kind is p.KEYWORD_ONLY)
    return type(f"{fn.__name__}_kernel", (FunctionKernel,),
                {"fn": staticmethod(fn), "attr_names": names, "takes_out": "out" in names,
                 "__module__": fn.__module__, "__qualname__": f"{fn.__qualname__}_kernel", "__doc__": fn.__doc__})
