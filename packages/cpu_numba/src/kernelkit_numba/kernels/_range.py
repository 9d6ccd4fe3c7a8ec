"""The column range of a strided window tap, shared by the conv, conv-transpose and pool loops."""
from __future__ import annotations

from ..config import jit_inline


@jit_inline
def tap_range(off, stride, size, count):
    """Outputs ``o`` in ``[lo, hi)`` whose source ``o * stride + off`` lies inside ``[0, size)``,
    for ``count`` outputs: the loop bounds that keep a tap inside the unpadded input."""
    lo = 0 if off >= 0 else min(count, (-off + stride - 1) // stride)
    hi = 0 if size - 1 - off < 0 else min(count, (size - 1 - off) // stride + 1)
    return lo, max(lo, hi)
