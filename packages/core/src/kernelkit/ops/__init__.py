"""The core op set: each module declares ops (schema + shape rule) and their NumPy reference
kernels (device "cpu", vendor "reference"). Importing this package registers them all: every
module in this folder is imported in sorted order (``kernelkit.discovery``); files whose name
starts with ``_`` are shared helpers and are only imported by the ops that use them."""
from ..discovery import import_submodules

import_submodules(__name__)
