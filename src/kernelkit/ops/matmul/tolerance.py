"""How close a matmul must be: error formulas that follow the accumulation length K and the operand format.

The checker allows ``atol + rtol |ref| + 2 eps_lo (1 + |ref|)`` per element (verify.py), with eps_lo the error of
the reference computed by torch in the case dtype. For bfloat16 and float16 that term already grows with K (torch's
own GEMM rounds the same way an impl does), so those keep the project's floors. Three cases need more:

- float32 (IEEE): eps_lo is the error of *torch's* summation order. cuBLAS may split K and sum in a tree, which is
  more accurate than the one running sum per output that a simple correct kernel keeps, so the floor must hold the
  sequential sum's error by itself: ``accumulation_atol(FP32_UNIT, K)``.
- TF32 (fp32 operands on tensor cores): the reference is the exact product and torch's fp32 matmul does not round
  its operands, so eps_lo knows nothing of TF32: ``operand_rounding_atol(TF32_UNIT)`` plus rtol TF32_UNIT.
- fp8 e4m3 with fp32 output scales, rounded to bfloat16: the operands are exact, but Hopper's fp8 tensor cores
  accumulate with about 14 mantissa bits unless a kernel promotes its partial sums to fp32 (the DeepSeek-V3 report
  measured this; cuBLASLt promotes, Triton on sm_90 does not by default): ``accumulation_atol(FP8_ACCUMULATION_UNIT,
  K)``, with bfloat16's rtol for the output rounding.

Every formula assumes the op's inputs: A and B each scaled by K^-1/4, so C and every partial sum are O(1) and
sum_k (a_k b_k)^2 ~ 1. An op's tolerance is per dtype, not per size, so it is sized for the longest K the op
declares; a longer K given on the command line is checked against that.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

from kernelkit.spec import TOLERANCES, Size

FP32_UNIT = 2.0**-24  # unit roundoff of fp32: half an ulp of 1.0
TF32_UNIT = 2.0**-10  # TF32 keeps 10 mantissa bits; tensor cores may truncate, not round: a whole ulp of 1.0
FP8_ACCUMULATION_UNIT = 2.0**-14  # fp8 tensor-core accumulation keeps ~14 bits (truncated)

# A K-term running sum of O(1) partial sums makes K rounding errors of up to u each that add like a random walk:
# measured (fp32, sequential order, these inputs) the error's standard deviation is 0.30 u sqrt(K) and its largest
# over 1024 outputs 1.1-1.8 u sqrt(K), about 5.7 standard deviations for the 2**26 outputs of 8192 x 8192.
# 4 u sqrt(K) leaves twice that.
ACCUMULATION_FACTOR = 4.0
# Two operands each rounded by up to u (relative) put an error of standard deviation sqrt(2/3) u
# sqrt(sum_k (a_k b_k)^2) ~ 0.82 u on each output; 6 of those hold the largest of 2**26 outputs (measured for
# truncated TF32 operands: at most 2.7 u past the rtol term, at K = 17 where one product can dominate).
OPERAND_SIGMAS = 6.0


def accumulation_atol(unit: float, k: int) -> float:
    """Absolute error allowed for summing K products of O(1) running sums in a format of unit roundoff ``unit``."""
    return ACCUMULATION_FACTOR * unit * math.sqrt(max(k, 1))


def operand_rounding_atol(unit: float) -> float:
    """Absolute error allowed for rounding both operands to a format of unit roundoff ``unit`` (K-independent here:
    the inputs' scaling keeps sum_k (a_k b_k)^2 ~ 1)."""
    return OPERAND_SIGMAS * math.sqrt(2.0 / 3.0) * unit


def longest_k(sizes: Iterable[Size]) -> int:
    """The largest K among (M, N, K) sizes."""
    return max(size[2] for size in sizes)


def fp32_tolerance(k: int) -> tuple[float, float]:
    """(atol, rtol) for float32 outputs of IEEE fp32 products summed over up to ``k`` terms in any order."""
    return accumulation_atol(FP32_UNIT, k), TOLERANCES[torch.float32][1]


def tf32_tolerance(k: int) -> tuple[float, float]:
    """(atol, rtol) for float32 outputs of TF32 products. rtol TF32_UNIT: truncating both operands shrinks every
    product by half a TF32 ulp each on average, a bias that scales with |C|."""
    return operand_rounding_atol(TF32_UNIT) + accumulation_atol(FP32_UNIT, k), TF32_UNIT


def fp8_tolerance(k: int) -> tuple[float, float]:
    """(atol, rtol) for bfloat16 outputs of exact e4m3 products accumulated on fp8 tensor cores over ``k`` terms."""
    return accumulation_atol(FP8_ACCUMULATION_UNIT, k), TOLERANCES[torch.bfloat16][1]
