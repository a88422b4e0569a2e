"""Launchers of the Triton kernels (grids, tile choices, split-K buffers) and the dispatcher that picks one by M.

Nothing here imports triton: the kernels come from ``triton.py`` and ``triton_gemv.py`` (the M = 1 GEMV) through
lazy modules, loaded on the first launch.
The crossovers and tile tables are named constants below, chosen from the arithmetic in the comments; they are
to be re-measured on the GPU (``scripts/gpu-lowbit`` prints every kernel at every M beside the dispatcher).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from kernelkit.backends.lazy import kernel_module
from kernelkit.ops.lowbit.inputs import LinearShape

triton_kernels = kernel_module("kernelkit.ops.lowbit", "triton")
triton_gemv_kernels = kernel_module("kernelkit.ops.lowbit", "triton_gemv")  # the M = 1 GEMV

# Dispatcher crossovers, by rows of activations M (to be re-measured on the H100):
# - GEMV up to GEMV_MAX_M: one row is pure weight streaming; CUDA-core FMAs keep up with HBM for one row only.
# - split-K up to SPLITK_MAX_M: still bound by reading the weights (an M=64 tile is 64 FMAs a weight element),
#   which tensor cores do for free; splitting K gives ~2 programs an SM when N alone does not.
# - fused GEMM up to DEQUANT_CUBLAS_MIN_M; from there the weight is dequantized once into the activation dtype
#   (writing 2NK bytes, ~50 us for 14336x4096) and cuBLAS runs the matmul: at M = 4096 that adds ~7% to cuBLAS's
#   bf16 time, while the fused kernel pays its dequantization again for every band of M rows.
GEMV_MAX_M = 1
SPLITK_MAX_M = 64
DEQUANT_CUBLAS_MIN_M = 1024

# Split-K tiles: BLOCK_N channels (64: one warpgroup's wgmma height) x BLOCK_M rows (M rounded up to a power of
# two, at least 16 for tl.dot, at most SPLITK_MAX_M) x BLOCK_K. SPLIT_K makes about PROGRAMS_PER_SM programs an SM.
SPLITK_BLOCK_N = 64
SPLITK_BLOCK_K = 128
SPLITK_NUM_WARPS = 4
SPLITK_NUM_STAGES = 3
PROGRAMS_PER_SM = 2
REDUCE_BLOCK = 1024
# Dequantize kernel tiles: 16 rows x 64 words, 8 words a thread at 4 warps (two 16-byte loads; P times as many
# 16-bit values stored).
DEQUANT_BLOCK_N = 16
DEQUANT_BLOCK_KW = 64


@dataclass(frozen=True)
class Problem:
    """One call, ready to launch: 2-D contiguous x, contiguous weights, and what the kernels specialize on."""

    x: torch.Tensor  # (M, K)
    packed: torch.Tensor
    scales: torch.Tensor
    zeros: torch.Tensor | None
    bits: int
    group_size: int | None
    shape: LinearShape

    @property
    def group_arg(self) -> int:
        """The kernels' GROUP_SIZE: 0 means per-channel."""
        return self.group_size or 0

    @property
    def zeros_arg(self) -> torch.Tensor:
        """A tensor for the zeros pointer; never read when symmetric (HAS_ZEROS=False)."""
        return self.zeros if self.zeros is not None else self.scales

    def common(self) -> dict[str, object]:
        return {"BITS": self.bits, "GROUP_SIZE": self.group_arg, "HAS_ZEROS": self.zeros is not None}

    def precision(self) -> str:
        """tl.dot's input precision: fp32 activations stay fp32 (TF32 would miss the fp32 tolerance)."""
        return "ieee" if self.x.dtype == torch.float32 else "tf32"


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def splitk_tiles(m: int) -> int:
    """BLOCK_M of the split-K kernel: M rounded up to a power of two, from 16 (tl.dot's least) to SPLITK_MAX_M."""
    return min(max(16, 1 << max(0, m - 1).bit_length()), max(16, SPLITK_MAX_M))


def split_count(m: int, n: int, k: int, sm_count: int) -> int:
    """SPLIT_K: enough K splits for ~PROGRAMS_PER_SM programs an SM, never more than there are K tiles."""
    tiles = cdiv(n, SPLITK_BLOCK_N) * cdiv(m, splitk_tiles(m))
    k_tiles = max(1, cdiv(k, SPLITK_BLOCK_K))
    wanted = max(1, cdiv(PROGRAMS_PER_SM * sm_count, tiles))
    per_split = cdiv(k_tiles, min(wanted, k_tiles))
    return cdiv(k_tiles, per_split)  # no empty split


def pick_kernel(m: int) -> str:
    """The dispatcher's choice for M rows: 'gemv', 'splitk', 'gemm' or 'dequant_cublas'."""
    if m <= GEMV_MAX_M:
        return "gemv"
    if m <= SPLITK_MAX_M:
        return "splitk"
    return "gemm" if m < DEQUANT_CUBLAS_MIN_M else "dequant_cublas"


def _sm_count(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4  # the interpreter: a few splits, so CPU tests cover the split path


def gemv(p: Problem) -> torch.Tensor:
    """y (M, N): lowbit_gemv_kernel (triton_gemv.py), one row of programs per row of x, K split over up to
    SPLIT_K programs as the autotuned config says."""
    kernels = triton_gemv_kernels.load()
    return gemv_rows(p, kernels.lowbit_gemv_kernel, kernels.GEMV_MIN_BLOCK_N, kernels.words_per_split, tiles=1)


def gemv_rows(p: Problem, kernel: Any, min_block_n: int, words_per_split: Callable[[int, int, int], int],
              tiles: int) -> torch.Tensor:
    """y (M, N) from a GEMV kernel whose programs are (row of x, block of BLOCK_N rows, K split), each split
    ``words_per_split(words, BLOCK_KW * tiles, SPLIT_K)`` words long (``tiles``: the word tiles a step loads).
    The split path's fp32 sums and counters are a buffer of this call (never shared with another call, on any
    stream or device), zeroed by the split configs' pre-hook."""
    s = p.shape
    y = torch.empty((s.m, s.n), dtype=p.x.dtype, device=p.x.device)
    # int32: (M, N) fp32 sums as bits, then one counter per (row of x, block of rows) at the least BLOCK_N
    workspace = torch.empty(s.m * (s.n + cdiv(s.n, min_block_n)), dtype=torch.int32, device=p.x.device)
    kwords = p.packed.shape[1]

    def grid(meta: dict) -> tuple[int, int, int]:
        per_split = words_per_split(kwords, meta["BLOCK_KW"] * tiles, meta["SPLIT_K"])
        return s.m, cdiv(s.n, meta["BLOCK_N"]), cdiv(kwords, per_split)

    kernel[grid](p.x, p.packed, p.scales, p.zeros_arg, y, workspace, s.n, s.k, kwords, p.x.stride(0),
                 p.packed.stride(0), p.scales.stride(0), y.stride(0), **p.common())
    return y


def splitk(p: Problem, combine: str = "atomic") -> torch.Tensor:
    """y (M, N): lowbit_splitk_kernel; partial tiles combined by ``combine``: 'atomic' (tl.atomic_add into a zeroed
    fp32 buffer, then cast) or 'twopass' (fp32 partials per split, summed by lowbit_splitk_reduce_kernel)."""
    if combine not in ("atomic", "twopass"):
        raise ValueError(f"combine must be 'atomic' or 'twopass', got {combine!r}")
    s = p.shape
    block_m = splitk_tiles(s.m)
    split = split_count(s.m, s.n, s.k, _sm_count(p.x.device))
    tiles_per_split = cdiv(cdiv(s.k, SPLITK_BLOCK_K), split)
    if split == 1:
        out = torch.empty((s.m, s.n), dtype=p.x.dtype, device=p.x.device)
        mode = 0
    elif combine == "atomic":
        out = torch.zeros((s.m, s.n), dtype=torch.float32, device=p.x.device)
        mode = 1
    else:
        out = torch.empty((split, s.m, s.n), dtype=torch.float32, device=p.x.device)
        mode = 2
    grid = (cdiv(s.n, SPLITK_BLOCK_N), split, cdiv(s.m, block_m))
    triton_kernels.lowbit_splitk_kernel[grid](
        p.x, p.packed, p.scales, p.zeros_arg, out, s.m, s.n, s.k, p.packed.shape[1], tiles_per_split,
        p.x.stride(0), p.packed.stride(0), p.scales.stride(0), s.m * s.n, s.n,
        BLOCK_N=SPLITK_BLOCK_N, BLOCK_M=block_m, BLOCK_K=SPLITK_BLOCK_K, COMBINE=mode, PRECISION=p.precision(),
        num_warps=SPLITK_NUM_WARPS, num_stages=SPLITK_NUM_STAGES, **p.common())
    if mode == 0:
        return out
    if mode == 1:
        return out.to(p.x.dtype)
    y = torch.empty((s.m, s.n), dtype=p.x.dtype, device=p.x.device)
    triton_kernels.lowbit_splitk_reduce_kernel[(cdiv(s.m * s.n, REDUCE_BLOCK),)](
        out, y, s.m * s.n, SPLIT_K=split, BLOCK=REDUCE_BLOCK)
    return y


def gemm(p: Problem) -> torch.Tensor:
    """y (M, N): lowbit_gemm_kernel, autotuned tiles, no split."""
    s = p.shape
    y = torch.empty((s.m, s.n), dtype=p.x.dtype, device=p.x.device)
    grid = lambda meta: (cdiv(s.n, meta["BLOCK_N"]) * cdiv(s.m, meta["BLOCK_M"]),)  # noqa: E731
    bucket = 1 << max(0, s.m - 1).bit_length()
    triton_kernels.lowbit_gemm_kernel[grid](
        p.x, p.packed, p.scales, p.zeros_arg, y, s.m, s.n, s.k, p.packed.shape[1], bucket,
        p.x.stride(0), p.packed.stride(0), p.scales.stride(0), y.stride(0), PRECISION=p.precision(), **p.common())
    return y


def dequantize(p: Problem) -> torch.Tensor:
    """The (N, K) weight in the activation dtype: lowbit_dequant_kernel."""
    s = p.shape
    w = torch.empty((s.n, s.k), dtype=p.x.dtype, device=p.x.device)
    grid = (cdiv(s.n, DEQUANT_BLOCK_N), cdiv(p.packed.shape[1], DEQUANT_BLOCK_KW))
    triton_kernels.lowbit_dequant_kernel[grid](
        p.packed, p.scales, p.zeros_arg, w, s.n, s.k, p.packed.shape[1], p.packed.stride(0), p.scales.stride(0),
        w.stride(0), BLOCK_N=DEQUANT_BLOCK_N, BLOCK_KW=DEQUANT_BLOCK_KW, **p.common())
    return w


def dequant_cublas(p: Problem) -> torch.Tensor:
    """y (M, N): the weight dequantized by lowbit_dequant_kernel, then cuBLAS (F.linear) in the activation dtype."""
    return torch.nn.functional.linear(p.x, dequantize(p))


KERNELS = {"gemv": gemv, "splitk": splitk, "gemm": gemm, "dequant_cublas": dequant_cublas}


def auto(p: Problem) -> torch.Tensor:
    """y (M, N) by the kernel ``pick_kernel`` names for M."""
    return KERNELS[pick_kernel(p.shape.m)](p)
