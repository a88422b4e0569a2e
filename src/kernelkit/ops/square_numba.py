"""Numba kernels of `square`, kept apart so that `kernelkit.ops.square` imports without numba.

Numba's CUDA simulator swaps the module-level name ``cuda`` for its fake; a kernel must reach ``cuda`` as a
global of its module (not a closure variable) to run there.
"""

from numba import cuda


@cuda.jit
def square_2d_kernel(x, y):
    # The learner's Numba version: one thread per element on a 2D grid; reads 1 element, writes 1.
    row, col = cuda.grid(2)
    if row < x.shape[0] and col < x.shape[1]:
        y[row, col] = x[row, col] * x[row, col]
