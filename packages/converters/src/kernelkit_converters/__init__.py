"""Converters from other model formats into kernelkit IR."""
