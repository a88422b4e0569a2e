"""Attention, forward and backward: o = softmax(q kᵀ / sqrt(d)) v, full or causal, with grouped-query heads.

Ops, and what their size tuple means:

- ``attention`` (batch, heads, seq, head_dim): every query sees every key.
- ``attention_causal`` (batch, heads, seq, head_dim): query i sees keys 0..i (self-attention, so the mask is the
  lower triangle, diagonal included).
- ``attention_gqa`` (batch, heads, kv_heads, seq, head_dim): causal, with k and v of kv_heads heads, each shared by
  heads // kv_heads query heads (query head h reads key/value head h // (heads // kv_heads)).
- ``attention_with_lse``, ``attention_causal_with_lse``, ``attention_gqa_with_lse`` (the same sizes): the training
  forward, (q, k, v) -> (o, lse), so the saved statistics are checked too.
- ``attention_backward``, ``attention_causal_backward``, ``attention_gqa_backward`` (the same sizes):
  (q, k, v, o, lse, do) -> (dq, dk, dv).

Tensors: q, o, do, dq (B, H, S, D); k, v, dk, dv (B, H_kv, S, D); lse (B, H, S) float32, the natural log of each
row's sum of exp(scores): the row statistics a flash forward saves for its backward (FlashAttention's layout).
Softmax scale 1/sqrt(D). dtypes: bfloat16, float16, float32 (the Triton kernels multiply fp32 in IEEE fp32; SDPA's
flash and cuDNN backends refuse fp32: SKIPPED). The Triton kernels take head_dim 16, 32, 64, 128 or 256.

Forward impls: ``eager_naive`` (the learner's first version: S = q kᵀ materialized), ``triton_online`` (online
softmax, one pass over K/V per query block), ``triton_flash`` (FA2: resident query tile, causal block skipping,
autotuned for Hopper), ``triton_flash_tma`` (the same, K/V tiles loaded by TMA), ``triton_flash_ws`` (Triton's
tutorial kernel: in-kernel TMA descriptors; its warp-specialized K/V loop is out of autotuning, wrong on an
H200; triton_ws.py),
``eager_sdpa_flash`` / ``_cudnn`` / ``_efficient`` (torch SDPA with one backend forced), and the ``compile``
baseline. Backward impls:
``eager_naive``, ``triton_flash`` (dK/dV kernel, then dQ kernel), ``triton_flash_dq_atomic`` (dQ by fp32 atomics
in the dK/dV kernel), ``eager_sdpa_*`` (SDPA's forward and backward: it cannot start from another kernel's saved o
and lse).
Differentiable function: ``flash_attention(q, k, v, causal=False)`` (function.py), torch.compile-able; importing it
defines its two torch.library operators, so it is imported on first use, not with this package.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from kernelkit.backends.lazy import kernel_module
from kernelkit.ops.attention import launch, sdpa
from kernelkit.spec import Op, Size, op, seeded_normal

FP = [torch.bfloat16, torch.float16, torch.float32]
ws_kernels = kernel_module(__name__, "triton_ws")
# GPU checks. The reference runs in float64 with every score materialized, so these stay small enough for it.
SIZES = [
    (2, 4, 1000, 64),  # seq a multiple of no tile: partial last query and key blocks
    (1, 8, 2048, 128),  # whole tiles, head_dim 128
    (3, 2, 129, 128),  # one row past a 128-row tile: a last query block of one row
    (1, 2, 17, 64),  # shorter than one tile
]
GQA_SIZES = [(2, 8, 2, 1000, 128), (1, 16, 4, 2048, 64), (1, 4, 1, 129, 64)]  # groups of 4, 4 and 4 heads
# The interpreter runs ~1 ms per program, with 64 x 32 tiles (see triton.py): seq 77 is a whole query tile and 13
# rows, three key steps (the last partial) and a two-step diagonal; 64 is whole tiles.
CPU_SIZES = [(1, 2, 77, 64), (2, 1, 64, 32)]
GQA_CPU_SIZES = [(1, 4, 2, 45, 32)]
# `kernelkit bench`: 16k tokens (batch x seq) of 16 heads, as the targets; the check before timing computes the
# float64 reference (~35 GB at seq 4096), so longer sequences are timed by scripts/gpu-attention instead.
BENCH_SIZES = [(16, 16, 1024, 128), (4, 16, 4096, 128), (4, 16, 4096, 64)]
GQA_BENCH_SIZES = [(4, 16, 4, 4096, 128), (16, 32, 8, 1024, 128)]


def dims(size: Size) -> tuple[int, int, int, int, int]:
    """(batch, heads, kv_heads, seq, head_dim) of a 4- or 5-long size."""
    if len(size) == 4:
        b, h, s, d = size
        return b, h, h, s, d
    if len(size) == 5:
        return tuple(size)  # type: ignore[return-value]
    raise ValueError(f"an attention size is (batch, heads, seq, head_dim) or with kv_heads after heads; got {size}")


def _expand_kv(k: torch.Tensor, v: torch.Tensor, heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """k, v with each key/value head repeated for the query heads that share it."""
    group = heads // k.shape[1]
    if group == 1:
        return k, v
    return k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)


def _masked_scores(q: torch.Tensor, k: torch.Tensor, causal: bool) -> torch.Tensor:
    """q kᵀ / sqrt(d), keys after the query set to -inf when causal: (B, H, S, S)."""
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        seq = q.shape[-2]
        above = torch.ones(seq, seq, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(above, float("-inf"))
    return scores


# Reference. FLOPs: two products of 2·S²·D per head, 4·B·H·S²·D; causal counts exactly half, 2·B·H·S²·D, as
# FlashAttention's benchmarks and the SDPA figures do (the S·(S+1)/2 visible scores hold the diagonal too: S/2
# more per head, 0.01% at seq 4096). Bytes: read q, k, v, write o, what a fused kernel must move; the flash
# kernels also write lse (B·H·S floats, 0.4% more at head_dim 128 in bf16), not counted here.
def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    k, v = _expand_kv(k, v, q.shape[1])
    return torch.softmax(_masked_scores(q, k, causal), dim=-1) @ v


def forward_flops(q: torch.Tensor, causal: bool) -> int:
    b, h, s, d = q.shape
    return 4 * b * h * s * s * d // (2 if causal else 1)


def _forward_bytes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> int:
    return (2 * q.numel() + k.numel() + v.numel()) * q.element_size()


def forward_inputs(size: Size, dtype: torch.dtype, device: torch.device, seed: int) -> tuple[torch.Tensor, ...]:
    """Seeded standard-normal q (B, H, S, D), k and v (B, H_kv, S, D): scores of unit variance after the scale."""
    b, h, hk, s, d = dims(size)
    return (seeded_normal((b, h, s, d), dtype, device, seed * 1009),
            seeded_normal((b, hk, s, d), dtype, device, seed * 1009 + 1),
            seeded_normal((b, hk, s, d), dtype, device, seed * 1009 + 2))


def _forward_op(name: str, causal: bool, sizes: list[Size], cpu_sizes: list[Size], bench_sizes: list[Size]
                ) -> Callable[[Callable[..., torch.Tensor]], Op]:
    return op(name=name, sizes=sizes, cpu_sizes=cpu_sizes, dtypes=FP, inputs=forward_inputs, bytes=_forward_bytes,
              flops=lambda q, k, v: forward_flops(q, causal), bench_sizes=bench_sizes)


@_forward_op("attention", False, SIZES, CPU_SIZES, BENCH_SIZES)
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q kᵀ / sqrt(d)) v, every query seeing every key."""
    return reference(q, k, v, causal=False)


@_forward_op("attention_causal", True, SIZES, CPU_SIZES, BENCH_SIZES)
def attention_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q kᵀ / sqrt(d)) v, query i seeing keys 0..i."""
    return reference(q, k, v, causal=True)


@_forward_op("attention_gqa", True, GQA_SIZES, GQA_CPU_SIZES, GQA_BENCH_SIZES)
def attention_gqa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention with fewer key/value heads than query heads (grouped-query attention)."""
    return reference(q, k, v, causal=True)


# The training forward: (o, lse), what a flash forward returns and its backward reads. lse is float32 whatever the
# inputs' dtype (computed in the case dtype, then widened; in float64 for the check, then rounded to float32).
# Bytes: the forward's, and B·H·S floats of lse written.
def forward_statistics(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """(o, lse) by the reference's math: o as ``reference``, lse = logsumexp of each row's masked scores."""
    ke, ve = _expand_kv(k, v, q.shape[1])
    scores = _masked_scores(q, ke, causal)
    return torch.softmax(scores, dim=-1) @ ve, torch.logsumexp(scores, dim=-1).float()


def _with_lse_op(name: str, causal: bool, sizes: list[Size], cpu_sizes: list[Size]
                 ) -> Callable[[Callable[..., tuple[torch.Tensor, torch.Tensor]]], Op]:
    return op(name=name, sizes=sizes, cpu_sizes=cpu_sizes, dtypes=FP, inputs=forward_inputs,
              bytes=lambda q, k, v: _forward_bytes(q, k, v) + q.numel() // q.shape[-1] * 4,
              flops=lambda q, k, v: forward_flops(q, causal))


@_with_lse_op("attention_with_lse", False, SIZES, CPU_SIZES[:1])
def attention_with_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(o, lse) of attention: the output and each row's log-sum-exp of scores (float32)."""
    return forward_statistics(q, k, v, causal=False)


@_with_lse_op("attention_causal_with_lse", True, SIZES, CPU_SIZES[:1])
def attention_causal_with_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
                              ) -> tuple[torch.Tensor, torch.Tensor]:
    """(o, lse) of attention_causal."""
    return forward_statistics(q, k, v, causal=True)


@_with_lse_op("attention_gqa_with_lse", True, GQA_SIZES, GQA_CPU_SIZES)
def attention_gqa_with_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(o, lse) of attention_gqa."""
    return forward_statistics(q, k, v, causal=True)


# Reference of the backward: autograd's formulas for the forward reference, P recomputed by softmax:
#     dV = Pᵀ dO,  dP = dO Vᵀ,  dS = P ∘ (dP - rowsum(P ∘ dP)),  dQ = dS K / sqrt(d),  dK = dSᵀ Q / sqrt(d)
# and, for shared key/value heads, dK and dV summed over the query heads of the group. o and lse, which the
# kernels read instead of recomputing (rowsum(P ∘ dP) = rowsum(dO ∘ O)), come from the inputs factory.
# FLOPs: five products of 2·S²·D per head (S recomputed, dP, dV, dQ, dK), 10·B·H·S²·D, 2.5x the forward, half
# when causal, as FlashAttention counts (the two-kernel triton_flash does seven: S and dP in each kernel).
# Bytes: read q, k, v, o, do and lse, write dq, dk, dv.
def backward_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, do: torch.Tensor, causal: bool
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    heads, kv_heads = q.shape[1], k.shape[1]
    ke, ve = _expand_kv(k, v, heads)
    scale = 1.0 / math.sqrt(q.shape[-1])
    p = torch.softmax(_masked_scores(q, ke, causal), dim=-1)
    dv = p.transpose(-2, -1) @ do
    dp = do @ ve.transpose(-2, -1)
    ds = p * (dp - (p * dp).sum(dim=-1, keepdim=True))
    dq = ds @ ke * scale
    dk = ds.transpose(-2, -1) @ q * scale
    return dq, sum_groups(dk, kv_heads), sum_groups(dv, kv_heads)


def sum_groups(t: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """(B, H, S, D) per query head -> (B, H_kv, S, D): the sum over each group of query heads."""
    b, h, s, d = t.shape
    return t if h == kv_heads else t.reshape(b, kv_heads, h // kv_heads, s, d).sum(dim=2)


def backward_flops(q: torch.Tensor, causal: bool) -> int:
    return forward_flops(q, causal) * 5 // 2


def _backward_bytes(q, k, v, o, lse, do) -> int:
    return (4 * q.numel() + 2 * k.numel() + 2 * v.numel()) * q.element_size() + lse.numel() * 4


def backward_inputs(causal: bool) -> Callable[[Size, torch.dtype, torch.device, int], tuple[torch.Tensor, ...]]:
    """(q, k, v, o, lse, do): forward_inputs, o and lse from the reference forward in fp32 (o rounded to the
    dtype, as a forward would store it; lse kept fp32), do a seeded standard normal."""

    def make(size: Size, dtype: torch.dtype, device: torch.device, seed: int) -> tuple[torch.Tensor, ...]:
        q, k, v = forward_inputs(size, dtype, device, seed)
        o, lse = forward_statistics(q.float(), k.float(), v.float(), causal)
        return q, k, v, o.to(dtype), lse, seeded_normal(tuple(q.shape), dtype, device, seed * 1009 + 3)

    return make


def _backward_op(name: str, causal: bool, sizes: list[Size], cpu_sizes: list[Size], bench_sizes: list[Size]
                 ) -> Callable[[Callable[..., tuple[torch.Tensor, ...]]], Op]:
    return op(name=name, sizes=sizes, cpu_sizes=cpu_sizes, dtypes=FP, inputs=backward_inputs(causal),
              bytes=_backward_bytes, flops=lambda q, *rest: backward_flops(q, causal), bench_sizes=bench_sizes)


@_backward_op("attention_backward", False, SIZES, CPU_SIZES, BENCH_SIZES)
def attention_backward(q, k, v, o, lse, do) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) of attention for the output gradient do, given its output o and row statistics lse."""
    return backward_reference(q, k, v, do, causal=False)


@_backward_op("attention_causal_backward", True, SIZES, CPU_SIZES, BENCH_SIZES)
def attention_causal_backward(q, k, v, o, lse, do) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) of attention_causal for the output gradient do, given its output o and row statistics lse."""
    return backward_reference(q, k, v, do, causal=True)


@_backward_op("attention_gqa_backward", True, GQA_SIZES, GQA_CPU_SIZES, GQA_BENCH_SIZES)
def attention_gqa_backward(q, k, v, o, lse, do) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) of attention_gqa (dk, dv summed over each group of query heads)."""
    return backward_reference(q, k, v, do, causal=True)


# The learner's first versions -------------------------------------------------------------------------------

def naive_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """Scores materialized in the input dtype, softmax in fp32, then P v: B·H·S² elements written and read three
    times (scores, fp32 probabilities, probabilities cast back), memory growing as seq²."""
    k, v = _expand_kv(k, v, q.shape[1])
    p = torch.softmax(_masked_scores(q, k, causal).float(), dim=-1)
    return p.to(q.dtype) @ v


def naive_backward(q, k, v, o, lse, do, causal: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The flash formulas on whole fp32 matrices: P = exp(S - lse) from the saved statistics, delta =
    rowsum(dO ∘ O); S, P, dP and dS are each B·H·S² fp32 elements."""
    kv_heads = k.shape[1]
    ke, ve = (t.float() for t in _expand_kv(k, v, q.shape[1]))
    qf, dof = q.float(), do.float()
    scale = 1.0 / math.sqrt(q.shape[-1])
    p = torch.exp(_masked_scores(qf, ke, causal) - lse[..., None])
    dv = p.transpose(-2, -1) @ dof
    ds = p * (dof @ ve.transpose(-2, -1) - (dof * o.float()).sum(dim=-1, keepdim=True))
    dq = ds @ ke * scale
    dk = ds.transpose(-2, -1) @ qf * scale
    return dq.to(q.dtype), sum_groups(dk, kv_heads).to(k.dtype), sum_groups(dv, kv_heads).to(v.dtype)


# Impls ------------------------------------------------------------------------------------------------------

def _register_forward(target: Op, causal: bool) -> None:
    @target.impl("eager_naive")
    def eager_naive(q, k, v):
        """S = q kᵀ materialized, softmax in fp32, then P v: the learner's first version (memory ~ seq²)."""
        return naive_forward(q, k, v, causal)

    @target.impl("triton_online", kernels=[launch.forward_kernels.lazy("attention_online_kernel")])
    def triton_online(q, k, v):
        """Triton, online softmax: one pass over every K/V block per 64-row query block, every block masked."""
        return launch.forward(q, k, v, causal, "online")[0]

    @target.impl("triton_flash", kernels=[launch.forward_kernels.lazy("attention_flash_kernel")])
    def triton_flash(q, k, v):
        """Triton, FA2: 128-row query tiles, exp2, mask-free off-diagonal steps, causal block skipping, autotuned."""
        return launch.forward(q, k, v, causal, "flash")[0]

    @target.impl("triton_flash_tma", kernels=[launch.forward_kernels.lazy("attention_flash_tma_kernel")])
    def triton_flash_tma(q, k, v):
        """triton_flash with K/V tiles loaded by Hopper's TMA (tensor descriptors) instead of pointer arithmetic."""
        return launch.forward(q, k, v, causal, "flash_tma")[0]

    @target.impl("triton_flash_ws", kernels=[ws_kernels.lazy("attention_flash_ws_kernel")])
    def triton_flash_ws(q, k, v):
        """Triton's tutorial forward: in-kernel TMA descriptors, the plain K/V loop autotuned (triton_ws.py)."""
        return ws_kernels.forward(q, k, v, causal)[0]

    for backend in sdpa.BACKENDS:
        target.impl(f"eager_sdpa_{backend}")(_sdpa_forward(backend, causal))


def _sdpa_forward(backend: str, causal: bool) -> Callable[..., torch.Tensor]:
    def eager_sdpa(q, k, v):
        return sdpa.forward(q, k, v, causal, backend)

    eager_sdpa.__name__ = f"eager_sdpa_{backend}"
    eager_sdpa.__doc__ = f"torch SDPA with only its {backend} backend (SKIPPED where it refuses the case)."
    return eager_sdpa


def _register_backward(target: Op, causal: bool) -> None:
    @target.impl("eager_naive")
    def eager_naive(q, k, v, o, lse, do):
        """The flash backward's formulas on whole fp32 S x S matrices: the learner's first version."""
        return naive_backward(q, k, v, o, lse, do, causal)

    @target.impl("triton_flash", kernels=[launch.backward_kernels.lazy("attention_backward_dkdv_kernel"),
                                          launch.backward_kernels.lazy("attention_backward_dq_kernel")])
    def triton_flash(q, k, v, o, lse, do):
        """Triton, FA2 by recomputation: delta, then a dK/dV kernel over key blocks, then a dQ kernel."""
        return launch.backward(q, k, v, o, lse, do, causal)

    @target.impl("triton_flash_dq_atomic",
                 kernels=[launch.backward_kernels.lazy("attention_backward_dkdv_dq_atomic_kernel")])
    def triton_flash_dq_atomic(q, k, v, o, lse, do):
        """Triton, FA2 with dQ added up by fp32 atomics inside the dK/dV kernel (one kernel, 5 products a tile)."""
        return launch.backward(q, k, v, o, lse, do, causal, dq_atomic=True)

    for backend in sdpa.BACKENDS:
        target.impl(f"eager_sdpa_{backend}")(_sdpa_backward(backend, causal))


def _sdpa_backward(backend: str, causal: bool) -> Callable[..., tuple[torch.Tensor, ...]]:
    def eager_sdpa(q, k, v, o, lse, do):
        return sdpa.backward(q, k, v, do, causal, backend)

    eager_sdpa.__name__ = f"eager_sdpa_{backend}"
    eager_sdpa.__doc__ = (f"torch SDPA's {backend} backend, its own forward then its backward (it cannot start "
                          "from saved o, lse); SKIPPED where it refuses the case.")
    return eager_sdpa


_FORWARD_KERNELS = {"online": "attention_online_kernel", "flash": "attention_flash_kernel",
                    "flash_tma": "attention_flash_tma_kernel"}


def _register_with_lse(target: Op, causal: bool) -> None:
    @target.impl("eager_naive")
    def eager_naive(q, k, v):
        """Scores materialized in fp32: softmax(S) v and logsumexp(S), the learner's version."""
        o, lse = forward_statistics(q.float(), k.float(), v.float(), causal)
        return o.to(q.dtype), lse

    for kernel in ("online", "flash", "flash_tma"):
        target.impl(f"triton_{kernel}", kernels=[launch.forward_kernels.lazy(_FORWARD_KERNELS[kernel])])(
            _triton_with_lse(kernel, causal))

    @target.impl("triton_flash_ws", kernels=[ws_kernels.lazy("attention_flash_ws_kernel")])
    def triton_flash_ws(q, k, v):
        """attention's triton_flash_ws, returning the lse it saves (launch.backward reads it as triton_flash's)."""
        return ws_kernels.forward(q, k, v, causal)


def _triton_with_lse(kernel: str, causal: bool) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    def triton_with_lse(q, k, v):
        return launch.forward(q, k, v, causal, kernel)

    triton_with_lse.__name__ = f"triton_{kernel}"
    triton_with_lse.__doc__ = f"attention's triton_{kernel}, returning the lse it saves for the backward too."
    return triton_with_lse


for _forward, _with_lse, _backward, _causal in (
        (attention, attention_with_lse, attention_backward, False),
        (attention_causal, attention_causal_with_lse, attention_causal_backward, True),
        (attention_gqa, attention_gqa_with_lse, attention_gqa_backward, True)):
    _register_forward(_forward, _causal)
    _register_with_lse(_with_lse, _causal)
    _register_backward(_backward, _causal)
    # As PyTorch operators (kk.torch_op), the training forward's impls take dq, dk, dv from the backward op's impl
    # of the same name, which reads q, k, v, o and the saved lse.
    _with_lse.set_backward(_backward, saved=lambda q, k, v, o, lse: (q, k, v, o, lse))
del _forward, _with_lse, _backward, _causal


def __getattr__(name: str) -> Any:
    """``flash_attention`` on first use (importing it defines its torch.library operators)."""
    if name == "flash_attention":
        from kernelkit.ops.attention.function import flash_attention

        return flash_attention
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
