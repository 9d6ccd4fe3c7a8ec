"""Reading files that are data from elsewhere: model files, deployment files, kernel configs, feeds.

Two helpers every reader uses, so each rule is written once:

- :func:`open_regular` opens a path only if it is a regular file. It opens with ``O_NONBLOCK`` and
  checks ``fstat`` before reading, so a FIFO, a device or a folder (which would block or never end)
  is refused at once instead of hanging ``open``/``read``.
- :func:`load_yaml` is ``yaml.safe_load`` that refuses documents whose aliases expand beyond
  ``limits.YAML_MAX_NODES`` nodes (a "billion laughs" bomb is 400 bytes) or refer to themselves,
  before any Python object is built.
"""
from __future__ import annotations

import errno
import os
import stat

from .errors import brief
from .limits import YAML_MAX_NODES, checked_count


def open_regular(path, mode: str = "rb"):
    """``open(path, mode)`` for reading, refusing anything but a regular file with an OSError
    (errno EINVAL, "not a regular file") without ever blocking on it."""
    if mode not in ("rb", "r"):
        raise ValueError(f"open_regular reads only, got mode {mode!r}")
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags)
    try:
        kind = os.fstat(fd).st_mode
        if not stat.S_ISREG(kind):
            what = "a folder" if stat.S_ISDIR(kind) else "a FIFO" if stat.S_ISFIFO(kind) else "a special file"
            raise OSError(errno.EINVAL, f"not a regular file ({what})", str(path))
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)  # regular files ignore O_NONBLOCK; clear it for clarity
        return os.fdopen(fd, mode, encoding="utf-8" if mode == "r" else None)
    except BaseException:
        os.close(fd)
        raise


def read_regular(path) -> bytes:
    """The bytes of ``path``, which must be a regular file (see :func:`open_regular`)."""
    with open_regular(path) as f:
        return f.read()


def _npy_header(f, size: int, where: str):
    """Read the .npy header at ``f``'s position; check the declared data fits in ``size`` bytes.
    Returns the declared (shape, dtype)."""
    import numpy as np
    from numpy.lib import format as npy

    start = f.tell()
    version = npy.read_magic(f)
    read = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
    shape, _, dtype = read(f)
    count = checked_count(shape)
    held = size - (f.tell() - start)
    if count is None or count * dtype.itemsize > held:
        raise ValueError(f"{where}: the header declares {dtype}{brief(list(shape))}, "
                         f"more than the {held} bytes of data the file holds")
    return tuple(shape), np.dtype(dtype)


def read_npy_header(f, where: str):
    """The (shape, dtype) that the header of the .npy file object ``f`` (a regular file, at the
    header) declares, checked against the file's size; ``f`` is left after the header."""
    return _npy_header(f, os.fstat(f.fileno()).st_size - f.tell(), where)


def read_npy(f, where: str):
    """One array from the .npy file object ``f`` (a regular file), its header checked against the
    file's size before anything is allocated; no pickles. ValueError on anything wrong."""
    import numpy as np

    start = f.tell()
    if f.read(4) == b"PK\x03\x04":
        raise ValueError(f"{where}: an .npz archive holds several arrays; give one .npy file per input")
    f.seek(start)
    read_npy_header(f, where)
    f.seek(start)
    return np.load(f, allow_pickle=False)


def read_npz(path, where: str) -> dict:
    """Every array of the .npz at ``path`` (a regular file), each member's header checked against the
    member's size first; no pickles. OSError or ValueError on anything wrong."""
    import zipfile

    from numpy.lib import format as npy

    arrays = {}
    try:
        with open_regular(path) as fh, zipfile.ZipFile(fh) as zf:
            for info in zf.infolist():
                name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
                with zf.open(info) as member:
                    _npy_header(member, info.file_size, f"{where} member {name!r}")
                with zf.open(info) as member:
                    arrays[name] = npy.read_array(member, allow_pickle=False)
    except (zipfile.BadZipFile, EOFError) as exc:
        raise ValueError(f"{where}: not a valid .npz archive: {exc}") from exc
    return arrays


class YamlBombError(ValueError):
    """A YAML document whose aliases expand too far or refer to themselves."""


def _children(node):
    value = node.value
    if isinstance(value, list):
        for item in value:
            if isinstance(item, tuple):  # a mapping's (key, value) pair
                yield from item
            else:
                yield item


def expanded_size(root, limit: int = YAML_MAX_NODES) -> int:
    """Nodes in the YAML node graph ``root`` once every alias is expanded, computed without
    expanding (each shared node once); YamlBombError above ``limit`` or on a cycle."""
    sizes: dict[int, int] = {}
    active: set[int] = set()  # the nodes on the current path (a depth-first walk)
    stack = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            active.discard(key)
            size = 1 + sum(sizes[id(c)] for c in _children(node))
            if size > limit:
                raise YamlBombError(f"the document expands to more than {limit} nodes through aliases")
            sizes[key] = size
            continue
        if key in sizes:
            continue
        if key in active:
            raise YamlBombError("an alias refers to a node that contains it (a recursive document)")
        active.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in sizes)
    return sizes[id(root)]


def _bounded_loader():
    import yaml

    class BoundedSafeLoader(yaml.SafeLoader):
        """``yaml.SafeLoader`` that measures the composed node graph before constructing it."""

        def get_single_node(self):
            node = super().get_single_node()
            if node is not None:
                expanded_size(node)
            return node

    return BoundedSafeLoader


_LOADER = None


def load_yaml(text):
    """``yaml.safe_load(text)`` with the alias bound; raises yaml.YAMLError, RecursionError (absurd
    nesting) or YamlBombError, which callers turn into their ConfigError."""
    import yaml

    global _LOADER
    if _LOADER is None:
        _LOADER = _bounded_loader()
    return yaml.load(text, Loader=_LOADER)  # noqa: S506 - a SafeLoader subclass
