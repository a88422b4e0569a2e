"""cuSPARSELt's compressed form of a 2:4 weight, written by one Triton pass at memory speed (Hopper, 16-bit).

Why. A 2:4 training step compresses W and W^T again at every step (the dense weight is what is trained). On an
H200 (torch 2.11, 2026-11-27) ``torch._cslt_compress`` of an 11008x4096 fp16 weight takes 981 us of GPU time: two
library kernels, ``compressSparseTensor_4_2`` (863 us) and ``hopperSparseMetaDataReorder`` (80 us), for 90 MB read
and 50 MB written, which a copy moves in ~47 us. Twice a step, that was 2 of the step's 5 ms.

Here one Triton program reads 64 rows x 64 columns of the pruned weight and writes their kept values and their two
metadata tiles in the library's layout (layout.py; the kernel is compress_triton.py's). Where that layout is not
known to hold (another GPU generation, another library version), ``compress`` defers to the library:
``layout_verified`` compares this kernel's bytes with the library's once per device and dtype.
"""

from __future__ import annotations

import functools
import warnings

import torch

from kernelkit.backends.lazy import kernel_module
from kernelkit.ops.sparse24 import cusparselt, cusparselt_plan
from kernelkit.ops.sparse24.layout import COLS, ROWS, compressed_shape, padded, written_bytes

kernels = kernel_module("kernelkit.ops.sparse24", "compress_triton")  # Triton: imported on first use


def compress_triton(w: torch.Tensor) -> torch.Tensor:
    """The compressed form of a pruned fp16/bf16 w (N, K), K a multiple of 4, by the Triton kernel: one pass."""
    n_rows, n_cols = w.shape
    if w.stride(1) != 1:
        w = w.contiguous()
    out, values, meta = _compressed_tensor(w, n_rows, n_cols)
    grid = (-(-n_rows // ROWS), -(-n_cols // 64))
    kernels.compress24_kernel[grid](w, values, meta, n_rows, n_cols, padded(n_cols, COLS), w.stride(0), num_warps=4)
    return out


def _compressed_tensor(w: torch.Tensor, n_rows: int, n_cols: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(the compressed tensor of an (n_rows, n_cols) weight like w, its values as w's dtype, its metadata bytes)."""
    out = torch.empty(compressed_shape(n_rows, n_cols), dtype=w.dtype, device=w.device)
    flat = out.view(torch.uint8).reshape(-1)
    return out, flat[: n_rows * n_cols].view(w.dtype), flat[n_rows * n_cols:]


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
    written = written_bytes(*w.shape)
    same = torch.equal(ours.view(torch.uint8).reshape(-1)[:written], theirs.view(torch.uint8).reshape(-1)[:written])
    if not same:
        warnings.warn("kernelkit's 2:4 compression does not match this cuSPARSELt's layout; compressing with the "
                      "library instead (about 30x slower on an H200)", RuntimeWarning, stacklevel=2)
    return same


def _verified(w: torch.Tensor) -> bool:
    cusparselt.check_weight(w)
    cusparselt.require_cusparselt(w)
    return layout_verified(w.device.index if w.device.index is not None else torch.cuda.current_device(), w.dtype)


def _library_compress(w: torch.Tensor) -> torch.Tensor:
    return cusparselt_plan.compress(w) if cusparselt_plan.unavailable(w, w) is None else cusparselt.compress(w)


def compress(w: torch.Tensor) -> torch.Tensor:
    """w (N, K) pruned 2:4, fp16/bf16 on a GPU -> its compressed form: the Triton kernel where its layout is the
    library's (layout_verified), else cusparseLt through cusparselt_plan (or torch where that does not load)."""
    return compress_triton(w) if _verified(w) else _library_compress(w)
