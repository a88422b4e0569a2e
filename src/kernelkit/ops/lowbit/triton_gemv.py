"""The M = 1 GEMV of the low-bit linear ops (the memory-bound decode path). Imported on first use (see
backends/lazy.py), never with the op; its lane helpers come from triton.py.

``lowbit_gemv_kernel`` streams the packed weights once: BLOCK_N output channels a program, BLOCK_KW words of K a
step, each code made into (q - z) s by ``_lane`` (no int-to-float conversion) and the lanes of a word stacked with
tl.join, so every thread expands its own words and the K tile meets x as one contiguous vector of BLOCK_KW * P
values (acc [BLOCK_N, BLOCK_KW * P] in fp32, one reduction at the end). K may be split over SPLIT_K programs
(long K, few row blocks: more programs than SMs); their fp32 partial sums meet in a buffer allocated per call
(launch.gemv), never shared between calls, so two calls on different streams or devices cannot mix.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernelkit.ops.lowbit.triton import _configs, _tuning_bench, word_lanes


def _zero_workspace(nargs: dict) -> None:
    """The split configs' pre-hook: zero the call's sums and counters (ws_ptr) before the launch, on its stream.
    A memset per call (autotuning times it with the kernel) that the lab's timings in lowbit_gemv_kernel's
    docstring did not include (its workspace was zeroed once and cleaned by the kernel); the one-split configs
    never touch ws_ptr and pay nothing."""
    nargs["ws_ptr"].zero_()


def _config(block_n: int, block_kw: int, warps: int, stages: int, split: int) -> triton.Config:
    return triton.Config({"BLOCK_N": block_n, "BLOCK_KW": block_kw, "SPLIT_K": split}, num_warps=warps,
                         num_stages=stages, pre_hook=_zero_workspace if split > 1 else None)


# (BLOCK_N, BLOCK_KW, warps, stages, SPLIT_K): the fastest config of each of the six H100 shapes in the docstring
# of lowbit_gemv_kernel (three of them shared one), and nothing else: each config is a compile on a cold cache.
GEMV_CONFIGS = [_config(8, 64, 4, 1, 1), _config(4, 128, 4, 1, 1), _config(16, 64, 4, 1, 4),
                _config(4, 128, 4, 2, 2)]
# The interpreter (~1 ms a program): one config, few programs, on the split path (the CPU tests run through it).
GEMV_INTERPRETER_CONFIG = _config(32, 16, 4, 1, 2)
# BLOCK_N of the configs at its least: launch.gemv sizes the counters of the split path by it.
GEMV_MIN_BLOCK_N = min(c.kwargs["BLOCK_N"] for c in GEMV_CONFIGS + [GEMV_INTERPRETER_CONFIG])


def words_per_split(kwords: int, block_kw: int, split_k: int) -> int:
    """KW_PER_SPLIT: words of K a split, whole BLOCK_KW tiles as even as they come; the grid (launch.gemv) has
    ceil(KW / KW_PER_SPLIT) splits, at most SPLIT_K, none empty. A function of plain ints: the grid computes it
    from the config, not from the kernel's arguments (the interpreter hands those to the grid as tensors)."""
    return triton.cdiv(triton.cdiv(kwords, block_kw), split_k) * block_kw


@triton.jit
def _store_rows(y, rows, m, N, y_ptr, ws_ptr, stride_ym, SPLIT_K: tl.constexpr):
    """y[m, rows] = y (fp32 [BLOCK_N]) in y's dtype. Split: add into the call's fp32 sums (ws_ptr, int32 bits,
    zeroed), then the program that arrives last at this row block's counter reads the sums back and stores them."""
    mask = rows < N
    if SPLIT_K == 1:
        tl.store(y_ptr + m * stride_ym + rows, y.to(y_ptr.dtype.element_ty), mask=mask)
    else:
        at = ws_ptr + m * N + rows  # sums first: (M, N); then the counters, (M, row blocks)
        tl.atomic_add(at.to(tl.pointer_type(tl.float32), bitcast=True), y, mask=mask, sem="relaxed")
        tl.debug_barrier()  # every thread's adds come before the counter's release
        n_blocks = tl.num_programs(1)
        counter = ws_ptr + tl.num_programs(0).to(tl.int64) * N + m * n_blocks + tl.program_id(1)
        if tl.atomic_add(counter, 1, sem="acq_rel") == tl.num_programs(2) - 1:
            # An atomic read (served by L2, where the adds landed; a plain load could hit a stale L1 line). Through
            # int32 bits: the interpreter has no float exchange.
            total = tl.atomic_xchg(at, tl.zeros_like(rows), mask=mask, sem="acq_rel").to(tl.float32, bitcast=True)
            tl.store(y_ptr + m * stride_ym + rows, total.to(y_ptr.dtype.element_ty), mask=mask)


@triton.autotune(configs=_configs(GEMV_CONFIGS, GEMV_INTERPRETER_CONFIG), key=["N", "K", "BITS", "GROUP_SIZE"],
                 do_bench=_tuning_bench)
@triton.heuristics({"KW_PER_SPLIT": lambda a: words_per_split(a["KW"], a["BLOCK_KW"], a["SPLIT_K"]),
                    "EVEN": lambda a: a["KW"] % a["BLOCK_KW"] == 0 and a["K"] == a["KW"] * (32 // a["BITS"])})
@triton.jit
def lowbit_gemv_kernel(x_ptr, w_ptr, s_ptr, z_ptr, y_ptr, ws_ptr, N, K, KW, stride_xm, stride_wn, stride_sn,
                       stride_ym, KW_PER_SPLIT, BITS: tl.constexpr, GROUP_SIZE: tl.constexpr, HAS_ZEROS: tl.constexpr,
                       BLOCK_N: tl.constexpr, BLOCK_KW: tl.constexpr, SPLIT_K: tl.constexpr, EVEN: tl.constexpr):
    """y[m, n] = sum_k x[m, k] (q[n, k] - z) s: reads N * KW words, the scales (and zeros) and x once per program.

    Program (m, row block, split): rows [pid_n * BLOCK_N, ...) over words [split * KW_PER_SPLIT, ...). Each lane
    is f * scale + offset with f = 1 + q / 2**BITS (exact), scale = s 2**BITS and offset = -(1 + z / 2**BITS)
    scale: (q - z) s in one FMA, exact (its rounding is fp32's). Per-channel (GROUP_SIZE 0): the loop sums
    (q - z) / 2**BITS x and the scale s 2**BITS is applied once after it. Rows past N read row N - 1 (in bounds,
    no mask on the hot loads) and are not stored. With SPLIT_K > 1 the partial sums go through ws_ptr
    (``_store_rows``): the launcher allocates it per call and the configs' pre-hook zeroes it (a memset per call).

    Measured on an H100 (cold: L2 flushed, launch included; bf16 activations, M = 1; 2026-11-23), in the lab as
    ``lab_join_kernel`` at its best config, against bf16 F.linear and the GEMV it replaces (at its best config):

    | N x K      | bits      | bf16 F.linear | previous GEMV | this kernel | config                |
    | 4096x4096  | int4 g128 | 18.1 us       | 19.9 us       | 15.8 us     | n8 kw64 w4 s1 sk1     |
    | 14336x4096 | int4 g128 | 45.1 us       | 38.6 us       | 41.6 us     | n4 kw128 w4 s1 sk1    |
    | 4096x14336 | int4 g128 | 46.2 us       | 46.5 us       | 45.1 us     | n16 kw64 w4 s1 sk4    |
    | 4096x4096  | int8 pc   | 19.1 us       | 23.7 us       | 14.9 us     | n4 kw128 w4 s2 sk2    |
    | 14336x4096 | int8 pc   | 45.2 us       | 52.5 us       | 29.6 us     | n16 kw64 w4 s1 sk4    |
    | 4096x14336 | int8 pc   | 46.0 us       | 58.8 us       | 27.4 us     | n16 kw64 w4 s1 sk4    |

    The lab's split path zeroed its workspace once; here the split configs add a memset per call. The in-op
    kernel is re-measured by scripts/gpu-lowbit.
    """
    P: tl.constexpr = 32 // BITS
    PER_GROUP: tl.constexpr = GROUP_SIZE > 0
    m = tl.program_id(0).to(tl.int64)  # row of x: consecutive programs share a band of weights past M = 1
    rows = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    safe_rows = tl.minimum(rows, N - 1).to(tl.int64)
    w_rows = w_ptr + safe_rows[:, None] * stride_wn  # [BLOCK_N, 1]
    x_row = x_ptr + m * stride_xm
    kw_start = tl.program_id(2) * KW_PER_SPLIT
    kw_end = tl.minimum(kw_start + KW_PER_SPLIT, KW)
    scale = tl.full([BLOCK_N, BLOCK_KW], 1.0, tl.float32)
    if not PER_GROUP:  # one zero code a row, 2**(BITS - 1) when symmetric: the offset is fixed for the loop
        zero = tl.full([BLOCK_N, 1], 1 << (BITS - 1), tl.int32)
        if HAS_ZEROS:
            zero = tl.load(z_ptr + safe_rows * stride_sn).to(tl.int32)[:, None]
        offset = -(1.0 + zero.to(tl.float32) * (1.0 / (1 << BITS))) * scale
    acc = tl.zeros([BLOCK_N, BLOCK_KW * P], dtype=tl.float32)
    for kw0 in range(kw_start, kw_end, BLOCK_KW):
        kw = kw0 + tl.arange(0, BLOCK_KW)
        k = kw0 * P + tl.arange(0, BLOCK_KW * P)  # column kw * P + lane of the stacked lanes is k
        if EVEN:
            words = tl.load(w_rows + kw[None, :])
            xv = tl.load(x_row + k).to(tl.float32)
        else:  # x past K or past this split is 0, so padding codes and masked words add nothing
            words = tl.load(w_rows + kw[None, :], mask=(kw < kw_end)[None, :], other=0)
            xv = tl.load(x_row + k, mask=(k < K) & (k < kw_end * P), other=0.0).to(tl.float32)
        if PER_GROUP:
            at = safe_rows[:, None] * stride_sn + (kw * P // GROUP_SIZE)[None, :]  # each word's group
            if EVEN:
                scale = tl.load(s_ptr + at).to(tl.float32) * (1 << BITS)
            else:  # words past the split's end would read past the row's groups
                scale = tl.load(s_ptr + at, mask=(kw < kw_end)[None, :], other=0.0).to(tl.float32) * (1 << BITS)
            if HAS_ZEROS:
                zero = tl.load(z_ptr + at, mask=(kw < kw_end)[None, :], other=0).to(tl.int32)
            else:
                zero = tl.full([BLOCK_N, BLOCK_KW], 1 << (BITS - 1), tl.int32)
            offset = -(1.0 + zero.to(tl.float32) * (1.0 / (1 << BITS))) * scale
        lanes = word_lanes(words, scale, offset, BITS)
        acc += tl.reshape(lanes, (BLOCK_N, BLOCK_KW * P)) * xv[None, :]
    y = tl.sum(acc, axis=1)
    if not PER_GROUP:
        y = y * tl.load(s_ptr + safe_rows * stride_sn).to(tl.float32) * (1 << BITS)
    _store_rows(y, rows, m, N, y_ptr, ws_ptr, stride_ym, SPLIT_K)
