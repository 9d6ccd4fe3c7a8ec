"""Bounds on what untrusted files and settings may ask for, in one place (see docs/robustness.md).

Each bound is far above any real model and far below what would exhaust memory or overflow a
64-bit size: a file that exceeds one gets a typed error before anything is allocated or multiplied.
"""
from __future__ import annotations

import os
from functools import lru_cache

MAX_RANK = 64  # dims of one tensor (NumPy's own limit is 64)
MAX_DIM = (1 << 63) - 1  # one dim fits an int64
MAX_ELEMENTS = 1 << 48  # elements of one tensor declared by a file or a feed header (2^48 = 256 Ti)
MAX_RANDOM_ELEMENTS = 1 << 28  # a random input the CLI makes up (1 GiB of float32)
MAX_THREADS = 4096  # Session(threads=...) and a deployment file's threads:
YAML_MAX_NODES = 100_000  # YAML nodes after expanding aliases (a deployment file has a few hundred)
MAX_TENSOR_BYTES_ENV = "KERNELKIT_MAX_TENSOR_BYTES"  # overrides max_tensor_bytes() (an int, bytes)
FALLBACK_TENSOR_BYTES = 1 << 40  # where the host's physical memory cannot be read (1 TiB)
MIN_TENSOR_BYTES = 1 << 20  # a smaller $KERNELKIT_MAX_TENSOR_BYTES counts as this: a hot path may skip
# the check (and its environment lookup, ~1 us) for a tensor of at most this many bytes


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


CGROUP_MEMORY_FILES = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")  # v2, v1


@lru_cache(maxsize=1)
def physical_memory() -> int | None:
    """The memory this process may use in bytes: the host's physical memory, or the container's
    cgroup memory limit where that is smaller; None where ``os.sysconf`` cannot tell."""
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
    total = pages * size if pages > 0 and size > 0 else None
    for path in CGROUP_MEMORY_FILES:
        try:
            with open(path, encoding="ascii") as f:
                text = f.read(64).strip()
        except (OSError, ValueError):
            continue
        if text.isdigit() and 0 < int(text) < (1 << 60):  # "max" / 2^63-ish: no limit
            total = int(text) if total is None else min(total, int(text))
    return total


def max_tensor_bytes() -> int:
    """Bytes one tensor may take when a kernel sizes it from run-time VALUES (Pad's pads, Expand's
    shape, Range's limit, ...): ``$KERNELKIT_MAX_TENSOR_BYTES`` when set, else ``physical_memory()``;
    never below ``MIN_TENSOR_BYTES`` (1 MiB). Read at every call (an environment lookup), so a
    process may change it."""
    text = os.environ.get(MAX_TENSOR_BYTES_ENV)
    if text:
        try:
            value = int(text, 0)
        except ValueError:
            value = -1
        if value < 0:
            from .errors import ConfigError, brief

            raise ConfigError(f"${MAX_TENSOR_BYTES_ENV}={brief(text)} is not a byte count (an int >= 0)")
        return max(value, MIN_TENSOR_BYTES)
    return physical_memory() or FALLBACK_TENSOR_BYTES


def check_tensor_bytes(shape, dtype, what: str = "output") -> int:
    """The element count of a ``shape`` x ``dtype`` tensor a kernel is about to allocate, or a
    ``TensorTooLargeError`` when it would take more than ``max_tensor_bytes()``.

    Call it before ``np.empty``/``np.pad``/``np.tile``/a device buffer whose shape comes from input
    values: on a host that overcommits memory a 13 TB ``np.empty`` succeeds and the process is
    killed while filling it, so a ``MemoryError`` cannot be relied on. An empty tensor with a dim
    over ``max_tensor_bytes() // 8`` is refused too (its per-axis index table). ``shape`` holds Python or
    NumPy ints (each >= 0); the count stops growing as soon as it is over the bound."""
    import numpy as np

    itemsize = np.dtype(dtype).itemsize or 1
    dims = [int(d) for d in shape]
    count = checked_count(dims, MIN_TENSOR_BYTES // itemsize)
    if count and max(dims, default=0) <= MIN_TENSOR_BYTES // 8:  # under the floor: no environment lookup
        return count
    limit = max_tensor_bytes()
    count = checked_count(dims, limit // itemsize)
    # kernels build an int64 index table per axis (numba's gathers, Resize's source coordinates):
    # with a zero dim elsewhere the tensor is empty, but such a table would not be
    if count is None or (count == 0 and dims and max(dims) > limit // 8):
        from .errors import TensorTooLargeError, brief

        raise TensorTooLargeError(
            f"{what} of shape {brief(tuple(dims))} and dtype {np.dtype(dtype).name} would take more than "
            f"{limit} bytes (the limit for one tensor sized from run-time values: the host's memory, "
            f"or ${MAX_TENSOR_BYTES_ENV})")
    return count
