"""Triton kernels of the matmul ops, and their launchers: C = A @ B with an fp32 accumulator in every kernel.

Imported on an impl's first call, never with the op (importing triton fixes whether kernels run in its
interpreter). A is (M, K) and B is (K, N), each with any strides: the ops pass B = b.T for the (N, K) layouts, so one
kernel serves them all. Operands are fp32 (``INPUT_PRECISION`` "ieee": exact products, FMA units; "tf32": tensor
cores, operands rounded to 10 mantissa bits), bf16, fp16 or fp8 e4m3 (per-tensor scales applied to the
accumulator). Every kernel reads 0 past the K edge and masks its stores at the M and N edges.

Kernels: ``matmul_kernel`` (the tutorial's blocked kernel, grouped program order), ``matmul_persistent_kernel``
(one program per SM looping over tiles), ``matmul_tma_kernel`` (persistent, tiles moved by TMA through tensor
descriptors), ``matmul_splitk_kernel`` + ``matmul_splitk_reduce_kernel`` (K split across programs, fp32 partials
summed by a second kernel).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch
import triton
import triton.language as tl

from kernelkit.backends import triton as kk_triton

# ---- autotuning configs -------------------------------------------------------------------------------------
# Chosen with an H100 in mind: 128 x 256 and 128 x 128 tiles with BLOCK_K = 64 (16-bit) or 128 (fp8) keep the
# wgmma units fed from 3-4 pipelined shared-memory stages (228 KiB per SM); fp32 tiles hold half as many K per
# byte. The 64-row configs serve short M (one row: most of a 128-row tile would be masked). The interpreter
# (CPU) always runs one small config: its cost is per program (tens of ms for a matmul tile), not per element.


def _config(m: int, n: int, k: int, stages: int, warps: int, group: int = 8) -> triton.Config:
    return triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "GROUP_M": group},
                         num_stages=stages, num_warps=warps)


INTERPRETER_CONFIG = _config(32, 32, 32, 1, 1, group=2)
# Few configs per family: each one is compiled for every specialization of every kernel and dtype (N and K
# divisible by 16 or not; M is not specialized, see _JIT), about a second each on the GPU machine, and a check of
# the default sizes compiles them all.
CONFIGS_16BIT = [_config(128, 256, 64, 3, 8), _config(128, 128, 64, 4, 8), _config(64, 128, 64, 4, 4),
                 _config(64, 64, 64, 4, 4)]
CONFIGS_FP8 = [_config(128, 256, 128, 3, 8), _config(128, 128, 128, 4, 8), _config(64, 128, 128, 4, 4),
               _config(64, 64, 128, 4, 4)]
CONFIGS_TF32 = [_config(128, 128, 32, 4, 8), _config(64, 128, 32, 4, 4), _config(64, 64, 32, 4, 4)]
CONFIGS_FP32 = [_config(128, 128, 32, 3, 8), _config(64, 64, 32, 3, 4)]  # "ieee": FMA units, registers bound it
SPLITK_CONFIGS_16BIT = [_config(128, 128, 64, 4, 8), _config(64, 64, 64, 4, 4)]
SPLITK_CONFIGS_FP32 = [_config(128, 128, 32, 3, 8), _config(64, 64, 32, 3, 4)]
SHORT_M = 64  # M up to this: only the configs of at most this many rows


def _family(configs: Sequence[triton.Config], named_args: dict[str, Any], kwargs: dict[str, Any]
            ) -> list[triton.Config]:
    """The configs written for these operands (fp8, 16-bit, tf32 or fp32) among ``configs``."""
    dtype = named_args["a_ptr"].dtype
    if dtype.itemsize == 1:
        wanted = CONFIGS_FP8
    elif dtype.itemsize == 2:
        wanted = CONFIGS_16BIT + SPLITK_CONFIGS_16BIT
    elif kwargs.get("INPUT_PRECISION") == "tf32":
        wanted = CONFIGS_TF32 + SPLITK_CONFIGS_FP32
    else:
        wanted = CONFIGS_FP32 + SPLITK_CONFIGS_FP32
    return [c for c in configs if any(c is w for w in wanted)]


def prune_configs(configs: list[triton.Config], named_args: dict[str, Any], **kwargs: Any) -> list[triton.Config]:
    """The interpreter's tiny config on a CPU; on a GPU the configs of the operands' family, short ones for short M."""
    if kk_triton.interpreting():
        return [INTERPRETER_CONFIG]
    family = _family(configs, named_args, kwargs)
    short = [c for c in family if c.kwargs["BLOCK_M"] <= SHORT_M]
    return short if named_args["M"] <= SHORT_M and short else family


# Autotuning times each config for 10 + 40 ms (Triton's default is 25 + 100): enough to rank tiles at these sizes,
# and a sweep of many shapes and dtypes tunes in a fraction of the time.
_tuning_bench = functools.partial(kk_triton.do_bench, warmup=10, rep=40)
_KEY = ["M", "N", "K", "INPUT_PRECISION"]
_ALL = [INTERPRETER_CONFIG, *CONFIGS_16BIT, *CONFIGS_FP8, *CONFIGS_TF32, *CONFIGS_FP32]
_SPLITK_ALL = [INTERPRETER_CONFIG, *SPLITK_CONFIGS_16BIT, *SPLITK_CONFIGS_FP32]


# M is not specialized (Triton would compile apart M = 1 and M divisible by 16): it only bounds the stores,
# while K and N set whether the loads along them can be 16-byte vectors.
_JIT = triton.jit(do_not_specialize=["M"])


def _autotune(configs: list[triton.Config], key: list[str]) -> Any:
    return triton.autotune(configs=configs, key=key, prune_configs_by={"early_config_prune": prune_configs},
                           do_bench=_tuning_bench, cache_results=True)


# ---- pieces every kernel shares -----------------------------------------------------------------------------


@triton.jit
def _tile_coords(tile_id, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of tile ``tile_id`` in grouped order: GROUP_M rows of tiles are walked column by column, so
    the tiles running at the same time share their A rows and B columns in L2 (the tutorial's ordering)."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = (tile_id // num_pid_in_group) * GROUP_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (tile_id % num_pid_in_group) % group_size_m
    pid_n = (tile_id % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def _dot_tile(a_ptr, b_ptr, M, N, pid_m, pid_n, k_len, stride_am, stride_ak, stride_bk, stride_bn,
              INPUT_PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The fp32 (BLOCK_M, BLOCK_N) tile (pid_m, pid_n) of A[:, :k_len] @ B[:k_len, :]."""
    # Rows past M (columns past N) wrap around to rows (columns) of the matrix: in bounds, never stored, so only
    # K needs a mask (the tutorial's trick). The wrap keeps the compiler's view of contiguity, so loads along a
    # contiguous N stay 16-byte vectors that the pipeliner can stage; a clamp (tl.minimum) would not. Row offsets
    # are int64: row * stride passes 2**31 in large matrices.
    offs_am = ((pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M).to(tl.int64)
    offs_bn = ((pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N).to(tl.int64)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, k_len, BLOCK_K):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_len - k, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_len - k, other=0.0)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    return acc


@triton.jit
def _store_tile(c_ptr, acc, M, N, pid_m, pid_n, stride_cm, stride_cn, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr):
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + offs_m.to(tl.int64)[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def _scaled(acc, scale_a_ptr, scale_b_ptr, SCALED: tl.constexpr):
    """fp8: the accumulator times the operands' per-tensor scales (one multiply per output, not per product)."""
    if SCALED:
        acc = acc * (tl.load(scale_a_ptr) * tl.load(scale_b_ptr))
    return acc


@triton.jit
def _matmul_tile(tile_id, a_ptr, b_ptr, c_ptr, scale_a_ptr, scale_b_ptr, M, N, K, stride_am, stride_ak,
                 stride_bk, stride_bn, stride_cm, stride_cn, SCALED: tl.constexpr, INPUT_PRECISION: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """C tile ``tile_id`` (grouped order): A @ B over the whole of K, scaled (fp8), stored in C's dtype."""
    pid_m, pid_n = _tile_coords(tile_id, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    acc = _dot_tile(a_ptr, b_ptr, M, N, pid_m, pid_n, K, stride_am, stride_ak, stride_bk, stride_bn,
                    INPUT_PRECISION, BLOCK_M, BLOCK_N, BLOCK_K)
    acc = _scaled(acc, scale_a_ptr, scale_b_ptr, SCALED)
    _store_tile(c_ptr, acc, M, N, pid_m, pid_n, stride_cm, stride_cn, BLOCK_M, BLOCK_N)


# ---- kernels ------------------------------------------------------------------------------------------------


@_autotune(_ALL, _KEY)
@_JIT
def matmul_kernel(a_ptr, b_ptr, c_ptr, scale_a_ptr, scale_b_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  SCALED: tl.constexpr, INPUT_PRECISION: tl.constexpr, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    # One program per C tile. Reads A N/BLOCK_N times and B M/BLOCK_M times (L2 absorbs much of it);
    # 2 BLOCK_M BLOCK_N BLOCK_K flops per loaded (BLOCK_M + BLOCK_N) BLOCK_K elements.
    _matmul_tile(tl.program_id(0), a_ptr, b_ptr, c_ptr, scale_a_ptr, scale_b_ptr, M, N, K, stride_am, stride_ak,
                 stride_bk, stride_bn, stride_cm, stride_cn, SCALED, INPUT_PRECISION, BLOCK_M, BLOCK_N, BLOCK_K,
                 GROUP_M)


@_autotune(_ALL, _KEY)
@_JIT
def matmul_persistent_kernel(a_ptr, b_ptr, c_ptr, scale_a_ptr, scale_b_ptr, M, N, K,
                             stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                             NUM_PROGRAMS: tl.constexpr, SCALED: tl.constexpr, INPUT_PRECISION: tl.constexpr,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                             GROUP_M: tl.constexpr):
    # NUM_PROGRAMS programs (one per SM) walk the tiles in grouped order, NUM_PROGRAMS apart: no tail wave of
    # partly idle SMs, no block launch per tile, and one tile's epilogue overlaps the next tile's loads.
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for tile_id in tl.range(tl.program_id(0), num_tiles, NUM_PROGRAMS):
        _matmul_tile(tile_id, a_ptr, b_ptr, c_ptr, scale_a_ptr, scale_b_ptr, M, N, K, stride_am, stride_ak,
                     stride_bk, stride_bn, stride_cm, stride_cn, SCALED, INPUT_PRECISION, BLOCK_M, BLOCK_N, BLOCK_K,
                     GROUP_M)


@_autotune(_ALL, _KEY)
@_JIT
def matmul_tma_kernel(a_ptr, b_ptr, c_ptr, scale_a_ptr, scale_b_ptr, M, N, K, stride_am, stride_b, stride_cm,
                      B_K_CONTIGUOUS: tl.constexpr, NUM_PROGRAMS: tl.constexpr, SCALED: tl.constexpr,
                      INPUT_PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    # As matmul_persistent_kernel, but the copy engine (TMA) moves whole tiles between global and shared memory
    # from tensor descriptors: no address arithmetic or masks in the threads (TMA fills 0 past an edge and
    # clips stores). Needs unit stride along each matrix's last dimension and 16-byte aligned rows.
    # B_K_CONTIGUOUS: B is given as its (N, K) transpose with K contiguous (nn.Linear's weight, or fp8's
    # column-major B), and each tile is transposed in shared memory for the dot.
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K])
    if B_K_CONTIGUOUS:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[stride_b, 1],
                                           block_shape=[BLOCK_N, BLOCK_K])
    else:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_b, 1],
                                           block_shape=[BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[stride_cm, 1], block_shape=[BLOCK_M, BLOCK_N])
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for tile_id in tl.range(tl.program_id(0), num_tiles, NUM_PROGRAMS):
        pid_m, pid_n = _tile_coords(tile_id, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            a = a_desc.load([pid_m * BLOCK_M, k])
            if B_K_CONTIGUOUS:
                b = b_desc.load([pid_n * BLOCK_N, k]).T
            else:
                b = b_desc.load([k, pid_n * BLOCK_N])
            acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        acc = _scaled(acc, scale_a_ptr, scale_b_ptr, SCALED)
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_ptr.dtype.element_ty))


@_autotune(_SPLITK_ALL, [*_KEY, "SPLIT_K"])
@_JIT
def matmul_splitk_kernel(a_ptr, b_ptr, partial_ptr, M, N, K, SPLIT_K,
                         stride_am, stride_ak, stride_bk, stride_bn,
                         INPUT_PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    # Program (tile, s) sums K range s of SPLIT_K (whole BLOCK_K steps; trailing ranges may be empty) and
    # writes its fp32 tile to plane s of the (SPLIT_K, M, N) partials: SPLIT_K times the programs of an
    # unsplit grid for the same flops, each with a SPLIT_K-th of the K loop.
    pid_m, pid_n = _tile_coords(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    split = tl.program_id(1)
    k_per_split = tl.cdiv(tl.cdiv(K, SPLIT_K), BLOCK_K) * BLOCK_K
    k_begin = split * k_per_split
    k_len = tl.minimum(k_per_split, K - k_begin)  # <= 0 for an empty trailing range: no step runs
    a_start = a_ptr + k_begin.to(tl.int64) * stride_ak
    b_start = b_ptr + k_begin.to(tl.int64) * stride_bk
    acc = _dot_tile(a_start, b_start, M, N, pid_m, pid_n, k_len, stride_am, stride_ak, stride_bk, stride_bn,
                    INPUT_PRECISION, BLOCK_M, BLOCK_N, BLOCK_K)
    plane = partial_ptr + split.to(tl.int64) * M * N
    _store_tile(plane, acc, M, N, pid_m, pid_n, N, 1, BLOCK_M, BLOCK_N)


@triton.jit
def matmul_splitk_reduce_kernel(partial_ptr, c_ptr, MN, SPLIT_K, BLOCK_SIZE: tl.constexpr):
    # C = the sum of the SPLIT_K fp32 planes, rounded once to C's dtype: read SPLIT_K MN floats, write MN.
    offs = tl.program_id(0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < MN
    ptrs = partial_ptr + offs
    acc = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)
    for _ in range(SPLIT_K):
        acc += tl.load(ptrs, mask=mask, other=0.0)
        ptrs += MN
    tl.store(c_ptr + offs, acc.to(c_ptr.dtype.element_ty), mask=mask)


# ---- launchers: check nothing the op's impls have not checked, allocate C, launch ------------------------------
# a is (M, K) and b is (K, N), any strides (b may be the transpose view of an (N, K) matrix); C is a new
# contiguous (M, N) tensor of out_dtype. precision: tl.dot's input_precision, read for fp32 operands only: "ieee"
# (exact products) or "tf32" (Triton's default). scales: fp8's per-tensor fp32 scale tensors (0-d), or None.

DOT_PRECISION = "tf32"

INTERPRETER_PROGRAMS = 2  # persistent programs in the interpreter: with more tiles, each of them loops
SPLITK_MIN_K = 1024  # the shortest K a split sums on a GPU: the pipeline's prologue and epilogue stay small
INTERPRETER_SPLITK_MIN_K = 16  # in the interpreter: K = 40 takes two ranges (32 and 8)
SPLITK_MAX = 64
REDUCE_BLOCK = 1024
Scales = tuple[torch.Tensor, torch.Tensor] | None


def program_slots(device: torch.device) -> int:
    """Programs a persistent kernel launches: one per SM (the interpreter: a few, so that each one loops)."""
    if kk_triton.interpreting() or device.type != "cuda":
        return INTERPRETER_PROGRAMS
    return torch.cuda.get_device_properties(device).multi_processor_count


def _output(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    return torch.empty((a.shape[0], b.shape[1]), dtype=out_dtype, device=a.device)


def _scale_args(scales: Scales, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, bool]:
    return (c, c, False) if scales is None else (scales[0], scales[1], True)  # c: never read when not SCALED


def matmul_blocked(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype, precision: str = DOT_PRECISION,
                   scales: Scales = None) -> torch.Tensor:
    """C = A @ B by matmul_kernel: one program per C tile, tiles in grouped order."""
    return _launch_tiles(a, b, out_dtype, precision, scales, persistent=False)


def matmul_persistent(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype, precision: str = DOT_PRECISION,
                      scales: Scales = None) -> torch.Tensor:
    """C = A @ B by matmul_persistent_kernel: at most one program per SM, each looping over tiles."""
    return _launch_tiles(a, b, out_dtype, precision, scales, persistent=True)


def _launch_tiles(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype, precision: str, scales: Scales,
                  persistent: bool) -> torch.Tensor:
    c = _output(a, b, out_dtype)
    (M, K), N = a.shape, b.shape[1]
    if c.numel():
        scale_a, scale_b, scaled = _scale_args(scales, c)
        slots = program_slots(a.device) if persistent else None
        kernel, extra = (matmul_kernel, {}) if slots is None else (matmul_persistent_kernel, {"NUM_PROGRAMS": slots})

        def grid(meta: dict[str, Any]) -> tuple[int]:
            tiles = triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])
            return (tiles if slots is None else min(slots, tiles),)

        kernel[grid](a, b, c, scale_a, scale_b, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                     c.stride(0), c.stride(1), SCALED=scaled, INPUT_PRECISION=precision, **extra)
    return c


def tma_available() -> str | None:
    """None when tensor descriptors can be made inside kernels here; else why not."""
    if not hasattr(tl, "make_tensor_descriptor") or not hasattr(triton, "set_allocator"):
        return f"triton {triton.__version__} has no tl.make_tensor_descriptor / triton.set_allocator"
    return None


def _tma_rows(t: torch.Tensor) -> bool:
    """TMA's rule for a matrix: unit stride along the last dimension, rows and base on 16-byte boundaries."""
    size = t.element_size()
    return t.stride(1) == 1 and (t.stride(0) * size) % 16 == 0 and t.data_ptr() % 16 == 0 and min(t.shape) > 0


def tma_fits(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype) -> bool:
    """Whether matmul_tma can take these operands (B as (K, N) rows, or as the transpose of (N, K) rows)."""
    n_bytes = b.shape[1] * torch.finfo(out_dtype).bits // 8
    return _tma_rows(a) and (_tma_rows(b) or _tma_rows(b.T)) and n_bytes % 16 == 0


def matmul_tma(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype, precision: str = DOT_PRECISION,
               scales: Scales = None) -> torch.Tensor:
    """C = A @ B by matmul_tma_kernel when ``tma_fits``, else by matmul_persistent (pointer loads)."""
    if not tma_fits(a, b, out_dtype):
        return matmul_persistent(a, b, out_dtype, precision, scales)
    c = _output(a, b, out_dtype)
    (M, K), N = a.shape, b.shape[1]
    scale_a, scale_b, scaled = _scale_args(scales, c)
    slots = program_slots(a.device)
    k_contiguous = not _tma_rows(b)  # b = bt.T: descriptors over bt's (N, K) rows
    stride_b = b.stride(1) if k_contiguous else b.stride(0)
    # Descriptors made inside a kernel live in a global scratch buffer (128 bytes per program) that Triton
    # asks this allocator for at each launch.
    triton.set_allocator(functools.partial(_scratch, a.device))

    def grid(meta: dict[str, Any]) -> tuple[int]:
        return (min(slots, triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])),)

    matmul_tma_kernel[grid](a, b, c, scale_a, scale_b, M, N, K, a.stride(0), stride_b, c.stride(0),
                            B_K_CONTIGUOUS=k_contiguous, NUM_PROGRAMS=slots, SCALED=scaled,
                            INPUT_PRECISION=precision)
    return c


def _scratch(device: torch.device, size: int, alignment: int, stream: Any) -> torch.Tensor:
    return torch.empty(size, dtype=torch.int8, device=device)


def split_count(M: int, N: int, K: int, slots: int, min_k: int = SPLITK_MIN_K) -> int:
    """How many K ranges: enough to give every SM a program at 128 x 128 tiles, each range at least ``min_k``
    long, at most SPLITK_MAX; a power of two. 1 when the tiles alone fill the GPU."""
    tiles = triton.cdiv(M, 128) * triton.cdiv(N, 128)
    split = max(1, min(slots // max(tiles, 1), K // min_k, SPLITK_MAX))
    return 1 << (split.bit_length() - 1)


def matmul_splitk(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype, precision: str = DOT_PRECISION,
                  split_k: int | None = None) -> torch.Tensor:
    """C = A @ B by matmul_splitk_kernel then matmul_splitk_reduce_kernel; ``split_k`` default: split_count."""
    c = _output(a, b, out_dtype)
    (M, K), N = a.shape, b.shape[1]
    if not c.numel():
        return c
    if split_k is None:
        min_k = INTERPRETER_SPLITK_MIN_K if kk_triton.interpreting() else SPLITK_MIN_K
        split_k = split_count(M, N, K, program_slots(a.device), min_k)
    partials = torch.empty((split_k, M, N), dtype=torch.float32, device=a.device)

    def grid(meta: dict[str, Any]) -> tuple[int, int]:
        return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]), split_k)

    matmul_splitk_kernel[grid](a, b, partials, M, N, K, split_k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                               INPUT_PRECISION=precision)
    matmul_splitk_reduce_kernel[(triton.cdiv(M * N, REDUCE_BLOCK),)](partials, c, M * N, split_k,
                                                                     BLOCK_SIZE=REDUCE_BLOCK, num_warps=4)
    return c
