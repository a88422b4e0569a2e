"""Matrix multiply, C = A @ B: from the lecture's shared-memory tile to cuBLAS speed. Every size is (M, N, K).

Ops:

- ``matmul``: A (M, K) @ B (K, N), both row-major, -> C (M, N) in their dtype: float32 (IEEE: exact products on
  the FMA units, what cuBLAS's SIMT SGEMM computes), bfloat16, float16 (tensor cores, fp32 accumulation).
- ``matmul_bt``: A (M, K) @ Bᵀ with B given as (N, K) rows: nn.Linear's weight layout (y = x Wᵀ).
- ``matmul_tf32``: float32 operands on tensor cores in TF32 (operands cut to 10 mantissa bits), float32 out.
- ``matmul_fp8``: float8_e4m3fn A (M, K) row-major and B (K, N) column-major (the layout cuBLASLt's fp8 GEMM
  takes), per-tensor fp32 scales: C = (scale_a A) @ (scale_b B) in bfloat16. The case dtype names the output.

Impls: the CUDA fp32 ladder of ``matmul`` (``cuda_naive`` -> ``cuda_coalesced`` -> ``cuda_smem`` -> ``cuda_tile1d``
-> ``cuda_tile2d`` -> ``cuda_vec4`` -> ``cuda_warptile``, each adding one idea; cuda.cu; then ``cuda_double_buffer``
-> ``cuda_cp_async`` (cuda_pipelined.cu) -> ``cuda_warp64`` (cuda_tuned.cu), pipelined.py); Triton (triton.py)
``triton_blocked`` (the tutorial's kernel: grouped program order, autotuned), ``triton_persistent`` (one program per
SM), ``triton_tma`` (persistent, tiles moved by TMA) and ``triton_splitk`` (K split across programs, for small M·N
with long K). Baselines: ``eager`` is cuBLAS (the reference itself for matmul and matmul_bt; TF32 cuBLAS for
matmul_tf32; ``torch._scaled_mm`` for matmul_fp8) and ``compile`` is torch.compile (``--compile-mode max-autotune``
lets inductor try its Triton GEMM templates).

Inputs (inputs.py): seeded normals, A and B each scaled by K^-1/4, so C is O(1) whatever K is. Cost: 2MNK flops;
bytes: read A and B once, write C once (the minimum; tiled kernels re-read from L2). Tolerance (tolerance.py):
the project's rule for bfloat16 and float16, formulas in the unit roundoff and sqrt(K) for float32, TF32 and fp8.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Iterator

import torch

from kernelkit.backends.lazy import kernel_module
from kernelkit.errors import BackendUnavailable
from kernelkit.ops.matmul import ladder, pipelined
from kernelkit.ops.matmul.inputs import FP8, FP8_MAX, matmul_bt_inputs, matmul_fp8_inputs, matmul_inputs
from kernelkit.ops.matmul.tolerance import fp8_tolerance, fp32_tolerance, longest_k, tf32_tolerance
from kernelkit.spec import op

__all__ = ["FP8_MAX", "matmul", "matmul_bt", "matmul_bt_inputs", "matmul_fp8", "matmul_fp8_inputs", "matmul_inputs",
           "matmul_tf32"]

triton_kernels = kernel_module(__name__, "triton")

FP = [torch.float32, torch.bfloat16, torch.float16]
SIZES = [
    (1823, 1029, 781),  # a multiple of no tile; K odd, so no row is 16-byte aligned: scalar and pointer paths
    (1, 1000, 4104),  # one row (a GEMV shape: a tile's other rows masked); rows aligned, so TMA takes it
    (1000, 1000, 1004),  # fp32 rows 16-byte aligned (vector paths), partial tiles in M and N, K = 125 x 8 + 4
    (4096, 4096, 4096),  # the square the ladder is timed at
    (256, 256, 65536),  # split-K's shape, and the longest accumulation the tolerance is sized for
]
CPU_SIZES = [  # the Triton interpreter takes tens of ms per 32 x 32 program: few programs each
    (33, 29, 17),  # partial tiles in M and N, K shorter than one K-block, unaligned rows
    (1, 16, 40),  # one row; a whole and a partial K-block; split-K takes two K ranges
    (65, 8, 8),  # 3 tiles down M: a partial group of tile rows, the persistent programs loop; aligned rows (TMA)
]
BENCH_SIZES = [(1024, 1024, 1024), (4096, 4096, 4096), (8192, 8192, 8192), (256, 256, 65536)]
# fp8: cuBLASLt needs K and N multiples of 16, so the odd shape keeps M odd and N, K off every tile instead.
FP8_SIZES = [(1823, 1040, 784), (1, 1040, 4112), (4096, 4096, 4096)]
FP8_BENCH_SIZES = [(4096, 4096, 4096), (8192, 8192, 8192)]
FP8_CPU_SIZES = [(33, 32, 48), (1, 16, 32)]  # eager and compile only: the interpreter has no bfloat16 (SKIPPED)
LONGEST_K = longest_k(SIZES + BENCH_SIZES)
FP8_LONGEST_K = longest_k(FP8_SIZES + FP8_BENCH_SIZES)


# ---- cost -----------------------------------------------------------------------------------------------------

def _mnk(a: torch.Tensor, b: torch.Tensor, b_is_nk: bool = False) -> tuple[int, int, int]:
    return a.shape[0], b.shape[0] if b_is_nk else b.shape[1], a.shape[1]


def _bytes(a: torch.Tensor, b: torch.Tensor, out_size: int, b_is_nk: bool = False) -> int:
    """Read A and B once, write C once."""
    m, n, _ = _mnk(a, b, b_is_nk)
    return a.numel() * a.element_size() + b.numel() * b.element_size() + m * n * out_size


def _flops(a: torch.Tensor, b: torch.Tensor, b_is_nk: bool = False) -> int:
    """One multiply and one add per (m, n, k)."""
    m, n, k = _mnk(a, b, b_is_nk)
    return 2 * m * n * k


# ---- references (the spec; run in float64 for the check, and in the case dtype for the reference's own error) ---

@op(sizes=SIZES, cpu_sizes=CPU_SIZES, bench_sizes=BENCH_SIZES, dtypes=FP, inputs=matmul_inputs,
    bytes=lambda a, b: _bytes(a, b, a.element_size()), flops=_flops,
    tolerance={torch.float32: fp32_tolerance(LONGEST_K)})
def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """C = A @ B: A (M, K), B (K, N), row-major, C in their dtype."""
    return a @ b


@op(sizes=SIZES, cpu_sizes=CPU_SIZES, bench_sizes=BENCH_SIZES, dtypes=FP, inputs=matmul_bt_inputs,
    bytes=lambda a, b: _bytes(a, b, a.element_size(), b_is_nk=True), flops=lambda a, b: _flops(a, b, b_is_nk=True),
    tolerance={torch.float32: fp32_tolerance(LONGEST_K)})
def matmul_bt(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """C = A @ Bᵀ: A (M, K), B (N, K) (nn.Linear's weight), C (M, N) in their dtype."""
    return a @ b.T


@op(sizes=SIZES, cpu_sizes=CPU_SIZES, bench_sizes=BENCH_SIZES, dtypes=[torch.float32], inputs=matmul_inputs,
    bytes=lambda a, b: _bytes(a, b, a.element_size()), flops=_flops,
    tolerance={torch.float32: tf32_tolerance(LONGEST_K)}, compute_dtype="tf32")  # TF32 tensor cores, not fp32 FMAs
def matmul_tf32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """C = A @ B in fp32, as TF32 tensor cores may compute it: the exact product is the spec, TF32's error allowed."""
    return a @ b


@op(sizes=FP8_SIZES, cpu_sizes=FP8_CPU_SIZES, bench_sizes=FP8_BENCH_SIZES, dtypes=[torch.bfloat16],
    inputs=matmul_fp8_inputs, bytes=lambda a, b, scale_a, scale_b: _bytes(a, b, 2), flops=lambda a, b, *_: _flops(a, b),
    tolerance={torch.bfloat16: fp8_tolerance(FP8_LONGEST_K)}, compute_dtype="fp8")  # the dtype names the output
def matmul_fp8(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor) -> torch.Tensor:
    """C = (scale_a A) @ (scale_b B) rounded to bfloat16; A (M, K), B (K, N) float8_e4m3fn, scales fp32 scalars."""
    if a.dtype == torch.float64:  # the checker's float64 run: every operand is float64 already
        return (a @ b) * (scale_a * scale_b)
    return ((a.float() @ b.float()) * (scale_a * scale_b)).to(torch.bfloat16)


# ---- operand checks -----------------------------------------------------------------------------------------

def _check(a: torch.Tensor, b: torch.Tensor, dtypes: tuple[torch.dtype, ...], b_is_nk: bool = False) -> None:
    """ValueError unless a and b are 2-D matrices of one of ``dtypes``, on one device, with matching K."""
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"matmul takes 2-D matrices, got shapes {tuple(a.shape)} and {tuple(b.shape)}")
    k_b = b.shape[1] if b_is_nk else b.shape[0]
    if a.shape[1] != k_b:
        layout = "B (N, K)" if b_is_nk else "B (K, N)"
        raise ValueError(f"A (M, K) = {tuple(a.shape)} and {layout} = {tuple(b.shape)} disagree on K")
    if a.dtype != b.dtype or a.dtype not in dtypes:
        names = ", ".join(str(d).removeprefix("torch.") for d in dtypes)
        raise ValueError(f"A and B must share one dtype of {names}; got {a.dtype} and {b.dtype}")
    if a.device != b.device:
        raise ValueError(f"A and B must be on one device, got {a.device} and {b.device}")


def _precision(dtype: torch.dtype) -> str:
    # fp32 operands would multiply in TF32 (10-bit mantissa) by Triton's default: IEEE keeps matmul's fp32 exact.
    return "ieee" if dtype == torch.float32 else "tf32"


# ---- matmul: the CUDA fp32 ladder ---------------------------------------------------------------------------

def _cuda(rung: ladder.Rung, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    _check(a, b, (torch.float32,))
    return ladder.launch(rung, a, b)


@matmul.impl("cuda_naive", kernels=ladder.NAIVE.kernels, dtypes=[torch.float32])
def matmul_cuda_naive(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """CUDA, one thread per C element, threadIdx.x on rows: the learner's first kernel.

    Each warp's A load touches 32 rows (32 sectors for 32 useful floats) and its C store is strided by N.
    H100: 1.0% of cuBLAS fp32 at 4096³; ncu at 2048³: 16.5 global sectors per load request, L1 hit 99%, FMA
    pipe 0.9% busy.
    """
    return _cuda(ladder.NAIVE, a, b)


@matmul.impl("cuda_coalesced", kernels=ladder.COALESCED.kernels, dtypes=[torch.float32])
def matmul_cuda_coalesced(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """CUDA, one thread per C element, threadIdx.x on columns: coalesced B loads and C stores.

    A warp's B load and C store are each one 128-byte line; its A load is one broadcast value.
    H100: 11.3% of cuBLAS; ncu at 2048³: sectors per request 16.5 -> 2.5, 13.5x faster than naive, SM
    throughput 79% (the L1 load path), FMA pipe 12.7%.
    """
    return _cuda(ladder.COALESCED, a, b)


@matmul.impl("cuda_smem", kernels=ladder.SMEM.kernels, dtypes=[torch.float32])
def matmul_cuda_smem(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """CUDA, the lecture's shared-memory tiles: 32 x 32 tiles of A and B staged per block.

    Each element loaded from global memory is used 32 times from shared memory.
    H100: 17.3% of cuBLAS; ncu at 2048³: executed instructions 1485M -> 845M, L1 hit 95% -> 0% (the re-reads
    now come from shared memory), FMA pipe 12.7% -> 15.7%.
    """
    return _cuda(ladder.SMEM, a, b)


@matmul.impl("cuda_tile1d", kernels=ladder.TILE1D.kernels, dtypes=[torch.float32])
def matmul_cuda_tile1d(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """CUDA, 1D register tile: 64 x 64 block tile, BK = 8, each thread 8 results down a column.

    One B value read from shared memory serves 8 FMAs.

    H100: 31.6% of cuBLAS; ncu at 2048³: executed instructions 845M -> 493M, FMAs 35% -> 56% of them, FMA
    pipe 15.7% -> 28.8%.
    """
    return _cuda(ladder.TILE1D, a, b)


@matmul.impl("cuda_tile2d", kernels=ladder.TILE2D.kernels, dtypes=[torch.float32])
def matmul_cuda_tile2d(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """CUDA, 2D register tile: 128 x 128 block tile, BK = 8, each thread an 8 x 8 outer product per k.

    H100: 60.2% of cuBLAS; ncu at 2048³: executed instructions 493M -> 329M, FMAs 83% of them, FMA pipe 28.8%
    -> 49.4%; 0.4 shared-load bank conflicts per wavefront appear (B: a warp's 16 columns 32 bytes apart).
    """
    return _cuda(ladder.TILE2D, a, b)


@matmul.impl("cuda_vec4", kernels=ladder.VEC4.kernels, dtypes=[torch.float32])
def matmul_cuda_vec4(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """CUDA, tile2d with float4 global loads and stores, and A transposed in shared memory.

    A thread's 8 A values for one k are then contiguous: float4 shared loads for A as for B. Rows not 16-byte
    aligned (K or N not a multiple of 4) take the same tiling with scalar global accesses.

    H100: 64.3% of cuBLAS; ncu at 2048³: 16 sectors per global load request (LDG.128: 4 -> 16), executed
    instructions 329M -> 312M, FMA pipe 49.4% -> 52.4%.
    """
    return _cuda(ladder.VEC4, a, b)


@matmul.impl("cuda_warptile", kernels=ladder.WARPTILE.kernels, dtypes=[torch.float32])
def matmul_cuda_warptile(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """CUDA, warp tiling (conflict-free shared loads) and double-buffered shared tiles.

    Each warp computes a 32 x 64 piece, its lanes 4 x 8, each lane four 4 x 4 blocks; the next tile is loaded into
    registers during this tile's FMAs, then into the other shared buffer. Unaligned rows: scalar global accesses.

    H100: 76.7% of cuBLAS at 4096³ (the 80% target missed by 3.3 points); ncu at 2048³: shared-load bank
    conflicts 0.4 -> 0 per wavefront, FMA pipe 52.4% -> 61.4% busy at 24.5% achieved occupancy (two 256-thread
    blocks an SM): more of each warp's latency must hide behind its own FMAs.
    """
    return _cuda(ladder.WARPTILE, a, b)


pipelined.register(matmul, _cuda)  # cuda_double_buffer, cuda_cp_async, cuda_warp64


# ---- Triton impls (matmul, matmul_bt, matmul_tf32, matmul_fp8) ---------------------------------------------

_BLOCKED = [triton_kernels.lazy("matmul_kernel")]
_PERSISTENT = [triton_kernels.lazy("matmul_persistent_kernel")]
_TMA = [triton_kernels.lazy("matmul_tma_kernel"), triton_kernels.lazy("matmul_persistent_kernel")]
_SPLITK = [triton_kernels.lazy("matmul_splitk_kernel"), triton_kernels.lazy("matmul_splitk_reduce_kernel")]


def _tma_or_skip(device: torch.device) -> None:
    """BackendUnavailable (SKIPPED) where kernels cannot make TMA descriptors: an old Triton, a pre-Hopper GPU."""
    reason = triton_kernels.tma_available()
    if reason is None and device.type == "cuda" and torch.cuda.get_device_capability(device)[0] < 9:
        reason = "TMA needs compute capability 9.0 (Hopper) or newer"
    if reason is not None:
        raise BackendUnavailable(reason)


def _register_triton(target, b_is_nk: bool, dtypes: tuple[torch.dtype, ...], tf32: bool) -> None:  # noqa: ANN001
    """triton_blocked, triton_persistent, triton_tma and triton_splitk on ``target``; B is (N, K) when b_is_nk."""

    def operands(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, str]:
        _check(a, b, dtypes, b_is_nk)
        return a, (b.T if b_is_nk else b), "tf32" if tf32 else _precision(a.dtype)

    @target.impl("triton_blocked", kernels=_BLOCKED)
    def triton_blocked(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Triton, the tutorial's blocked kernel: one program per C tile, grouped order for L2 reuse, autotuned."""
        a, b, precision = operands(a, b)
        return triton_kernels.matmul_blocked(a, b, a.dtype, precision)

    @target.impl("triton_persistent", kernels=_PERSISTENT)
    def triton_persistent(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Triton, persistent: one program per SM looping over tiles in grouped order (no tail wave), autotuned."""
        a, b, precision = operands(a, b)
        return triton_kernels.matmul_persistent(a, b, a.dtype, precision)

    @target.impl("triton_tma", kernels=_TMA)
    def triton_tma(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Triton, persistent with TMA tensor descriptors (Hopper); unaligned rows take triton_persistent's kernel.

        TMA needs 16-byte aligned rows; SKIPPED where Triton or the GPU lacks TMA."""
        a, b, precision = operands(a, b)
        _tma_or_skip(a.device)
        return triton_kernels.matmul_tma(a, b, a.dtype, precision)

    @target.impl("triton_splitk", kernels=_SPLITK)
    def triton_splitk(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Triton, split-K: K ranges in parallel programs, fp32 partials summed by a second kernel.

        For small M·N with long K: enough ranges to fill the SMs. The second kernel sums the partials in a fixed
        order, so results are deterministic (atomics would add them in arrival order)."""
        a, b, precision = operands(a, b)
        return triton_kernels.matmul_splitk(a, b, a.dtype, precision)


_register_triton(matmul, b_is_nk=False, dtypes=tuple(FP), tf32=False)
_register_triton(matmul_bt, b_is_nk=True, dtypes=tuple(FP), tf32=False)
_register_triton(matmul_tf32, b_is_nk=False, dtypes=(torch.float32,), tf32=True)


# ---- matmul_tf32: cuBLAS and torch.compile with TF32 on ------------------------------------------------------

@contextlib.contextmanager
def tf32_matmuls() -> Iterator[None]:
    """torch's fp32 matmuls in TF32 inside the block (torch.backends.cuda.matmul), restored after."""
    settings = torch.backends.cuda.matmul
    if hasattr(settings, "fp32_precision"):  # torch >= 2.9
        before, settings.fp32_precision = settings.fp32_precision, "tf32"
        try:
            yield
        finally:
            settings.fp32_precision = before
    else:
        before, settings.allow_tf32 = settings.allow_tf32, True
        try:
            yield
        finally:
            settings.allow_tf32 = before


@matmul_tf32.impl("eager")
def matmul_tf32_eager(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """cuBLAS with TF32 tensor cores (torch's fp32 matmul with TF32 allowed): the baseline to beat."""
    with tf32_matmuls():
        return a @ b


@matmul_tf32.impl("compile")
def matmul_tf32_compile(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """torch.compile of the reference with TF32 allowed (inductor's GEMMs then use TF32 too)."""
    from kernelkit.backends import compiled

    with tf32_matmuls():
        return compiled.compiled_reference(matmul_tf32)(a, b)


# ---- matmul_fp8 ---------------------------------------------------------------------------------------------

def _scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor) -> torch.Tensor:
    return torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16)


def _check_fp8(a: torch.Tensor, b: torch.Tensor) -> None:
    _check(a, b, (FP8,))
    if b.stride(0) != 1:
        raise ValueError(f"B must be column-major (the transpose of (N, K) rows), got strides {b.stride()}")


def _check_scaled_mm(a: torch.Tensor, b: torch.Tensor) -> None:
    _check_fp8(a, b)
    if a.shape[1] % 16 or b.shape[1] % 16:
        raise BackendUnavailable(f"torch._scaled_mm needs K and N multiples of 16, got K={a.shape[1]}, "
                                 f"N={b.shape[1]}")


@matmul_fp8.impl("eager")
def matmul_fp8_eager(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor) -> torch.Tensor:
    """torch._scaled_mm: cuBLASLt's fp8 GEMM (partial sums promoted to fp32), the baseline to beat."""
    _check_scaled_mm(a, b)
    return _scaled_mm(a, b, scale_a, scale_b)


@functools.cache
def _scaled_mm_op():  # noqa: ANN202 - an Op, built on first use only
    return dataclasses.replace(matmul_fp8, reference=_scaled_mm)


@matmul_fp8.impl("compile")
def matmul_fp8_compile(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor
                       ) -> torch.Tensor:
    """torch.compile of torch._scaled_mm (compiling the reference would time an fp32 GEMM, no fp8 baseline)."""
    from kernelkit.backends import compiled

    _check_scaled_mm(a, b)
    return compiled.compiled_reference(_scaled_mm_op())(a, b, scale_a, scale_b)


@matmul_fp8.impl("triton_blocked", kernels=_BLOCKED)
def matmul_fp8_triton_blocked(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor
                              ) -> torch.Tensor:
    """Triton, the blocked kernel on e4m3, autotuned; scales applied once per output.

    On Hopper the fp8 tensor cores accumulate with ~14 mantissa bits (Triton does not promote partial sums to
    fp32 by default; see tolerance.py)."""
    _check_fp8(a, b)
    return triton_kernels.matmul_blocked(a, b, torch.bfloat16, scales=(scale_a, scale_b))


@matmul_fp8.impl("triton_persistent", kernels=_PERSISTENT)
def matmul_fp8_triton_persistent(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor
                                 ) -> torch.Tensor:
    """Triton, the persistent kernel on e4m3, autotuned."""
    _check_fp8(a, b)
    return triton_kernels.matmul_persistent(a, b, torch.bfloat16, scales=(scale_a, scale_b))


@matmul_fp8.impl("triton_tma", kernels=_TMA)
def matmul_fp8_triton_tma(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor
                          ) -> torch.Tensor:
    """Triton, persistent with TMA descriptors on e4m3 (B's K-contiguous tiles are what fp8 wgmma wants)."""
    _check_fp8(a, b)
    _tma_or_skip(a.device)
    return triton_kernels.matmul_tma(a, b, torch.bfloat16, scales=(scale_a, scale_b))
