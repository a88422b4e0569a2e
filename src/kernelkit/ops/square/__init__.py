"""square: y = x * x, elementwise, any shape.

Non-contiguous inputs are copied to a contiguous tensor first (one extra read and write); the output is
contiguous. An empty input gives an empty output without a launch. Memory traffic of the kernels: read N
elements, write N elements; N multiplications.

Variants: ``triton_rowwise``, ``numba_2d``, ``cuda_2d`` are the learner's first versions; ``triton_flat``,
``numba_flat`` and ``cuda_vec4`` treat the tensor as one flat array (no per-row work, no 2D index math);
``cuda_inline_vec4`` is cuda_vec4's float32 kernel built by torch's load_inline. Kernels: triton.py, numba.py,
cuda.cu (NVRTC), inline.cu (load_inline, with its C++ wrapper).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from kernelkit.backends.cuda import cuda_kernel, load_inline
from kernelkit.backends.cuda.grid import BLOCK, elementwise_blocks
from kernelkit.backends.lazy import kernel_module
from kernelkit.backends.numba import launch
from kernelkit.spec import op

triton_kernels = kernel_module(__name__, "triton")
numba_kernels = kernel_module(__name__, "numba")


# Reference. bytes: read numel + write numel elements; flops: numel multiplications.
@op(
    sizes=[(4096, 4096), (1823, 781), (1, 4097)],
    cpu_sizes=[(64, 48), (33, 17), (1, 257)],  # interpreter and simulator run ~1 ms per program / 100 us per thread
    dtypes=[torch.float32, torch.bfloat16, torch.float16],
    bench_sizes=[(1 << 20,), (1 << 24,), (1 << 26,), (1 << 28,)],  # 4 MiB .. 1 GiB of fp32 input
    bytes=lambda x: 2 * x.numel() * x.element_size(),
    flops=lambda x: x.numel(),
)
def square(x: torch.Tensor) -> torch.Tensor:
    """y = x * x, elementwise."""
    return x * x


def _as_rows(x: torch.Tensor) -> torch.Tensor:
    """(..., N) -> a contiguous (rows, N) view; a 0-d tensor is one row of one element, (0,) no row of none."""
    return x.contiguous().reshape(math.prod(x.shape[:-1]), x.shape[-1] if x.dim() else 1)


def _as_flat(x: torch.Tensor) -> torch.Tensor:
    """Any shape -> its elements as a contiguous 1-D tensor (a copy only when x is not contiguous)."""
    return x.contiguous().view(-1)


def _into_new(x: torch.Tensor, view: Callable[[torch.Tensor], torch.Tensor],
              fill: Callable[[torch.Tensor, torch.Tensor], None]) -> torch.Tensor:
    """y = x * x by a launcher: ``fill(src, y)`` with src = ``view(x)`` and y a new contiguous tensor like it,
    not called for an empty input (no launch); y comes back in x's shape."""
    src = view(x)
    y = torch.empty_like(src)
    if src.numel():
        fill(src, y)
    return y.view(x.shape)


# Kernels and launchers --------------------------------------------------------------------------------------

CUDA_2D = cuda_kernel("cuda.cu", "square_2d_kernel")
# The same float4 kernel as a PyTorch C++ extension through torch's load_inline (the lectures' path): the
# wrapper in inline.cu checks, allocates and launches on the current stream.
SQUARE_INLINE = load_inline(
    "square_vec4_ext",
    cpp_sources="torch::Tensor square_vec4(torch::Tensor x);",
    cuda_sources="inline.cu",
    functions=["square_vec4"],
)

CUDA_VEC4 = {  # one kernel per dtype: 4 floats or 8 halves / bfloat16s per 16-byte vector
    torch.float32: cuda_kernel("cuda.cu", "square_vec4_f32_kernel"),
    torch.float16: cuda_kernel("cuda.cu", "square_vec4_f16_kernel"),
    torch.bfloat16: cuda_kernel("cuda.cu", "square_vec4_bf16_kernel"),
}

# Grid-stride kernels (numba_flat, cuda_vec4) launch one thread per item on a GPU (see backends/cuda/grid.py for
# why) and a tiny grid in Numba's simulator, where the loop is what runs.
GRID_STRIDE_BLOCK = BLOCK


# Impls ------------------------------------------------------------------------------------------------------

@square.impl("eager")
def square_eager(x: torch.Tensor) -> torch.Tensor:
    """torch.square: PyTorch's own kernel."""
    return torch.square(x)


@square.impl("triton_rowwise", kernels=[triton_kernels.lazy("square_rowwise_kernel")])
def square_triton_rowwise(x: torch.Tensor) -> torch.Tensor:
    """Triton, one program per row (the lecture's first version)."""
    import triton

    def program_per_row(rows: torch.Tensor, y: torch.Tensor) -> None:
        block = min(triton.next_power_of_2(rows.shape[1]), 4096)
        triton_kernels.square_rowwise_kernel[(rows.shape[0],)](rows, y, rows.shape[1], rows.stride(0), y.stride(0),
                                                               BLOCK_SIZE=block)

    return _into_new(x, _as_rows, program_per_row)


@square.impl("numba_2d", dtypes=[torch.float32, torch.float16])
def square_numba_2d(x: torch.Tensor) -> torch.Tensor:
    """Numba @cuda.jit, one thread per element on a 2D grid (the learner's version)."""
    def thread_per_element(rows: torch.Tensor, y: torch.Tensor) -> None:
        block = (16, 16)
        grid = ((rows.shape[1] + 15) // 16, (rows.shape[0] + 15) // 16)  # (column blocks, row blocks)
        launch(numba_kernels.square_2d_kernel, grid, block, rows, y)

    return _into_new(x, _as_rows, thread_per_element)


@square.impl("cuda_2d", kernels=[CUDA_2D], dtypes=[torch.float32])
def square_cuda_2d(x: torch.Tensor) -> torch.Tensor:
    """CUDA C++ through NVRTC, one thread per element on a 2D grid (the learner's version, float32)."""
    def thread_per_element(rows: torch.Tensor, y: torch.Tensor) -> None:
        n_rows, n_cols = rows.shape
        block = (16, 16)
        grid = ((n_cols + 15) // 16, (n_rows + 15) // 16)
        CUDA_2D.launch(grid, block, rows, y, n_rows, n_cols)

    return _into_new(x, _as_rows, thread_per_element)


@square.impl("triton_flat", kernels=[triton_kernels.lazy("square_flat_kernel")])
def square_triton_flat(x: torch.Tensor) -> torch.Tensor:
    """Triton, a flat 1D grid over every element; BLOCK_SIZE and num_warps autotuned per numel and dtype."""
    import triton

    def flat_blocks(flat: torch.Tensor, y: torch.Tensor) -> None:
        n = flat.numel()
        triton_kernels.square_flat_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](flat, y, n)

    return _into_new(x, _as_flat, flat_blocks)


@square.impl("numba_flat", dtypes=[torch.float32, torch.float16])
def square_numba_flat(x: torch.Tensor) -> torch.Tensor:
    """Numba @cuda.jit, a 1D grid-stride loop over the flat elements (float32, float16)."""
    def grid_stride(flat: torch.Tensor, y: torch.Tensor) -> None:
        blocks = elementwise_blocks(flat.numel(), flat.device)
        launch(numba_kernels.square_flat_kernel, blocks, GRID_STRIDE_BLOCK, flat, y)

    return _into_new(x, _as_flat, grid_stride)


@square.impl("cuda_vec4", kernels=list(CUDA_VEC4.values()), dtypes=list(CUDA_VEC4))
def square_cuda_vec4(x: torch.Tensor) -> torch.Tensor:
    """CUDA C++ through NVRTC: 16-byte loads and stores in a grid-stride loop (float32, float16, bfloat16)."""
    if x.dtype not in CUDA_VEC4:
        raise TypeError(f"cuda_vec4 takes {', '.join(map(str, CUDA_VEC4))}, got {x.dtype}")

    def vectors(flat: torch.Tensor, y: torch.Tensor) -> None:  # y: a new allocation, 256-byte aligned
        n = flat.numel()
        per_vector = 16 // flat.element_size()
        # A view that starts off a 16-byte boundary (x[1:]) runs the kernel's scalar loop: one item per element.
        items = -(-n // per_vector) if flat.data_ptr() % 16 == 0 else n
        CUDA_VEC4[x.dtype].launch(elementwise_blocks(items, flat.device), GRID_STRIDE_BLOCK, flat, y, n)

    return _into_new(x, _as_flat, vectors)


@square.impl("cuda_inline_vec4", kernels=[SQUARE_INLINE], dtypes=[torch.float32])
def square_cuda_inline_vec4(x: torch.Tensor) -> torch.Tensor:
    """CUDA C++ through torch's load_inline: float4 grid-stride loop with a scalar tail (float32)."""
    return SQUARE_INLINE.square_vec4(x.contiguous())
