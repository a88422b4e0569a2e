"""The Triton kernel that writes cuSPARSELt's compressed form (layout.py) of a pruned weight. Imported on first
use (backends/lazy.py).

A program owns a 64 x 64 tile: a 64-row metadata band by two 32-column metadata tiles, so no two programs touch
one byte. Rows past the weight read as zeros: their groups get nibble 0xE, as the library pads rows to 64;
columns are padded to 32, so a last tile of 32 columns writes one metadata tile.

Tried and dropped: one pass that prunes W with the transposable mask and writes both W~'s and W~^T's compressed
forms, in 32- or 64-row tiles. On an H200 (2026-11-27, 11008x4096 fp16, warm, CUDA
events) it took 261-401 us over five tile and warp shapes, against 181 us for the pruning kernel and two of these
(106 + 2 x 39); in cold training steps, interleaved in one process, the two were within their spread (1.016x and
1.012x nn.Linear). Its code is in the history.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def store_compressed(tile, block_row, block_col, values_ptr, meta_ptr, n_rows, n_cols, cols_p):
    """Write a pruned (64, 64) tile at rows 64 block_row.., columns 64 block_col.. of an (n_rows, n_cols) weight
    into its compressed form: kept values into values_ptr ((n_rows, n_cols / 2) row-major), nibbles into
    meta_ptr (bytes; cols_p: n_cols padded to 32)."""
    TR: tl.constexpr = 64
    TC: tl.constexpr = 64
    rows = block_row * TR + tl.arange(0, TR)
    groups = tl.reshape(tile, (TR, TC // 4, 4))
    pos = tl.arange(0, 4)[None, None, :]
    nonzero = groups != 0
    first = tl.min(tl.where(nonzero & (pos < 3), pos, 2), axis=2)
    last = tl.max(tl.where(nonzero, pos, -1), axis=2)
    second = tl.where(last > first, last, 3)
    v0 = tl.sum(tl.where(pos == first[:, :, None], groups.to(tl.float32), 0.0), axis=2)
    v1 = tl.sum(tl.where(pos == second[:, :, None], groups.to(tl.float32), 0.0), axis=2)
    kept = tl.reshape(tl.join(v0, v1), (TR, TC // 2)).to(values_ptr.dtype.element_ty)
    half = block_col * (TC // 2) + tl.arange(0, TC // 2)
    tl.store(values_ptr + rows[:, None].to(tl.int64) * (n_cols // 2) + half[None, :], kept,
             mask=(rows[:, None] < n_rows) & (half[None, :] < n_cols // 2))
    # (16-row group, high, lane, group of 4 columns): row 16 group + 8 high + lane of the tile
    nibbles = tl.reshape(first | (second << 2), (TR // 16, 2, 8, TC // 4))
    low, high = tl.split(tl.permute(nibbles, (0, 2, 3, 1)))
    byte = (low | (high << 4)).to(tl.uint8)  # (16-row group, lane, group)
    sixteen = block_row * (TR // 16) + tl.arange(0, TR // 16)[:, None, None]  # 16-row groups of the weight
    lane = tl.arange(0, 8)[None, :, None]
    g = tl.arange(0, TC // 4)[None, None, :]
    g8 = g % 8
    tile32 = block_col * (TC // 32) + g // 8  # 32-column metadata tile
    at = ((sixteen // 4).to(tl.int64) * 8 * cols_p + tile32 * 256
          + 4 * (16 * (sixteen % 4) + 2 * lane + (g8 // 2) % 2) + 2 * (g8 % 2) + g8 // 4)
    tl.store(meta_ptr + at, byte, mask=(tile32 < cols_p // 32) & (lane >= 0))


@triton.jit
def compress24_kernel(w_ptr, values_ptr, meta_ptr, n_rows, n_cols, cols_p, stride_w):
    """Program (p, q): the compressed form of the pruned w's rows 64 p.., columns 64 q..."""
    rows = tl.program_id(0) * 64 + tl.arange(0, 64)
    cols = tl.program_id(1) * 64 + tl.arange(0, 64)
    inside = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    tile = tl.load(w_ptr + rows[:, None].to(tl.int64) * stride_w + cols[None, :], mask=inside, other=0.0)
    store_compressed(tile, tl.program_id(0), tl.program_id(1), values_ptr, meta_ptr, n_rows, n_cols, cols_p)
