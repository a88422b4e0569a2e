"""flash_attention(q, k, v, causal=...): the Triton forward and backward as one differentiable PyTorch operator.

Importing this module defines two ``torch.library`` operators (the op package itself imports it only when
``flash_attention`` is first asked for, so loading the attention ops registers nothing):

- ``kernelkit::flash_attention_forward(q, k, v, causal) -> (o, lse)``: the flash kernel;
- ``kernelkit::flash_attention_backward(q, k, v, o, lse, do, causal) -> (dq, dk, dv)``: the flash backward
  (dK/dV kernel, then dQ kernel), registered as the forward's gradient.

Each is one opaque node to torch.compile, with a fake impl giving its outputs' shapes and strides, so a model
calling ``flash_attention`` compiles with ``fullgraph=True``; the Triton launchers (autotuning, grids) run as
plain Python. They are defined at import, not on first call, because torch.compile cannot trace a definition.
lse is saved for the backward, not an output of attention: no gradient flows through it.
"""

from __future__ import annotations

from typing import Any

import torch

from kernelkit.ops.attention import launch


@torch.library.custom_op("kernelkit::flash_attention_forward", mutates_args=(),
                         schema="(Tensor q, Tensor k, Tensor v, bool causal) -> (Tensor, Tensor)")
def flash_attention_forward(q, k, v, causal):
    return launch.forward(q, k, v, causal, "flash")


@flash_attention_forward.register_fake
def _(q, k, v, causal):
    launch.check_qkv(q, k, v)  # a shape error surfaces while tracing, not at the first run
    b, h, s, d = q.shape
    return q.new_empty((b, h, s, d)), q.new_empty((b, h, s), dtype=torch.float32)


@torch.library.custom_op("kernelkit::flash_attention_backward", mutates_args=(),
                         schema="(Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, Tensor do, bool causal)"
                                " -> (Tensor, Tensor, Tensor)")
def flash_attention_backward(q, k, v, o, lse, do, causal):
    return launch.backward(q, k, v, o, lse, do, causal)


@flash_attention_backward.register_fake
def _(q, k, v, o, lse, do, causal):
    # Contiguous whatever the inputs' strides, as the kernels write them (inductor plans memory on this).
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[torch.Tensor, torch.Tensor]) -> None:
    q, k, v, causal = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.causal = causal


def _gradient(ctx: Any, grad_o: torch.Tensor, _grad_lse: torch.Tensor | None) -> tuple[Any, ...]:
    q, k, v, o, lse = ctx.saved_tensors
    dq, dk, dv = flash_attention_backward(q, k, v, o, lse, grad_o.contiguous(), ctx.causal)
    return dq, dk, dv, None


flash_attention_forward.register_autograd(_gradient, setup_context=_setup_context)


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """softmax(q kᵀ / sqrt(d)) v, differentiable: q (B, H, S, D), k and v (B, H_kv, S, D) with H a multiple of
    H_kv (grouped-query attention); fp16, bf16 or fp32; D one of 16, 32, 64, 128, 256. Returns (B, H, S, D)."""
    o, _lse = flash_attention_forward(q, k, v, causal)
    return o
