"""Bounds on what untrusted files and settings may ask for, in one place (see docs/robustness.md).

Each bound is far above any real model and far below what would exhaust memory or overflow a
64-bit size: a file that exceeds one gets a typed error before anything is allocated or multiplied.
"""
from __future__ import annotations

MAX_RANK = 64  # dims of one tensor (NumPy's own limit is 64)
MAX_DIM = (1 << 63) - 1  # one dim fits an int64
MAX_ELEMENTS = 1 << 48  # elements of one tensor declared by a file or a feed header (2^48 = 256 Ti)
MAX_RANDOM_ELEMENTS = 1 << 28  # a random input the CLI makes up (1 GiB of float32)
MAX_THREADS = 4096  # Session(threads=...) and a deployment file's threads:
YAML_MAX_NODES = 100_000  # YAML nodes after expanding aliases (a deployment file has a few hundred)


def checked_count(shape, limit: int = MAX_ELEMENTS) -> int | None:
    """The element count of ``shape`` (non-negative Python ints), or None when it exceeds ``limit``.

    Multiplies Python ints and stops as soon as the running product is over the limit, so neither a
    huge dim nor many dims cost more than one pass; a zero anywhere gives 0."""
    if 0 in shape:
        return 0
    count = 1
    for d in shape:
        count *= d
        if count > limit:
            return None
    return count
