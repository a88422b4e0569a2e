"""Triton kernels of the 2:4 sparsifiers: one pass, each program prunes a tile in registers.

Imported on first use (see backends/lazy.py): whether kernels run compiled or in the interpreter is fixed when
triton is first imported. In the interpreter each kernel has one config and nothing is tuned (a CPU timing says
nothing about a GPU); on a GPU ``@triton.autotune`` picks the tile per shape.

Layout trick: a tile of K-contiguous elements is reshaped so that each group of four lies along a last axis of
(2, 2), and ``tl.split`` takes the four elements apart without moving data between threads; ``tl.join`` puts the
pruned ones back. The loads and stores stay whole 2-D tiles, so they are as wide as a copy's.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernelkit.backends.triton import do_bench, interpreting

# (BLOCK_M, BLOCK_K, num_warps). Rowwise: 4K-16K elements a program, 16-64 per thread (several 16-byte vectors
# in flight each, as a copy needs). Transposable: smaller tiles, its 90-mask scan keeps ~30 values a block live.
# Four each: every config is compiled on first use per dtype, and more would slow a first call for little gain.
ROWWISE_TILES = [(16, 256, 4), (32, 256, 8), (64, 256, 8), (32, 512, 8)]
TRANSPOSABLE_TILES = [(32, 64, 4), (64, 64, 4), (32, 128, 4), (64, 128, 8)]
# The interpreter's one tile: small, so the CPU tests' tiny shapes still span several programs and masked edges.
INTERPRETER_ROWWISE_TILE = (16, 64, 4)
INTERPRETER_TRANSPOSABLE_TILE = (16, 64, 4)


def _configs(tiles: list[tuple[int, int, int]], interpreter_tile: tuple[int, int, int]) -> list[triton.Config]:
    chosen = [interpreter_tile] if interpreting() else tiles
    return [triton.Config({"BLOCK_M": m, "BLOCK_K": k}, num_warps=w) for m, k, w in chosen]


@triton.jit
def _split4(t):
    """(..., 2, 2) -> its four (...) slices in index order 0..3 (index = 2 * second-to-last + last)."""
    even, odd = tl.split(t)
    x0, x2 = tl.split(even)
    x1, x3 = tl.split(odd)
    return x0, x1, x2, x3


@triton.jit
def _join4(x0, x1, x2, x3):
    """The inverse of _split4: four (...) tensors -> (..., 2, 2)."""
    return tl.join(tl.join(x0, x2), tl.join(x1, x3))


@triton.jit
def _keep_two_of_four(x0, x1, x2, x3):
    """Prune one group: keep the two largest |x|; of equal magnitudes the lower index wins.

    Element i is kept when fewer than two others beat it; j beats i when |x_j| > |x_i|, or when they are equal
    and j < i. Six compares decide all twelve ordered pairs.
    """
    a0, a1, a2, a3 = tl.abs(x0), tl.abs(x1), tl.abs(x2), tl.abs(x3)
    b10 = (a1 > a0).to(tl.int32)  # 1 beats 0 (on a tie 0 beats 1)
    b20 = (a2 > a0).to(tl.int32)
    b30 = (a3 > a0).to(tl.int32)
    b21 = (a2 > a1).to(tl.int32)
    b31 = (a3 > a1).to(tl.int32)
    b32 = (a3 > a2).to(tl.int32)
    beaten0 = b10 + b20 + b30
    beaten1 = (1 - b10) + b21 + b31
    beaten2 = (1 - b20) + (1 - b21) + b32
    beaten3 = (1 - b30) + (1 - b31) + (1 - b32)
    zero = tl.zeros_like(x0)
    return (tl.where(beaten0 < 2, x0, zero), tl.where(beaten1 < 2, x1, zero),
            tl.where(beaten2 < 2, x2, zero), tl.where(beaten3 < 2, x3, zero))


@triton.autotune(configs=_configs(ROWWISE_TILES, INTERPRETER_ROWWISE_TILE), key=["n_rows", "n_cols"],
                 do_bench=do_bench)
@triton.jit
def sparsify24_rowwise_kernel(x_ptr, y_ptr, n_rows, n_cols, stride_xm, stride_xk, stride_ym,
                              BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    # Read MK, write MK elements. n_cols and BLOCK_K are multiples of 4, so a masked edge never cuts a group.
    rows = (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)  # row * stride passes 2**31
    cols = (tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)).to(tl.int64)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xk, mask=mask, other=0.0)
    x0, x1, x2, x3 = _split4(tl.reshape(x, (BLOCK_M, BLOCK_K // 4, 2, 2)))
    y0, y1, y2, y3 = _keep_two_of_four(x0, x1, x2, x3)
    y = tl.reshape(_join4(y0, y1, y2, y3), (BLOCK_M, BLOCK_K))
    tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :], y, mask=mask)


@triton.jit
def _pair_sums(a0, a1, a2, a3):
    """One row's six pair sums in float32, in the order of patterns.PAIRS: (0,1) (0,2) (0,3) (1,2) (1,3) (2,3)."""
    a0, a1, a2, a3 = tl.abs(a0).to(tl.float32), tl.abs(a1).to(tl.float32), tl.abs(a2).to(tl.float32), \
        tl.abs(a3).to(tl.float32)
    return a0 + a1, a0 + a2, a0 + a3, a1 + a2, a1 + a3, a2 + a3


@triton.jit
def _best_transposable_mask(x00, x01, x02, x03, x10, x11, x12, x13, x20, x21, x22, x23, x30, x31, x32, x33):
    """The 16 bits (bit 4r + c) of the best of the 90 transposable masks of each block, as patterns.py defines:
    float32 scores added in its order, the first mask in its order among equal scores. Written out, not looped:
    the mask table is then plain constants, and the interpreter runs one function call, not 90."""
    s0_0, s0_1, s0_2, s0_3, s0_4, s0_5 = _pair_sums(x00, x01, x02, x03)
    s1_0, s1_1, s1_2, s1_3, s1_4, s1_5 = _pair_sums(x10, x11, x12, x13)
    s2_0, s2_1, s2_2, s2_3, s2_4, s2_5 = _pair_sums(x20, x21, x22, x23)
    s3_0, s3_1, s3_2, s3_3, s3_4, s3_5 = _pair_sums(x30, x31, x32, x33)
    best = tl.full(s0_0.shape, -1.0, tl.float32)  # every score is >= 0: the first mask is always taken
    keep = tl.zeros(s0_0.shape, tl.int32)
    # BEGIN SCAN (generated by patterns.scan_source(); a test checks these lines against it)
    score = (s0_0 + s1_0) + (s2_5 + s3_5)
    keep, best = tl.where(score > best, 52275, keep), tl.maximum(best, score)
    score = (s0_0 + s1_1) + (s2_4 + s3_5)
    keep, best = tl.where(score > best, 51795, keep), tl.maximum(best, score)
    score = (s0_0 + s1_1) + (s2_5 + s3_4)
    keep, best = tl.where(score > best, 44115, keep), tl.maximum(best, score)
    score = (s0_0 + s1_2) + (s2_3 + s3_5)
    keep, best = tl.where(score > best, 50835, keep), tl.maximum(best, score)
    score = (s0_0 + s1_2) + (s2_5 + s3_3)
    keep, best = tl.where(score > best, 27795, keep), tl.maximum(best, score)
    score = (s0_0 + s1_3) + (s2_2 + s3_5)
    keep, best = tl.where(score > best, 51555, keep), tl.maximum(best, score)
    score = (s0_0 + s1_3) + (s2_5 + s3_2)
    keep, best = tl.where(score > best, 40035, keep), tl.maximum(best, score)
    score = (s0_0 + s1_4) + (s2_1 + s3_5)
    keep, best = tl.where(score > best, 50595, keep), tl.maximum(best, score)
    score = (s0_0 + s1_4) + (s2_5 + s3_1)
    keep, best = tl.where(score > best, 23715, keep), tl.maximum(best, score)
    score = (s0_0 + s1_5) + (s2_0 + s3_5)
    keep, best = tl.where(score > best, 50115, keep), tl.maximum(best, score)
    score = (s0_0 + s1_5) + (s2_1 + s3_4)
    keep, best = tl.where(score > best, 42435, keep), tl.maximum(best, score)
    score = (s0_0 + s1_5) + (s2_2 + s3_3)
    keep, best = tl.where(score > best, 27075, keep), tl.maximum(best, score)
    score = (s0_0 + s1_5) + (s2_3 + s3_2)
    keep, best = tl.where(score > best, 38595, keep), tl.maximum(best, score)
    score = (s0_0 + s1_5) + (s2_4 + s3_1)
    keep, best = tl.where(score > best, 23235, keep), tl.maximum(best, score)
    score = (s0_0 + s1_5) + (s2_5 + s3_0)
    keep, best = tl.where(score > best, 15555, keep), tl.maximum(best, score)
    score = (s0_1 + s1_0) + (s2_4 + s3_5)
    keep, best = tl.where(score > best, 51765, keep), tl.maximum(best, score)
    score = (s0_1 + s1_0) + (s2_5 + s3_4)
    keep, best = tl.where(score > best, 44085, keep), tl.maximum(best, score)
    score = (s0_1 + s1_1) + (s2_4 + s3_4)
    keep, best = tl.where(score > best, 43605, keep), tl.maximum(best, score)
    score = (s0_1 + s1_2) + (s2_3 + s3_4)
    keep, best = tl.where(score > best, 42645, keep), tl.maximum(best, score)
    score = (s0_1 + s1_2) + (s2_4 + s3_3)
    keep, best = tl.where(score > best, 27285, keep), tl.maximum(best, score)
    score = (s0_1 + s1_3) + (s2_2 + s3_4)
    keep, best = tl.where(score > best, 43365, keep), tl.maximum(best, score)
    score = (s0_1 + s1_3) + (s2_4 + s3_2)
    keep, best = tl.where(score > best, 39525, keep), tl.maximum(best, score)
    score = (s0_1 + s1_4) + (s2_0 + s3_5)
    keep, best = tl.where(score > best, 50085, keep), tl.maximum(best, score)
    score = (s0_1 + s1_4) + (s2_1 + s3_4)
    keep, best = tl.where(score > best, 42405, keep), tl.maximum(best, score)
    score = (s0_1 + s1_4) + (s2_2 + s3_3)
    keep, best = tl.where(score > best, 27045, keep), tl.maximum(best, score)
    score = (s0_1 + s1_4) + (s2_3 + s3_2)
    keep, best = tl.where(score > best, 38565, keep), tl.maximum(best, score)
    score = (s0_1 + s1_4) + (s2_4 + s3_1)
    keep, best = tl.where(score > best, 23205, keep), tl.maximum(best, score)
    score = (s0_1 + s1_4) + (s2_5 + s3_0)
    keep, best = tl.where(score > best, 15525, keep), tl.maximum(best, score)
    score = (s0_1 + s1_5) + (s2_0 + s3_4)
    keep, best = tl.where(score > best, 41925, keep), tl.maximum(best, score)
    score = (s0_1 + s1_5) + (s2_4 + s3_0)
    keep, best = tl.where(score > best, 15045, keep), tl.maximum(best, score)
    score = (s0_2 + s1_0) + (s2_3 + s3_5)
    keep, best = tl.where(score > best, 50745, keep), tl.maximum(best, score)
    score = (s0_2 + s1_0) + (s2_5 + s3_3)
    keep, best = tl.where(score > best, 27705, keep), tl.maximum(best, score)
    score = (s0_2 + s1_1) + (s2_3 + s3_4)
    keep, best = tl.where(score > best, 42585, keep), tl.maximum(best, score)
    score = (s0_2 + s1_1) + (s2_4 + s3_3)
    keep, best = tl.where(score > best, 27225, keep), tl.maximum(best, score)
    score = (s0_2 + s1_2) + (s2_3 + s3_3)
    keep, best = tl.where(score > best, 26265, keep), tl.maximum(best, score)
    score = (s0_2 + s1_3) + (s2_0 + s3_5)
    keep, best = tl.where(score > best, 50025, keep), tl.maximum(best, score)
    score = (s0_2 + s1_3) + (s2_1 + s3_4)
    keep, best = tl.where(score > best, 42345, keep), tl.maximum(best, score)
    score = (s0_2 + s1_3) + (s2_2 + s3_3)
    keep, best = tl.where(score > best, 26985, keep), tl.maximum(best, score)
    score = (s0_2 + s1_3) + (s2_3 + s3_2)
    keep, best = tl.where(score > best, 38505, keep), tl.maximum(best, score)
    score = (s0_2 + s1_3) + (s2_4 + s3_1)
    keep, best = tl.where(score > best, 23145, keep), tl.maximum(best, score)
    score = (s0_2 + s1_3) + (s2_5 + s3_0)
    keep, best = tl.where(score > best, 15465, keep), tl.maximum(best, score)
    score = (s0_2 + s1_4) + (s2_1 + s3_3)
    keep, best = tl.where(score > best, 26025, keep), tl.maximum(best, score)
    score = (s0_2 + s1_4) + (s2_3 + s3_1)
    keep, best = tl.where(score > best, 22185, keep), tl.maximum(best, score)
    score = (s0_2 + s1_5) + (s2_0 + s3_3)
    keep, best = tl.where(score > best, 25545, keep), tl.maximum(best, score)
    score = (s0_2 + s1_5) + (s2_3 + s3_0)
    keep, best = tl.where(score > best, 14025, keep), tl.maximum(best, score)
    score = (s0_3 + s1_0) + (s2_2 + s3_5)
    keep, best = tl.where(score > best, 51510, keep), tl.maximum(best, score)
    score = (s0_3 + s1_0) + (s2_5 + s3_2)
    keep, best = tl.where(score > best, 39990, keep), tl.maximum(best, score)
    score = (s0_3 + s1_1) + (s2_2 + s3_4)
    keep, best = tl.where(score > best, 43350, keep), tl.maximum(best, score)
    score = (s0_3 + s1_1) + (s2_4 + s3_2)
    keep, best = tl.where(score > best, 39510, keep), tl.maximum(best, score)
    score = (s0_3 + s1_2) + (s2_0 + s3_5)
    keep, best = tl.where(score > best, 50070, keep), tl.maximum(best, score)
    score = (s0_3 + s1_2) + (s2_1 + s3_4)
    keep, best = tl.where(score > best, 42390, keep), tl.maximum(best, score)
    score = (s0_3 + s1_2) + (s2_2 + s3_3)
    keep, best = tl.where(score > best, 27030, keep), tl.maximum(best, score)
    score = (s0_3 + s1_2) + (s2_3 + s3_2)
    keep, best = tl.where(score > best, 38550, keep), tl.maximum(best, score)
    score = (s0_3 + s1_2) + (s2_4 + s3_1)
    keep, best = tl.where(score > best, 23190, keep), tl.maximum(best, score)
    score = (s0_3 + s1_2) + (s2_5 + s3_0)
    keep, best = tl.where(score > best, 15510, keep), tl.maximum(best, score)
    score = (s0_3 + s1_3) + (s2_2 + s3_2)
    keep, best = tl.where(score > best, 39270, keep), tl.maximum(best, score)
    score = (s0_3 + s1_4) + (s2_1 + s3_2)
    keep, best = tl.where(score > best, 38310, keep), tl.maximum(best, score)
    score = (s0_3 + s1_4) + (s2_2 + s3_1)
    keep, best = tl.where(score > best, 22950, keep), tl.maximum(best, score)
    score = (s0_3 + s1_5) + (s2_0 + s3_2)
    keep, best = tl.where(score > best, 37830, keep), tl.maximum(best, score)
    score = (s0_3 + s1_5) + (s2_2 + s3_0)
    keep, best = tl.where(score > best, 14790, keep), tl.maximum(best, score)
    score = (s0_4 + s1_0) + (s2_1 + s3_5)
    keep, best = tl.where(score > best, 50490, keep), tl.maximum(best, score)
    score = (s0_4 + s1_0) + (s2_5 + s3_1)
    keep, best = tl.where(score > best, 23610, keep), tl.maximum(best, score)
    score = (s0_4 + s1_1) + (s2_0 + s3_5)
    keep, best = tl.where(score > best, 50010, keep), tl.maximum(best, score)
    score = (s0_4 + s1_1) + (s2_1 + s3_4)
    keep, best = tl.where(score > best, 42330, keep), tl.maximum(best, score)
    score = (s0_4 + s1_1) + (s2_2 + s3_3)
    keep, best = tl.where(score > best, 26970, keep), tl.maximum(best, score)
    score = (s0_4 + s1_1) + (s2_3 + s3_2)
    keep, best = tl.where(score > best, 38490, keep), tl.maximum(best, score)
    score = (s0_4 + s1_1) + (s2_4 + s3_1)
    keep, best = tl.where(score > best, 23130, keep), tl.maximum(best, score)
    score = (s0_4 + s1_1) + (s2_5 + s3_0)
    keep, best = tl.where(score > best, 15450, keep), tl.maximum(best, score)
    score = (s0_4 + s1_2) + (s2_1 + s3_3)
    keep, best = tl.where(score > best, 26010, keep), tl.maximum(best, score)
    score = (s0_4 + s1_2) + (s2_3 + s3_1)
    keep, best = tl.where(score > best, 22170, keep), tl.maximum(best, score)
    score = (s0_4 + s1_3) + (s2_1 + s3_2)
    keep, best = tl.where(score > best, 38250, keep), tl.maximum(best, score)
    score = (s0_4 + s1_3) + (s2_2 + s3_1)
    keep, best = tl.where(score > best, 22890, keep), tl.maximum(best, score)
    score = (s0_4 + s1_4) + (s2_1 + s3_1)
    keep, best = tl.where(score > best, 21930, keep), tl.maximum(best, score)
    score = (s0_4 + s1_5) + (s2_0 + s3_1)
    keep, best = tl.where(score > best, 21450, keep), tl.maximum(best, score)
    score = (s0_4 + s1_5) + (s2_1 + s3_0)
    keep, best = tl.where(score > best, 13770, keep), tl.maximum(best, score)
    score = (s0_5 + s1_0) + (s2_0 + s3_5)
    keep, best = tl.where(score > best, 49980, keep), tl.maximum(best, score)
    score = (s0_5 + s1_0) + (s2_1 + s3_4)
    keep, best = tl.where(score > best, 42300, keep), tl.maximum(best, score)
    score = (s0_5 + s1_0) + (s2_2 + s3_3)
    keep, best = tl.where(score > best, 26940, keep), tl.maximum(best, score)
    score = (s0_5 + s1_0) + (s2_3 + s3_2)
    keep, best = tl.where(score > best, 38460, keep), tl.maximum(best, score)
    score = (s0_5 + s1_0) + (s2_4 + s3_1)
    keep, best = tl.where(score > best, 23100, keep), tl.maximum(best, score)
    score = (s0_5 + s1_0) + (s2_5 + s3_0)
    keep, best = tl.where(score > best, 15420, keep), tl.maximum(best, score)
    score = (s0_5 + s1_1) + (s2_0 + s3_4)
    keep, best = tl.where(score > best, 41820, keep), tl.maximum(best, score)
    score = (s0_5 + s1_1) + (s2_4 + s3_0)
    keep, best = tl.where(score > best, 14940, keep), tl.maximum(best, score)
    score = (s0_5 + s1_2) + (s2_0 + s3_3)
    keep, best = tl.where(score > best, 25500, keep), tl.maximum(best, score)
    score = (s0_5 + s1_2) + (s2_3 + s3_0)
    keep, best = tl.where(score > best, 13980, keep), tl.maximum(best, score)
    score = (s0_5 + s1_3) + (s2_0 + s3_2)
    keep, best = tl.where(score > best, 37740, keep), tl.maximum(best, score)
    score = (s0_5 + s1_3) + (s2_2 + s3_0)
    keep, best = tl.where(score > best, 14700, keep), tl.maximum(best, score)
    score = (s0_5 + s1_4) + (s2_0 + s3_1)
    keep, best = tl.where(score > best, 21420, keep), tl.maximum(best, score)
    score = (s0_5 + s1_4) + (s2_1 + s3_0)
    keep, best = tl.where(score > best, 13740, keep), tl.maximum(best, score)
    score = (s0_5 + s1_5) + (s2_0 + s3_0)
    keep, best = tl.where(score > best, 13260, keep), tl.maximum(best, score)
    # END SCAN
    return keep


@triton.jit
def _pruned_blocks(x00, x01, x02, x03, x10, x11, x12, x13, x20, x21, x22, x23, x30, x31, x32, x33, keep):
    """The 16 elements with the mask ``keep`` applied, joined back into blocks [i, j, r1, r0, c1, c0]."""
    z = tl.zeros_like(x00)
    col0 = _join4(tl.where((keep & 0x1) != 0, x00, z), tl.where((keep & 0x10) != 0, x10, z),
                  tl.where((keep & 0x100) != 0, x20, z), tl.where((keep & 0x1000) != 0, x30, z))
    col1 = _join4(tl.where((keep & 0x2) != 0, x01, z), tl.where((keep & 0x20) != 0, x11, z),
                  tl.where((keep & 0x200) != 0, x21, z), tl.where((keep & 0x2000) != 0, x31, z))
    col2 = _join4(tl.where((keep & 0x4) != 0, x02, z), tl.where((keep & 0x40) != 0, x12, z),
                  tl.where((keep & 0x400) != 0, x22, z), tl.where((keep & 0x4000) != 0, x32, z))
    col3 = _join4(tl.where((keep & 0x8) != 0, x03, z), tl.where((keep & 0x80) != 0, x13, z),
                  tl.where((keep & 0x800) != 0, x23, z), tl.where((keep & 0x8000) != 0, x33, z))
    return _join4(col0, col1, col2, col3)


@triton.autotune(configs=_configs(TRANSPOSABLE_TILES, INTERPRETER_TRANSPOSABLE_TILE),
                 key=["n_rows", "n_cols", "WRITE_T"], do_bench=do_bench)
@triton.jit
def sparsify24_transposable_kernel(x_ptr, y_ptr, yt_ptr, n_rows, n_cols, stride_xm, stride_xk,
                                   BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, WRITE_T: tl.constexpr):
    # Read MK, write MK elements (and MK more for the transposed copy when WRITE_T). n_rows, n_cols and the
    # tile are multiples of 4: a masked edge never cuts a 4x4 block.
    rows = (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    cols = (tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)).to(tl.int64)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xk, mask=mask, other=0.0)
    # (BLOCK_M, BLOCK_K) -> blocks [i, j, r, c] -> each of a block's 16 elements a tensor over (i, j).
    blocks = tl.permute(tl.reshape(x, (BLOCK_M // 4, 4, BLOCK_K // 4, 4)), (0, 2, 1, 3))
    col0, col1, col2, col3 = _split4(tl.reshape(blocks, (BLOCK_M // 4, BLOCK_K // 4, 2, 2, 2, 2)))
    x00, x10, x20, x30 = _split4(col0)
    x01, x11, x21, x31 = _split4(col1)
    x02, x12, x22, x32 = _split4(col2)
    x03, x13, x23, x33 = _split4(col3)
    keep = _best_transposable_mask(x00, x01, x02, x03, x10, x11, x12, x13, x20, x21, x22, x23, x30, x31, x32, x33)
    blocks = _pruned_blocks(x00, x01, x02, x03, x10, x11, x12, x13, x20, x21, x22, x23, x30, x31, x32, x33, keep)
    blocks = tl.reshape(blocks, (BLOCK_M // 4, BLOCK_K // 4, 4, 4))
    y = tl.reshape(tl.permute(blocks, (0, 2, 1, 3)), (BLOCK_M, BLOCK_K))
    tl.store(y_ptr + rows[:, None] * n_cols + cols[None, :], y, mask=mask)
    if WRITE_T:  # the pruned matrix transposed, (K, M) contiguous: what the backward's sparse operand needs
        yt = tl.reshape(tl.permute(blocks, (1, 3, 0, 2)), (BLOCK_K, BLOCK_M))
        mask_t = (cols[:, None] < n_cols) & (rows[None, :] < n_rows)
        tl.store(yt_ptr + cols[:, None] * n_rows + rows[None, :], yt, mask=mask_t)
