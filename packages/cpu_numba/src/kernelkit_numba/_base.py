"""What the class kernels share: attributes kept from ``prepare``, the session's thread count
applied around ``execute``, and errors that name the node."""
from __future__ import annotations

import inspect

from kernelkit.errors import OpAttributeError

from . import config, progress, tiered


class NumbaKernel:
    """Base of the backend's class kernels.

    ``prepare`` keeps the complete attributes and the session's thread count
    (``Session(threads=...)`` arrives as ``self.context.threads``); subclasses implement
    ``setup(input_specs)`` (checks, derived sizes, scratch buffers) and ``compute(*inputs)``.
    Outputs are allocated per call: the session hands results to callers and concurrent runs, so a
    buffer reused across calls would be overwritten under them. Scratch buffers (im2col) are reused,
    which is safe because the session serialises ``execute`` per node.
    """

    context = None
    uses_blas = False  # kernels that call BLAS (np.dot/np.matmul): BLAS at one thread, shards in parallel
    _tier_mode = _tier_trial = _tier_ref = None  # tiered start (tiered.py): mode, pending trial, reference
    _tier_count = 0

    def prepare(self, input_specs, attrs) -> None:
        self.attrs = dict(attrs)
        self.threads = getattr(self.context, "threads", None)
        self.setup(input_specs)

    def resize(self, input_specs) -> None:
        self.setup(input_specs)

    def setup(self, input_specs) -> None:  # overridden where something can be derived up front
        pass

    def execute(self, *inputs):
        if self._tier_mode is not tiered.EAGER:  # never compiles on this thread (tiered.py)
            return tiered.execute(self, inputs)
        return self.run_numba(*inputs)

    def run_numba(self, *inputs):
        progress.install()  # once: a line on stderr while kernels compile (terminals only)
        inputs = tuple(map(config.readonly, inputs))  # one compiled signature for inputs and constants
        small = self.threads == 1 or self.work(*inputs) < config.SERIAL_WORK  # no thread woken
        threads = 1 if small else (self.threads or config.default_threads())
        if self.uses_blas:
            config.blas_single()
        local = config._local  # the budget set by hand: two context managers cost ~5 us a node
        was = getattr(local, "threads", None)
        local.threads = threads
        try:
            return self.compute(*inputs)
        finally:
            local.threads = was

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


class FunctionKernel(NumbaKernel):
    """A plain kernel function run as a class kernel, so that it too follows the session's thread
    count. ``fn`` gets the attributes its signature names, as the session would pass them."""

    fn = staticmethod(lambda *xs: None)
    attr_names: frozenset = frozenset()

    def setup(self, input_specs):
        self.kwargs = {k: v for k, v in self.attrs.items() if k in self.attr_names}

    def compute(self, *inputs):
        return self.fn(*inputs, **self.kwargs)


def threaded(fn) -> type:
    """A FunctionKernel class running ``fn``, for ``register_kernel``: the function itself stays
    plain and directly callable."""
    names = frozenset(p.name for p in inspect.signature(fn).parameters.values() if p.kind is p.KEYWORD_ONLY)
    return type(f"{fn.__name__}_kernel", (FunctionKernel,),
                {"fn": staticmethod(fn), "attr_names": names, "__module__": fn.__module__,
                 "__qualname__": f"{fn.__qualname__}_kernel", "__doc__": fn.__doc__})
