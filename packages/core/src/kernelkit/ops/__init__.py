"""The core op set: each module declares ops (schema + shape rule) and their NumPy reference
kernels (device "cpu", vendor "reference"). Importing this package registers them all."""
from . import unary  # noqa: F401
from . import (arg, binary, cast, concat, constant, cumsum, expand, flatten, gather, logic,  # noqa: F401
               range, reduce, reshape, shape_ops, slice, split, squeeze, tile, topk, transpose, variadic, where)
from . import (batchnorm, clip, conv, conv_transpose, depth_space, dropout, gemm, global_pool,  # noqa: F401
               instancenorm, layernorm, lrn, matmul, pad, pool, prelu, resize, softmax)
