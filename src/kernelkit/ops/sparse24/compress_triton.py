"""Triton kernels that write cuSPARSELt's compressed form (layout.py): from a pruned weight, or pruning W with the
transposable mask and writing W's and W^T's compressed forms in the same pass (a training step's whole
preparation of its two sparse operands). Imported on first use (backends/lazy.py).

A program owns a 64 x 64 tile (32 x 64 in the pruning pass: then its transpose is 64 x 32): whole 16-row
groups of metadata bands by whole 32-column metadata tiles, so no two programs touch one byte. Rows past the
weight read as zeros: their groups get nibble 0xE, as the library pads rows to 64; columns are padded to 32.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernelkit.ops.sparse24.triton import _best_transposable_mask, _pruned_blocks, _split4

TILE = 64


@triton.jit
def store_compressed(tile, block_row, block_col, values_ptr, meta_ptr, n_rows, n_cols, cols_p,
                     TR: tl.constexpr, TC: tl.constexpr):
    """Write a pruned (TR, TC) tile (TR, TC: 32 or 64) at rows TR block_row.., columns TC block_col.. of an
    (n_rows, n_cols) weight into its compressed form: kept values into values_ptr ((n_rows, n_cols / 2)
    row-major), nibbles into meta_ptr (bytes; cols_p: n_cols padded to 32). A 32-row tile writes its half of
    each metadata byte block: a byte holds rows l and l + 8 of one 16-row group, never two tiles' rows."""
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
    store_compressed(tile, tl.program_id(0), tl.program_id(1), values_ptr, meta_ptr, n_rows, n_cols, cols_p, 64, 64)


@triton.jit
def prune_compress_kernel(x_ptr, values_ptr, meta_ptr, values_t_ptr, meta_t_ptr, n_rows, n_cols, stride_xm,
                          stride_xk, BLOCK_M: tl.constexpr):
    """Program (p, q): prune x's rows BLOCK_M p.., columns 64 q.. (BLOCK_M: 32 or 64) with the transposable mask
    (triton.py's scan), then write the tile into x~'s compressed form and its transpose into x~^T's. The grid's
    rows cover n_rows padded to 64: the metadata's padded rows are written too."""
    rows = (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    cols = (tl.program_id(1) * 64 + tl.arange(0, 64)).to(tl.int64)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xk, mask=mask, other=0.0)
    blocks = tl.permute(tl.reshape(x, (BLOCK_M // 4, 4, 16, 4)), (0, 2, 1, 3))
    col0, col1, col2, col3 = _split4(tl.reshape(blocks, (BLOCK_M // 4, 16, 2, 2, 2, 2)))
    x00, x10, x20, x30 = _split4(col0)
    x01, x11, x21, x31 = _split4(col1)
    x02, x12, x22, x32 = _split4(col2)
    x03, x13, x23, x33 = _split4(col3)
    keep = _best_transposable_mask(x00, x01, x02, x03, x10, x11, x12, x13, x20, x21, x22, x23, x30, x31, x32, x33)
    blocks = _pruned_blocks(x00, x01, x02, x03, x10, x11, x12, x13, x20, x21, x22, x23, x30, x31, x32, x33, keep)
    blocks = tl.reshape(blocks, (BLOCK_M // 4, 16, 4, 4))
    y = tl.reshape(tl.permute(blocks, (0, 2, 1, 3)), (BLOCK_M, 64))
    yt = tl.reshape(tl.permute(blocks, (1, 3, 0, 2)), (64, BLOCK_M))
    store_compressed(y, tl.program_id(0), tl.program_id(1), values_ptr, meta_ptr, n_rows, n_cols,
                     (n_cols + 31) // 32 * 32, BLOCK_M, 64)
    store_compressed(yt, tl.program_id(1), tl.program_id(0), values_t_ptr, meta_t_ptr, n_cols, n_rows,
                     (n_rows + 31) // 32 * 32, 64, BLOCK_M)
