"""bias_gelu: y = gelu_tanh(x + bias), x (..., N), bias (N,) added to every row; the fusion demo.

Eager PyTorch runs it as two kernels, each a full pass over memory: ``x + bias`` reads MN + N elements and writes
MN, then ``gelu`` reads those MN and writes MN: 4MN + N elements moved. A fused kernel keeps ``x + bias`` in
registers: it reads MN + N and writes MN, 2MN + N, so it can run about twice as fast as eager on a memory-bound
GPU. ``bytes=`` is the fused ideal (what any kernel must move); ``unfused_bytes`` is the eager traffic, so a report
can say what fusing saved.

GELU is the tanh approximation (``torch.nn.functional.gelu(approximate="tanh")``). The fused kernels compute in
fp32 and round once, to the output dtype; eager rounds ``x + bias`` to the storage dtype in between.
Non-contiguous inputs are copied to contiguous tensors first; the output is contiguous. An empty input gives an
empty output without a launch.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from kernelkit.backends.cuda import cuda_kernel
from kernelkit.backends.cuda.grid import BLOCK, elementwise_blocks
from kernelkit.backends.lazy import kernel_module
from kernelkit.spec import Size, op, seeded_normal

triton_kernels = kernel_module(__name__, "triton")

FP = (torch.float32, torch.bfloat16, torch.float16)
# Per element: the add, then the tanh formula 0.5 h (1 + tanh(sqrt(2/pi) (h + 0.044715 h^3))) as written: h*h,
# *h, *0.044715, +h, *sqrt(2/pi), tanh, +1, *h, *0.5 (tanh counted as one): 10 FLOPs. Far below the H100's
# FLOP/byte balance, so the op is memory-bound in every dtype.
FLOPS_PER_ELEMENT = 10


def _inputs(size: Size, dtype: torch.dtype, device: torch.device, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x of ``size`` (rows, N) and bias (N,), standard normal from different seeds (bias is not x's first row)."""
    return seeded_normal(size, dtype, device, 2 * seed), seeded_normal(size[-1:], dtype, device, 2 * seed + 1)


def unfused_bytes(x: torch.Tensor, bias: torch.Tensor) -> int:
    """Bytes eager PyTorch moves: add (read MN + N, write MN), then gelu (read MN, write MN) = 4MN + N elements."""
    return (4 * x.numel() + bias.numel()) * x.element_size()


def fused_bytes(x: torch.Tensor, bias: torch.Tensor) -> int:
    """Bytes a fused kernel must move: read MN + N, write MN = 2MN + N elements (the op's ``bytes=``)."""
    return (2 * x.numel() + bias.numel()) * x.element_size()


# Reference: two eager ops, as a model would write it. bytes: the fused ideal, 2MN + N elements (eager moves
# 4MN + N: unfused_bytes); flops: 10 per element.
@op(
    sizes=[
        (1823, 781),  # odd N: no 16-byte vector fits a row exactly (the CUDA scalar path), partial tiles both ways
        (1, 4097),  # one row, one past a power of two
        (4096, 4096),  # N a multiple of every vector width: the vector path
        (8192, 3072),  # a GPT-style hidden size, 3 * 1024
    ],
    cpu_sizes=[(7, 33), (1, 257), (3, 1)],  # the interpreter runs ~1 ms per program; (3, 1): one column
    bench_sizes=[(4096, 1024), (8192, 4096), (16384, 8192), (32768, 8192)],  # fp32 fused: 32 MiB .. 2 GiB moved
    dtypes=list(FP),
    inputs=_inputs,
    bytes=fused_bytes,
    flops=lambda x, bias: FLOPS_PER_ELEMENT * x.numel(),
)
def bias_gelu(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """y = gelu_tanh(x + bias): x (..., N), bias (N,); float32, bfloat16, float16."""
    h = x + bias
    return F.gelu(h, approximate="tanh")


def _as_rows(x: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Check shapes and dtypes; x (..., N) -> a contiguous (rows, N) view, bias -> contiguous (N,)."""
    if x.dim() == 0 or bias.shape != x.shape[-1:]:
        raise ValueError(f"bias_gelu needs x (..., N) and bias (N,), got x {tuple(x.shape)}, bias {tuple(bias.shape)}")
    if bias.dtype != x.dtype or bias.device != x.device:
        raise ValueError(f"bias_gelu needs x and bias of one dtype and device, got {x.dtype} on {x.device} and "
                         f"{bias.dtype} on {bias.device}")
    return x.contiguous().view(math.prod(x.shape[:-1]), x.shape[-1]), bias.contiguous()


# Kernels and launchers --------------------------------------------------------------------------------------
# Triton: bias_gelu_fused_kernel (triton.py), 2D tiles with the bias loaded once per tile.

CUDA_FUSED_VEC = {  # one kernel per dtype: 4 floats or 8 halves / bfloat16s per 16-byte vector (cuda.cu)
    torch.float32: cuda_kernel("cuda.cu", "bias_gelu_vec_f32_kernel"),
    torch.float16: cuda_kernel("cuda.cu", "bias_gelu_vec_f16_kernel"),
    torch.bfloat16: cuda_kernel("cuda.cu", "bias_gelu_vec_bf16_kernel"),
}

# The grid-stride kernels run 256-thread blocks, one thread per work item (see backends/cuda/grid.py for why).
GRID_STRIDE_BLOCK = BLOCK


# Impls ------------------------------------------------------------------------------------------------------

@bias_gelu.impl("eager_unfused")
def bias_gelu_eager_unfused(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """PyTorch eager, two kernels: torch.add, then gelu(tanh) on its output (4MN + N elements moved)."""
    h = torch.add(x, bias)  # kernel 1: read MN + N, write MN (h goes to memory)
    return F.gelu(h, approximate="tanh")  # kernel 2: read MN, write MN


@bias_gelu.impl("triton_fused", kernels=[triton_kernels.lazy("bias_gelu_fused_kernel")])
def bias_gelu_triton_fused(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Triton, one program per 2D tile, bias loaded once per tile; tile size and num_warps autotuned per shape."""
    import triton

    rows, b = _as_rows(x, bias)
    y = torch.empty_like(rows)
    n_rows, n_cols = rows.shape
    if rows.numel():
        grid = lambda meta: (triton.cdiv(n_rows, meta["BLOCK_M"]), triton.cdiv(n_cols, meta["BLOCK_N"]))
        triton_kernels.bias_gelu_fused_kernel[grid](rows, b, y, n_rows, n_cols)
    return y.view(x.shape)


@bias_gelu.impl("cuda_fused_vec", kernels=list(CUDA_FUSED_VEC.values()), dtypes=list(CUDA_FUSED_VEC))
def bias_gelu_cuda_fused_vec(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """CUDA C++ through NVRTC: 16-byte loads and stores, bias by column, grid-stride (float32, float16, bfloat16)."""
    if x.dtype not in CUDA_FUSED_VEC:
        raise TypeError(f"cuda_fused_vec takes {', '.join(map(str, CUDA_FUSED_VEC))}, got {x.dtype}")
    rows, b = _as_rows(x, bias)
    y = torch.empty_like(rows)  # a new allocation: 256-byte aligned
    n_rows, n_cols = rows.shape
    if rows.numel():
        per_vector = 16 // rows.element_size()
        # The kernel's vector path needs N % per_vector == 0 and 16-byte aligned x, bias, y; otherwise it runs
        # its scalar loop, one item per element.
        aligned = (rows.data_ptr() | b.data_ptr()) % 16 == 0
        items = rows.numel() // per_vector if aligned and n_cols % per_vector == 0 else rows.numel()
        CUDA_FUSED_VEC[x.dtype].launch(elementwise_blocks(items, rows.device), GRID_STRIDE_BLOCK,
                                       rows, b, y, n_rows, n_cols)
    return y.view(x.shape)
