"""PyTorch's scaled_dot_product_attention with one backend forced: the baselines to beat.

FLASH_ATTENTION is FlashAttention-2, CUDNN_ATTENTION NVIDIA's cuDNN fused attention, EFFICIENT_ATTENTION the
memory-efficient (xFormers) kernel. A backend that refuses the case (dtype, head_dim, GQA, GPU) raises
BackendUnavailable, so the case is SKIPPED with PyTorch's reason instead of failing.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernelkit.errors import BackendUnavailable

BACKENDS = ("flash", "cudnn", "efficient")


def _backend(name: str):  # -> torch.nn.attention.SDPBackend
    from torch.nn.attention import SDPBackend

    return {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}[name]


def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, backend: str) -> torch.Tensor:
    """o = softmax(q kᵀ / sqrt(d), causal) v by SDPA's ``backend`` (flash, cudnn, efficient) only."""
    from torch.nn.attention import sdpa_kernel

    if q.device.type != "cuda":
        raise BackendUnavailable(f"SDPA's {backend} backend is a CUDA kernel; this case runs on {q.device.type}")
    try:
        with sdpa_kernel(_backend(backend)):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=k.shape[1] != q.shape[1])
    except RuntimeError as exc:
        if "No available kernel" in str(exc):
            raise BackendUnavailable(f"SDPA's {backend} backend refuses this case: {_first_line(exc)}") from None
        raise


def backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, do: torch.Tensor, causal: bool, backend: str
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) by autograd through SDPA's ``backend``: its own forward, then its backward.

    SDPA's backward cannot be handed another kernel's saved output and statistics, so this runs SDPA's forward
    too: timed as one call, it is forward + backward. (scripts/gpu-attention times the backward alone.)
    """
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    with torch.enable_grad():
        o = forward(q, k, v, causal, backend)
        dq, dk, dv = torch.autograd.grad(o, (q, k, v), do)
    return dq, dk, dv


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
