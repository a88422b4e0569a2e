"""Triton kernels of the split-row softmax, imported on first use (``kernel_module`` in ``kernelkit.ops.softmax``).

A row is cut into chunks of BLOCK_SIZE elements and every chunk gets its own program, so a few long rows still fill
every SM (one program a row leaves most of a 132-SM GPU idle below ~132 rows). Two kernels:
  1. ``softmax_split_partials_kernel``: each chunk's max m_c and sum s_c = sum exp(x - m_c) into two small fp32
     (M, n_chunks) buffers. Reads MN elements, writes 2 M n_chunks floats.
  2. ``softmax_split_normalize_kernel``: each program merges its row's partials (M = max m_c,
     S = sum s_c exp(m_c - M)), reads its chunk again and writes exp(x - M) / S. Reads MN + 2 M n_chunks^2, writes MN.
In all 2 reads + 1 write of the row. A single kernel holding each chunk in registers would need a row-wide barrier
between programs, which deadlocks when a row's programs are not all resident at once: Triton cannot promise that.

The grid is one-dimensional, program p taking row p // n_chunks and chunk p % n_chunks (a second grid axis would
cap rows at 65535). Pass 1 walks memory forwards; pass 2 walks it backwards, so its first programs read the chunks
pass 1 read last, which may still be in L2 (50 MB on an H100).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def softmax_split_partials_kernel(x_ptr, max_ptr, sum_ptr, n_cols, n_chunks, stride_xm, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    row = (pid // n_chunks).to(tl.int64)  # int64: row * stride passes 2**31 on large tensors
    chunk = pid % n_chunks
    cols = chunk * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + row * stride_xm + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
    chunk_max = tl.max(x, axis=0)
    # A chunk of only -inf (masked) takes its exponentials against 0: exp(-inf - 0) = 0, where -inf - -inf is NaN.
    shift = tl.where(chunk_max == -float("inf"), 0.0, chunk_max)
    chunk_sum = tl.sum(tl.exp(x - shift), axis=0)
    tl.store(max_ptr + row * n_chunks + chunk, chunk_max)
    tl.store(sum_ptr + row * n_chunks + chunk, chunk_sum)


@triton.jit
def softmax_split_normalize_kernel(x_ptr, y_ptr, max_ptr, sum_ptr, n_cols, n_chunks, stride_xm, stride_ym,
                                   BLOCK_SIZE: tl.constexpr, CHUNKS_BLOCK: tl.constexpr):
    pid = tl.num_programs(0) - 1 - tl.program_id(0)  # backwards: see the module's docstring
    row = (pid // n_chunks).to(tl.int64)
    chunk = pid % n_chunks
    # The row's partials; padding entries are (-inf, 0) and add 0 * exp(-inf - M) = 0 to the sum.
    index = tl.arange(0, CHUNKS_BLOCK)
    in_row = index < n_chunks
    maxes = tl.load(max_ptr + row * n_chunks + index, mask=in_row, other=-float("inf"))
    sums = tl.load(sum_ptr + row * n_chunks + index, mask=in_row, other=0.0)
    row_max = tl.max(maxes, axis=0)
    # A chunk of only -inf has (m, s) = (-inf, 0): 0 * exp(-inf) = 0. A row of only -inf has row_max = -inf, so
    # exp(-inf - -inf) = NaN: the row gives NaN, as torch.softmax does.
    row_sum = tl.sum(sums * tl.exp(maxes - row_max), axis=0)
    cols = chunk * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=-float("inf")).to(tl.float32)
    y = tl.exp(x - row_max) / row_sum
    tl.store(y_ptr + row * stride_ym + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
