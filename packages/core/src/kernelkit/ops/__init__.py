"""The core op set: each module declares ops (schema + shape rule) and their NumPy reference
kernels (device "cpu", vendor "reference"). Importing this package registers them all."""
from . import unary  # noqa: F401
