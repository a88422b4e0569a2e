"""triton_flash_ws: the attention forward after Triton's fused-attention tutorial (Triton 3.6), built for Hopper.

What differs from triton_flash_tma (triton.py): q, k, v are read through tensor descriptors made inside the kernel
(``tl.make_tensor_descriptor``: one TMA copy a tile, no address arithmetic), and the kernel has two loop shapes over
the key/value blocks:

- warp-specialized: one ``tl.range(..., warp_specialize=True)`` loop. On Hopper, Triton 3.6's pass
  (``add_hopper_warpspec``) splits it into a producer warp group issuing the TMA loads and two consumer warp
  groups running the wgmma products and the softmax on 64 query rows each (FlashAttention-3's layout), so loads
  overlap the math without register-hungry software pipelining. The pass takes one loop per kernel (two loops in
  a row fail inside it, checked with Triton 3.6 for sm_90), so a causal or ragged forward masks every step.
  **Not autotuned**: on an H200 (Triton 3.6, 2026-11-27, tests/test_ops_attention_ws.py forcing this shape) it
  returned NaN in 8 of the 8 test shapes in one run and 7 in another (full and causal, head dim 64 and 128, seq
  129 to 4096; the shape that passed once failed in a third run), where the plain loop was right every time.
  Results that vary from run to run, as a race gives; the cause is not found.
  Only tests that force it (``WARP_SPECIALIZED_SHAPES``) run it.
- plain: Triton's software pipeline, 8 warps; causal split into mask-free steps below the diagonal and masked
  steps on it, a ragged last key block masked alone. The autotuner chooses among these.

Warp-specialized configs are pruned off Hopper: Blackwell's warp specialization is another pass, which the tutorial
drives with a split accumulator and a register cap, not taken here.

Layout: q, o (B, H, S, D); k, v (B, H_kv, S, D), H a multiple of H_kv; lse (B, H, S) float32, natural log, the
same statistics as triton_flash saves, so ``launch.backward`` takes this forward's (o, lse) unchanged. Inputs that
are not contiguous or not 16-byte aligned are copied first (TMA's rule). Sequences of any length: a partial last
key block is masked; o and lse are stored through masked pointers (a descriptor store would write into the next
head's rows of the (B·H·S, D) matrix). fp32 runs in the interpreter only (CPU checks).

Imported on first use only (see backends/lazy.py): importing triton fixes whether kernels are interpreted.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch
import triton
import triton.language as tl

from kernelkit.backends.triton import do_bench, interpreting
from kernelkit.errors import BackendUnavailable
from kernelkit.ops.attention import launch
from kernelkit.ops.attention.triton import _query_block, _softmax_step

LOG2E = 1.4426950408889634  # exp(x) = exp2(x · log2(e)): log2(e) is folded into the softmax scale
# (BLOCK_M, BLOCK_N, num_warps, num_stages, warp-specialized). A 128-row query tile is two 64-row wgmma tiles;
# 64- or 128-key steps; 2-4 K/V tiles in flight. Triton 3.6 warp-specializes a Hopper loop only at num_warps 4:
# it then adds a producer warp group to two consumer groups of 4 warps, 64 query rows each (12 warps, setmaxnreg;
# compiled for sm_90: 168 registers a thread, no spills). Those shapes are out of the autotuner (wrong results on
# a GPU, see the module doc). Plain loops take 8 warps at 128 rows (4 spill at head_dim 128, see triton.py);
# 64-row tiles on 4 warps serve head_dim 256.
WARP_SPECIALIZED_SHAPES = [(128, 128, 4, 2, True), (128, 64, 4, 3, True), (128, 64, 4, 4, True)]
HOPPER_SHAPES = [(128, 128, 8, 2, False), (128, 128, 8, 3, False), (128, 64, 8, 3, False), (128, 64, 8, 4, False),
                 (64, 64, 4, 2, False), (64, 64, 4, 3, False)]
# In the interpreter every program and every op of a loop step costs Python time: one small tile (as triton.py),
# the warp-specialized kernel's single loop (the interpreter runs it as a plain loop); tests pick the other.
INTERPRETED_SHAPES = [(64, 32, 4, 1, True)]
SHARED_MEMORY_BYTES = 232448  # an H100 block's opt-in shared memory (227 KB)


def _configs() -> list[triton.Config]:
    shapes = INTERPRETED_SHAPES if interpreting() else HOPPER_SHAPES
    return [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "WARP_SPECIALIZE": ws}, num_warps=w, num_stages=s)
            for m, n, w, s, ws in shapes]


def _prune(configs: list[triton.Config], named_args: dict, **kwargs: Any) -> list[triton.Config]:
    """Drop configs that cannot run here: warp-specialized ones off Hopper (the pass is Hopper's; Blackwell's
    differs), and those whose tiles overflow shared memory (the query tile plus num_stages K and V tiles of
    16-bit elements: head_dim 256 at 128-row tiles). Never returns an empty list."""
    head_dim = kwargs.get("HEAD_DIM", 0)
    q = named_args.get("q_ptr")
    hopper = q is None or q.device.type != "cuda" or torch.cuda.get_device_capability(q.device)[0] == 9

    def tile_bytes(c: triton.Config) -> int:
        return 2 * head_dim * (c.kwargs["BLOCK_M"] + 2 * c.num_stages * c.kwargs["BLOCK_N"])

    kept = [c for c in configs if (hopper or not c.kwargs["WARP_SPECIALIZE"])
            and tile_bytes(c) <= SHARED_MEMORY_BYTES]
    plain = [c for c in configs if not c.kwargs["WARP_SPECIALIZE"]] or configs
    return kept or [min(plain, key=tile_bytes)]


@triton.jit
def _ws_steps(acc, l_i, m_i, q, k_desc, v_desc, kv_row, rows, start, end, seq, qk_scale,
              BLOCK_N: tl.constexpr, CAUSAL_MASK: tl.constexpr, BOUNDS_MASK: tl.constexpr,
              WARP_SPECIALIZE: tl.constexpr):
    # Keys [start, end) in BLOCK_N steps for the resident query tile q, the tutorial's loop body around
    # triton.py's online-softmax step (scores in the log2 domain; masks compile-time, so the off-diagonal steps
    # carry none).
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in tl.range(start, end, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = k_desc.load([kv_row + start_n, 0]).T
        s = tl.dot(q, k)
        p, alpha, l_new, m_new = _softmax_step(s, l_i, m_i, rows, start_n + offs_n, seq, qk_scale, CAUSAL_MASK,
                                               BOUNDS_MASK)
        acc = acc * alpha[:, None]
        v = v_desc.load([kv_row + start_n, 0])
        acc = tl.dot(p.to(v.dtype), v, acc)
        l_i = l_new
        m_i = m_new
    return acc, l_i, m_i


@triton.autotune(configs=_configs(), key=["seq", "HEAD_DIM", "CAUSAL"],
                 prune_configs_by={"early_config_prune": _prune}, do_bench=do_bench)
@triton.heuristics({"EVEN_N": lambda args: args["seq"] % args["BLOCK_N"] == 0})
@triton.jit
def attention_flash_ws_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, n_batch, n_heads, n_kv_heads, seq, qk_scale,
                              HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, WARP_SPECIALIZE: tl.constexpr,
                              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN_N: tl.constexpr):
    # One program per BLOCK_M query rows of one (batch, head). q, k, v contiguous, seen as (rows, head_dim)
    # matrices of B·H·S and B·H_kv·S rows. Reads q once and K/V once per query block (from L2 for all but the
    # first program of a head: the query block is the fastest grid axis); writes o and lse.
    tl.static_assert(BLOCK_M % BLOCK_N == 0)
    pid_m = _query_block(CAUSAL)  # causal: the longest rows first, no tail at the end
    pid_bh = tl.program_id(1)
    batch = pid_bh // n_heads
    kv_row = (batch * n_kv_heads + (pid_bh % n_heads) // (n_heads // n_kv_heads)) * seq
    q_desc = tl.make_tensor_descriptor(q_ptr, shape=[n_batch * n_heads * seq, HEAD_DIM], strides=[HEAD_DIM, 1],
                                       block_shape=[BLOCK_M, HEAD_DIM])
    kv_rows = n_batch * n_kv_heads * seq
    k_desc = tl.make_tensor_descriptor(k_ptr, shape=[kv_rows, HEAD_DIM], strides=[HEAD_DIM, 1],
                                       block_shape=[BLOCK_N, HEAD_DIM])
    v_desc = tl.make_tensor_descriptor(v_ptr, shape=[kv_rows, HEAD_DIM], strides=[HEAD_DIM, 1],
                                       block_shape=[BLOCK_N, HEAD_DIM])
    start_m = pid_m * BLOCK_M
    rows = start_m + tl.arange(0, BLOCK_M)
    q = q_desc.load([pid_bh * seq + start_m, 0])  # rows past seq: the next head's or TMA's zeros, never stored
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    if WARP_SPECIALIZE:
        # Triton 3.6's Hopper pass partitions one loop per kernel (two loops in a row fail in it): every key block
        # up to the diagonal (causal) or the end in a single loop, masked on every step unless the forward is
        # full over whole key blocks (the tutorial's case).
        hi = tl.minimum(start_m + BLOCK_M, seq) if CAUSAL else seq
        acc, l_i, m_i = _ws_steps(acc, l_i, m_i, q, k_desc, v_desc, kv_row, rows, 0, hi, seq, qk_scale,
                                  BLOCK_N, CAUSAL, not CAUSAL and not EVEN_N, True)
    else:
        # Keys [0, mid) take no mask. Causal: every row sees every key before the tile's first row (all < seq).
        # Full: every whole key block. Then the diagonal under the causal mask (which also drops keys past the
        # end: col > row for every row < seq), or the partial last block under the bounds mask.
        mid = start_m if CAUSAL else (seq // BLOCK_N) * BLOCK_N
        acc, l_i, m_i = _ws_steps(acc, l_i, m_i, q, k_desc, v_desc, kv_row, rows, 0, mid, seq, qk_scale,
                                  BLOCK_N, False, False, False)
        end = tl.minimum(start_m + BLOCK_M, seq) if CAUSAL else seq
        acc, l_i, m_i = _ws_steps(acc, l_i, m_i, q, k_desc, v_desc, kv_row, rows, mid, end, seq, qk_scale,
                                  BLOCK_N, CAUSAL, not CAUSAL, False)
    o = acc / l_i[:, None]
    offs_d = tl.arange(0, HEAD_DIM)
    offsets = pid_bh.to(tl.int64) * seq * HEAD_DIM + rows[:, None] * HEAD_DIM + offs_d[None, :]
    tl.store(o_ptr + offsets, o.to(o_ptr.dtype.element_ty), mask=rows[:, None] < seq)
    # m is in the log2 domain: lse = ln(sum exp(s)) = (m + log2(l)) · ln(2).
    tl.store(lse_ptr + pid_bh.to(tl.int64) * seq + rows, (m_i + tl.math.log2(l_i)) * 0.6931471805599453,
             mask=rows < seq)


def unavailable(device: torch.device, dtype: torch.dtype) -> str | None:
    """Why triton_flash_ws cannot run here, or None: it needs in-kernel tensor descriptors (Triton >= 3.4) and,
    on a GPU, TMA (compute capability 9.0 or newer) and 16-bit inputs (fp32 runs in the interpreter only)."""
    if not hasattr(tl, "make_tensor_descriptor") or not hasattr(triton, "set_allocator"):
        return f"triton {triton.__version__} has no tl.make_tensor_descriptor / triton.set_allocator"
    if device.type == "cuda" and torch.cuda.get_device_capability(device)[0] < 9:
        return "triton_flash_ws loads tiles by TMA: it needs compute capability 9.0 (Hopper) or newer"
    if device.type == "cuda" and dtype == torch.float32:
        return ("the Triton attention kernels take bfloat16 or float16 on a GPU; float32 runs in the Triton "
                "interpreter, for CPU checks")
    return None


def _tma_ready(t: torch.Tensor) -> torch.Tensor:
    """t itself when contiguous with a 16-byte aligned base (TMA's rule), else a contiguous copy."""
    if t.is_contiguous() and t.data_ptr() % 16 == 0:
        return t
    return torch.empty(t.shape, dtype=t.dtype, device=t.device).copy_(t)


def _scratch(device: torch.device, size: int, alignment: int, stream: Any) -> torch.Tensor:
    return torch.empty(size, dtype=torch.int8, device=device)


def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(o, lse) of attention by attention_flash_ws_kernel: o (B, H, S, D) in q's dtype, lse (B, H, S) float32.

    q (B, H, S, D), k and v (B, H_kv, S, D), one dtype of bf16, fp16 (fp32 in the interpreter), D in
    launch.HEAD_DIMS. BackendUnavailable where the kernel cannot run (see ``unavailable``); ValueError on bad shapes.
    """
    launch.check_qkv(q, k, v)
    reason = unavailable(q.device, q.dtype)
    if reason is not None:
        raise BackendUnavailable(reason)
    b, h, s, d = q.shape
    o = torch.empty((b, h, s, d), dtype=q.dtype, device=q.device)
    lse = torch.empty((b, h, s), dtype=torch.float32, device=q.device)
    if o.numel() == 0:
        return o, lse
    q, k, v = (_tma_ready(t) for t in (q, k, v))
    # Descriptors made inside a kernel live in a global scratch buffer (128 bytes per program) that Triton asks
    # this allocator for at each launch.
    triton.set_allocator(functools.partial(_scratch, q.device))
    attention_flash_ws_kernel[lambda meta: (triton.cdiv(s, meta["BLOCK_M"]), b * h)](
        q, k, v, o, lse, b, h, k.shape[1], s, LOG2E / math.sqrt(d), HEAD_DIM=d, CAUSAL=causal)
    return o, lse
