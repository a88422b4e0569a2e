"""``LowBitLinear``: an nn.Linear whose weight is held as packed low-bit codes, for inference.

    layer = LowBitLinear.from_linear(linear, bits=4, group_size=128)    # quantizes the weight once
    y = layer(x)                                                        # x (..., in) -> (..., out)
    torch.compile(model, fullgraph=True)                                 # one custom op: no graph break

The matmul runs as a kernelkit operator (``kk.torch_op``): on CUDA ``cuda_auto`` for 4- and 8-bit weights where
CUDA C++ kernels run (cuda-core installed: the tensor-core GEMV up to 16 rows, else triton_auto), ``triton_auto``
otherwise (GEMV, split-K or GEMM by the number of rows); ``eager_dequant`` elsewhere, or one impl named by
``impl``. The bias is added after it.
"""

from __future__ import annotations

import functools
import importlib.util
from typing import Any

import torch
from torch import nn

from kernelkit.ops.lowbit.quantization import QuantizedWeight, quantize

DEFAULT_IMPLS = {"cuda": "triton_auto"}  # by device type; any other device runs FALLBACK_IMPL
FALLBACK_IMPL = "eager_dequant"
CUDA_AUTO = "cuda_auto"  # before DEFAULT_IMPLS on a GPU, for the ops that have it, where CUDA C++ kernels run


class LowBitLinear(nn.Module):
    """y = x @ W.T + b with W of shape (out_features, in_features) stored as ``bits``-bit codes.

    Buffers: ``packed`` (out, ceil(in / P)) int32, ``scales`` (out, G), ``zeros`` (out, G) uint8 or None
    (symmetric), ``bias`` (out,) or None. ``impl``: 'auto' (per device, see DEFAULT_IMPLS) or an impl name of the
    op ``linear_w{bits}`` used on every device.
    """

    def __init__(self, weight: QuantizedWeight, bias: torch.Tensor | None = None, *, impl: str = "auto") -> None:
        super().__init__()
        self.bits, self.group_size, self.impl = weight.bits, weight.group_size, impl
        self.in_features, self.out_features = weight.in_features, weight.out_features
        self.register_buffer("packed", weight.packed)
        self.register_buffer("scales", weight.scales)
        self.register_buffer("zeros", weight.zeros)
        self.register_buffer("bias", None if bias is None else bias.detach().clone())
        # Operators are made here, not in forward: torch.compile traces forward, and making one registers it.
        self._operators = _operators(weight.bits, impl)

    @classmethod
    def from_linear(cls, linear: nn.Linear, bits: int = 4, group_size: int | None = 128, *,
                    symmetric: bool | None = None, dtype: torch.dtype | None = None,
                    impl: str = "auto") -> LowBitLinear:
        """Quantize ``linear``'s weight (round to nearest; quantization.py has the convention). symmetric: default
        True for 8 bits, False below; dtype: the scales' dtype, default the weight's (use the activations')."""
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"from_linear takes an nn.Linear, got {type(linear).__name__}")
        weight = linear.weight.detach()
        scale_dtype = dtype or (weight.dtype if weight.dtype != torch.float64 else torch.float32)
        quantized = quantize(weight, bits, group_size, symmetric=bits == 8 if symmetric is None else symmetric,
                             scale_dtype=scale_dtype)
        return cls(quantized, linear.bias, impl=impl)

    @property
    def weight(self) -> QuantizedWeight:
        return QuantizedWeight(self.packed, self.scales, self.zeros, self.bits, self.group_size, self.in_features)

    def impl_for(self, device: torch.device) -> str:
        """The impl forward runs for inputs on ``device``."""
        if self.impl != "auto":
            return self.impl
        if device.type == "cuda" and CUDA_AUTO in self._operators and cuda_kernels_run():
            return CUDA_AUTO
        return DEFAULT_IMPLS.get(device.type, FALLBACK_IMPL)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        operator = self._operators[self.impl_for(x.device)]
        y = operator(x, self.packed, self.scales, self.zeros, self.group_size)
        return y if self.bias is None else y + self.bias.to(y.dtype)

    def extra_repr(self) -> str:
        kind = "per-channel" if self.group_size is None else f"group_size={self.group_size}"
        symmetry = "symmetric" if self.zeros is None else "asymmetric"
        return (f"in_features={self.in_features}, out_features={self.out_features}, bits={self.bits}, {kind}, "
                f"{symmetry}, bias={self.bias is not None}, impl={self.impl}")

    def __getstate__(self) -> dict[str, Any]:
        """Operators are process-wide objects: pickled modules make them again when loaded."""
        state = self.__dict__.copy()
        state.pop("_operators", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._operators = _operators(self.bits, self.impl)


def _operators(bits: int, impl: str) -> dict[str, Any]:
    """impl name -> the kernelkit:: operator of op linear_w{bits}, for every impl ``impl`` may run."""
    from kernelkit.ops import lowbit
    from kernelkit.torch_ops import torch_op

    if bits not in lowbit.OPS:
        raise ValueError(f"bits must be one of {sorted(lowbit.OPS)}, got {bits}")
    op = lowbit.OPS[bits]
    if impl != "auto" and impl not in op.impls:
        raise ValueError(f"op {op.name!r} has no impl {impl!r}; its impls: {', '.join(op.impls)}")
    names = {*DEFAULT_IMPLS.values(), FALLBACK_IMPL, CUDA_AUTO} & set(op.impls) if impl == "auto" else {impl}
    return {name: torch_op(op, name) for name in names}


@functools.cache
def cuda_kernels_run() -> bool:
    """Whether kernelkit's CUDA C++ kernels can launch here: cuda-core (the ``cuda`` extra) is installed."""
    try:
        return importlib.util.find_spec("cuda.core") is not None
    except (ImportError, ValueError):  # no ``cuda`` package at all
        return False
