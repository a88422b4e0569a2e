"""cuSPARSELt's compressed form of a 2:4 weight, written by one Triton pass at memory speed (Hopper, 16-bit).

Why. A 2:4 training step compresses W and W^T again at every step (the dense weight is what is trained). On an
H200 (torch 2.11, 2026-11-27) ``torch._cslt_compress`` of an 11008x4096 fp16 weight takes 981 us of GPU time: two
library kernels, ``compressSparseTensor_4_2`` (863 us) and ``hopperSparseMetaDataReorder`` (80 us), for 90 MB read
and 50 MB written, which a copy moves in ~47 us. Twice a step, that was 2 of the step's 5 ms.

Here one Triton program reads 64 rows x 64 columns of the pruned weight and writes their kept values and their two
metadata tiles in the library's layout (layout.py). Where that layout is not known to hold (another GPU
generation, another library version), ``compress`` defers to the library: ``layout_verified`` compares this
kernel's bytes with the library's once per device and dtype.
"""

from __future__ import annotations

import functools
import warnings

import torch

from kernelkit.ops.sparse24 import cusparselt, cusparselt_plan
from kernelkit.ops.sparse24.layout import COLS, ROWS, compressed_bytes, compressed_shape, padded


@functools.cache
def _kernel():  # noqa: ANN202 - a triton.JITFunction, built on first use (Triton imported only then)
    import triton
    import triton.language as tl

    @triton.jit
    def compress24_kernel(w_ptr, values_ptr, meta_ptr, n_rows, n_cols, cols_p, stride_w):
        """Program (p, q): rows 64 p.., columns 64 q.. of w; writes their values and two metadata tiles."""
        rows = tl.program_id(0) * 64 + tl.arange(0, 64)
        cols = tl.program_id(1) * 64 + tl.arange(0, 64)
        inside = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
        tile = tl.load(w_ptr + rows[:, None].to(tl.int64) * stride_w + cols[None, :], mask=inside, other=0.0)
        groups = tl.reshape(tile, (64, 16, 4))
        pos = tl.arange(0, 4)[None, None, :]
        nonzero = groups != 0
        first = tl.min(tl.where(nonzero & (pos < 3), pos, 2), axis=2)
        last = tl.max(tl.where(nonzero, pos, -1), axis=2)
        second = tl.where(last > first, last, 3)
        v0 = tl.sum(tl.where(pos == first[:, :, None], groups.to(tl.float32), 0.0), axis=2)
        v1 = tl.sum(tl.where(pos == second[:, :, None], groups.to(tl.float32), 0.0), axis=2)
        kept = tl.reshape(tl.join(v0, v1), (64, 32)).to(values_ptr.dtype.element_ty)
        half = tl.program_id(1) * 32 + tl.arange(0, 32)
        tl.store(values_ptr + rows[:, None].to(tl.int64) * (n_cols // 2) + half[None, :], kept,
                 mask=(rows[:, None] < n_rows) & (half[None, :] < n_cols // 2))
        nibbles = tl.reshape(first | (second << 2), (4, 2, 8, 16))  # (a, high, lane, group)
        low, high = tl.split(tl.permute(nibbles, (0, 2, 3, 1)))
        byte = (low | (high << 4)).to(tl.uint8)  # (a, lane, group)
        a = tl.arange(0, 4)[:, None, None]
        lane = tl.arange(0, 8)[None, :, None]
        g = tl.arange(0, 16)[None, None, :]
        g8 = g % 8
        at = (tl.program_id(0).to(tl.int64) * 8 * cols_p + (tl.program_id(1) * 2 + g // 8) * 256
              + 4 * (16 * a + 2 * lane + (g8 // 2) % 2) + 2 * (g8 % 2) + g8 // 4)
        tl.store(meta_ptr + at, byte)

    return compress24_kernel


def compress_triton(w: torch.Tensor) -> torch.Tensor:
    """The compressed form of a pruned fp16/bf16 w (N, K), K a multiple of 4, by the Triton kernel: one pass."""
    import triton

    n_rows, n_cols = w.shape
    if w.stride(1) != 1:
        w = w.contiguous()
    out = torch.empty(compressed_shape(n_rows, n_cols), dtype=w.dtype, device=w.device)
    flat = out.view(torch.uint8).reshape(-1)
    values = flat[: n_rows * n_cols].view(w.dtype)
    meta = flat[n_rows * n_cols:]
    grid = (triton.cdiv(n_rows, ROWS), triton.cdiv(n_cols, COLS))
    _kernel()[grid](w, values, meta, n_rows, n_cols, padded(n_cols, COLS), w.stride(0), num_warps=4)
    return out


@functools.cache
def layout_verified(device: int, dtype: torch.dtype) -> bool:
    """Whether compress_triton writes the bytes cuSPARSELt writes on this GPU for this dtype: compared once, on
    a 128x256 pruned weight with every group full (a mismatch warns, and compress uses the library)."""
    from kernelkit.ops import sparse24  # the package imports its impls, and they this module

    if torch.cuda.get_device_capability(device)[0] != 9 or dtype not in (torch.float16, torch.bfloat16):
        return False
    generator = torch.Generator().manual_seed(24)
    w = sparse24.sparsify24(torch.randn(128, 256, generator=generator).to(dtype)).to(f"cuda:{device}")
    if cusparselt_plan.unavailable(w, w) is not None:
        return False
    ours, theirs = compress_triton(w), cusparselt_plan.compress(w)
    written = compressed_bytes(*w.shape)
    same = torch.equal(ours.view(torch.uint8).reshape(-1)[:written], theirs.view(torch.uint8).reshape(-1)[:written])
    if not same:
        warnings.warn("kernelkit's 2:4 compression does not match this cuSPARSELt's layout; compressing with the "
                      "library instead (about 20x slower)", RuntimeWarning, stacklevel=2)
    return same


def compress(w: torch.Tensor) -> torch.Tensor:
    """w (N, K) pruned 2:4, fp16/bf16 on a GPU -> its compressed form: the Triton kernel where its layout is the
    library's (layout_verified), else cusparseLt through cusparselt_plan (or torch where that does not load)."""
    cusparselt.check_weight(w)
    cusparselt.require_cusparselt(w)
    device = w.device.index if w.device.index is not None else torch.cuda.current_device()
    if layout_verified(device, w.dtype):
        return compress_triton(w)
    if cusparselt_plan.unavailable(w, w) is None:
        return cusparselt_plan.compress(w)
    return cusparselt.compress(w)
