"""Inputs of the matmul ops: seeded normals drawn on the CPU (a seed gives the same operands on every device).

A and B are each scaled by K^-1/4, so every element of C = A @ B, and every partial sum on the way, has variance
about 1 whatever K is: the rounding error of a long accumulation grows, its operands' magnitudes do not, and the
tolerance formulas (tolerance.py) can rely on that.
"""

from __future__ import annotations

import torch

from kernelkit.spec import Size, seeded_normal


def _operand(shape: tuple[int, int], k: int, seed: int) -> torch.Tensor:
    """A seeded fp32 normal on the CPU, scaled by K^-1/4 (C = A @ B then has unit variance)."""
    return seeded_normal(shape, torch.float32, "cpu", seed) * (max(k, 1) ** -0.25)


def matmul_inputs(size: Size, dtype: torch.dtype, device: torch.device, seed: int
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """A (M, K) and B (K, N) in ``dtype``."""
    m, n, k = size
    return (_operand((m, k), k, seed * 1009).to(device=device, dtype=dtype),
            _operand((k, n), k, seed * 1009 + 1).to(device=device, dtype=dtype))


def matmul_bt_inputs(size: Size, dtype: torch.dtype, device: torch.device, seed: int
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """A (M, K) and B (N, K) in ``dtype``."""
    m, n, k = size
    return (_operand((m, k), k, seed * 1009).to(device=device, dtype=dtype),
            _operand((n, k), k, seed * 1009 + 1).to(device=device, dtype=dtype))


FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0  # e4m3's largest finite value


def _quantized(x: torch.Tensor, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """x as e4m3 scaled to use its whole range, and the dequantizing scale: x ~ scale * x8 (per tensor)."""
    amax = float(x.abs().max()) if x.numel() else 1.0
    scale = max(amax, 1e-12) / FP8_MAX
    return (x / scale).to(device=device, dtype=FP8), torch.tensor(scale, dtype=torch.float32, device=device)


def matmul_fp8_inputs(size: Size, dtype: torch.dtype, device: torch.device, seed: int) -> tuple[torch.Tensor, ...]:
    """A (M, K) e4m3 row-major, B (K, N) e4m3 column-major (the transpose of (N, K) rows), their fp32 scales.
    ``dtype`` is the output's (bfloat16); the operands are fp8 whatever it is."""
    m, n, k = size
    a8, scale_a = _quantized(_operand((m, k), k, seed * 1009), device)
    bt8, scale_b = _quantized(_operand((n, k), k, seed * 1009 + 1), device)
    return a8, bt8.T, scale_a, scale_b
