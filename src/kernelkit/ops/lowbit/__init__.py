"""Low-bit linear layers: y = x @ W.T with W stored as 8-, 4- or 2-bit codes and per-group or per-channel scales.

Ops (size (M, N, K); the case dtype is the activation dtype: bfloat16 and float16 are the paths that matter,
float32 is there to check the kernels in the CPU interpreter):

- ``linear_w4``: 4-bit codes, asymmetric, groups of 128 along K (its default inputs);
- ``linear_w8``: 8-bit codes, symmetric, per-channel;
- ``linear_w2``: 2-bit codes, asymmetric, groups of 64.

Every op takes ``(x, packed, scales, zeros=None, group_size=...)``: x (..., K), packed (N, ceil(K / P)) int32
(packing.py has the layout), scales (N, G) in the activation dtype, zeros (N, G) uint8 codes or None (symmetric),
group_size None for per-channel (quantization.py has the convention w = (q - z) * s); the output is (..., N) in x's
dtype. Any group size (a power of two, whole words) and either symmetry work with every impl but PyTorch's own.

Impls of every op: ``eager_dequant`` (dequantize with PyTorch ops, then F.linear), ``triton_gemv`` (memory-bound
M = 1 path: the weights streamed once, K split over programs when long), ``triton_splitk`` (tensor cores, K split
over programs, partials combined with tl.atomic_add), ``triton_splitk_twopass`` (the same, partials summed by a
second kernel), ``triton_gemm`` (large M, dequantized in the K loop feeding tl.dot), ``triton_dequant_cublas`` (a
dequantize kernel, then cuBLAS), ``triton_auto`` (one of those by M: launch.pick_kernel); ``eager_int4pack_mm``
(linear_w4) and ``eager_int8pack_mm`` (linear_w8): PyTorch's own kernels on a cached conversion of the weights
(torch_packed.py). For M <= 16 (SKIPPED with the reason past it, or where the kernel does not apply; launched by
gemv_launch.py): ``triton_gemv_unrolled`` (every op: triton_gemv's kernel with 4 word tiles loaded a step before
any is expanded), ``cuda_gemv`` (linear_w4 and linear_w8, bf16 and fp16: gemv.cu, a warp per 2 rows) and
``cuda_gemv_mma`` (linear_w4 and linear_w8, bf16 and fp16: gemv_mma.cu, codes made 16-bit floats for mma.sync).
``cuda_auto`` (linear_w4 and linear_w8, every M): cuda_gemv_mma where it applies, else triton_auto; what
LowBitLinear runs on a GPU where the CUDA backend runs.

"Faster than bf16" compares with F.linear on a dense weight of the same shape. That is not an impl: an impl sees
only the op's inputs (the quantized weight), and building a dense weight inside it would time the build;
scripts/gpu-lowbit times F.linear on a dense bf16 weight beside the impls instead (timing does not depend on the
values). ``LowBitLinear`` (module.py) is the drop-in nn.Module.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import torch

from kernelkit.ops.lowbit import gemv_launch, launch, torch_packed
from kernelkit.ops.lowbit.inputs import check_inputs, cost_bytes, cost_flops, seeded_inputs
from kernelkit.ops.lowbit.quantization import QuantizedWeight, dequantize, quantize
from kernelkit.spec import Op, op

__all__ = ["LowBitLinear", "QuantizedWeight", "dequantize", "linear_w2", "linear_w4", "linear_w8", "lowbit_linear",
           "quantize"]

FP = [torch.bfloat16, torch.float16, torch.float32]
# (M, N, K). Edges: the decode GEMV; odd N and K = 1000 (a short last group of 104 at g128, a padded last word at
# 2 bits); batched decode on a tall weight; M = 64 with K = 14336 (the split-K / GEMM crossover on a long K); an
# odd M past the split-K range (the fused GEMM); a prefill (dequantize + cuBLAS).
SIZES = [(1, 4096, 4096), (3, 1000, 1000), (16, 14336, 4096), (64, 4096, 14336), (300, 2048, 4096),
         (2048, 4096, 4096)]
# The interpreter runs ~1 ms a program: one row; three rows and K = 100 (a padded word, a short group); 17 rows
# (past one 16-row tile) and K = 192 (one and a half groups of 128).
CPU_SIZES = [(1, 24, 256), (3, 33, 100), (17, 40, 192)]
# The targets' sizes: M = 1, 16, 64, 4096 on the weights of a Llama-3-8B layer (4096x4096, 14336x4096, 4096x14336).
BENCH_SIZES = [(m, n, k) for n, k in ((4096, 4096), (14336, 4096), (4096, 14336)) for m in (1, 16, 64, 4096)]


def lowbit_linear(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None,
                  bits: int, group_size: int | None) -> torch.Tensor:
    """The reference: dequantize W in the scales' dtype ((q - z) * s, one rounding; the scales are stored in the
    activations' dtype), then x @ W.T in x's dtype. The checker runs it in float64 (exact) and in the case dtype.

    bytes: read x (MK), the packed words (N ceil(K / P) x 4), scales and zeros (NG each), write y (MN); flops: 2MNK.
    """
    shape = check_inputs(x, packed, scales, zeros, bits, group_size, reference=True)
    weight = dequantize(packed, scales, zeros, bits, group_size, shape.k)
    return x @ weight.to(x.dtype).T


_COST = {"bytes": cost_bytes, "flops": cost_flops, "sizes": SIZES, "cpu_sizes": CPU_SIZES, "dtypes": FP,
         "bench_sizes": BENCH_SIZES}


@op(inputs=seeded_inputs(4, 128, symmetric=False), **_COST)
def linear_w4(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None = None,
              group_size: int | None = 128) -> torch.Tensor:
    """y = x @ W.T, W as 4-bit codes (8 a word) with per-group scales and zero points."""
    return lowbit_linear(x, packed, scales, zeros, 4, group_size)


@op(inputs=seeded_inputs(8, None, symmetric=True), **_COST)
def linear_w8(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None = None,
              group_size: int | None = None) -> torch.Tensor:
    """y = x @ W.T, W as 8-bit codes (4 a word) with per-channel scales."""
    return lowbit_linear(x, packed, scales, zeros, 8, group_size)


@op(inputs=seeded_inputs(2, 64, symmetric=False), **_COST)
def linear_w2(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None = None,
              group_size: int | None = 64) -> torch.Tensor:
    """y = x @ W.T, W as 2-bit codes (16 a word) with per-group scales and zero points."""
    return lowbit_linear(x, packed, scales, zeros, 2, group_size)


OPS: dict[int, Op] = {8: linear_w8, 4: linear_w4, 2: linear_w2}

# Impls ------------------------------------------------------------------------------------------------------

Runner = Callable[[launch.Problem], torch.Tensor]


def run(runner: Runner, x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None,
        bits: int, group_size: int | None) -> torch.Tensor:
    """Check the arguments, fold x to (M, K), run ``runner`` and unfold; no launch for an empty output."""
    shape = check_inputs(x, packed, scales, zeros, bits, group_size)
    out_shape = (*x.shape[:-1], shape.n)
    if shape.m == 0 or shape.n == 0:
        return torch.empty(out_shape, dtype=x.dtype, device=x.device)
    if shape.k == 0:
        return torch.zeros(out_shape, dtype=x.dtype, device=x.device)
    problem = launch.Problem(x.reshape(shape.m, shape.k).contiguous(), packed.contiguous(), scales.contiguous(),
                             None if zeros is None else zeros.contiguous(), bits, group_size, shape)
    return runner(problem).reshape(out_shape)


def _eager_dequant(p: launch.Problem) -> torch.Tensor:
    weight = dequantize(p.packed, p.scales, p.zeros, p.bits, p.group_size, p.shape.k)
    return torch.nn.functional.linear(p.x, weight.to(p.x.dtype))


def _torch_packed(convert: Callable[..., torch.Tensor]) -> Runner:
    return lambda p: convert(p.x, p.packed, p.scales, p.zeros, p.group_size, p.shape)


tk = launch.triton_kernels
# name -> (runner, kernels it launches, one-line description); registered on every op below.
IMPLS: dict[str, tuple[Runner, list[Any], str]] = {
    "eager_dequant": (_eager_dequant, [], "PyTorch ops: dequantize W to the activation dtype, then F.linear"),
    "triton_gemv": (launch.gemv, [launch.triton_gemv_kernels.lazy("lowbit_gemv_kernel")],
                    "Triton GEMV: each word's codes expanded in-thread, x as one vector; K split when it is long"),
    "triton_splitk": (launch.splitk, [tk.lazy("lowbit_splitk_kernel")],
                      "Triton split-K on tensor cores, partial tiles combined by tl.atomic_add in fp32"),
    "triton_splitk_twopass": (lambda p: launch.splitk(p, "twopass"),
                              [tk.lazy("lowbit_splitk_kernel"), tk.lazy("lowbit_splitk_reduce_kernel")],
                              "Triton split-K on tensor cores, fp32 partials summed by a second kernel"),
    "triton_gemm": (launch.gemm, [tk.lazy("lowbit_gemm_kernel")],
                    "Triton GEMM: dequantized in the K loop feeding tl.dot, autotuned Hopper tiles"),
    "triton_dequant_cublas": (launch.dequant_cublas, [tk.lazy("lowbit_dequant_kernel")],
                              "Triton dequantize kernel to the activation dtype, then cuBLAS (F.linear)"),
    "triton_auto": (launch.auto, [launch.triton_gemv_kernels.lazy("lowbit_gemv_kernel")]
                    + [tk.lazy(name) for name in ("lowbit_splitk_kernel", "lowbit_gemm_kernel",
                                                  "lowbit_dequant_kernel")],
                    "the dispatcher: GEMV, split-K, GEMM or dequantize + cuBLAS by M (launch.pick_kernel)"),
    "triton_gemv_unrolled": (gemv_launch.triton_unrolled,
                             [gemv_launch.unrolled_kernels.lazy("lowbit_gemv_unrolled_kernel")],
                             "Triton GEMV for M <= 16, 4 word tiles loaded before the first is expanded; K split "
                             "when long"),
}
TORCH_IMPLS: dict[int, tuple[str, Runner, str]] = {
    4: ("eager_int4pack_mm", _torch_packed(torch_packed.int4pack_mm),
        "torch._weight_int4pack_mm (tinygemm) on a cached conversion of the weights"),
    8: ("eager_int8pack_mm", _torch_packed(torch_packed.int8pack_mm),
        "torch._weight_int8pack_mm on a cached conversion of the weights"),
}

# Impls of linear_w4 and linear_w8 only: name -> (runner, bits -> kernels it launches, dtypes, description).
WIDE_CODE_IMPLS: dict[str, tuple[Runner, Callable[[int], list[Any]], list[torch.dtype], str]] = {
    "cuda_gemv": (gemv_launch.cuda_gemv, gemv_launch.kernels_for, list(gemv_launch.DTYPES),
                  "CUDA GEMV for M <= 16: a warp per 2 rows, 4 x 16-byte loads a row in flight a lane, "
                  "every load serving all rows of x (gemv.cu)"),
    "cuda_gemv_mma": (gemv_launch.cuda_gemv_mma, gemv_launch.mma_kernels_for, list(gemv_launch.DTYPES),
                      "CUDA GEMV for M <= 16 on tensor cores: two codes a LOP3 into 16-bit floats, "
                      "mma.sync m16n8k16 (gemv_mma.cu)"),
    "cuda_auto": (gemv_launch.cuda_auto, lambda b: gemv_launch.mma_kernels_for(b) + IMPLS["triton_auto"][1], [],
                  "the dispatcher LowBitLinear runs on a GPU: cuda_gemv_mma where it applies (M <= 16), else "
                  "triton_auto's pick by M (gemv_launch.cuda_auto: the table that chose it)"),
}


def _register(target: Op, bits: int, name: str, runner: Runner, kernels: list[Any], doc: str,
              dtypes: list[torch.dtype] | None = None) -> None:
    default_group = target.reference.__defaults__[-1]

    def impl(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None = None,
             group_size: int | None = default_group) -> torch.Tensor:
        return run(runner, x, packed, scales, zeros, bits, group_size)

    impl.__name__ = impl.__qualname__ = f"{target.name}_{name}"
    impl.__doc__ = doc
    target.impl(name, kernels=kernels, dtypes=dtypes or ())(impl)


for _bits, _op in OPS.items():
    for _name, (_runner, _kernels, _doc) in IMPLS.items():
        _register(_op, _bits, _name, _runner, _kernels, _doc)
    if _bits in TORCH_IMPLS:
        _name, _runner, _doc = TORCH_IMPLS[_bits]
        _register(_op, _bits, _name, _runner, [], _doc)
    if _bits in gemv_launch.BITS:
        for _name, (_runner, _kernels_for, _dtypes, _doc) in WIDE_CODE_IMPLS.items():
            _register(_op, _bits, _name, _runner, _kernels_for(_bits), _doc, _dtypes)


def __getattr__(name: str) -> Any:
    """``LowBitLinear`` (module.py), imported on first use: the nn.Module's operators are made from OPS, so it
    imports this package."""
    if name == "LowBitLinear":
        return importlib.import_module("kernelkit.ops.lowbit.module").LowBitLinear
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
