"""PyTorch's own low-bit matmuls as comparison impls: ``_weight_int4pack_mm`` and ``_weight_int8pack_mm``, fed
weights converted from this package's packing once per weight tensor (a cached conversion, so a timed call is the
matmul alone; the first call, timed apart, pays the conversion).

PyTorch's int4 format (tinygemm): codes q in [0, 16) mean w = (q - 8) * s + zero, with per-group (scale, zero)
pairs of shape (K / group, N, 2) in the activation dtype. From w = (q - z) * s: zero = (8 - z) * s, rounded to the
activation dtype (the one rounding this path adds). Its int8 format: int8 weights (N, K) and per-channel scales
(N,): w = q8 * s with q8 = q - 128 for symmetric 8-bit codes.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from kernelkit.errors import BackendUnavailable
from kernelkit.ops.lowbit import packing
from kernelkit.ops.lowbit.inputs import LinearShape

INT4_GROUP_SIZES = (32, 64, 128, 256)  # what _weight_int4pack_mm accepts
INT4_INNER_K_TILES = (8, 4, 2)  # the largest that divides K / 16 is used
CACHED_WEIGHTS = 4  # conversions kept: the weights of the last few cases


@dataclass
class _Entry:
    sources: tuple[weakref.ref, ...]  # the tensors converted: a hit must be these very objects, unchanged
    versions: tuple[int, ...]
    converted: tuple[torch.Tensor, ...]


_cache: OrderedDict[tuple[Any, ...], _Entry] = OrderedDict()


def cached(kind: str, sources: tuple[torch.Tensor, ...], convert: Callable[[], tuple[torch.Tensor, ...]]
           ) -> tuple[torch.Tensor, ...]:
    """``convert()``'s result for these source tensors, converted once while they live and are not modified.

    Keyed by the objects themselves (weak references and version counters), never by address alone: a new tensor
    at a freed tensor's address must not hit its entry.
    """
    key = (kind, *(id(t) for t in sources))  # kind names the conversion and the dtype it converts to
    entry = _cache.get(key)
    versions = tuple(t._version for t in sources)
    if entry is not None and all(r() is t for r, t in zip(entry.sources, sources, strict=True)) \
            and entry.versions == versions:
        _cache.move_to_end(key)
        return entry.converted
    converted = convert()
    _cache[key] = _Entry(tuple(weakref.ref(t) for t in sources), versions, converted)
    while len(_cache) > CACHED_WEIGHTS:
        _cache.popitem(last=False)
    return converted


def int4pack_mm(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None,
                group_size: int | None, shape: LinearShape) -> torch.Tensor:
    """y (M, N) by torch._weight_int4pack_mm (CUDA) or its CPU twin; BackendUnavailable where it cannot run."""
    on_cuda = x.device.type == "cuda"
    if group_size not in INT4_GROUP_SIZES or shape.k % group_size:
        raise BackendUnavailable(f"_weight_int4pack_mm takes groups of {INT4_GROUP_SIZES} dividing K; got "
                                 f"group_size={group_size}, K={shape.k}")
    if on_cuda and (x.dtype != torch.bfloat16 or shape.k % 32 or shape.n % 8):
        raise BackendUnavailable(f"_weight_int4pack_mm on CUDA takes bfloat16 activations, K a multiple of 32 "
                                 f"and N of 8; got {x.dtype}, K={shape.k}, N={shape.n}")
    if not on_cuda and shape.n % 16:
        raise BackendUnavailable(f"_weight_int4pack_mm on the CPU takes N a multiple of 16; got N={shape.n}")
    if x.device.type not in ("cuda", "cpu"):
        raise BackendUnavailable(f"_weight_int4pack_mm runs on CUDA and CPU, not {x.device.type}")
    sources = (packed, scales) if zeros is None else (packed, scales, zeros)
    weight, scale_zero = cached(
        f"int4 {x.dtype}", sources, lambda: _to_int4pack(packed, scales, zeros, group_size, shape, x.dtype))
    if on_cuda:
        return torch._weight_int4pack_mm(x, weight, group_size, scale_zero)
    return torch._weight_int4pack_mm_for_cpu(x, weight, group_size, scale_zero)


def _to_int4pack(packed: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None, group_size: int,
                 shape: LinearShape, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    codes = packing.unpack(packed, 4, shape.k)  # (N, K) int32 in [0, 16)
    zero = torch.full_like(scales, 8, dtype=torch.float32) if zeros is None else zeros.to(torch.float32)
    offset = ((8 - zero) * scales.to(torch.float32)).to(dtype)  # w = (q - 8) s + offset
    scale_zero = torch.stack([scales.to(dtype), offset], dim=2).transpose(0, 1).contiguous()  # (G, N, 2)
    if packed.device.type == "cuda":
        pairs = (codes[:, ::2] << 4 | codes[:, 1::2]).to(torch.uint8)  # even k in the high nibble
        tiles = next(t for t in INT4_INNER_K_TILES if shape.k % (16 * t) == 0)
        return torch._convert_weight_to_int4pack(pairs, tiles), scale_zero
    return torch._convert_weight_to_int4pack_for_cpu(codes, 2), scale_zero


def int8pack_mm(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None,
                group_size: int | None, shape: LinearShape) -> torch.Tensor:
    """y (M, N) by torch._weight_int8pack_mm: symmetric per-channel 8-bit weights only."""
    if group_size is not None or zeros is not None:
        raise BackendUnavailable("_weight_int8pack_mm takes symmetric per-channel weights (no groups, no zeros)")
    if x.device.type == "cuda" and x.dtype != torch.bfloat16:
        raise BackendUnavailable(f"_weight_int8pack_mm on CUDA is compared in bfloat16 only; got {x.dtype}")
    if shape.k % 8:
        # PyTorch 2.13's CPU kernel reads past the end of such rows (wrong results, then a segfault).
        raise BackendUnavailable(f"_weight_int8pack_mm is used with K a multiple of 8 only; got K={shape.k}")
    if x.device.type == "cpu" and x.dtype == torch.bfloat16 and shape.k % 16:
        # PyTorch 2.13's CPU kernel in bfloat16 is wrong for K = 8 mod 16 (seen on an AMD EPYC with AVX-512: 24% error
        # at K=104; every K a multiple of 16 from 16 to 288 was right).
        raise BackendUnavailable(f"_weight_int8pack_mm on the CPU in bfloat16 is used with K a multiple of 16 only; "
                                 f"got K={shape.k}")
    weight, channel_scales = cached(f"int8 {x.dtype}", (packed, scales), lambda: (
        (packing.unpack(packed, 8, shape.k) - 128).to(torch.int8), scales[:, 0].to(x.dtype).contiguous()))
    return torch._weight_int8pack_mm(x, weight, channel_scales)
