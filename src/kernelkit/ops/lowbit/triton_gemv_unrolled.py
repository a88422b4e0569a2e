"""The low-bit GEMV with its K loop unrolled: UNROLL word tiles loaded before the first of them is expanded, so
each thread has UNROLL 16-byte loads in flight instead of one. Imported on first use (see backends/lazy.py),
never with the op; the lanes and the split-K combine come from triton.py and triton_gemv.py.

Why: ``lowbit_gemv_kernel`` (triton_gemv.py) loads one [BLOCK_N, BLOCK_KW] tile a step, 4 words (16 bytes) a
thread at its configs, and expands it before the next load is issued: one load in flight a thread, so the loop
waits a full memory latency a step (it reached 0.9-1.2x bf16 F.linear at M = 1 on an H100). Here a step loads
UNROLL tiles first; at BLOCK_N x BLOCK_KW = 1024 words and 4 warps that is UNROLL x 32 bytes a thread, 16 KiB a
program, before any arithmetic. The expansion is the same (``word_lanes``: exact (q - z) s, one scale and zero a
group's chunk of words), each tile's products summed to [BLOCK_N] fp32 at once (a [BLOCK_N, BLOCK_KW * P]
accumulator of four tiles spilled: 255 registers at int4 for sm_90); K may be split over SPLIT_K programs whose
sums meet through the call's workspace (``_store_rows``).
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernelkit.ops.lowbit.triton import _configs, _tuning_bench, chunk_words, word_lanes
from kernelkit.ops.lowbit.triton_gemv import _config, _store_rows, words_per_split

UNROLL_TILES = 4  # word tiles loaded per step before any is expanded (the kernel's four loads w_a .. w_d)
UNROLL = tl.constexpr(UNROLL_TILES)  # the same, as the kernel reads a global

# (BLOCK_N, BLOCK_KW, warps, stages, SPLIT_K): 1024 words a tile (16 KiB a step over 4 tiles), as rows x words;
# split ones for long K with few row blocks (4096x14336: 256 programs of 16 rows without a split). To be measured
# (scripts/gpu-lowbit-style cold timings); each is a compile on a cold cache. (4, 256, 4, 1, 1) is left out: forced
# alone on an H200 (Triton 3.6, 2026-11-27) it was wrong on every call (4041 of 4096 outputs at M = 1, K = 14336),
# right in the interpreter; the autotuner's picking it now and then was the intermittent failure seen before.
UNROLLED_CONFIGS = [_config(8, 128, 4, 1, 1), _config(16, 64, 4, 1, 1), _config(16, 64, 4, 1, 2),
                    _config(16, 64, 4, 1, 4)]
# The interpreter (~1 ms a program): small tiles, split in 2, so the CPU tests cover the split path and a
# partial step (K = 128 at 4 bits is 16 words of a 32-word step); 64 rows a program, as the interpreter pays per
# program and per operation, hardly per element.
UNROLLED_INTERPRETER_CONFIG = _config(64, 8, 4, 1, 2)
UNROLLED_MIN_BLOCK_N = min(c.kwargs["BLOCK_N"] for c in UNROLLED_CONFIGS + [UNROLLED_INTERPRETER_CONFIG])


@triton.jit
def _load_words(w_rows, kw0, kw_end, CHUNKS: tl.constexpr, CHUNK: tl.constexpr):
    """[BLOCK_N, CHUNKS, CHUNK] int32 words kw0 + c CHUNK + j of the rows at w_rows ([BLOCK_N, 1, 1] pointers);
    0 past kw_end. CHUNK words share a scale (a group's words, or the tile's)."""
    kw = kw0 + (tl.arange(0, CHUNKS)[:, None] * CHUNK + tl.arange(0, CHUNK)[None, :])[None, :, :]
    return tl.load(w_rows + kw, mask=kw < kw_end, other=0)


@triton.jit
def _tile_dot(words, kw0, kw_end, x_row, s_ptr, z_ptr, safe_rows, K, stride_sn, channel_offset,
              BITS: tl.constexpr, GROUP_SIZE: tl.constexpr, HAS_ZEROS: tl.constexpr, BLOCK_N: tl.constexpr,
              BLOCK_KW: tl.constexpr, CHUNK: tl.constexpr):
    """[BLOCK_N] fp32: sum over the tile of (q - z) s x, for ``words`` ([BLOCK_N, CHUNKS, CHUNK], from
    ``_load_words``) at word columns kw0 + [0, BLOCK_KW); codes past kw_end or K meet x = 0. One scale and zero
    a chunk ([BLOCK_N, CHUNKS, 1], broadcast over its words). Per channel (GROUP_SIZE 0): (q - z) / 2**BITS with
    the caller's ``channel_offset`` ([BLOCK_N, 1, 1]); the scale is applied after the loop."""
    P: tl.constexpr = 32 // BITS
    CHUNKS: tl.constexpr = BLOCK_KW // CHUNK
    k = kw0 * P + tl.arange(0, BLOCK_KW * P)  # column kw * P + lane of the stacked lanes is k
    xv = tl.load(x_row + k, mask=(k < K) & (k < kw_end * P), other=0.0).to(tl.float32)
    if GROUP_SIZE > 0:
        first = kw0 + tl.arange(0, CHUNKS) * CHUNK  # each chunk's first word
        in_range = (first < kw_end)[None, :]
        at = safe_rows[:, None] * stride_sn + (first * P // GROUP_SIZE)[None, :]  # [BLOCK_N, CHUNKS]
        scale = tl.load(s_ptr + at, mask=in_range, other=0.0).to(tl.float32)[:, :, None] * (1 << BITS)
        if HAS_ZEROS:
            zero = tl.load(z_ptr + at, mask=in_range, other=0).to(tl.float32)[:, :, None]
        else:
            zero = tl.full([BLOCK_N, CHUNKS, 1], 1 << (BITS - 1), tl.float32)
        offset = -(1.0 + zero * (1.0 / (1 << BITS))) * scale
    else:
        scale = tl.full([BLOCK_N, 1, 1], 1.0, tl.float32)
        offset = channel_offset
    lanes = tl.reshape(word_lanes(words, scale, offset, BITS), (BLOCK_N, BLOCK_KW * P))
    return tl.sum(lanes * xv[None, :], axis=1)


@triton.autotune(configs=_configs(UNROLLED_CONFIGS, UNROLLED_INTERPRETER_CONFIG),
                 key=["N", "K", "BITS", "GROUP_SIZE"], do_bench=_tuning_bench)
@triton.heuristics({"KW_PER_SPLIT": lambda a: words_per_split(a["KW"], a["BLOCK_KW"] * UNROLL_TILES,
                                                               a["SPLIT_K"]),
                    "CHUNK": lambda a: chunk_words(a["BITS"], a["GROUP_SIZE"], a["BLOCK_KW"] * (32 // a["BITS"]))})
@triton.jit
def lowbit_gemv_unrolled_kernel(x_ptr, w_ptr, s_ptr, z_ptr, y_ptr, ws_ptr, N, K, KW, stride_xm, stride_wn,
                                stride_sn, stride_ym, KW_PER_SPLIT, BITS: tl.constexpr, GROUP_SIZE: tl.constexpr,
                                HAS_ZEROS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_KW: tl.constexpr,
                                SPLIT_K: tl.constexpr, CHUNK: tl.constexpr):
    """y[m, n] = sum_k x[m, k] (q[n, k] - z) s. Program (m, row block, split): rows [pid_n * BLOCK_N, ...) over
    words [split * KW_PER_SPLIT, ...) in steps of UNROLL tiles of BLOCK_KW words. Reads the words once per row of
    x (later rows of x find them in L2). Rows past N read row N - 1 and are not stored."""
    CHUNKS: tl.constexpr = BLOCK_KW // CHUNK
    m = tl.program_id(0).to(tl.int64)
    rows = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    safe_rows = tl.minimum(rows, N - 1).to(tl.int64)
    w_rows = w_ptr + safe_rows[:, None, None] * stride_wn
    x_row = x_ptr + m * stride_xm
    kw_start = tl.program_id(2) * KW_PER_SPLIT
    kw_end = tl.minimum(kw_start + KW_PER_SPLIT, KW)
    channel_offset = tl.zeros([BLOCK_N, 1, 1], tl.float32)
    if GROUP_SIZE == 0:  # one zero code a row: the offset is fixed for the loop, the scale applied after it
        zero = tl.full([BLOCK_N], 1 << (BITS - 1), tl.float32)
        if HAS_ZEROS:
            zero = tl.load(z_ptr + safe_rows * stride_sn).to(tl.float32)
        channel_offset = -(1.0 + zero * (1.0 / (1 << BITS)))[:, None, None]
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for kw0 in range(kw_start, kw_end, UNROLL * BLOCK_KW):
        # Every tile's load is issued before the first expansion: UNROLL loads in flight a thread.
        w_a = _load_words(w_rows, kw0, kw_end, CHUNKS, CHUNK)
        w_b = _load_words(w_rows, kw0 + BLOCK_KW, kw_end, CHUNKS, CHUNK)
        w_c = _load_words(w_rows, kw0 + 2 * BLOCK_KW, kw_end, CHUNKS, CHUNK)
        w_d = _load_words(w_rows, kw0 + 3 * BLOCK_KW, kw_end, CHUNKS, CHUNK)
        acc += _tile_dot(w_a, kw0, kw_end, x_row, s_ptr, z_ptr, safe_rows, K, stride_sn, channel_offset, BITS,
                         GROUP_SIZE, HAS_ZEROS, BLOCK_N, BLOCK_KW, CHUNK)
        acc += _tile_dot(w_b, kw0 + BLOCK_KW, kw_end, x_row, s_ptr, z_ptr, safe_rows, K, stride_sn, channel_offset,
                         BITS, GROUP_SIZE, HAS_ZEROS, BLOCK_N, BLOCK_KW, CHUNK)
        acc += _tile_dot(w_c, kw0 + 2 * BLOCK_KW, kw_end, x_row, s_ptr, z_ptr, safe_rows, K, stride_sn,
                         channel_offset, BITS, GROUP_SIZE, HAS_ZEROS, BLOCK_N, BLOCK_KW, CHUNK)
        acc += _tile_dot(w_d, kw0 + 3 * BLOCK_KW, kw_end, x_row, s_ptr, z_ptr, safe_rows, K, stride_sn,
                         channel_offset, BITS, GROUP_SIZE, HAS_ZEROS, BLOCK_N, BLOCK_KW, CHUNK)
    y = acc
    if GROUP_SIZE == 0:
        y = y * tl.load(s_ptr + safe_rows * stride_sn).to(tl.float32) * (1 << BITS)
    _store_rows(y, rows, m, N, y_ptr, ws_ptr, stride_ym, SPLIT_K)
