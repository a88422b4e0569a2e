"""Triton kernels of `square`, imported on first use (``kernel_module`` in ``kernelkit.ops.square``): importing
triton fixes whether its kernels run in the interpreter, so the op's package imports without it."""

from __future__ import annotations

import triton
import triton.language as tl

from kernelkit.backends.triton import do_bench

# A few block sizes around what elementwise kernels like on H100; the best depends on numel (tail, waves).
FLAT_CONFIGS = [triton.Config({"BLOCK_SIZE": size}, num_warps=warps)
                for size, warps in ((1024, 4), (2048, 4), (4096, 8), (8192, 8))]


@triton.jit
def square_rowwise_kernel(x_ptr, y_ptr, n_cols, stride_xm, stride_ym, BLOCK_SIZE: tl.constexpr):
    # One program per row, as in the lecture; rows longer than BLOCK_SIZE are walked in chunks.
    row = tl.program_id(0)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask)
        tl.store(y_ptr + row * stride_ym + cols, x * x, mask=mask)


@triton.autotune(configs=FLAT_CONFIGS, key=["n_elements"], do_bench=do_bench)
@triton.jit
def square_flat_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    # One program per BLOCK_SIZE consecutive elements: reads BLOCK_SIZE elements, writes BLOCK_SIZE, in wide
    # coalesced accesses. int64 offsets: int32 ones would wrap past 2**31 elements.
    offsets = tl.program_id(0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    # The square in fp32, rounded once to the output dtype: what PyTorch computes for fp16 and bf16.
    tl.store(y_ptr + offsets, (x * x).to(y_ptr.dtype.element_ty), mask=mask)
