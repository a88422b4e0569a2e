"""Launchers of the GEMVs for M <= 16 that keep several loads in flight a thread: ``cuda_gemv`` (gemv.cu: int4
and int8 codes, bf16 or fp16 activations) and ``triton_unrolled`` (triton_gemv_unrolled.py: any bits, any dtype).
Where one does not apply (``cuda_unsupported``, ``unrolled_unsupported``) it raises BackendUnavailable: the
checker reports SKIPPED with the reason.

CUDA: one kernel a (bits, dtype, M tile); M tiles are powers of two up to MAX_M, so M = 3 runs the M = 4 kernel (its
fourth row reads row 3 again and is not stored). Each kernel is built alone (NVRTC, one -D naming it), so the
first launch of one compiles one instantiation, not twenty.

Bytes per call at M = 1, int4 g128 4096x4096: 8 MiB of words + 256 KiB of scales + 128 KiB of zeros + 8 KiB of x;
at the H100's ~3.0 TB/s copy rate that is ~2.9 us, against ~11 us for bf16 F.linear's 32 MiB of weights.
"""

from __future__ import annotations

import torch

from kernelkit.backends.cuda import CudaKernel, cuda_kernel
from kernelkit.backends.lazy import kernel_module
from kernelkit.errors import BackendUnavailable
from kernelkit.ops.lowbit import launch
from kernelkit.ops.lowbit.launch import Problem, cdiv, gemv_rows

unrolled_kernels = kernel_module("kernelkit.ops.lowbit", "triton_gemv_unrolled")

MAX_M = 16
M_TILES = (1, 2, 4, 8, 16)
BITS = (4, 8)
DTYPES = {torch.bfloat16: "bf16", torch.float16: "f16"}
# gemv.cu's kWarps and kRows: a block of 4 warps, each owning 2 output rows.
WARPS = 4
ROWS_PER_WARP = 2
CHUNK_BYTES = 16  # a lane's load: 4 words, 32 int4 or 16 int8 codes
PER_CHANNEL_SHIFT = 30  # chunk >> 30 is 0 for every chunk: one group a row


def kernel_name(bits: int, dtype: torch.dtype, m_tile: int) -> str:
    """'lowbit_gemv_w4_bf16_m1_kernel': the extern "C" name in gemv.cu."""
    return f"lowbit_gemv_w{bits}_{DTYPES[dtype]}_m{m_tile}_kernel"


def _build(name: str) -> CudaKernel:
    return cuda_kernel("gemv.cu", name, options=(f"-DLOWBIT_GEMV_{name}",))


KERNELS: dict[tuple[int, torch.dtype, int], CudaKernel] = {
    (bits, dtype, m): _build(kernel_name(bits, dtype, m)) for bits in BITS for dtype in DTYPES for m in M_TILES
}


def kernels_for(bits: int) -> list[CudaKernel]:
    """The kernels an op of ``bits``-bit codes may launch (compiled by the checker even without a GPU)."""
    return [kernel for (b, _, _), kernel in KERNELS.items() if b == bits]


def codes_per_chunk(bits: int) -> int:
    return CHUNK_BYTES * 8 // bits


def m_tile(m: int) -> int:
    """The smallest M tile holding m rows (1 <= m <= MAX_M)."""
    return next(t for t in M_TILES if t >= m)


def _unsupported(p: Problem, name: str, k_block: int, rows: str) -> str | None:
    """Why a CUDA GEMV of gemv.cu or gemv_mma.cu cannot take this call, or None: both read 4- and 8-bit codes in
    16-byte chunks (each chunk in one group) with bf16 or fp16 activations and scales in that dtype, at most MAX_M
    rows (``rows``: why), K in whole blocks of ``k_block`` codes."""
    s, dtype = p.shape, p.x.dtype
    if p.bits not in BITS:
        return f"{name} reads 4- and 8-bit codes, not {p.bits}-bit"
    if dtype not in DTYPES:
        return f"{name} takes bfloat16 and float16 activations, not {dtype}"
    if p.scales.dtype != dtype:
        return f"{name} takes scales in the activation dtype ({dtype}), got {p.scales.dtype}"
    if s.m > MAX_M:
        return f"{name} takes M <= {MAX_M} rows ({rows}), got M = {s.m}"
    chunk = codes_per_chunk(p.bits)
    if s.k % k_block:
        return f"{name} reads K in blocks of {k_block} codes: K must be a multiple of {k_block} at {p.bits} bits, " \
               f"got K = {s.k}"
    if p.group_size is not None and p.group_size < chunk:
        return f"{name} scales a lane's {chunk} codes at once: group_size must be at least {chunk} at {p.bits} " \
               f"bits, got {p.group_size}"
    return None


def cuda_unsupported(p: Problem) -> str | None:
    """Why gemv.cu cannot take this call, or None: K a multiple of a chunk (32 int4 or 16 int8 codes)."""
    return _unsupported(p, "cuda_gemv", codes_per_chunk(p.bits), "a GEMV or small GEMM on CUDA cores")


def _aligned(t: torch.Tensor) -> torch.Tensor:
    """t, or a copy where its data does not start on 16 bytes (a view into a larger tensor): the kernel's vector
    loads need it."""
    return t if t.data_ptr() % CHUNK_BYTES == 0 else t.clone()


def _operands(p: Problem) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x, packed, zeros, y) as both CUDA GEMVs take them: x and the words 16-byte aligned, y new. Symmetric weights
    have no zeros: any uint8 tensor fills the pointer (has_zeros = 0, never read)."""
    x, packed = _aligned(p.x), _aligned(p.packed)
    zeros = p.zeros if p.zeros is not None else packed.view(torch.uint8)
    return x, packed, zeros, torch.empty((p.shape.m, p.shape.n), dtype=x.dtype, device=x.device)


def cuda_gemv(p: Problem) -> torch.Tensor:
    """y (M, N) in x's dtype: one launch of gemv.cu's kernel for (bits, dtype, M tile); BackendUnavailable where
    ``cuda_unsupported`` gives a reason."""
    reason = cuda_unsupported(p)
    if reason is not None:
        raise BackendUnavailable(reason)
    s = p.shape
    x, packed, zeros, y = _operands(p)
    codes = codes_per_chunk(p.bits)
    chunks = s.k // codes
    shift = PER_CHANNEL_SHIFT if p.group_size is None else (p.group_size // codes).bit_length() - 1
    kernel = KERNELS[p.bits, x.dtype, m_tile(s.m)]
    kernel.launch(cdiv(s.n, WARPS * ROWS_PER_WARP), WARPS * 32, x, packed, p.scales, zeros, y, s.m, s.n, chunks,
                  s.groups, shift, int(p.zeros is not None))
    return y


# gemv_mma.cu: int4 and int8 on tensor cores. A block of 8 warps owns R tiles of 16 rows; each lane reads 16-byte
# chunks, a quad 4 chunks of a row (a K block: 128 int4 or 64 int8 codes); x rows are the MMA's N, 8 a fragment.
MMA_M_TILES = (8, 16)
MMA_TILE_ROWS = 16
MMA_W4_M16_TILES = 2  # R of int4 at M tile 16 (gemv_mma.cu's GEMV_MMA_W4_M16_TILES); 1 elsewhere
MMA_THREADS = 256


def row_tiles(bits: int, m_tile: int) -> int:
    """Row tiles of 16 a block of gemv_mma.cu's kernel for (bits, M tile) owns, as it is built by default."""
    return MMA_W4_M16_TILES if bits == 4 and m_tile > 8 else 1


def mma_kernel_name(bits: int, dtype: torch.dtype, m_tile: int) -> str:
    """'lowbit_gemv_mma_w4_bf16_m8_kernel': the extern "C" name in gemv_mma.cu."""
    return f"lowbit_gemv_mma_w{bits}_{DTYPES[dtype]}_m{m_tile}_kernel"


MMA_KERNELS: dict[tuple[int, torch.dtype, int], CudaKernel] = {
    (bits, dtype, m): cuda_kernel("gemv_mma.cu", mma_kernel_name(bits, dtype, m),
                                  options=(f"-DLOWBIT_GEMV_MMA_{mma_kernel_name(bits, dtype, m)}",))
    for bits in BITS for dtype in DTYPES for m in MMA_M_TILES
}


def mma_kernels_for(bits: int) -> list[CudaKernel]:
    """The kernels cuda_gemv_mma may launch for ``bits``-bit codes (none for 2 bits)."""
    return [kernel for (b, _, _), kernel in MMA_KERNELS.items() if b == bits]


def mma_unsupported(p: Problem) -> str | None:
    """Why gemv_mma.cu cannot take this call, or None: K in whole blocks of a quad (4 chunks: 128 int4 or 64 int8
    codes)."""
    return _unsupported(p, "cuda_gemv_mma", 4 * codes_per_chunk(p.bits), "x's rows are the MMA's N")


def cuda_gemv_mma(p: Problem, kernel: CudaKernel | None = None, threads: int = MMA_THREADS,
                  tiles: int | None = None) -> torch.Tensor:
    """y (M, N) in x's dtype: one launch of gemv_mma.cu's kernel for (bits, dtype, M tile); BackendUnavailable
    where ``mma_unsupported`` gives a reason. ``kernel``/``threads``/``tiles``: a build of it with other -D
    launch-shape options, its block size and its row tiles a block (scripts/gpu-gemv-tune)."""
    reason = mma_unsupported(p)
    if reason is not None:
        raise BackendUnavailable(reason)
    s = p.shape
    x, packed, zeros, y = _operands(p)
    shift = PER_CHANNEL_SHIFT if p.group_size is None else p.group_size.bit_length() - 1
    tile = next(t for t in MMA_M_TILES if t >= s.m)
    kernel = kernel or MMA_KERNELS[p.bits, x.dtype, tile]
    rows = MMA_TILE_ROWS * (tiles or row_tiles(p.bits, tile))
    kernel.launch(cdiv(s.n, rows), threads, x, packed, p.scales, zeros, y, s.m, s.n,
                  s.k // codes_per_chunk(p.bits), s.groups, shift, int(p.zeros is not None))
    return y


def cuda_auto(p: Problem) -> torch.Tensor:
    """y (M, N): ``cuda_gemv_mma`` wherever it takes the call (M <= 16 rows on a GPU, 4- or 8-bit codes, bf16 or
    fp16, K in its blocks), else ``triton_auto``'s pick by M (launch.pick_kernel).

    Chosen by the lowbit targets of scripts/gpu-frontier (H200, 2026-11-27; cold mode, median us; the fastest
    low-bit impl of each row in brackets where it is not cuda_gemv_mma; int4 M = 16 measured again with gemv_mma's
    row tiles and padded partial sums, the same day):

        weight, M               cuda_gemv_mma  triton_auto  bf16 F.linear
        int4 4096x4096, 1             8.6         21.4         14.5
        int4 4096x4096, 16           10.7         18.4         14.5    [2 row tiles a block; 12.1 with 1]
        int4 14336x4096, 1           18.8         41.6         33.5
        int4 14336x4096, 16          22.6        111.6         33.5    [2 row tiles; 36.0 with 1]
        int4 4096x14336, 1           18.1         41.2         32.1
        int4 4096x14336, 16          25.3         42.2         32.8    [2 row tiles; 28.0 with 1]
        int8 4096x4096, 1            11.1         11.2         14.4
        int8 14336x4096, 1           25.6         25.6         33.3    [cuda_gemv 23.0]
        int8 4096x14336, 1           26.2        167.4         31.9
        M = 4096 (every weight): triton_auto's dequantize + cuBLAS, 0.81-0.95x bf16 F.linear; cuda_gemv_mma
        takes no M above 16.
    """
    if p.x.device.type == "cuda" and mma_unsupported(p) is None:
        return cuda_gemv_mma(p)
    return launch.auto(p)


def unrolled_unsupported(p: Problem) -> str | None:
    """Why triton_gemv_unrolled does not take this call, or None: a program a row of x re-reads the weights for
    every row (from L2), a GEMV's regime, so past MAX_M rows the tensor-core kernels are the ones to run."""
    if p.shape.m > MAX_M:
        return f"triton_gemv_unrolled takes M <= {MAX_M} rows (a program a row of x), got M = {p.shape.m}"
    return None


def triton_unrolled(p: Problem) -> torch.Tensor:
    """y (M, N): lowbit_gemv_unrolled_kernel, one row of programs per row of x, K split as the autotuned config
    says (launch.gemv_rows)."""
    reason = unrolled_unsupported(p)
    if reason is not None:
        raise BackendUnavailable(reason)
    kernels = unrolled_kernels.load()
    return gemv_rows(p, kernels.lowbit_gemv_unrolled_kernel, kernels.UNROLLED_MIN_BLOCK_N, kernels.words_per_split,
                     tiles=kernels.UNROLL_TILES)
