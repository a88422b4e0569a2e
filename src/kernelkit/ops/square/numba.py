"""Numba kernels of `square`, imported on first use so that `kernelkit.ops.square` imports without numba.

Numba's CUDA simulator swaps the module-level name ``cuda`` for its fake; a kernel must reach ``cuda`` as a
global of its module (not a closure variable) to run there.
"""

from numba import cuda


@cuda.jit
def square_2d_kernel(x, y):
    # The learner's Numba version: one thread per element on a 2D grid; reads 1 element, writes 1.
    # Columns on the grid's x axis: neighbouring threads read neighbouring elements, and x allows 2**31 - 1
    # blocks where y allows only 65535 (a (1, 2**20) tensor has 65536 column blocks).
    col, row = cuda.grid(2)
    if row < x.shape[0] and col < x.shape[1]:
        y[row, col] = x[row, col] * x[row, col]


@cuda.jit
def square_flat_kernel(x, y):
    # A 1D grid-stride loop over the flat arrays: neighbouring threads touch neighbouring elements (coalesced),
    # and a grid that fills the GPU once covers any size. Reads 1 element and writes 1 per step.
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    for i in range(start, x.size, stride):
        y[i] = x[i] * x[i]
