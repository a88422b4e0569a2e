"""Triton kernels that write cuSPARSELt's compressed form (layout.py): from a pruned weight, or pruning W with the
transposable mask and writing W's and W^T's compressed forms in the same pass (a training step's whole
preparation of its two sparse operands). Imported on first use (backends/lazy.py).

A program owns a 64 x 64 tile: one 64-row metadata band by two 32-column metadata tiles, so each program writes
whole metadata tiles and no two programs touch one byte. Rows past the weight read as zeros: their groups get
nibble 0xE, as the library pads rows to 64; columns are padded to 32, so a last tile of 32 writes one.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernelkit.ops.sparse24.triton import _best_transposable_mask, _pruned_blocks, _split4

TILE = 64


@triton.jit
def store_compressed(tile, block_row, block_col, values_ptr, meta_ptr, n_rows, n_cols, cols_p):
    """Write a pruned (64, 64) tile at rows 64 block_row.., columns 64 block_col.. of an (n_rows, n_cols)
    weight into its compressed form: kept values into values_ptr ((n_rows, n_cols / 2) row-major), nibbles
    into meta_ptr (bytes; cols_p: n_cols padded to 32)."""
    rows = block_row * 64 + tl.arange(0, 64)
    groups = tl.reshape(tile, (64, 16, 4))
    pos = tl.arange(0, 4)[None, None, :]
    nonzero = groups != 0
    first = tl.min(tl.where(nonzero & (pos < 3), pos, 2), axis=2)
    last = tl.max(tl.where(nonzero, pos, -1), axis=2)
    second = tl.where(last > first, last, 3)
    v0 = tl.sum(tl.where(pos == first[:, :, None], groups.to(tl.float32), 0.0), axis=2)
    v1 = tl.sum(tl.where(pos == second[:, :, None], groups.to(tl.float32), 0.0), axis=2)
    kept = tl.reshape(tl.join(v0, v1), (64, 32)).to(values_ptr.dtype.element_ty)
    half = block_col * 32 + tl.arange(0, 32)
    tl.store(values_ptr + rows[:, None].to(tl.int64) * (n_cols // 2) + half[None, :], kept,
             mask=(rows[:, None] < n_rows) & (half[None, :] < n_cols // 2))
    nibbles = tl.reshape(first | (second << 2), (4, 2, 8, 16))  # (a, high, lane, group): row 16a + 8 high + lane
    low, high = tl.split(tl.permute(nibbles, (0, 2, 3, 1)))
    byte = (low | (high << 4)).to(tl.uint8)  # (a, lane, group)
    a = tl.arange(0, 4)[:, None, None]
    lane = tl.arange(0, 8)[None, :, None]
    g = tl.arange(0, 16)[None, None, :]
    g8 = g % 8
    tile = block_col * 2 + g // 8  # of 32 columns
    at = (block_row.to(tl.int64) * 8 * cols_p + tile * 256
          + 4 * (16 * a + 2 * lane + (g8 // 2) % 2) + 2 * (g8 % 2) + g8 // 4)
    tl.store(meta_ptr + at, byte, mask=(tile < cols_p // 32) & (a >= 0) & (lane >= 0))


@triton.jit
def compress24_kernel(w_ptr, values_ptr, meta_ptr, n_rows, n_cols, cols_p, stride_w):
    """Program (p, q): the compressed form of the pruned w's rows 64 p.., columns 64 q..."""
    rows = tl.program_id(0) * 64 + tl.arange(0, 64)
    cols = tl.program_id(1) * 64 + tl.arange(0, 64)
    inside = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    tile = tl.load(w_ptr + rows[:, None].to(tl.int64) * stride_w + cols[None, :], mask=inside, other=0.0)
    store_compressed(tile, tl.program_id(0), tl.program_id(1), values_ptr, meta_ptr, n_rows, n_cols, cols_p)


@triton.jit
def prune_compress_kernel(x_ptr, values_ptr, meta_ptr, values_t_ptr, meta_t_ptr, n_rows, n_cols, stride_xm,
                          stride_xk):
    """Program (p, q): prune x's rows 64 p.., columns 64 q.. with the transposable mask (triton.py's scan), then
    write the tile into x~'s compressed form and its transpose into x~^T's."""
    rows = (tl.program_id(0) * 64 + tl.arange(0, 64)).to(tl.int64)
    cols = (tl.program_id(1) * 64 + tl.arange(0, 64)).to(tl.int64)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xk, mask=mask, other=0.0)
    blocks = tl.permute(tl.reshape(x, (16, 4, 16, 4)), (0, 2, 1, 3))
    col0, col1, col2, col3 = _split4(tl.reshape(blocks, (16, 16, 2, 2, 2, 2)))
    x00, x10, x20, x30 = _split4(col0)
    x01, x11, x21, x31 = _split4(col1)
    x02, x12, x22, x32 = _split4(col2)
    x03, x13, x23, x33 = _split4(col3)
    keep = _best_transposable_mask(x00, x01, x02, x03, x10, x11, x12, x13, x20, x21, x22, x23, x30, x31, x32, x33)
    blocks = _pruned_blocks(x00, x01, x02, x03, x10, x11, x12, x13, x20, x21, x22, x23, x30, x31, x32, x33, keep)
    blocks = tl.reshape(blocks, (16, 16, 4, 4))
    y = tl.reshape(tl.permute(blocks, (0, 2, 1, 3)), (64, 64))
    yt = tl.reshape(tl.permute(blocks, (1, 3, 0, 2)), (64, 64))
    store_compressed(y, tl.program_id(0), tl.program_id(1), values_ptr, meta_ptr, n_rows, n_cols,
                     (n_cols + 31) // 32 * 32)
    store_compressed(yt, tl.program_id(1), tl.program_id(0), values_t_ptr, meta_t_ptr, n_cols, n_rows,
                     (n_rows + 31) // 32 * 32)
