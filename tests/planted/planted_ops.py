"""Planted impls: each one earns a particular status. `kernelkit check` must survive all of them in one run.

Used by the test suite (CPU) and by scripts/device-check (GPU, where the illegal memory access really happens).
"""

import ctypes
import time

import torch

import kernelkit as kk


@kk.op(sizes=[(64, 48)], cpu_sizes=[(64, 48)], dtypes=[torch.float32])
def planted(x):
    """The spec every planted impl is judged against."""
    return x * x


@planted.impl("eager_correct")
def correct(x):
    return x * x


@planted.impl("eager_zeros")
def zeros(x):
    return torch.zeros_like(x)


@planted.impl("eager_echo")
def echo(x):
    return x.clone()


@planted.impl("eager_mutates_input")
def mutates(x):
    return x.mul_(x).clone()


@planted.impl("eager_wrong_shape")
def wrong_shape(x):
    return (x * x).t().contiguous()


@planted.impl("eager_wrong_dtype")
def wrong_dtype(x):
    return (x * x).double()


@planted.impl("eager_off_by_one_row")
def last_row_wrong(x):
    y = x * x
    y[-1] += 1.0
    return y


_first_answer = {}


@planted.impl("eager_stale_output")
def stale(x):
    # Computes the first answer it is asked for, then keeps returning it.
    if "y" not in _first_answer:
        _first_answer["y"] = x * x
    return _first_answer["y"].clone()


@planted.impl("eager_raises")
def raises(x):
    raise RuntimeError("planted failure")


@planted.impl("eager_segfault")
def segfault(x):
    ctypes.string_at(0)  # reads address 0: SIGSEGV in the worker
    return x * x


@planted.impl("eager_hangs")
def hangs(x):
    time.sleep(3600)
    return x * x


@planted.impl("eager_out_of_memory")
def out_of_memory(x):
    torch.empty(2**50, dtype=torch.uint8, device=x.device)  # 1 PiB
    return x * x


@planted.impl("triton_syntax_error")
def triton_syntax_error(x):
    from planted_triton_syntax import launch  # that module's kernel has a syntax error

    return launch(x)


CUDA_SYNTAX_ERROR = kk.cuda_kernel(
    r"""
extern "C" __global__ void square_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x
    if (i < n) y[i] = x[i] * x[i];
}
""",
    "square_kernel",
)


@planted.impl("cuda_syntax_error", kernels=[CUDA_SYNTAX_ERROR])
def cuda_syntax_error(x):
    y = torch.empty_like(x)
    CUDA_SYNTAX_ERROR.launch((x.numel() + 255) // 256, 256, x, y, x.numel())
    return y


CUDA_ILLEGAL_ADDRESS = kk.cuda_kernel(
    r"""
extern "C" __global__ void square_wild_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    // Writes a terabyte past the output: an illegal memory access that poisons the CUDA context.
    if (i < n) y[i + (1ll << 38)] = x[i] * x[i];
}
""",
    "square_wild_kernel",
)


@planted.impl("cuda_illegal_address", kernels=[CUDA_ILLEGAL_ADDRESS])
def cuda_illegal_address(x):
    y = torch.empty_like(x)
    CUDA_ILLEGAL_ADDRESS.launch((x.numel() + 255) // 256, 256, x, y, x.numel())
    return y


def _zeros_input(size, dtype, device, seed):
    return (torch.zeros(size, dtype=dtype, device=device),)


@kk.op(sizes=[(64, 48)], cpu_sizes=[(64, 48)], dtypes=[torch.float32], inputs=_zeros_input)
def planted_zero_input(x):
    """An op whose inputs are all zeros: its cases cannot catch a broken impl."""
    return x * x


@planted_zero_input.impl("eager_weakly_tested")
def weakly_tested(x):
    return x * x
