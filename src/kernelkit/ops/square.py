"""square: y = x * x, elementwise, any shape.

Non-contiguous inputs are copied to a contiguous tensor first (one extra read and write); the output is
contiguous. Memory traffic of the kernels: read N elements, write N elements; N multiplications.
"""

from __future__ import annotations

import functools

import torch

from kernelkit.backends.cuda import cuda_kernel
from kernelkit.backends.numba import launch
from kernelkit.spec import op


# Reference. bytes: read numel + write numel elements; flops: numel multiplications.
@op(
    sizes=[(4096, 4096), (1823, 781), (1, 4097)],
    cpu_sizes=[(64, 48), (33, 17), (1, 257)],  # interpreter and simulator run ~1 ms per program / 100 us per thread
    dtypes=[torch.float32, torch.bfloat16, torch.float16],
    bytes=lambda x: 2 * x.numel() * x.element_size(),
    flops=lambda x: x.numel(),
)
def square(x: torch.Tensor) -> torch.Tensor:
    """y = x * x, elementwise."""
    return x * x


def _as_rows(x: torch.Tensor) -> torch.Tensor:
    """(..., N) -> a contiguous (rows, N) view; a 0-d tensor is one row of one element."""
    return x.contiguous().reshape(-1, x.shape[-1] if x.dim() else 1)


# Kernels and launchers --------------------------------------------------------------------------------------

@functools.cache
def _triton_rowwise_kernel():  # built on first use: importing triton at import time would fix the interpreter choice
    import triton
    import triton.language as tl

    @triton.jit
    def square_rowwise_kernel(x_ptr, y_ptr, n_cols, stride_xm, stride_ym, BLOCK_SIZE: tl.constexpr):
        # One program per row, as in the lecture; rows longer than BLOCK_SIZE are walked in chunks.
        row = tl.program_id(0)
        for start in range(0, n_cols, BLOCK_SIZE):
            cols = start + tl.arange(0, BLOCK_SIZE)
            mask = cols < n_cols
            x = tl.load(x_ptr + row * stride_xm + cols, mask=mask)
            tl.store(y_ptr + row * stride_ym + cols, x * x, mask=mask)

    return square_rowwise_kernel


CUDA_2D = cuda_kernel("square.cu", "square_2d_kernel")


# Impls ------------------------------------------------------------------------------------------------------

@square.impl("eager")
def square_eager(x: torch.Tensor) -> torch.Tensor:
    """torch.square: PyTorch's own kernel."""
    return torch.square(x)


@square.impl("triton_rowwise")
def square_triton_rowwise(x: torch.Tensor) -> torch.Tensor:
    """Triton, one program per row (the lecture's first version)."""
    import triton

    rows = _as_rows(x)
    y = torch.empty_like(rows)
    if rows.numel():
        block = min(triton.next_power_of_2(rows.shape[1]), 4096)
        kernel = _triton_rowwise_kernel()
        kernel[(rows.shape[0],)](rows, y, rows.shape[1], rows.stride(0), y.stride(0), BLOCK_SIZE=block)
    return y.reshape(x.shape)


@square.impl("numba_2d", dtypes=[torch.float32, torch.float16])
def square_numba_2d(x: torch.Tensor) -> torch.Tensor:
    """Numba @cuda.jit, one thread per element on a 2D grid (the learner's version)."""
    rows = _as_rows(x)
    y = torch.empty_like(rows)
    if rows.numel():
        block = (16, 16)
        grid = ((rows.shape[0] + 15) // 16, (rows.shape[1] + 15) // 16)
        from kernelkit.ops.square_numba import square_2d_kernel

        launch(square_2d_kernel, grid, block, rows, y)
    return y.reshape(x.shape)


@square.impl("cuda_2d", kernels=[CUDA_2D], dtypes=[torch.float32])
def square_cuda_2d(x: torch.Tensor) -> torch.Tensor:
    """CUDA C++ through NVRTC, one thread per element on a 2D grid (the learner's version, float32)."""
    rows = _as_rows(x)
    y = torch.empty_like(rows)
    if rows.numel():
        n_rows, n_cols = rows.shape
        block = (16, 16)
        grid = ((n_cols + 15) // 16, (n_rows + 15) // 16)
        CUDA_2D.launch(grid, block, rows, y, n_rows, n_cols)
    return y.reshape(x.shape)
