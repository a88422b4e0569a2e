"""Triton kernel of bias_gelu, imported on first use (``kernel_module`` in ``kernelkit.ops.bias_gelu``): importing
triton fixes whether its kernels run in the interpreter, so the op's package imports without it."""

from __future__ import annotations

import triton
import triton.language as tl

from kernelkit.backends.triton import do_bench

# Widest tile row: N = 3072 and 4096 split into whole 1024-column tiles; a narrower N gets a power-of-two tile
# just wider than itself and more rows per program.
MAX_BLOCK_N = 1024
# Elements per program and warps, around what elementwise kernels like on H100 (16 to 64 bytes a thread for
# fp32); the best depends on the shape (tail, waves). The tile's shape follows from TILE and N (heuristics).
FUSED_CONFIGS = [triton.Config({"TILE": tile}, num_warps=warps)
                 for tile, warps in ((2048, 4), (4096, 4), (4096, 8), (8192, 8))]


@triton.autotune(configs=FUSED_CONFIGS, key=["n_rows", "n_cols"], do_bench=do_bench)
@triton.heuristics({  # evaluated in order: BLOCK_M sees BLOCK_N
    "BLOCK_N": lambda args: min(triton.next_power_of_2(args["n_cols"]), MAX_BLOCK_N, args["TILE"]),
    "BLOCK_M": lambda args: args["TILE"] // args["BLOCK_N"],
})
@triton.jit
def bias_gelu_fused_kernel(x_ptr, bias_ptr, y_ptr, n_rows, n_cols, TILE: tl.constexpr,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # One program per (BLOCK_M, BLOCK_N) tile of the row-major (rows, N) matrix: it loads the BLOCK_N bias
    # values of its columns once and broadcasts them down its rows, so no per-element column arithmetic.
    # Reads BLOCK_M * BLOCK_N elements of x and BLOCK_N of bias, writes BLOCK_M * BLOCK_N: the fused ideal.
    # int64 row offsets: int32 ones would wrap past 2**31 elements.
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    mask = (rows[:, None] < n_rows) & col_mask[None, :]
    offsets = rows[:, None] * n_cols + cols[None, :]
    b = tl.load(bias_ptr + cols, mask=col_mask).to(tl.float32)
    h = tl.load(x_ptr + offsets, mask=mask).to(tl.float32) + b[None, :]
    # gelu_tanh(h) = 0.5 h (1 + tanh(u)) = h * sigmoid(2u), u = sqrt(2/pi) (h + 0.044715 h^3): one exp, no
    # tanh. The sigmoid in its overflow-free form (t = exp(-|2u|) in (0, 1]; 1 / (1 + t), or t / (1 + t) for
    # u < 0): the denominator stays in [1, 2], where Triton's approximate division is exact enough, and far
    # in the negative tail t underflows to 0, giving the reference's -0.
    two_u = 1.5957691216057308 * h * (1.0 + 0.044715 * h * h)
    t = tl.exp(-tl.abs(two_u))
    y = h * (tl.where(two_u >= 0, 1.0, t) / (1.0 + t))
    # Rounded once to the output dtype; eager also rounds h, in between.
    tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)
