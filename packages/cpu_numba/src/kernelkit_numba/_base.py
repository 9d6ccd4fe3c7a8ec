"""What the class kernels share: attributes kept from ``prepare``, the session's thread count
applied around ``execute``, and errors that name the node."""
from __future__ import annotations

from kernelkit.errors import OpAttributeError

from . import config


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

    def prepare(self, input_specs, attrs) -> None:
        self.attrs = dict(attrs)
        self.threads = getattr(self.context, "threads", None)
        self.setup(input_specs)

    def resize(self, input_specs) -> None:
        self.setup(input_specs)

    def setup(self, input_specs) -> None:  # overridden where something can be derived up front
        pass

    def execute(self, *inputs):
        with config.num_threads(self.threads):
            return self.compute(*inputs)

    def compute(self, *inputs):
        raise NotImplementedError

    @property
    def where(self) -> str:
        node = getattr(self.context, "node", None)
        return f"node {node.name!r} ({node.op_id})" if node is not None else type(self).__name__

    def attr_error(self, message: str) -> OpAttributeError:
        return OpAttributeError(f"{self.where}: {message}")
