"""softmax over the last dimension, and its backward, for float32, bfloat16 and float16 (fp32 math inside).

Shapes: x (..., N) -> y (..., N); the leading dimensions are folded into M rows. Non-contiguous inputs are copied
to a contiguous tensor first (one extra read and write); outputs are contiguous. An empty input gives an empty
output without a launch. A row of -inf only gives NaN, as torch.softmax does.

Forward impls: ``eager`` (torch.softmax, PyTorch's fused kernel: the baseline to beat), ``eager_fivepass`` (the
lecture's five-op version), ``triton_rowwise`` (whole rows in registers; rows longer than
``ROWWISE_MAX_N`` = 32768 run ``triton_online``'s kernel instead), ``triton_online`` (any row length:
online max and rescaled sum, then a second pass), ``cuda_warp`` (CUDA C++: shuffle reductions; rows whose pointers
and length allow 16-byte accesses are held in registers up to 32768 elements, other rows take the online two passes),
``cuda_cluster`` (CUDA C++ for sm_90: a thread-block cluster of 2, 4 or 8 CTAs a row (cluster.py chooses by row
length and count), each holding its
slice in registers and exchanging (max, sum) through distributed shared memory, so every element is read once; rows of
16385 to 262144 elements that allow 16-byte accesses, on sm_90 or newer; other rows run cuda_warp's kernel),
``triton_split`` (rows cut into chunks of 4096, a program each, so a few long rows fill the GPU: one kernel writes
each chunk's max and sum, a second merges a row's and writes its chunk; 2 reads + 1 write).
Backward impls: ``eager`` (PyTorch's fused kernel, what autograd runs), ``triton_rowwise`` (whole rows of y and dy
in registers; rows longer than ``BACKWARD_ROWWISE_MAX_N`` = 16384 take a chunked two-pass kernel), ``cuda_warp``
(y and dy in registers up to 16384 elements when 16-byte aligned, two passes otherwise).
"""

from __future__ import annotations

import math

import torch

from kernelkit.backends.cuda import CudaKernel, cuda_kernel
from kernelkit.backends.lazy import kernel_module
from kernelkit.ops.softmax.cluster import CUDA_CLUSTER, launch_cuda_cluster
from kernelkit.spec import Size, op, seeded_normal

triton_kernels = kernel_module(__name__, "triton")
triton_split_kernels = kernel_module(__name__, "triton_split")

FP = [torch.float32, torch.bfloat16, torch.float16]
CPU_SIZES = [(7, 33), (1, 257), (2, 3, 65)]  # the Triton interpreter runs ~1 ms per program: keep them tiny
# The default sweep of `kernelkit bench`: short rows (many programs), the classic square, 256 MiB at 16 and 32 bits
# (past the 50 MB L2), and rows too long for one block's registers.
BENCH_SIZES = [(8192, 1000), (4096, 4096), (32768, 4096), (8192, 8192), (1024, 65536)]


# Reference. bytes: read MN + write MN elements, what a fused kernel moves (the ideal). The five-pass eager
# version below moves 5MN + M reads and 3MN + 2M writes (as the lecture counts them), 4x the ideal.
# flops: 5 per element (max, subtract, exp, sum, scale), an exp counted as one although it runs on the
# special-function units: enough to place softmax on the roofline (intensity 5 / (2 x itemsize)), far left of
# any ridge: memory-bound.
@op(
    # Edges: odd shape with rows unaligned to 16 bytes; one long row (a block boundary plus one); the square;
    # a row too long for one block (online paths); one past the register limit; 3-D with rows of 1000.
    sizes=[(1823, 781), (1, 4097), (4096, 4096), (64, 262144), (37, 32769), (8, 3, 1000)],
    cpu_sizes=CPU_SIZES,
    dtypes=FP,
    bytes=lambda x: 2 * x.numel() * x.element_size(),
    flops=lambda x: 5 * x.numel(),
    bench_sizes=BENCH_SIZES,
)
def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension: exp(x - max) / sum(exp(x - max)) per row."""
    return torch.softmax(x, dim=-1)


def backward_inputs(size: Size, dtype: torch.dtype, device: torch.device, seed: int
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """y: softmax of a seeded normal (valid probabilities, computed in fp32, rounded to dtype); dy: a seeded normal."""
    y = torch.softmax(seeded_normal(size, torch.float32, device, seed * 1009), dim=-1).to(dtype)
    return y, seeded_normal(size, dtype, device, seed * 1009 + 1)


# Reference. bytes: read y and dy (2MN), write dx (MN) elements. flops: 4 per element (y * dy, its row sum,
# dy - sum, y * that).
@op(
    # As the forward's, with one past the backward's register limit (16384) in place of the forward's.
    sizes=[(1823, 781), (1, 4097), (4096, 4096), (64, 262144), (37, 16385), (8, 3, 1000)],
    cpu_sizes=CPU_SIZES,
    dtypes=FP,
    inputs=backward_inputs,
    bytes=lambda y, dy: 3 * y.numel() * y.element_size(),
    flops=lambda y, dy: 4 * y.numel(),
    bench_sizes=BENCH_SIZES,
)
def softmax_backward(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """dx = y * (dy - sum(y * dy, -1)): the gradient of softmax at output y for output gradient dy."""
    return y * (dy - (y * dy).sum(dim=-1, keepdim=True))


# As PyTorch operators (kk.torch_op), each forward impl takes its gradient from softmax_backward's impl of the
# same name, which reads the saved output y (not x: the backward never needs the logits).
softmax.set_backward(softmax_backward, saved=lambda x, y: (y,))


def _as_rows(x: torch.Tensor) -> torch.Tensor:
    """(..., N) -> a contiguous (M, N) tensor (a copy when x is not contiguous); a 0-d tensor is one row of one."""
    return x.contiguous().reshape(math.prod(x.shape[:-1]), x.shape[-1] if x.dim() else 1)


# Kernels and launchers --------------------------------------------------------------------------------------
# Triton (triton.py): whole rows in registers, or rows of any length in chunks; the heuristics below choose.

# Longest row the rowwise kernels hold in registers (as fp32, whatever the input dtype): at 16 warps, 64 values a
# thread for the forward's one row, 32 a thread for each of the backward's two (y, dy). Longer rows would spill.
ROWWISE_MAX_N = 32768
BACKWARD_ROWWISE_MAX_N = 16384
# Elements a rowwise program covers at least: rows shorter than this are packed several to a program, so a
# program of 4 warps still has ~8 elements a thread to load instead of idling on masked lanes.
ROWWISE_MIN_TILE = 1024
# Chunk of a row the looped kernels (online forward, chunked backward) load per step: 16 values a thread at 8 warps.
CHUNK_SIZE = 4096
CHUNK_NUM_WARPS = 8


def rowwise_num_warps(block_size: int) -> int:
    """Warps for a program holding ``block_size`` elements of a row (the fused-softmax tutorial's heuristic)."""
    if block_size >= 4096:
        return 16
    if block_size >= 2048:
        return 8
    return 4


def rows_per_program(block_size: int, n_rows: int) -> int:
    """Rows a rowwise program takes: enough for ROWWISE_MIN_TILE elements, no more than there are rows (pow2)."""
    rows = max(1, ROWWISE_MIN_TILE // block_size)
    return min(rows, 1 << max(0, n_rows - 1).bit_length())


def _launch_triton_rowwise(x: torch.Tensor, y: torch.Tensor) -> None:
    """Whole rows (n_cols <= ROWWISE_MAX_N) of the (M, N) x into y; several rows a program when they are short."""
    import triton

    n_rows, n_cols = x.shape
    block = triton.next_power_of_2(n_cols)
    per_program = rows_per_program(block, n_rows)
    triton_kernels.softmax_rowwise_kernel[(triton.cdiv(n_rows, per_program),)](
        x, y, n_rows, n_cols, x.stride(0), y.stride(0), BLOCK_SIZE=block, ROWS_PER_PROGRAM=per_program,
        num_warps=rowwise_num_warps(block * per_program))


def _launch_triton_online(x: torch.Tensor, y: torch.Tensor) -> None:
    """Rows of any length of the (M, N) x into y, one program a row, CHUNK_SIZE elements a step."""
    import triton

    n_rows, n_cols = x.shape
    block = min(triton.next_power_of_2(n_cols), CHUNK_SIZE)
    triton_kernels.softmax_online_kernel[(n_rows,)](x, y, n_cols, x.stride(0), y.stride(0), BLOCK_SIZE=block,
                                                    num_warps=min(CHUNK_NUM_WARPS, rowwise_num_warps(block)))


# Chunk of a row one triton_split program takes (16 values a thread at 8 warps): 1024 x 65536 gives 16384 programs.
SPLIT_CHUNK = 4096


def _launch_triton_split(x: torch.Tensor, y: torch.Tensor, chunk: int = SPLIT_CHUNK) -> None:
    """Rows of any length of the (M, N) x into y, a program per chunk of ``chunk`` (a power of two) elements:
    partial (max, sum) per chunk into two fp32 (M, chunks) buffers, then each chunk normalised from its row's."""
    import triton

    n_rows, n_cols = x.shape
    block = min(triton.next_power_of_2(n_cols), chunk)
    n_chunks = triton.cdiv(n_cols, block)
    maxes = torch.empty((n_rows, n_chunks), dtype=torch.float32, device=x.device)
    sums = torch.empty_like(maxes)
    grid = (n_rows * n_chunks,)
    warps = min(CHUNK_NUM_WARPS, rowwise_num_warps(block))
    triton_split_kernels.softmax_split_partials_kernel[grid](x, maxes, sums, n_cols, n_chunks, x.stride(0),
                                                             BLOCK_SIZE=block, num_warps=warps)
    triton_split_kernels.softmax_split_normalize_kernel[grid](
        x, y, maxes, sums, n_cols, n_chunks, x.stride(0), y.stride(0), BLOCK_SIZE=block,
        CHUNKS_BLOCK=triton.next_power_of_2(n_chunks), num_warps=warps)


def _launch_triton_backward(y: torch.Tensor, dy: torch.Tensor, dx: torch.Tensor) -> None:
    """dx of (M, N) y and dy: whole rows up to BACKWARD_ROWWISE_MAX_N, the chunked two-pass kernel beyond."""
    import triton

    n_rows, n_cols = y.shape
    strides = (y.stride(0), dy.stride(0), dx.stride(0))
    if n_cols <= BACKWARD_ROWWISE_MAX_N:
        block = triton.next_power_of_2(n_cols)
        per_program = rows_per_program(block, n_rows)
        triton_kernels.softmax_backward_rowwise_kernel[(triton.cdiv(n_rows, per_program),)](
            y, dy, dx, n_rows, n_cols, *strides, BLOCK_SIZE=block, ROWS_PER_PROGRAM=per_program,
            num_warps=rowwise_num_warps(block * per_program))
    else:
        block = CHUNK_SIZE
        triton_kernels.softmax_backward_chunked_kernel[(n_rows,)](y, dy, dx, n_cols, *strides, BLOCK_SIZE=block,
                                                                  num_warps=CHUNK_NUM_WARPS)


# One kernel per dtype and direction; each picks its path per launch (see cuda.cu): the row in registers with
# 16-byte accesses when aligned and no longer than threads x 32 (forward) or x 16 (backward), else two passes.
CUDA_WARP = {
    torch.float32: cuda_kernel("cuda.cu", "softmax_warp_f32_kernel"),
    torch.float16: cuda_kernel("cuda.cu", "softmax_warp_f16_kernel"),
    torch.bfloat16: cuda_kernel("cuda.cu", "softmax_warp_bf16_kernel"),
}
CUDA_BACKWARD_WARP = {
    torch.float32: cuda_kernel("cuda.cu", "softmax_backward_warp_f32_kernel"),
    torch.float16: cuda_kernel("cuda.cu", "softmax_backward_warp_f16_kernel"),
    torch.bfloat16: cuda_kernel("cuda.cu", "softmax_backward_warp_bf16_kernel"),
}
CUDA_ELEMENTS_PER_THREAD = 16  # one to four 16-byte vectors in flight a thread; at 1024 threads rows run longer


def cuda_threads(n_cols: int) -> int:
    """Threads per block for rows of n_cols: a power of two from 32 to 1024, ~16 elements a thread."""
    wanted = -(-n_cols // CUDA_ELEMENTS_PER_THREAD)
    return min(1024, max(32, 1 << max(0, wanted - 1).bit_length()))


def _cuda_kernel(table: dict[torch.dtype, CudaKernel], dtype: torch.dtype) -> CudaKernel:
    if dtype not in table:
        raise TypeError(f"cuda_warp takes {', '.join(map(str, table))}, got {dtype}")
    return table[dtype]


# Impls: forward ---------------------------------------------------------------------------------------------

@softmax.impl("eager")
def softmax_eager(x: torch.Tensor) -> torch.Tensor:
    """torch.softmax: PyTorch's own fused kernel, the baseline to beat."""
    return torch.softmax(x, dim=-1)


@softmax.impl("eager_fivepass")
def softmax_eager_fivepass(x: torch.Tensor) -> torch.Tensor:
    """The lecture's naive softmax: five PyTorch ops (max, subtract, exp, sum, divide), each a pass over memory."""
    if x.numel() == 0:
        return torch.empty_like(x)  # amax refuses a row of no elements (a max has no identity)
    x_max = x.amax(dim=-1, keepdim=True)  # read MN, write M
    shifted = x - x_max  # read MN + M, write MN
    numerator = torch.exp(shifted)  # read MN, write MN
    denominator = numerator.sum(dim=-1, keepdim=True)  # read MN, write M
    # read MN (and the M sums, which the lecture's 5MN + M leaves out), write MN
    return numerator / denominator


@softmax.impl("triton_rowwise")
def softmax_triton_rowwise(x: torch.Tensor) -> torch.Tensor:
    """Triton, whole rows in registers (several short rows a program); rows past 32768 run triton_online's kernel."""
    rows = _as_rows(x)
    y = torch.empty_like(rows)
    if rows.numel():
        if rows.shape[1] <= ROWWISE_MAX_N:
            _launch_triton_rowwise(rows, y)
        else:
            _launch_triton_online(rows, y)
    return y.reshape(x.shape)


@softmax.impl("triton_online")
def softmax_triton_online(x: torch.Tensor) -> torch.Tensor:
    """Triton, rows of any length in chunks: online max and rescaled sum, then a second pass writes."""
    rows = _as_rows(x)
    y = torch.empty_like(rows)
    if rows.numel():
        _launch_triton_online(rows, y)
    return y.reshape(x.shape)


@softmax.impl("cuda_warp", kernels=list(CUDA_WARP.values()), dtypes=list(CUDA_WARP))
def softmax_cuda_warp(x: torch.Tensor) -> torch.Tensor:
    """CUDA C++, a block a row, shuffle reductions; aligned rows up to 32768 in registers, others in two passes."""
    kernel = _cuda_kernel(CUDA_WARP, x.dtype)
    rows = _as_rows(x)
    y = torch.empty_like(rows)
    if rows.numel():
        kernel.launch(rows.shape[0], cuda_threads(rows.shape[1]), rows, y, rows.shape[1])
    return y.reshape(x.shape)


@softmax.impl("triton_split")
def softmax_triton_split(x: torch.Tensor) -> torch.Tensor:
    """Triton, a program per 4096-element chunk of a row: chunk (max, sum) partials, then a pass that merges them
    and writes; 2 reads + 1 write, but every SM has work even with a few long rows."""
    rows = _as_rows(x)
    y = torch.empty_like(rows)
    if rows.numel():
        _launch_triton_split(rows, y)
    return y.reshape(x.shape)


@softmax.impl("cuda_cluster", kernels=[*CUDA_CLUSTER.values(), *CUDA_WARP.values()], dtypes=list(CUDA_WARP))
def softmax_cuda_cluster(x: torch.Tensor) -> torch.Tensor:
    """CUDA C++ on sm_90, a cluster of 2, 4 or 8 CTAs a row (cluster.choose_cluster), each element read once
    (aligned rows of 16385..262144); other rows, and GPUs before sm_90, run cuda_warp's kernel (see cluster.py)."""
    kernel = _cuda_kernel(CUDA_WARP, x.dtype)
    rows = _as_rows(x)
    y = torch.empty_like(rows)
    if rows.numel() and not launch_cuda_cluster(rows, y):
        kernel.launch(rows.shape[0], cuda_threads(rows.shape[1]), rows, y, rows.shape[1])
    return y.reshape(x.shape)


# Impls: backward --------------------------------------------------------------------------------------------

def _backward_rows(y: torch.Tensor, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if y.shape != dy.shape or y.dtype != dy.dtype:
        raise ValueError(f"y and dy must match: got {tuple(y.shape)} {y.dtype} and {tuple(dy.shape)} {dy.dtype}")
    return _as_rows(y), _as_rows(dy)


@softmax_backward.impl("eager")
def softmax_backward_eager(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """PyTorch's own fused softmax backward kernel (what autograd runs), the baseline to beat."""
    return torch._softmax_backward_data(dy, y, -1, y.dtype)


@softmax_backward.impl("triton_rowwise")
def softmax_backward_triton_rowwise(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """Triton, whole rows of y and dy in registers; rows past 16384 take a chunked two-pass kernel."""
    y_rows, dy_rows = _backward_rows(y, dy)
    dx = torch.empty_like(y_rows)
    if dx.numel():
        _launch_triton_backward(y_rows, dy_rows, dx)
    return dx.reshape(y.shape)


@softmax_backward.impl("cuda_warp", kernels=list(CUDA_BACKWARD_WARP.values()), dtypes=list(CUDA_BACKWARD_WARP))
def softmax_backward_cuda_warp(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """CUDA C++, a block a row, shuffle reductions; aligned rows up to 16384 in registers, others in two passes."""
    kernel = _cuda_kernel(CUDA_BACKWARD_WARP, y.dtype)
    y_rows, dy_rows = _backward_rows(y, dy)
    dx = torch.empty_like(y_rows)
    if dx.numel():
        kernel.launch(dx.shape[0], cuda_threads(dx.shape[1]), y_rows, dy_rows, dx, dx.shape[1])
    return dx.reshape(y.shape)
