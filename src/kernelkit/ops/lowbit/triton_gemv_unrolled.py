"""The low-bit GEMV with its K loop unrolled: UNROLL word tiles loaded before the first of them is expanded, so
each thread has UNROLL 16-byte loads in flight instead of one. Imported on first use (see backends/lazy.py),
never with the op; the lanes and the split-K combine come from triton.py and triton_gemv.py.

Why: ``lowbit_gemv_kernel`` (triton_gemv.py) loads one [BLOCK_N, BLOCK_KW] tile a step, 4 words (16 bytes) a
thread at its configs, and expands it before the next load is issued: one load in flight a thread, so the loop
waits a full memory latency a step (it reached 0.9-1.2x bf16 F.linear at M = 1 on an H100). Here a step loads
UNROLL tiles first; at BLOCK_N x BLOCK_KW = 1024 words and 4 warps that is UNROLL x 32 bytes a thread, 16 KiB a
program, before any arithmetic. The expansion is the same (``word_lanes``: exact (q - z) s), accumulated in
[BLOCK_N, BLOCK_KW * P] fp32 and reduced once at the end; K may be split over SPLIT_K programs whose sums meet
through the call's workspace (``_store_rows``).
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernelkit.ops.lowbit.triton import _configs, _tuning_bench, word_lanes
from kernelkit.ops.lowbit.triton_gemv import _config, _store_rows, words_per_split

UNROLL = 4  # word tiles loaded per step before any is expanded (the kernel's four loads w_a .. w_d)

# (BLOCK_N, BLOCK_KW, warps, stages, SPLIT_K): 1024 words a tile (16 KiB a step over 4 tiles), as rows x words;
# split ones for long K with few row blocks (4096x14336: 256 programs of 16 rows without a split). To be measured
# (scripts/gpu-lowbit-style cold timings); each is a compile on a cold cache.
UNROLLED_CONFIGS = [_config(8, 128, 4, 1, 1), _config(16, 64, 4, 1, 1), _config(4, 256, 4, 1, 1),
                    _config(16, 64, 4, 1, 2), _config(16, 64, 4, 1, 4)]
# The interpreter (~1 ms a program): small tiles, split in 2, so the CPU tests cover the split path and a
# partial step (K = 128 at 4 bits is 16 words of a 32-word step); 64 rows a program, as the interpreter pays per
# program and per operation, hardly per element.
UNROLLED_INTERPRETER_CONFIG = _config(64, 8, 4, 1, 2)
UNROLLED_MIN_BLOCK_N = min(c.kwargs["BLOCK_N"] for c in UNROLLED_CONFIGS + [UNROLLED_INTERPRETER_CONFIG])


@triton.jit
def _tile_product(words, kw_first, kw_end, x_row, s_ptr, z_ptr, safe_rows, K, stride_sn, scale, offset,
                  BITS: tl.constexpr, GROUP_SIZE: tl.constexpr, HAS_ZEROS: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_KW: tl.constexpr):
    """[BLOCK_N, BLOCK_KW * P] fp32: (q - z) s x for the loaded ``words`` of word columns kw_first + [0,
    BLOCK_KW); columns past kw_end (and codes past K) contribute 0 through x. Per-channel (GROUP_SIZE 0):
    (q - z) / 2**BITS x with the caller's fixed offset (the scale is applied after the loop)."""
    P: tl.constexpr = 32 // BITS
    kw = kw_first + tl.arange(0, BLOCK_KW)
    k = kw_first * P + tl.arange(0, BLOCK_KW * P)  # column kw * P + lane of the stacked lanes is k
    xv = tl.load(x_row + k, mask=(k < K) & (k < kw_end * P), other=0.0).to(tl.float32)
    if GROUP_SIZE > 0:
        in_range = (kw < kw_end)[None, :]
        at = safe_rows[:, None] * stride_sn + (kw * P // GROUP_SIZE)[None, :]  # each word's group
        scale = tl.load(s_ptr + at, mask=in_range, other=0.0).to(tl.float32) * (1 << BITS)
        if HAS_ZEROS:
            zero = tl.load(z_ptr + at, mask=in_range, other=0).to(tl.int32)
        else:
            zero = tl.full([BLOCK_N, BLOCK_KW], 1 << (BITS - 1), tl.int32)
        offset = -(1.0 + zero.to(tl.float32) * (1.0 / (1 << BITS))) * scale
    lanes = word_lanes(words, scale, offset, BITS)
    return tl.reshape(lanes, (BLOCK_N, BLOCK_KW * P)) * xv[None, :]


@triton.autotune(configs=_configs(UNROLLED_CONFIGS, UNROLLED_INTERPRETER_CONFIG),
                 key=["N", "K", "BITS", "GROUP_SIZE"], do_bench=_tuning_bench)
@triton.heuristics({"KW_PER_SPLIT": lambda a: words_per_split(a["KW"], a["BLOCK_KW"] * UNROLL, a["SPLIT_K"])})
@triton.jit
def lowbit_gemv_unrolled_kernel(x_ptr, w_ptr, s_ptr, z_ptr, y_ptr, ws_ptr, N, K, KW, stride_xm, stride_wn,
                                stride_sn, stride_ym, KW_PER_SPLIT, BITS: tl.constexpr, GROUP_SIZE: tl.constexpr,
                                HAS_ZEROS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_KW: tl.constexpr,
                                SPLIT_K: tl.constexpr):
    """y[m, n] = sum_k x[m, k] (q[n, k] - z) s. Program (m, row block, split): rows [pid_n * BLOCK_N, ...) over
    words [split * KW_PER_SPLIT, ...) in steps of UNROLL tiles of BLOCK_KW words. Reads the words once per row of
    x (later rows of x find them in L2). Rows past N read row N - 1 and are not stored."""
    P: tl.constexpr = 32 // BITS
    m = tl.program_id(0).to(tl.int64)
    rows = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    safe_rows = tl.minimum(rows, N - 1).to(tl.int64)
    w_rows = w_ptr + safe_rows[:, None] * stride_wn
    x_row = x_ptr + m * stride_xm
    kw_start = tl.program_id(2) * KW_PER_SPLIT
    kw_end = tl.minimum(kw_start + KW_PER_SPLIT, KW)
    scale = tl.full([BLOCK_N, BLOCK_KW], 1.0, tl.float32)
    offset = tl.zeros([BLOCK_N, BLOCK_KW], tl.float32)
    if GROUP_SIZE == 0:  # one zero code a row: the offset is fixed for the loop, the scale applied after it
        zero = tl.full([BLOCK_N, 1], 1 << (BITS - 1), tl.int32)
        if HAS_ZEROS:
            zero = tl.load(z_ptr + safe_rows * stride_sn).to(tl.int32)[:, None]
        offset = -(1.0 + zero.to(tl.float32) * (1.0 / (1 << BITS))) * scale
    acc = tl.zeros([BLOCK_N, BLOCK_KW * P], dtype=tl.float32)
    for kw0 in range(kw_start, kw_end, UNROLL * BLOCK_KW):
        # Every tile's load is issued before the first expansion: UNROLL loads in flight a thread.
        kw = kw0 + tl.arange(0, BLOCK_KW)
        w_a = tl.load(w_rows + kw[None, :], mask=(kw < kw_end)[None, :], other=0)
        w_b = tl.load(w_rows + BLOCK_KW + kw[None, :], mask=(kw + BLOCK_KW < kw_end)[None, :], other=0)
        w_c = tl.load(w_rows + 2 * BLOCK_KW + kw[None, :], mask=(kw + 2 * BLOCK_KW < kw_end)[None, :], other=0)
        w_d = tl.load(w_rows + 3 * BLOCK_KW + kw[None, :], mask=(kw + 3 * BLOCK_KW < kw_end)[None, :], other=0)
        acc += _tile_product(w_a, kw0, kw_end, x_row, s_ptr, z_ptr, safe_rows, K, stride_sn, scale, offset,
                             BITS, GROUP_SIZE, HAS_ZEROS, BLOCK_N, BLOCK_KW)
        acc += _tile_product(w_b, kw0 + BLOCK_KW, kw_end, x_row, s_ptr, z_ptr, safe_rows, K, stride_sn, scale,
                             offset, BITS, GROUP_SIZE, HAS_ZEROS, BLOCK_N, BLOCK_KW)
        acc += _tile_product(w_c, kw0 + 2 * BLOCK_KW, kw_end, x_row, s_ptr, z_ptr, safe_rows, K, stride_sn, scale,
                             offset, BITS, GROUP_SIZE, HAS_ZEROS, BLOCK_N, BLOCK_KW)
        acc += _tile_product(w_d, kw0 + 3 * BLOCK_KW, kw_end, x_row, s_ptr, z_ptr, safe_rows, K, stride_sn, scale,
                             offset, BITS, GROUP_SIZE, HAS_ZEROS, BLOCK_N, BLOCK_KW)
    y = tl.sum(acc, axis=1)
    if GROUP_SIZE == 0:
        y = y * tl.load(s_ptr + safe_rows * stride_sn).to(tl.float32) * (1 << BITS)
    _store_rows(y, rows, m, N, y_ptr, ws_ptr, stride_ym, SPLIT_K)
