"""Quantize a weight to b-bit codes with scales (and zero points), and dequantize it back: the reference's half.

Convention (the one every kernel follows): a weight W of shape (N, K) is cut along K into groups of
``group_size`` columns (the last group may be shorter when K is not a multiple), or one group per row
(``group_size=None``: per-channel). Each group g of row n has a scale s[n, g] and a zero point z[n, g], and a code
q in [0, 2**b) means

    w = (q - z) * s

- asymmetric: z is an integer code in [0, 2**b) stored as uint8, chosen so that the group's range, widened to
  hold 0, maps onto [0, 2**b - 1]: s = (max - min) / (2**b - 1), z = round(-min / s);
- symmetric: z = 2**(b - 1) for every group and is not stored (``zeros`` is None): s = max|w| / (2**(b - 1) - 1),
  so codes run from 1 to 2**b - 1 and zero is exact (int8: -127..127 around 128).

Scales are stored in the activation dtype (``scale_dtype``), rounded up to it, never down: the codes are chosen
with the stored scale, so every element is within s / 2 of its weight (no clamping beyond half a step). A group of
zeros gets s = 1 (any positive scale reproduces it exactly).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernelkit.ops.lowbit import packing

SCALE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class QuantizedWeight:
    """A weight of logical shape (N, K) as the low-bit ops take it.

    packed: (N, ceil(K / P)) int32 (packing.py); scales: (N, G) float; zeros: (N, G) uint8 codes, or None when
    symmetric; G = ceil(K / group_size), or 1 per-channel (group_size None).
    """

    packed: torch.Tensor
    scales: torch.Tensor
    zeros: torch.Tensor | None
    bits: int
    group_size: int | None
    in_features: int

    @property
    def out_features(self) -> int:
        return self.packed.shape[0]

    def dequantize(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The (N, K) weight the codes stand for, computed in ``dtype`` (default: the scales' dtype; float64 is
        exact)."""
        scales = self.scales if dtype is None else self.scales.to(dtype)
        return dequantize(self.packed, scales, self.zeros, self.bits, self.group_size, self.in_features)


def check_group_size(group_size: int | None, bits: int) -> None:
    """None (per-channel) or a power of two that is a multiple of P = 32 // bits, so no word spans two groups."""
    per_word = packing.values_per_word(bits)
    if group_size is None:
        return
    if not isinstance(group_size, int) or isinstance(group_size, bool):
        raise TypeError(f"group_size must be an int or None (per-channel), got {type(group_size).__name__}")
    if group_size < per_word or group_size & (group_size - 1):
        raise ValueError(f"group_size must be a power of two of at least {per_word} at {bits} bits (a whole number "
                         f"of {per_word}-code words), or None for per-channel; got {group_size}")


def n_groups(k: int, group_size: int | None) -> int:
    """G: groups per row, the last one shorter when K is not a multiple of group_size; 1 per-channel."""
    return 1 if group_size is None else max(1, -(-k // group_size))


def quantize(weight: torch.Tensor, bits: int, group_size: int | None = 128, *, symmetric: bool = False,
             scale_dtype: torch.dtype = torch.bfloat16) -> QuantizedWeight:
    """Round-to-nearest quantization of an (N, K) float weight (computed in fp32, on the weight's device)."""
    packing.check_bits(bits)
    check_group_size(group_size, bits)
    if scale_dtype not in SCALE_DTYPES:
        raise TypeError(f"scale_dtype must be one of {', '.join(map(str, SCALE_DTYPES))}, got {scale_dtype}")
    if weight.dim() != 2 or not weight.is_floating_point():
        raise ValueError(f"weight must be a 2-D float tensor (N, K), got {weight.dtype} of shape "
                         f"{tuple(weight.shape)}")
    if weight.numel() and not bool(torch.isfinite(weight).all()):
        raise ValueError("weight has NaN or infinite entries; they cannot be quantized")
    n, k = weight.shape
    size = k if group_size is None else group_size
    groups = n_groups(k, group_size)
    # Zero padding widens no group's range: every range below is widened to hold 0 anyway.
    padded = torch.zeros((n, groups * size), dtype=torch.float32, device=weight.device)
    padded[:, :k] = weight
    w = padded.view(n, groups, size)
    top = 1 << bits
    if symmetric:
        q_max = (top >> 1) - 1
        scales = _round_up(_positive(w.abs().amax(dim=-1) / q_max), scale_dtype)
        codes = torch.round(w / scales.float().unsqueeze(-1)).clamp(-q_max, q_max) + (top >> 1)
        zeros = None
    else:
        low = w.amin(dim=-1).clamp(max=0)
        high = w.amax(dim=-1).clamp(min=0)
        scales = _round_up(_positive((high - low) / (top - 1)), scale_dtype)
        zero = torch.round(-low / scales.float()).clamp(0, top - 1)
        codes = (torch.round(w / scales.float().unsqueeze(-1)) + zero.unsqueeze(-1)).clamp(0, top - 1)
        zeros = zero.to(torch.uint8)
    packed = packing.pack(codes.view(n, -1)[:, :k].to(torch.int32), bits)
    return QuantizedWeight(packed, scales, zeros, bits, group_size, k)


def dequantize(packed: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None, bits: int,
               group_size: int | None, k: int) -> torch.Tensor:
    """(N, K) weight (q - z) * s in the scales' dtype: one rounding (the product), as a kernel computing in that
    dtype makes. Plain PyTorch, so it runs on FakeTensors and under autograd (for the scales)."""
    codes = packing.unpack(packed, bits, k)
    per_column = k if group_size is None else group_size
    if zeros is None:
        centred = codes - (1 << (bits - 1))
    else:
        centred = codes - torch.repeat_interleave(zeros.to(torch.int32), per_column, dim=1)[:, :k]
    return centred.to(scales.dtype) * torch.repeat_interleave(scales, per_column, dim=1)[:, :k]


def _positive(scales: torch.Tensor) -> torch.Tensor:
    """A group of zeros has scale 0; any positive scale reproduces it, and 1 divides safely."""
    return torch.where(scales > 0, scales, torch.ones_like(scales))


def _round_up(scales: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """fp32 positive scales in ``dtype``, rounded up where rounding to nearest went down (one ulp up: for positive
    floats the next representable value has the next bit pattern)."""
    rounded = scales.to(dtype)
    if dtype == torch.float32:
        return rounded
    if not bool(torch.isfinite(rounded).all()):
        raise ValueError(f"a scale overflows {dtype}: the weight's range is too wide for {dtype} scales")
    low = rounded.to(torch.float32) < scales
    bumped = (rounded.view(torch.int16) + 1).view(dtype)
    return torch.where(low, bumped, rounded)
