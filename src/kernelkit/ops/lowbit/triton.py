"""Triton kernels of the low-bit linear ops. Imported on first use (see backends/lazy.py), never with the op.

Every kernel reads the packing of packing.py: code k of row n in word k // P at bits (k % P) * BITS. Codes become
floats without an int-to-float conversion (a 16-a-clock instruction on Hopper, 8x slower than an FMA): a shift and
one bitwise op put the code into the top mantissa bits of 1.0, a float whose value is then exactly 1 + q / 2**BITS.
Every kernel then makes (q - z) s exactly in fp32 with one FMA (``_lane``); the tensor-core kernels round it once
to the activation dtype, the reference's own rounding, and the GEMV multiplies it by x in fp32.

- ``lowbit_gemv_kernel`` (M = 1) lives in triton_gemv.py: the same lanes (``_lane``, ``_join*``) over a
  [rows, words] tile against x as one vector, K split over programs when it is long.
- ``lowbit_splitk_kernel``: small M on tensor cores. Output tiles are computed transposed, W_tile @ x_tile.T, so
  the dequantized weights are the wgmma's register operand and the few activation rows its shared-memory one; K is
  split over SPLIT_K programs, whose partial tiles are added with ``tl.atomic_add`` into an fp32 buffer, or
  stored apart for ``lowbit_splitk_reduce_kernel`` to sum (the two-pass variant), or stored directly (one split).
- ``lowbit_gemm_kernel``: large M, the same K loop (dequantize in the loop, feed ``tl.dot``) with no split and
  grouped program order for L2 reuse; autotuned over Hopper tile shapes.
- ``lowbit_dequant_kernel``: the whole (N, K) weight in the activation dtype, for cuBLAS to multiply.

Every kernel expands a tile of words lane by lane and stacks the lanes with tl.join, so each thread expands its
own words (Triton would spread a broadcast lane axis over threads).
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernelkit.backends.triton import do_bench, interpreting

# Autotuning budget per config (ms): short, so a sweep over many shapes stays within minutes.
TUNE_WARMUP_MS = 5
TUNE_REP_MS = 25


def _tuning_bench(fn, quantiles=None, **kwargs):
    return do_bench(fn, warmup=TUNE_WARMUP_MS, rep=TUNE_REP_MS, quantiles=quantiles)


def _configs(gpu: list[triton.Config], interpreter: triton.Config) -> list[triton.Config]:
    """The GPU list, or one small config in the interpreter (where tuning would time Python, ~1 ms a program)."""
    return [interpreter] if interpreting() else gpu


# GEMM on Hopper: (BLOCK_N channels, BLOCK_M activation rows, BLOCK_K) x warps x stages, grouped by GROUP_N.
# The weights are the wgmma's register operand (dequantized there), x the shared-memory one.
GEMM_CONFIGS = [
    triton.Config({"BLOCK_N": bn, "BLOCK_M": bm, "BLOCK_K": bk, "GROUP_N": 8}, num_warps=w, num_stages=s)
    for bn, bm, bk, w, s in [(128, 128, 64, 8, 3), (128, 256, 64, 8, 3), (64, 128, 128, 4, 4), (128, 64, 64, 4, 4)]
]
GEMM_INTERPRETER_CONFIG = triton.Config({"BLOCK_N": 32, "BLOCK_M": 16, "BLOCK_K": 128, "GROUP_N": 2},
                                        num_warps=4, num_stages=1)
# Wrong for 8-bit codes under Triton 3.6 on an H200 (2026-11-27): this config alone gave 9% of the outputs wrong and
# some non-finite at 2048x4096x4096, fp16 and bf16, two seeds each. The other three were right, and all four for
# int4. The autotuner chose it in some runs: a strict check failed once in three. Never offered for 8-bit codes.
WRONG_FOR_INT8 = ({"BLOCK_N": 128, "BLOCK_M": 128, "BLOCK_K": 64, "GROUP_N": 8}, 8, 3)  # (kwargs, warps, stages)


def prune_gemm_configs(configs: list[triton.Config], named_args: dict, **kwargs: object) -> list[triton.Config]:
    """The GEMM's configs for this call: WRONG_FOR_INT8 dropped when the codes are 8-bit."""
    if {**named_args, **kwargs}.get("BITS") != 8:
        return configs
    wrong_kwargs, wrong_warps, wrong_stages = WRONG_FOR_INT8
    return [c for c in configs
            if (c.kwargs, c.num_warps, c.num_stages) != (wrong_kwargs, wrong_warps, wrong_stages)]


def chunk_words(bits: int, group_size: int, block_k: int) -> int:
    """Words of a K tile that share one scale in the tensor-core kernels: a group's words, or the tile's when
    groups are longer or per-channel (GROUP_SIZE 0). Computed here, not in the kernel: ``min`` of constexprs is
    not Triton 3.6's."""
    tile_words = block_k // (32 // bits)
    return min(group_size // (32 // bits), tile_words) if group_size else tile_words


ONE = tl.constexpr(0x3F800000)  # float32 1.0: a code OR-ed into its top mantissa bits gives 1 + q / 2**BITS


@triton.jit
def _zero_codes(z_ptr, offsets, mask, BITS: tl.constexpr, HAS_ZEROS: tl.constexpr):
    """int32 zero codes at ``offsets``; 2**(BITS - 1) everywhere when symmetric (no zeros stored)."""
    if HAS_ZEROS:
        return tl.load(z_ptr + offsets, mask=mask, other=0).to(tl.int32)
    return tl.full(offsets.shape, 1 << (BITS - 1), tl.int32)


@triton.jit
def _join4(a, b, c, d):
    """[..., 4] as [..., 2, 2]: a, b, c, d in that order along the last axes (tl.join keeps them in-thread)."""
    return tl.join(tl.join(a, c), tl.join(b, d))


@triton.jit
def _join8(a0, a1, a2, a3, a4, a5, a6, a7):
    return tl.join(_join4(a0, a2, a4, a6), _join4(a1, a3, a5, a7))


@triton.jit
def _join16(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15):
    return tl.join(_join8(a0, a2, a4, a6, a8, a10, a12, a14), _join8(a1, a3, a5, a7, a9, a11, a13, a15))


@triton.jit
def _lane(words, scale, offset, LANE: tl.constexpr, BITS: tl.constexpr):
    """Code LANE of each word as fp32 f * scale + offset, with f = 1 + q / 2**BITS (exact): the code shifted into
    the top mantissa bits of 1.0 (a shift and a bitwise op; no int-to-float conversion, a 16-a-clock instruction
    on Hopper). With scale = s 2**BITS and offset = -(1 + z / 2**BITS) scale this is (q - z) s, and exactly so:
    f s' is exact and so is the sum (at most 20 significant bits), so the one rounding is the caller's cast."""
    up = 23 - BITS - LANE * BITS  # where this lane's code moves: left (>= 0) or right; a constant
    if up >= 0:
        moved = words << up
    else:
        moved = words >> -up
    f = ((moved & (((1 << BITS) - 1) << (23 - BITS))) | ONE).to(tl.float32, bitcast=True)
    return f * scale + offset


@triton.jit
def word_lanes(words, scale, offset, BITS: tl.constexpr):
    """Each word's 32 // BITS codes as (q - z) s, made by ``_lane`` and stacked on a new last axis (tl.join)."""
    if BITS == 8:
        lanes = _join4(_lane(words, scale, offset, 0, BITS), _lane(words, scale, offset, 1, BITS),
                       _lane(words, scale, offset, 2, BITS), _lane(words, scale, offset, 3, BITS))
    elif BITS == 4:
        lanes = _join8(_lane(words, scale, offset, 0, BITS), _lane(words, scale, offset, 1, BITS),
                       _lane(words, scale, offset, 2, BITS), _lane(words, scale, offset, 3, BITS),
                       _lane(words, scale, offset, 4, BITS), _lane(words, scale, offset, 5, BITS),
                       _lane(words, scale, offset, 6, BITS), _lane(words, scale, offset, 7, BITS))
    else:
        lanes = _join16(_lane(words, scale, offset, 0, BITS), _lane(words, scale, offset, 1, BITS),
                        _lane(words, scale, offset, 2, BITS), _lane(words, scale, offset, 3, BITS),
                        _lane(words, scale, offset, 4, BITS), _lane(words, scale, offset, 5, BITS),
                        _lane(words, scale, offset, 6, BITS), _lane(words, scale, offset, 7, BITS),
                        _lane(words, scale, offset, 8, BITS), _lane(words, scale, offset, 9, BITS),
                        _lane(words, scale, offset, 10, BITS),
                        _lane(words, scale, offset, 11, BITS),
                        _lane(words, scale, offset, 12, BITS),
                        _lane(words, scale, offset, 13, BITS),
                        _lane(words, scale, offset, 14, BITS),
                        _lane(words, scale, offset, 15, BITS))
    return lanes


@triton.jit
def _dequant_tile(w_ptr, s_ptr, z_ptr, safe_rows, kw0, K, KW, stride_wn, stride_sn,
                  BITS: tl.constexpr, GROUP_SIZE: tl.constexpr, HAS_ZEROS: tl.constexpr, EVEN_K: tl.constexpr,
                  SCALE: tl.constexpr, BLOCK_KW: tl.constexpr, CHUNK: tl.constexpr):
    """[BLOCK_N, BLOCK_KW * P] fp32 weights of rows ``safe_rows`` (int64), words kw0 .. kw0 + BLOCK_KW; words
    past KW give 0.

    Words are held as [rows, chunks, words of a chunk] (CHUNK words share a scale: ``chunk_words``), each lane
    of P becomes a tensor of that shape, and tl.join stacks the lanes as the innermost axes: every thread expands
    its own words, and the reshape to [rows, K] is free (column kw * P + lane is k)."""
    P: tl.constexpr = 32 // BITS
    CHUNKS: tl.constexpr = BLOCK_KW // CHUNK
    chunk = tl.arange(0, CHUNKS)
    kw = kw0 + (chunk[:, None] * CHUNK + tl.arange(0, CHUNK)[None, :])[None, :, :]  # [1, CHUNKS, CHUNK]
    at_words = w_ptr + safe_rows[:, None, None] * stride_wn + kw
    if EVEN_K:
        words = tl.load(at_words)
    else:
        words = tl.load(at_words, mask=kw < KW, other=0)
    # (q - z) s per group (scaled here when SCALE), or (q - z) / 2**BITS per channel (exact in 16 bits; the caller
    # multiplies by s 2**BITS after the K loop): the f * scale + offset of _lane.
    if GROUP_SIZE > 0:
        group = (kw0 + chunk * CHUNK) * P // GROUP_SIZE
        at = safe_rows[:, None] * stride_sn + group[None, :]  # [BLOCK_N, CHUNKS]
        in_k = group[None, :] * GROUP_SIZE < K
        zero = _zero_codes(z_ptr, at, in_k, BITS, HAS_ZEROS).to(tl.float32)[:, :, None]
        if SCALE:
            scale = tl.load(s_ptr + at, mask=in_k, other=0.0).to(tl.float32)[:, :, None] * (1 << BITS)
        else:
            scale = tl.full(zero.shape, 1.0, tl.float32)
    else:
        zero = _zero_codes(z_ptr, safe_rows * stride_sn, safe_rows >= 0, BITS, HAS_ZEROS).to(tl.float32)
        zero = zero[:, None, None]
        scale = tl.full(zero.shape, 1.0, tl.float32)
    offset = -(1.0 + zero * (1.0 / (1 << BITS))) * scale
    lanes = word_lanes(words, scale, offset, BITS)
    return tl.reshape(lanes, (safe_rows.shape[0], BLOCK_KW * P))


@triton.jit
def _dot_k_range(x_ptr, w_ptr, s_ptr, z_ptr, acc, rows, safe_rows, cols, tile_start, tile_end, M, K, KW,
                 stride_xm, stride_wn, stride_sn, BITS: tl.constexpr, GROUP_SIZE: tl.constexpr,
                 HAS_ZEROS: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr, PRECISION: tl.constexpr,
                 CHUNK: tl.constexpr):
    """acc [BLOCK_N, BLOCK_M] += W[rows, k] @ x[cols, k].T over K tiles [tile_start, tile_end); per-group scales
    applied in the loop (to the weights, before the dot), per-channel ones left to the caller."""
    BLOCK_KW: tl.constexpr = BLOCK_K // (32 // BITS)
    x_rows = x_ptr + cols.to(tl.int64)[:, None] * stride_xm
    col_ok = cols[:, None] < M
    for tile in range(tile_start, tile_end):
        w = _dequant_tile(w_ptr, s_ptr, z_ptr, safe_rows, tile * BLOCK_KW, K, KW, stride_wn, stride_sn, BITS,
                          GROUP_SIZE, HAS_ZEROS, EVEN_K, True, BLOCK_KW, CHUNK)
        k = tile * BLOCK_K + tl.arange(0, BLOCK_K)
        if EVEN_K:
            xt = tl.load(x_rows + k[None, :], mask=col_ok, other=0.0)
        else:
            xt = tl.load(x_rows + k[None, :], mask=col_ok & (k[None, :] < K), other=0.0)
        acc = tl.dot(w.to(xt.dtype), tl.trans(xt), acc, input_precision=PRECISION)
    return acc


@triton.jit
def _channel_scales(s_ptr, safe_rows, stride_sn, BITS: tl.constexpr, GROUP_SIZE: tl.constexpr):
    """[BLOCK_N, 1] factors applied after the K loop: s 2**BITS per channel (the loop summed (q - z) / 2**BITS);
    1 when the groups were scaled inside it."""
    if GROUP_SIZE > 0:
        return tl.full([safe_rows.shape[0], 1], 1.0, tl.float32)
    return tl.load(s_ptr + safe_rows * stride_sn).to(tl.float32)[:, None] * (1 << BITS)


@triton.heuristics({"EVEN_K": lambda a: a["K"] % a["BLOCK_K"] == 0,
                    "CHUNK_WORDS": lambda a: chunk_words(a["BITS"], a["GROUP_SIZE"], a["BLOCK_K"])})
@triton.jit
def lowbit_splitk_kernel(x_ptr, w_ptr, s_ptr, z_ptr, out_ptr, M, N, K, KW, TILES_PER_SPLIT,
                         stride_xm, stride_wn, stride_sn, stride_os, stride_om,
                         BITS: tl.constexpr, GROUP_SIZE: tl.constexpr, HAS_ZEROS: tl.constexpr,
                         BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
                         COMBINE: tl.constexpr, PRECISION: tl.constexpr, EVEN_K: tl.constexpr,
                         CHUNK_WORDS: tl.constexpr):
    # Program (n tile, split, m tile): out^T tile over K tiles [split * TILES_PER_SPLIT, ...). Reads the weights
    # once overall and x once per n tile. COMBINE: 0 store in the output dtype (one split), 1 atomic_add into fp32,
    # 2 store fp32 partials at split * stride_os for the reduce kernel.
    pid_n = tl.program_id(0)
    split = tl.program_id(1)
    rows = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    safe_rows = tl.minimum(rows, N - 1).to(tl.int64)
    cols = tl.program_id(2) * BLOCK_M + tl.arange(0, BLOCK_M)
    tiles = tl.cdiv(K, BLOCK_K)
    start = split * TILES_PER_SPLIT
    end = tl.minimum(start + TILES_PER_SPLIT, tiles)
    acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
    acc = _dot_k_range(x_ptr, w_ptr, s_ptr, z_ptr, acc, rows, safe_rows, cols, start, end, M, K, KW,
                       stride_xm, stride_wn, stride_sn, BITS, GROUP_SIZE, HAS_ZEROS, BLOCK_K, EVEN_K, PRECISION,
                       CHUNK_WORDS)
    acc = acc * _channel_scales(s_ptr, safe_rows, stride_sn, BITS, GROUP_SIZE)
    at = out_ptr + cols.to(tl.int64)[None, :] * stride_om + rows[:, None]
    mask = (rows[:, None] < N) & (cols[None, :] < M)
    if COMBINE == 0:
        tl.store(at, acc.to(out_ptr.dtype.element_ty), mask=mask)
    elif COMBINE == 1:
        tl.atomic_add(at, acc, mask=mask, sem="relaxed")
    else:
        tl.store(at + split.to(tl.int64) * stride_os, acc, mask=mask)


@triton.jit
def lowbit_splitk_reduce_kernel(partial_ptr, y_ptr, n_elements, SPLIT_K: tl.constexpr, BLOCK: tl.constexpr):
    # y = sum over splits of the (SPLIT_K, M, N) fp32 partials, in y's dtype: read SPLIT_K * MN, write MN.
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    total = tl.zeros([BLOCK], dtype=tl.float32)
    for split in tl.static_range(SPLIT_K):
        total += tl.load(partial_ptr + split * n_elements + offsets, mask=mask, other=0.0)
    tl.store(y_ptr + offsets, total.to(y_ptr.dtype.element_ty), mask=mask)


@triton.autotune(configs=_configs(GEMM_CONFIGS, GEMM_INTERPRETER_CONFIG),
                 key=["M_BUCKET", "N", "K", "BITS", "GROUP_SIZE"], do_bench=_tuning_bench,
                 prune_configs_by={"early_config_prune": prune_gemm_configs})
@triton.heuristics({"EVEN_K": lambda a: a["K"] % a["BLOCK_K"] == 0,
                    "CHUNK_WORDS": lambda a: chunk_words(a["BITS"], a["GROUP_SIZE"], a["BLOCK_K"])})
@triton.jit(do_not_specialize=["M_BUCKET"])
def lowbit_gemm_kernel(x_ptr, w_ptr, s_ptr, z_ptr, y_ptr, M, N, K, KW, M_BUCKET,
                       stride_xm, stride_wn, stride_sn, stride_ym,
                       BITS: tl.constexpr, GROUP_SIZE: tl.constexpr, HAS_ZEROS: tl.constexpr,
                       BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_N: tl.constexpr,
                       PRECISION: tl.constexpr, EVEN_K: tl.constexpr, CHUNK_WORDS: tl.constexpr):
    # One [BLOCK_N, BLOCK_M] tile of y^T a program over all of K. Programs run GROUP_N n-tiles down one column of
    # m-tiles before moving on, so a band of weights and of x stays in L2 (M_BUCKET only keys the autotuning).
    pid = tl.program_id(0)
    tiles_n = tl.cdiv(N, BLOCK_N)
    tiles_m = tl.cdiv(M, BLOCK_M)
    per_band = GROUP_N * tiles_m
    band = pid // per_band
    first_n = band * GROUP_N
    band_n = tl.minimum(tiles_n - first_n, GROUP_N)
    pid_n = first_n + (pid % per_band) % band_n
    pid_m = (pid % per_band) // band_n
    rows = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    safe_rows = tl.minimum(rows, N - 1).to(tl.int64)
    cols = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
    acc = _dot_k_range(x_ptr, w_ptr, s_ptr, z_ptr, acc, rows, safe_rows, cols, 0, tl.cdiv(K, BLOCK_K), M, K, KW,
                       stride_xm, stride_wn, stride_sn, BITS, GROUP_SIZE, HAS_ZEROS, BLOCK_K, EVEN_K, PRECISION,
                       CHUNK_WORDS)
    acc = acc * _channel_scales(s_ptr, safe_rows, stride_sn, BITS, GROUP_SIZE)
    mask = (rows[:, None] < N) & (cols[None, :] < M)
    tl.store(y_ptr + cols.to(tl.int64)[None, :] * stride_ym + rows[:, None], acc.to(y_ptr.dtype.element_ty),
             mask=mask)


@triton.heuristics({"CHUNK_WORDS": lambda a: chunk_words(a["BITS"], a["GROUP_SIZE"],
                                                          a["BLOCK_KW"] * (32 // a["BITS"]))})
@triton.jit
def lowbit_dequant_kernel(w_ptr, s_ptr, z_ptr, out_ptr, N, K, KW, stride_wn, stride_sn, stride_on,
                          BITS: tl.constexpr, GROUP_SIZE: tl.constexpr, HAS_ZEROS: tl.constexpr,
                          BLOCK_N: tl.constexpr, BLOCK_KW: tl.constexpr, CHUNK_WORDS: tl.constexpr):
    # out[n, k] = (q - z) s in out's dtype, (N, K): read N * KW words and the scales, write NK elements.
    P: tl.constexpr = 32 // BITS
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    safe_rows = tl.minimum(rows, N - 1).to(tl.int64)
    w = _dequant_tile(w_ptr, s_ptr, z_ptr, safe_rows, tl.program_id(1) * BLOCK_KW, K, KW, stride_wn, stride_sn,
                      BITS, GROUP_SIZE, HAS_ZEROS, False, True, BLOCK_KW, CHUNK_WORDS)
    w = w * _channel_scales(s_ptr, safe_rows, stride_sn, BITS, GROUP_SIZE)
    k = tl.program_id(1) * (BLOCK_KW * P) + tl.arange(0, BLOCK_KW * P)
    mask = (rows[:, None] < N) & (k[None, :] < K)
    tl.store(out_ptr + safe_rows[:, None] * stride_on + k[None, :], w.to(out_ptr.dtype.element_ty), mask=mask)
