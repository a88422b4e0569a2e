"""Triton kernels of the gelu ops, imported on first use (``kernel_module`` in ``kernelkit.ops.gelu``).

Importing triton fixes whether its kernels run in the interpreter, so ``kernelkit.ops.gelu`` must import without
it; this module imports triton at its top and is itself imported late. The math is cuda.cu's, in fp32 for every
storage dtype, rounded once to the output dtype.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernelkit.backends.triton import do_bench

SQRT_2_OVER_PI = tl.constexpr(0.7978845608028654)
CUBIC = tl.constexpr(0.044715)
INV_SQRT_2 = tl.constexpr(0.7071067811865476)
INV_SQRT_2PI = tl.constexpr(0.3989422804014327)

# A few block sizes around what elementwise kernels like on an H100; the best depends on numel (tail, waves).
# 8192 elements x 4 B is 32 KB per program in flight, 8 warps issue it as 16-byte accesses.
CONFIGS = [triton.Config({"BLOCK_SIZE": size}, num_warps=warps)
           for size, warps in ((1024, 4), (2048, 4), (4096, 8), (8192, 8))]


# ---- the math (fp32 in, fp32 out); cuda.cu explains each formulation ---------------------------------------

@triton.jit
def _tanh_halves(u):
    # sigmoid(2u) and sigmoid(-2u) from one exp of -2|u| <= 0: no overflow, and the small one keeps its precision.
    e = tl.exp(-2.0 * tl.abs(u))
    p = 1.0 / (1.0 + e)
    q = e * p
    positive = u >= 0.0
    return tl.where(positive, p, q), tl.where(positive, q, p)


@triton.jit
def _gelu(x, EXACT: tl.constexpr):
    if EXACT:
        y = 0.5 * x * (1.0 + tl.math.erf(x * INV_SQRT_2))
    else:
        u = SQRT_2_OVER_PI * x * (1.0 + CUBIC * x * x)
        plus, _ = _tanh_halves(u)
        y = x * plus
    return y


@triton.jit
def _gelu_grad(x, EXACT: tl.constexpr):
    if EXACT:
        cdf = 0.5 * (1.0 + tl.math.erf(x * INV_SQRT_2))
        pdf = INV_SQRT_2PI * tl.exp(-0.5 * x * x)
        g = cdf + x * pdf
    else:
        u = SQRT_2_OVER_PI * x * (1.0 + CUBIC * x * x)
        plus, minus = _tanh_halves(u)
        w = 2.0 * plus * minus * x  # 0 where s (1 - s) underflows: then (w x) x is 0, never 0 * inf
        g = plus + SQRT_2_OVER_PI * (w + 3.0 * CUBIC * (w * x * x))
    return g


# ---- kernels: one program per BLOCK_SIZE consecutive elements ----------------------------------------------
# Forward reads BLOCK_SIZE elements and writes BLOCK_SIZE; backward reads 2 x BLOCK_SIZE (x, dy), writes
# BLOCK_SIZE. int64 offsets: int32 ones would wrap past 2**31 elements. EXACT (a compile-time constant, tuned
# apart): the exact (erf) GELU, else the tanh approximation.

@triton.autotune(configs=CONFIGS, key=["n_elements", "EXACT"], do_bench=do_bench)
@triton.jit
def gelu_flat_kernel(x_ptr, y_ptr, n_elements, EXACT: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(y_ptr + offsets, _gelu(x, EXACT).to(y_ptr.dtype.element_ty), mask=mask)


@triton.autotune(configs=CONFIGS, key=["n_elements", "EXACT"], do_bench=do_bench)
@triton.jit
def gelu_backward_flat_kernel(x_ptr, dy_ptr, dx_ptr, n_elements, EXACT: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    dy = tl.load(dy_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(dx_ptr + offsets, (dy * _gelu_grad(x, EXACT)).to(dx_ptr.dtype.element_ty), mask=mask)
