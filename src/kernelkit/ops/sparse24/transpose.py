"""The transpose that turns cuSPARSELt's output into y, as one Triton kernel (imported on first use).

cusparselt_plan computes D = w x^T, (N, rows) row-major, and y = D^T[:M]. torch's ``D.t()[:M].contiguous()`` runs
aten's strided elementwise copy: neighbouring threads touch elements a whole row apart on one of its sides, and at
4096x11008 fp16 it took 299 us on an H200 (ncu; 0.6 TB/s, 88% of its warps' cycles waiting on memory) beside
the 339 us 2:4 matmul. Here a program moves a BLOCK x BLOCK tile: it reads BLOCK rows of D, consecutive columns
along each row, and ``tl.trans`` hands the tile to the store through shared memory, so the writes run along y's
rows too.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 64  # a tile: BLOCK x BLOCK elements, 8 KiB at 16 bits
GRID_Y_MAX = 65535  # CUDA's limit on a grid's second axis


@triton.jit
def transpose_rows_kernel(src_ptr, dst_ptr, n_src, n_dst, stride_src, stride_dst, BLOCK: tl.constexpr):
    """dst[i, j] = src[j, i] for i < n_dst, j < n_src: src (n_src, >= n_dst), dst (n_dst, n_src), unit column
    strides. Program (p, q) moves src rows p BLOCK.. and columns q BLOCK.."""
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)  # of src: columns of dst
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)  # of src: rows of dst
    inside = (rows[:, None] < n_src) & (cols[None, :] < n_dst)
    tile = tl.load(src_ptr + rows[:, None].to(tl.int64) * stride_src + cols[None, :], mask=inside)
    tl.store(dst_ptr + cols[:, None].to(tl.int64) * stride_dst + rows[None, :], tl.trans(tile),
             mask=tl.trans(inside))


def transposed_rows(src: torch.Tensor, n_rows: int) -> torch.Tensor:
    """``src.t()[:n_rows]`` as a new contiguous tensor: src (N, R) with unit column stride, n_rows <= R."""
    n_src = src.shape[0]
    out = torch.empty((n_rows, n_src), dtype=src.dtype, device=src.device)
    grid = (triton.cdiv(n_src, BLOCK), triton.cdiv(n_rows, BLOCK))
    if out.numel() == 0:
        return out
    if grid[1] > GRID_Y_MAX or src.stride(1) != 1:
        return src.t()[:n_rows].contiguous()  # past the grid's limit (4M rows of x) or an unusual layout
    transpose_rows_kernel[grid](src, out, n_src, n_rows, src.stride(0), out.stride(0), BLOCK=BLOCK, num_warps=4)
    return out
