"""ONNX backend node tests kernelkit does not run, each with its reason (the only such list).

Keys are regular expressions matched against the test name without the ``_cpu`` suffix
(``re.fullmatch``). ``EXCLUDED`` applies to every vendor; ``VENDOR_EXCLUDED[vendor]`` to one.
"""
from __future__ import annotations

EXCLUDED: dict[str, str] = {
}

VENDOR_EXCLUDED: dict[str, dict[str, str]] = {
    "numba": {},
    "opencl": {},
}


def exclusions(vendor: str) -> dict[str, str]:
    """Pattern -> reason for ``vendor``."""
    return {**EXCLUDED, **VENDOR_EXCLUDED.get(vendor, {})}
