"""The ``eager`` backend: impls that call PyTorch's own operators, and the eager baseline (the reference as written)."""

from __future__ import annotations

from kernelkit.backends.base import Backend
from kernelkit.spec import Impl, Op


class EagerBackend(Backend):
    name = "eager"
    description = "PyTorch's own operators, run eagerly"

    def baseline_impl(self, op: Op) -> Impl:
        """The reference itself: what a benchmark compares impls with when the op registers no ``eager``."""
        return Impl("eager", "eager", op.reference, description="the reference, eager PyTorch")
