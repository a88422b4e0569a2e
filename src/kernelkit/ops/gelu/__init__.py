"""gelu and its backward, elementwise, any shape: the tanh approximation and the exact (erf) form.

    gelu(x)                 = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))   F.gelu(x, approximate="tanh")
    gelu_erf(x)             = 0.5 x (1 + erf(x / sqrt 2))                        F.gelu(x)
    gelu_backward(x, dy)     = dy * gelu'(x)
    gelu_erf_backward(x, dy) = dy * gelu_erf'(x)

float32, bfloat16 and float16; every kernel computes in fp32 and rounds once to the input dtype, as PyTorch
does. Non-contiguous inputs are copied to contiguous tensors first (one extra read and write each); the output
is contiguous. An empty input gives an empty output without a launch. Memory traffic of the kernels: forward
reads N elements and writes N; backward reads 2N (x, dy) and writes N: elementwise ops are memory bound, and the
target is the device's copy bandwidth (H100: 3.0 TB/s).

Variants: ``cuda_double`` is the learner's first version (one thread per element, double-precision math);
``cuda_vec`` (16-byte vectors, grid-stride), ``triton_flat`` (autotuned flat blocks) and ``numba_flat``
(grid-stride, float32) treat the tensor as one flat array. Kernels: cuda.cu, triton.py, numba.py.
The forward references are PyTorch's fused F.gelu, so the derived eager baseline is PyTorch's kernel; the backward
references are the derivatives written out (a dozen kernels eagerly), so the backward ops register ``eager`` as
PyTorch's fused gelu_backward, the kernel autograd runs.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from kernelkit.backends.cuda import cuda_kernel
from kernelkit.backends.cuda.grid import BLOCK, elementwise_blocks
from kernelkit.backends.lazy import kernel_module
from kernelkit.backends.numba import launch
from kernelkit.spec import op

triton_kernels = kernel_module(__name__, "triton")
numba_kernels = kernel_module(__name__, "numba")

SQRT_2_OVER_PI = 0.7978845608028654
CUBIC = 0.044715
INV_SQRT_2 = 0.7071067811865476
INV_SQRT_2PI = 0.3989422804014327  # 1 / sqrt(2 pi): the standard normal pdf at 0

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
SIZES = [
    (4096, 4096),  # big: 16M elements
    (1823, 781),  # odd in both dimensions: partial blocks and a vector tail
    (1, 4097),  # one row, one past a power of two
]
BENCH_SIZES = [(2**20,), (2**24,), (2**26,), (2**28,)]  # 2**26 and 2**28 fp32: working sets of 256 MiB and more
CPU_SIZES = [(33, 17), (1, 257), (3, 5, 7)]  # interpreter and simulator run ~1 ms per program / 100 us per thread

# Flops per element, each transcendental (tanh, erf, exp) counted as one:
GELU_FLOPS = 9  # x^3 (2), * 0.044715, + x, * sqrt(2/pi), tanh, 1 +, * x, * 0.5
GELU_ERF_FLOPS = 5  # / sqrt 2, erf, 1 +, * x, * 0.5
GELU_BACKWARD_FLOPS = 20  # the forward's argument and tanh (6), 0.5 (1 + t) (2), 1 - t^2 (2), du/dx (4), 5 more * / +
GELU_ERF_BACKWARD_FLOPS = 11  # Phi (4), phi (4: x^2, * -0.5, exp, * 1/sqrt(2 pi)), x phi, +, * dy


def _unary_bytes(x: torch.Tensor) -> int:
    return 2 * x.numel() * x.element_size()  # read x, write y


def _binary_bytes(x: torch.Tensor, dy: torch.Tensor) -> int:
    return 3 * x.numel() * x.element_size()  # read x and dy, write dx


def _opmath(t: torch.Tensor) -> torch.Tensor:
    """16-bit tensors widened to float32 (PyTorch's own opmath); float32 and float64 unchanged."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


# References -------------------------------------------------------------------------------------------------
# The forward references are PyTorch's own fused kernels (the eager baseline to beat); tests check them against
# the formulas above in float64. The backward references are the derivatives written out; tests check them
# against torch.autograd.grad of the forward references in float64.

_OP_OPTIONS: dict[str, Any] = {"sizes": SIZES, "bench_sizes": BENCH_SIZES, "cpu_sizes": CPU_SIZES, "dtypes": DTYPES}


# bytes: read N + write N elements; flops: GELU_FLOPS per element.
@op(**_OP_OPTIONS, bytes=_unary_bytes, flops=lambda x: GELU_FLOPS * x.numel())
def gelu(x: torch.Tensor) -> torch.Tensor:
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), elementwise: GELU's tanh approximation."""
    return F.gelu(x, approximate="tanh")


# bytes: read N + write N elements; flops: GELU_ERF_FLOPS per element.
@op(**_OP_OPTIONS, bytes=_unary_bytes, flops=lambda x: GELU_ERF_FLOPS * x.numel())
def gelu_erf(x: torch.Tensor) -> torch.Tensor:
    """0.5 x (1 + erf(x / sqrt 2)) = x Phi(x), elementwise: the exact GELU."""
    return F.gelu(x)


def _same_shape(*size: int) -> tuple[tuple[int, ...], ...]:
    """x and dy: both of the case's size."""
    return (size, size)


# bytes: read 2N + write N elements; flops: GELU_BACKWARD_FLOPS per element.
@op(**_OP_OPTIONS, shapes=_same_shape, bytes=_binary_bytes, flops=lambda x, dy: GELU_BACKWARD_FLOPS * x.numel())
def gelu_backward(x: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """dx = dy * gelu'(x) for the tanh approximation; fp32 math for 16-bit inputs.

    Like PyTorch's own gelu_backward, NaN where x^2 overflows (|x| > ~1e19 in fp32): 0 * inf. The kernels give 0 or 1.
    """
    xf, dyf = _opmath(x), _opmath(dy)
    t = torch.tanh(SQRT_2_OVER_PI * (xf + CUBIC * xf**3))
    du_dx = SQRT_2_OVER_PI * (1 + 3 * CUBIC * xf**2)
    return (dyf * (0.5 * (1 + t) + 0.5 * xf * (1 - t * t) * du_dx)).to(x.dtype)


# bytes: read 2N + write N elements; flops: GELU_ERF_BACKWARD_FLOPS per element.
@op(**_OP_OPTIONS, shapes=_same_shape, bytes=_binary_bytes, flops=lambda x, dy: GELU_ERF_BACKWARD_FLOPS * x.numel())
def gelu_erf_backward(x: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """dx = dy * (Phi(x) + x phi(x)), the exact GELU's derivative; fp32 math for 16-bit inputs."""
    xf, dyf = _opmath(x), _opmath(dy)
    cdf = 0.5 * (1 + torch.erf(xf * INV_SQRT_2))
    pdf = INV_SQRT_2PI * torch.exp(-0.5 * xf * xf)
    return (dyf * (cdf + xf * pdf)).to(x.dtype)


# As PyTorch operators (kk.torch_op), each forward impl takes its gradient from the backward op's impl of the
# same name, which reads the saved x.
gelu.set_backward(gelu_backward, saved=lambda x, y: (x,))
gelu_erf.set_backward(gelu_erf_backward, saved=lambda x, y: (x,))


# Kernels ----------------------------------------------------------------------------------------------------

CUDA_DOUBLE = cuda_kernel("cuda.cu", "gelu_double_kernel")

_SUFFIXES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
# One cuda_vec kernel per op and dtype: 4 floats or 8 halves / bfloat16s per 16-byte vector.
CUDA_VEC = {
    name: {dtype: cuda_kernel("cuda.cu", f"{name}_vec_{suffix}_kernel") for dtype, suffix in _SUFFIXES.items()}
    for name in ("gelu", "gelu_erf", "gelu_backward", "gelu_erf_backward")
}
# triton_flat: one kernel per direction (triton.py), each in a tanh and an exact (erf) form.

# Launchers --------------------------------------------------------------------------------------------------
# The grid-stride kernels (cuda_vec, numba_flat) launch 256-thread blocks, one thread per step of work on a GPU
# (see backends/cuda/grid.py for why); in Numba's simulator the grid stays tiny, so the loop is exercised.
# Number of inputs -> 16-byte vectors per input a cuda_vec thread loads per step (cuda.cu's kUnrollUnary/Binary).
VECTORS_PER_STEP = {1: 2, 2: 1}


def _flat_inputs(x: torch.Tensor, *rest: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Every input as a contiguous 1-D tensor (a copy only when not contiguous); ValueError on a mismatch."""
    for t in rest:
        if t.shape != x.shape or t.dtype != x.dtype or t.device != x.device:
            raise ValueError(f"dy must match x: got {tuple(t.shape)} {t.dtype} on {t.device}, "
                             f"x is {tuple(x.shape)} {x.dtype} on {x.device}")
    return tuple(t.contiguous().view(-1) for t in (x, *rest))


def _run_cuda_vec(kernels: dict[torch.dtype, Any], x: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
    """Launch the 16-byte-vector kernel for x's dtype over the flat inputs; returns the output in x's shape."""
    if x.dtype not in kernels:
        raise TypeError(f"cuda_vec takes {', '.join(map(str, kernels))}, got {x.dtype}")
    flats = _flat_inputs(x, *rest)
    out = torch.empty_like(flats[0])  # a new allocation: 256-byte aligned
    n = out.numel()
    if n:
        # A view that starts off a 16-byte boundary (x[1:]) runs the kernel's scalar loop: one item per element.
        aligned = all(t.data_ptr() % 16 == 0 for t in flats)
        per_step = 16 // out.element_size() * VECTORS_PER_STEP[len(flats)]
        items = -(-n // per_step) if aligned else n
        kernels[x.dtype].launch(elementwise_blocks(items, out.device), BLOCK, *flats, out, n)
    return out.view(x.shape)


def _run_triton_flat(kernel: str, x: torch.Tensor, *rest: torch.Tensor, exact: bool) -> torch.Tensor:
    """Triton kernel ``kernel`` (triton.py) in its exact (erf) or tanh form: one program per BLOCK_SIZE flat
    elements; BLOCK_SIZE and num_warps autotuned per numel, dtype and form."""
    flats = _flat_inputs(x, *rest)
    out = torch.empty_like(flats[0])
    n = out.numel()
    if n:
        import triton

        getattr(triton_kernels, kernel)[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](*flats, out, n, EXACT=exact)
    return out.view(x.shape)


def _run_numba_flat(kernel: str, x: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
    """Numba grid-stride kernel ``kernel`` (numba.py) over the flat inputs."""
    flats = _flat_inputs(x, *rest)
    out = torch.empty_like(flats[0])
    if out.numel():
        launch(getattr(numba_kernels, kernel), elementwise_blocks(out.numel(), out.device), BLOCK, *flats, out)
    return out.view(x.shape)


# Impls ------------------------------------------------------------------------------------------------------

@gelu.impl("cuda_double", kernels=[CUDA_DOUBLE], dtypes=[torch.float32])
def gelu_cuda_double(x: torch.Tensor) -> torch.Tensor:
    """CUDA C++ through NVRTC, one thread per element, double-precision math (the learner's version, float32)."""
    if x.dtype != torch.float32:
        raise TypeError(f"cuda_double takes torch.float32, got {x.dtype}")
    (flat,) = _flat_inputs(x)
    y = torch.empty_like(flat)
    n = flat.numel()
    if n:
        CUDA_DOUBLE.launch(-(-n // BLOCK), BLOCK, flat, y, n)
    return y.view(x.shape)


@gelu.impl("cuda_vec", kernels=list(CUDA_VEC["gelu"].values()), dtypes=DTYPES)
def gelu_cuda_vec(x: torch.Tensor) -> torch.Tensor:
    """CUDA C++ through NVRTC: 16-byte loads and stores in a grid-stride loop, fp32 math with one fast exp."""
    return _run_cuda_vec(CUDA_VEC["gelu"], x)


@gelu.impl("triton_flat", kernels=[triton_kernels.lazy("gelu_flat_kernel")])
def gelu_triton_flat(x: torch.Tensor) -> torch.Tensor:
    """Triton, a flat 1D grid over every element; BLOCK_SIZE and num_warps autotuned per numel and dtype."""
    return _run_triton_flat("gelu_flat_kernel", x, exact=False)


@gelu.impl("numba_flat", dtypes=[torch.float32])
def gelu_numba_flat(x: torch.Tensor) -> torch.Tensor:
    """Numba @cuda.jit, a 1D grid-stride loop over the flat elements (float32)."""
    return _run_numba_flat("gelu_flat_kernel", x)


@gelu_erf.impl("cuda_vec", kernels=list(CUDA_VEC["gelu_erf"].values()), dtypes=DTYPES)
def gelu_erf_cuda_vec(x: torch.Tensor) -> torch.Tensor:
    """CUDA C++ through NVRTC: 16-byte loads and stores in a grid-stride loop, fp32 math with erff."""
    return _run_cuda_vec(CUDA_VEC["gelu_erf"], x)


@gelu_erf.impl("triton_flat", kernels=[triton_kernels.lazy("gelu_flat_kernel")])
def gelu_erf_triton_flat(x: torch.Tensor) -> torch.Tensor:
    """Triton, a flat 1D grid over every element, tl.math.erf; BLOCK_SIZE and num_warps autotuned."""
    return _run_triton_flat("gelu_flat_kernel", x, exact=True)


@gelu_erf.impl("numba_flat", dtypes=[torch.float32])
def gelu_erf_numba_flat(x: torch.Tensor) -> torch.Tensor:
    """Numba @cuda.jit, a 1D grid-stride loop with math.erf (float32)."""
    return _run_numba_flat("gelu_erf_flat_kernel", x)


# The backward references are the derivatives written out: run eagerly they are a dozen kernels, not a baseline
# worth beating. ``eager`` is what autograd runs for F.gelu: PyTorch's fused gelu_backward kernel.
@gelu_backward.impl("eager")
def gelu_backward_eager(x: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """torch.ops.aten.gelu_backward (approximate="tanh"): PyTorch's own fused kernel, what autograd runs."""
    return torch.ops.aten.gelu_backward(dy, x, approximate="tanh")


@gelu_backward.impl("cuda_vec", kernels=list(CUDA_VEC["gelu_backward"].values()), dtypes=DTYPES)
def gelu_backward_cuda_vec(x: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """CUDA C++ through NVRTC, fused: 16-byte loads of x and dy, one store of dx, in a grid-stride loop."""
    return _run_cuda_vec(CUDA_VEC["gelu_backward"], x, dy)


@gelu_backward.impl("triton_flat", kernels=[triton_kernels.lazy("gelu_backward_flat_kernel")])
def gelu_backward_triton_flat(x: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """Triton, fused: reads x and dy, writes dx, over a flat 1D grid; BLOCK_SIZE and num_warps autotuned."""
    return _run_triton_flat("gelu_backward_flat_kernel", x, dy, exact=False)


@gelu_backward.impl("numba_flat", dtypes=[torch.float32])
def gelu_backward_numba_flat(x: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """Numba @cuda.jit, fused, a 1D grid-stride loop (float32)."""
    return _run_numba_flat("gelu_backward_flat_kernel", x, dy)


@gelu_erf_backward.impl("eager")
def gelu_erf_backward_eager(x: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """torch.ops.aten.gelu_backward: PyTorch's own fused kernel, what autograd runs for F.gelu."""
    return torch.ops.aten.gelu_backward(dy, x)


@gelu_erf_backward.impl("cuda_vec", kernels=list(CUDA_VEC["gelu_erf_backward"].values()), dtypes=DTYPES)
def gelu_erf_backward_cuda_vec(x: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """CUDA C++ through NVRTC, fused: 16-byte loads of x and dy, one store of dx, in a grid-stride loop."""
    return _run_cuda_vec(CUDA_VEC["gelu_erf_backward"], x, dy)


@gelu_erf_backward.impl("triton_flat", kernels=[triton_kernels.lazy("gelu_backward_flat_kernel")])
def gelu_erf_backward_triton_flat(x: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """Triton, fused: reads x and dy, writes dx, over a flat 1D grid; BLOCK_SIZE and num_warps autotuned."""
    return _run_triton_flat("gelu_backward_flat_kernel", x, dy, exact=True)


@gelu_erf_backward.impl("numba_flat", dtypes=[torch.float32])
def gelu_erf_backward_numba_flat(x: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """Numba @cuda.jit, fused, a 1D grid-stride loop with math.erf and math.exp (float32)."""
    return _run_numba_flat("gelu_erf_backward_flat_kernel", x, dy)
