"""What the low-bit linear ops take: the argument checks every impl makes, the seeded input factory, the cost model.

Arguments of every op (``linear_w8``, ``linear_w4``, ``linear_w2``): x (..., K) float activations; packed (N,
ceil(K / P)) int32 (packing.py); scales (N, G) float; zeros (N, G) uint8 codes or None (symmetric); group_size
(None: per-channel). The output is (..., N) in x's dtype.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from kernelkit.ops.lowbit import packing
from kernelkit.ops.lowbit.quantization import check_group_size, n_groups, quantize
from kernelkit.spec import Size, seeded_normal

ACTIVATION_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class LinearShape:
    """M rows of activations (leading dimensions folded), N output channels, K input features, G groups a row."""

    m: int
    n: int
    k: int
    groups: int


def check_inputs(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None,
                 bits: int, group_size: int | None, *, reference: bool = False) -> LinearShape:
    """The shapes of one call, or a ValueError/TypeError that says which argument is wrong and what it should be.

    Reads shapes, dtypes and devices only (no values), so it also runs on FakeTensors. ``reference``: float64
    activations are allowed too (the checker runs the reference in float64).
    """
    check_group_size(group_size, bits)
    allowed = (*ACTIVATION_DTYPES, torch.float64) if reference else ACTIVATION_DTYPES
    if not isinstance(x, torch.Tensor) or x.dtype not in allowed or x.dim() < 1:
        raise TypeError(f"x must be a float tensor (..., K) of {', '.join(map(str, ACTIVATION_DTYPES))}, got "
                        f"{_describe(x)}")
    k = x.shape[-1]
    if packed.dtype != torch.int32 or packed.dim() != 2:
        raise TypeError(f"packed must be the int32 (N, ceil(K / {32 // bits})) tensor of packing.pack, got "
                        f"{_describe(packed)}")
    n = packed.shape[0]
    if packed.shape[1] != packing.packed_width(k, bits):
        raise ValueError(f"packed has {packed.shape[1]} words a row, but x has K = {k}: {bits}-bit codes need "
                         f"{packing.packed_width(k, bits)} (ceil({k} / {32 // bits}))")
    groups = n_groups(k, group_size)
    if not scales.is_floating_point() or tuple(scales.shape) != (n, groups):
        kind = "per-channel" if group_size is None else f"groups of {group_size}"
        raise ValueError(f"scales must be float of shape ({n}, {groups}) (N, G: {kind} over K = {k}), got "
                         f"{_describe(scales)}")
    if zeros is not None and (zeros.dtype != torch.uint8 or tuple(zeros.shape) != (n, groups)):
        raise ValueError(f"zeros must be uint8 codes of shape ({n}, {groups}) like scales, or None (symmetric), "
                         f"got {_describe(zeros)}")
    devices = {t.device for t in (x, packed, scales, zeros) if t is not None}
    if len(devices) > 1:
        raise ValueError(f"x, packed, scales and zeros must be on one device, got {sorted(map(str, devices))}")
    return LinearShape(math.prod(x.shape[:-1]), n, k, groups)


def _describe(t: Any) -> str:
    return f"{t.dtype} of shape {tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__


InputFactory = Callable[[Size, torch.dtype, torch.device, int], tuple[Any, ...]]


def seeded_inputs(bits: int, group_size: int | None, symmetric: bool) -> InputFactory:
    """inputs(size=(M, N, K), dtype, device, seed): a seeded standard-normal fp32 weight (N, K) quantized on the
    device with scales in the activation dtype, and seeded activations (M, K) in that dtype, scaled by 1/sqrt(K) so
    outputs stay O(1) at any K (the tolerance rule's (1 + |ref|) term assumes O(1) outputs: at |y| ~ sqrt(K) the
    bf16 reference's own error near y = 0 made an all-zeros output pass).

    Quantizing is exact arithmetic (IEEE division, rounding half to even), so the device does not change the codes.
    """

    def make(size: Size, dtype: torch.dtype, device: torch.device, seed: int) -> tuple[Any, ...]:
        m, n, k = size
        weight = seeded_normal((n, k), torch.float32, device, seed * 1009)
        quantized = quantize(weight, bits, group_size, symmetric=symmetric, scale_dtype=dtype)
        x = (seeded_normal((m, k), torch.float32, device, seed * 1009 + 1) * k**-0.5).to(dtype)
        return x, quantized.packed, quantized.scales, quantized.zeros, group_size

    return make


def cost_bytes(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None = None,
               group_size: int | None = None) -> int:
    """Bytes one call must move at least: read the packed weights, scales, zeros and activations once, write the
    output once. For M = 1 the weights dominate, so % of the copy ceiling says how close a GEMV is to the limit."""
    tensors = [x, packed, scales] + ([zeros] if zeros is not None else [])
    out = math.prod(x.shape[:-1]) * packed.shape[0] * x.element_size()
    return sum(t.numel() * t.element_size() for t in tensors) + out


def cost_flops(x: torch.Tensor, packed: torch.Tensor, *rest: Any) -> int:
    """2MNK: a multiply and an add per weight per row of activations (dequantizing is not counted)."""
    return 2 * math.prod(x.shape[:-1]) * packed.shape[0] * x.shape[-1]
