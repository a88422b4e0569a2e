"""Launchers of the attention kernels: check the shapes, allocate the outputs, launch.

No triton import here: the kernel modules are imported on the first launch (see backends/lazy.py).
"""

from __future__ import annotations

import math

import torch

from kernelkit.backends.lazy import kernel_module
from kernelkit.errors import BackendUnavailable

forward_kernels = kernel_module("kernelkit.ops.attention", "triton")
backward_kernels = kernel_module("kernelkit.ops.attention", "triton_backward")

# tl.dot needs at least 16 along the head dimension; the tiles are powers of two; past 256 the K/V tiles no
# longer fit in shared memory beside the query tile.
HEAD_DIMS = (16, 32, 64, 128, 256)
LOG2E = 1.4426950408889634


def check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> int:
    """Validate q (B, H, S, D), k and v (B, H_kv, S, D); return the group size H // H_kv. ValueError otherwise."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(f"{name} must be (batch, heads, seq, head_dim), got shape {tuple(t.shape)}")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    (b, h, s, d), (bk, hk, sk, dk) = q.shape, k.shape
    if (bk, sk, dk) != (b, s, d):
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} must agree in batch, seq and head_dim "
                         "(self-attention: queries and keys are the same sequence)")
    if hk == 0 or h % hk:
        raise ValueError(f"the {h} query heads must be a multiple of the {hk} key/value heads")
    if d not in HEAD_DIMS:
        raise ValueError(f"head_dim {d} is not supported; use one of {HEAD_DIMS}")
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"q, k, v must share one dtype of float16, bfloat16, float32; got {q.dtype}, {k.dtype}, "
                         f"{v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    return h // hk


def _require_16bit_on_gpu(q: torch.Tensor) -> None:
    """fp32 runs in the interpreter only (CPU checks): compiled, IEEE fp32 products run on the CUDA cores and their
    tiles spill 30-100 KB a thread (sm_90, triton 3.9), and TF32 would not meet fp32 tolerances."""
    if q.dtype == torch.float32 and q.device.type != "cpu":
        raise BackendUnavailable("the Triton attention kernels take bfloat16 or float16 on a GPU; float32 runs in "
                                 "the Triton interpreter, for CPU checks")


def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, kernel: str = "flash"
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """(o, lse): o (B, H, S, D) in q's dtype, lse (B, H, S) float32 (natural log of each row's softmax sum).

    kernel: "flash" (autotuned, causal block skipping), "flash_tma" (the same with TMA loads; q, k, v copied to
    contiguous 16-byte aligned tensors first when they are not) or "online" (one fixed tile, every block masked).
    """
    import triton

    group = check_qkv(q, k, v)
    _require_16bit_on_gpu(q)
    b, h, s, d = q.shape
    o = torch.empty((b, h, s, d), dtype=q.dtype, device=q.device)
    lse = torch.empty((b, h, s), dtype=torch.float32, device=q.device)
    if o.numel() == 0:
        return o, lse
    args = (q, k, v, o, lse, *q.stride(), *k.stride(), *v.stride(), *o.stride(), h, group, s)
    sm_scale = 1.0 / math.sqrt(d)
    if kernel == "online":
        block_m, block_n = forward_kernels.online_blocks()
        forward_kernels.attention_online_kernel[(triton.cdiv(s, block_m), b * h)](
            *args, sm_scale, HEAD_DIM=d, CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n,
            num_warps=forward_kernels.ONLINE_NUM_WARPS)
    elif kernel == "flash":
        forward_kernels.attention_flash_kernel[lambda meta: (triton.cdiv(s, meta["BLOCK_M"]), b * h)](
            *args, sm_scale * LOG2E, HEAD_DIM=d, CAUSAL=causal)
    elif kernel == "flash_tma":
        descriptors = [_rows_descriptor(t) for t in (q, k, v)]
        forward_kernels.attention_flash_tma_kernel[lambda meta: (triton.cdiv(s, meta["BLOCK_M"]), b * h)](
            *descriptors, o, lse, h, k.shape[1], s, sm_scale * LOG2E, HEAD_DIM=d, CAUSAL=causal)
    else:
        raise ValueError(f"unknown forward kernel {kernel!r}; use 'flash', 'flash_tma' or 'online'")
    return o, lse


def _rows_descriptor(t: torch.Tensor):  # -> triton.tools.tensor_descriptor.TensorDescriptor
    """A TMA descriptor of the (B, H, S, D) tensor t as a (B·H·S, D) matrix; its box is set per config (see the
    kernel's pre_hook). TMA needs a contiguous last dimension and 16-byte aligned rows: others are copied."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    if not t.is_contiguous() or t.data_ptr() % 16:
        t = torch.empty(t.shape, dtype=t.dtype, device=t.device).copy_(t)
    return TensorDescriptor(t, shape=[t.numel() // t.shape[-1], t.shape[-1]], strides=[t.shape[-1], 1],
                            block_shape=[1, 1])


def backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor,
             do: torch.Tensor, causal: bool, dq_atomic: bool = False
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) of the shapes and dtype of q, k, v. Non-contiguous inputs are copied to contiguous first.

    dq_atomic: dQ added up with fp32 atomics in the dK/dV kernel instead of by a kernel of its own.
    """
    import triton

    check_qkv(q, k, v)
    if o.shape != q.shape or do.shape != q.shape or o.dtype != q.dtype or do.dtype != q.dtype:
        raise ValueError(f"o and do must match q {tuple(q.shape)} {q.dtype}: got {tuple(o.shape)} {o.dtype} and "
                         f"{tuple(do.shape)} {do.dtype}")
    if lse.shape != q.shape[:3]:
        raise ValueError(f"lse must be (batch, heads, seq) = {tuple(q.shape[:3])}, got {tuple(lse.shape)}")
    _require_16bit_on_gpu(q)
    b, h, s, d = q.shape
    hk = k.shape[1]
    q, k, v, o, do = (t.contiguous() for t in (q, k, v, o, do))
    lse = lse.to(torch.float32).contiguous()
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    if q.numel() == 0:
        return dq, dk.zero_(), dv.zero_()  # no rows: no gradient flows to k and v (empty too unless s == 0)
    delta = torch.empty((b, h, s), dtype=torch.float32, device=q.device)
    block = backward_kernels.DELTA_BLOCK_M
    backward_kernels.attention_backward_delta_kernel[(triton.cdiv(s, block), b * h)](
        o, do, delta, s, HEAD_DIM=d, BLOCK_M=block)
    sm_scale = 1.0 / math.sqrt(d)
    shared = dict(HEAD_DIM=d, CAUSAL=causal)
    dkdv_grid = lambda meta: (triton.cdiv(s, meta["BLOCK_N"]), b * hk)  # noqa: E731 - Triton's grid idiom
    if dq_atomic:
        dq_sum = torch.empty((b, h, s, d), dtype=torch.float32, device=q.device)  # zeroed by the kernel's hook
        backward_kernels.attention_backward_dkdv_dq_atomic_kernel[dkdv_grid](
            q, k, v, do, lse, delta, dk, dv, dq_sum, h, hk, s, sm_scale * LOG2E, sm_scale, **shared)
        return dq.copy_(dq_sum), dk, dv
    backward_kernels.attention_backward_dkdv_kernel[dkdv_grid](
        q, k, v, do, lse, delta, dk, dv, delta, h, hk, s, sm_scale * LOG2E, sm_scale, **shared)
    backward_kernels.attention_backward_dq_kernel[lambda meta: (triton.cdiv(s, meta["BLOCK_M"]), b * h)](
        q, k, v, do, lse, delta, dq, h, hk, s, sm_scale * LOG2E, sm_scale, **shared)
    return dq, dk, dv
