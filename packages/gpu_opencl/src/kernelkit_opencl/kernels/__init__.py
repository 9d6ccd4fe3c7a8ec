"""OpenCL kernels, one family per module, each beside the ``.cl`` source it launches."""
