"""Kernel modules imported on first use: an op's ``triton.py`` and ``numba.py`` are never imported with the op.

Importing triton (or numba-cuda) fixes, for the whole process, whether kernels run compiled or in the
interpreter / simulator; a worker decides that (``backends.prepare_process``) before any kernel runs. So an op's
package names its kernel modules with ``kernel_module`` and touches them only inside its impls::

    triton_kernels = kernel_module(__name__, "triton")          # ops/matmul/triton.py, not imported yet

    @matmul.impl("triton_blocked", kernels=[triton_kernels.lazy("matmul_kernel")])
    def matmul_triton_blocked(a, b):
        ...
        triton_kernels.matmul_kernel[grid](a, b, c, ...)      # imported here, on the first call
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any


class KernelModule:
    """A module of kernels, imported when one of its attributes is first read."""

    def __init__(self, package: str, name: str) -> None:
        self.module_name = f"{package}.{name}"

    def __getattr__(self, attr: str) -> Any:  # called only for names the proxy itself lacks
        if attr.startswith("__"):
            raise AttributeError(attr)
        return getattr(self.load(), attr)

    def load(self) -> ModuleType:
        return importlib.import_module(self.module_name)

    def lazy(self, attr: str) -> LazyKernel:
        """A handle on kernel ``attr`` for an impl's ``kernels=[...]``, resolved only once the module is loaded."""
        return LazyKernel(self.module_name, attr)


@dataclass(frozen=True)
class LazyKernel:
    """Kernel ``attr`` of module ``module``: ``built()`` is None until an impl has imported the module."""

    module: str
    attr: str

    def built(self) -> Any:
        loaded = sys.modules.get(self.module)
        return getattr(loaded, self.attr, None) if loaded is not None else None

    def __call__(self) -> Any:
        return getattr(importlib.import_module(self.module), self.attr)


def kernel_module(package: str, name: str) -> KernelModule:
    """The kernel module ``package.name`` (e.g. ``kernel_module(__name__, "triton")`` in an op's __init__.py)."""
    return KernelModule(package, name)
