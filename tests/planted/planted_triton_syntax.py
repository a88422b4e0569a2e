"""A Triton kernel with a syntax error (a missing closing parenthesis), imported only when its impl runs."""

import triton
import triton.language as tl


@triton.jit
def square_kernel(x_ptr, y_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) ** 2, mask=mask)


def launch(x):
    y = x.new_empty(x.shape)
    square_kernel[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK_SIZE=256)
    return y
