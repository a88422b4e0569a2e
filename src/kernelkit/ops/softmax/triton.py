"""Triton kernels of the softmax ops, imported on first use (``kernel_module`` in ``kernelkit.ops.softmax``):
importing triton fixes whether its kernels run in the interpreter, so the op's package imports without it. Every
kernel reads fp16/bf16/fp32 and computes in fp32; the launch heuristics (block sizes, rows per program, warps)
are in the package's __init__.py.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def softmax_rowwise_kernel(x_ptr, y_ptr, n_rows, n_cols, stride_xm, stride_ym,
                           BLOCK_SIZE: tl.constexpr, ROWS_PER_PROGRAM: tl.constexpr):
    # ROWS_PER_PROGRAM whole rows in registers (BLOCK_SIZE >= n_cols): read MN, write MN elements.
    rows = tl.program_id(0) * ROWS_PER_PROGRAM + tl.arange(0, ROWS_PER_PROGRAM)
    cols = tl.arange(0, BLOCK_SIZE)
    store_mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    # Rows past the end read the last row again (in bounds; a padding row of -inf would compute NaN) and are
    # not stored. int64: row * stride passes 2**31 on large tensors.
    rows = tl.minimum(rows, n_rows - 1).to(tl.int64)
    x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :], mask=cols[None, :] < n_cols,
                other=-float("inf")).to(tl.float32)
    # Padding columns are -inf: they add exp(-inf) = 0. A row of -inf only gives NaN, as torch.softmax does.
    numerator = tl.exp(x - tl.max(x, axis=1)[:, None])
    inv_sum = 1.0 / tl.sum(numerator, axis=1)
    y = numerator * inv_sum[:, None]
    tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=store_mask)


@triton.jit
def softmax_online_kernel(x_ptr, y_ptr, n_cols, stride_xm, stride_ym, BLOCK_SIZE: tl.constexpr):
    # One program per row of any length, in BLOCK_SIZE chunks. Pass 1 keeps, per lane, the running max m and
    # the sum s of exp(x - m) rescaled whenever m grows; pass 2 reads the row again and writes it:
    # read 2MN, write MN elements.
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_xm
    y_row = y_ptr + row * stride_ym
    cols = tl.arange(0, BLOCK_SIZE)
    # m starts at float32's lowest, not at -inf: -inf - -inf would be NaN.
    m = tl.full([BLOCK_SIZE], -3.4028234663852886e38, tl.float32)
    s = tl.zeros([BLOCK_SIZE], tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        offsets = start + cols
        x = tl.load(x_row + offsets, mask=offsets < n_cols, other=-float("inf")).to(tl.float32)
        # One exp, of -|x - m|, for both cases: x is the new max (rescale s, add 1) or it is not (add e).
        e = tl.exp(-tl.abs(x - m))
        s = tl.where(x > m, s * e + 1.0, s + e)
        m = tl.maximum(m, x)
    row_max = tl.max(m, axis=0)
    inv_sum = 1.0 / tl.sum(s * tl.exp(m - row_max), axis=0)
    for start in range(0, n_cols, BLOCK_SIZE):
        offsets = start + cols
        mask = offsets < n_cols
        x = tl.load(x_row + offsets, mask=mask, other=-float("inf")).to(tl.float32)
        y = tl.exp(x - row_max) * inv_sum
        tl.store(y_row + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def softmax_backward_rowwise_kernel(y_ptr, dy_ptr, dx_ptr, n_rows, n_cols, stride_ym, stride_dym, stride_dxm,
                                    BLOCK_SIZE: tl.constexpr, ROWS_PER_PROGRAM: tl.constexpr):
    # Whole rows of y and dy in registers: read 2MN, write MN elements.
    rows = tl.program_id(0) * ROWS_PER_PROGRAM + tl.arange(0, ROWS_PER_PROGRAM)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    rows = rows.to(tl.int64)
    y = tl.load(y_ptr + rows[:, None] * stride_ym + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + rows[:, None] * stride_dym + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    dot = tl.sum(y * dy, axis=1)
    dx = y * (dy - dot[:, None])
    tl.store(dx_ptr + rows[:, None] * stride_dxm + cols[None, :], dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def softmax_backward_chunked_kernel(y_ptr, dy_ptr, dx_ptr, n_cols, stride_ym, stride_dym, stride_dxm,
                                    BLOCK_SIZE: tl.constexpr):
    # One program per row of any length: pass 1 sums y * dy chunk by chunk, pass 2 reads y and dy again and
    # writes dx: read 4MN, write MN elements.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    partial = tl.zeros([BLOCK_SIZE], tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        offsets = start + cols
        mask = offsets < n_cols
        y = tl.load(y_ptr + row * stride_ym + offsets, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + row * stride_dym + offsets, mask=mask, other=0.0).to(tl.float32)
        partial += y * dy
    dot = tl.sum(partial, axis=0)
    for start in range(0, n_cols, BLOCK_SIZE):
        offsets = start + cols
        mask = offsets < n_cols
        y = tl.load(y_ptr + row * stride_ym + offsets, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + row * stride_dym + offsets, mask=mask, other=0.0).to(tl.float32)
        tl.store(dx_ptr + row * stride_dxm + offsets, (y * (dy - dot)).to(dx_ptr.dtype.element_ty), mask=mask)
