"""A file that changes a built-in op's reference to match its impl: strict mode tells the op apart from its seal."""

from kernelkit.ops.square import square

square.reference = lambda x: x.abs()  # the cheat: the spec now agrees with the impl below


@square.impl("eager_abs")
def square_abs(x):
    return x.abs()
