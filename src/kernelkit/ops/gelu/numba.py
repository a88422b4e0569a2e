"""Numba kernels of the gelu ops, imported on first use so that ``kernelkit.ops.gelu`` imports without numba.

Numba's CUDA simulator swaps the module-level name ``cuda`` for its fake; a kernel must reach ``cuda`` as a
global of its module (not a closure variable) to run there.

Each kernel is a 1D grid-stride loop over flat float32 arrays (from the thread's global index, in steps of the
grid's thread count): neighbouring threads touch neighbouring elements (coalesced), and a grid that fills the GPU
once covers any size. The math is cuda.cu's, in float32: Numba types a Python float literal as float64, and
float32 * float64 is float64 math, so every constant is a float32 global (Numba freezes globals as constants of
their type). The math is written inline, not in device functions, so that ``numba.cuda.compile_ptx`` can type and
compile the kernels without a GPU (tests check there is no float64 in their PTX).
"""

import math

import numpy as np
from numba import cuda

ZERO = np.float32(0.0)
HALF = np.float32(0.5)
ONE = np.float32(1.0)
TWO = np.float32(2.0)
SQRT_2_OVER_PI = np.float32(0.7978845608028654)
CUBIC = np.float32(0.044715)
CUBIC_X3 = np.float32(3 * 0.044715)
INV_SQRT_2 = np.float32(0.7071067811865476)
INV_SQRT_2PI = np.float32(0.3989422804014327)


@cuda.jit
def gelu_flat_kernel(x, y):
    # gelu (tanh approximation): reads 1 element, writes 1 per step.
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        v = x[i]
        u = SQRT_2_OVER_PI * v * (ONE + CUBIC * v * v)
        # sigmoid(2u) from one exp of -2|u| <= 0: no overflow, and for u < 0 it is e p, not 1 - p (precision).
        e = math.exp(-TWO * abs(u))
        p = ONE / (ONE + e)
        y[i] = v * (p if u >= ZERO else e * p)


@cuda.jit
def gelu_erf_flat_kernel(x, y):
    # gelu (erf): reads 1 element, writes 1 per step.
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        v = x[i]
        y[i] = HALF * v * (ONE + math.erf(v * INV_SQRT_2))


@cuda.jit
def gelu_backward_flat_kernel(x, dy, dx):
    # dx = dy * gelu'(x), tanh approximation: reads 2 elements, writes 1 per step.
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        v = x[i]
        u = SQRT_2_OVER_PI * v * (ONE + CUBIC * v * v)
        e = math.exp(-TWO * abs(u))  # as in gelu_flat_kernel: s (1 - s) = p q whatever the sign of u
        p = ONE / (ONE + e)
        q = e * p
        plus = p if u >= ZERO else q
        w = TWO * p * q * v  # 0 where s (1 - s) underflows: then (w v) v is 0, never 0 * inf
        dx[i] = dy[i] * (plus + SQRT_2_OVER_PI * (w + CUBIC_X3 * (w * v * v)))


@cuda.jit
def gelu_erf_backward_flat_kernel(x, dy, dx):
    # dx = dy * gelu_erf'(x) = dy * (Phi(x) + x phi(x)): reads 2 elements, writes 1 per step.
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        v = x[i]
        cdf = HALF * (ONE + math.erf(v * INV_SQRT_2))
        pdf = INV_SQRT_2PI * math.exp(-HALF * v * v)
        dx[i] = dy[i] * (cdf + v * pdf)
