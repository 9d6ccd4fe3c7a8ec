"""Backend package (work in progress)."""


def initialize() -> None:
    """Register this backend's kernels and devices with kernelkit (entry point)."""
