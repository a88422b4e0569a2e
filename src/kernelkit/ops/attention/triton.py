"""Triton kernels of the attention forward: the online-softmax version and the FA2-style flash kernel.

Layout (see the package docstring): q, o (B, H, S, D); k, v (B, H_kv, S, D), H a multiple of H_kv (grouped-query
attention: query head h reads key/value head h // (H // H_kv)); lse (B, H, S) float32, natural log, contiguous.
Any strides are taken (a (B, S, H, D) tensor transposed to (B, H, S, D) is read in place). Products run on the
tensor cores with fp32 accumulation; the softmax statistics stay in fp32. fp32 inputs run in the interpreter only
(CPU checks; see launch.py).

Imported on first use only (see backends/lazy.py): importing triton fixes whether kernels are interpreted.
"""

from __future__ import annotations

from collections.abc import Callable

import triton
import triton.language as tl

from kernelkit.backends.triton import do_bench, interpreting

LOG2E = 1.4426950408889634  # exp(x) = exp2(x * log2(e)): the kernels fold log2(e) into the softmax scale

# triton_online: one fixed tile, no tuning (the second rung of the ladder).
ONLINE_BLOCK_M, ONLINE_BLOCK_N, ONLINE_NUM_WARPS = 64, 64, 4
# In the interpreter every program and every Triton op in a loop step costs Python time, whatever the tile size:
# tiles as large as the CPU test sequences (77 = 64 + 13 rows) still take several key steps, the last partial,
# and two steps on the diagonal.
INTERPRETED_BLOCK_M, INTERPRETED_BLOCK_N = 64, 32


def online_blocks() -> tuple[int, int]:
    """(BLOCK_M, BLOCK_N) of triton_online here: small tiles in the interpreter."""
    if interpreting():
        return INTERPRETED_BLOCK_M, INTERPRETED_BLOCK_N
    return ONLINE_BLOCK_M, ONLINE_BLOCK_N


# (BLOCK_M, BLOCK_N, num_warps, num_stages). Hopper: a 128-row query tile, 64 rows a warpgroup (the wgmma tile
# height), halves the K/V re-reads of a 64-row one; 64- or 128-key steps; 2-3 stages of K/V in flight; 64-row tiles
# for short sequences.
HOPPER_SHAPES = [(128, 64, 8, 2), (128, 64, 8, 3), (128, 128, 8, 2), (128, 64, 4, 3), (128, 128, 4, 2), (64, 64, 4, 3)]


def _flash_configs(pre_hook: Callable[[dict], None] | None = None) -> list[triton.Config]:
    shapes = [(INTERPRETED_BLOCK_M, INTERPRETED_BLOCK_N, 4, 1)] if interpreting() else HOPPER_SHAPES
    return [triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=s, pre_hook=pre_hook)
            for m, n, w, s in shapes]


def _prune_flash(configs: list[triton.Config], named_args: dict, **kwargs) -> list[triton.Config]:
    """At head_dim 128, a 128-row tile on 4 warps holds a 128 x 128 fp32 accumulator in 128 threads: compiled for
    sm_90 it spills 0.5-1.8 KB a thread (8 warps: none; the 3-stage 128-key config, left out, spilled 12 bytes)."""
    if kwargs.get("HEAD_DIM", 0) >= 128 and not interpreting():
        return [c for c in configs if c.num_warps == 8 or c.kwargs["BLOCK_M"] == 64]
    return configs


def _tma_block_shapes(nargs: dict) -> None:
    # The descriptors' boxes follow the config: set before every launch, tuning runs included.
    nargs["q_desc"].block_shape = [nargs["BLOCK_M"], nargs["HEAD_DIM"]]
    nargs["k_desc"].block_shape = [nargs["BLOCK_N"], nargs["HEAD_DIM"]]
    nargs["v_desc"].block_shape = [nargs["BLOCK_N"], nargs["HEAD_DIM"]]


@triton.jit
def attention_online_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr,
                            stride_qb, stride_qh, stride_qm, stride_qd,
                            stride_kb, stride_kh, stride_kn, stride_kd,
                            stride_vb, stride_vh, stride_vn, stride_vd,
                            stride_ob, stride_oh, stride_om, stride_od,
                            n_heads, group, seq, sm_scale,
                            HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # One program per BLOCK_M query rows of one (batch, head): one pass over every K/V block with a running max m
    # and a running sum l of exp(s - m), the output accumulator rescaled whenever m grows. Every block is masked
    # (causal and past the end) and the causal upper triangle is computed, then thrown away.
    # Reads q once and K/V once per query block; writes o and lse.
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    batch = pid_bh // n_heads
    head = pid_bh % n_heads
    kv_head = head // group
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q_base = q_ptr + batch.to(tl.int64) * stride_qb + head.to(tl.int64) * stride_qh
    k_base = k_ptr + batch.to(tl.int64) * stride_kb + kv_head.to(tl.int64) * stride_kh
    v_base = v_ptr + batch.to(tl.int64) * stride_vb + kv_head.to(tl.int64) * stride_vh
    q = tl.load(q_base + rows[:, None] * stride_qm + offs_d[None, :] * stride_qd, mask=rows[:, None] < seq,
                other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    for start_n in range(0, seq, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(k_base + cols[:, None] * stride_kn + offs_d[None, :] * stride_kd, mask=cols[:, None] < seq,
                    other=0.0)
        s = tl.dot(q, tl.trans(k)) * sm_scale
        keep = cols[None, :] < seq
        if CAUSAL:
            keep = keep & (rows[:, None] >= cols[None, :])
        s = tl.where(keep, s, float("-inf"))
        # The first block holds key 0, which every row sees: m is finite from then on, so no -inf - -inf.
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_base + cols[:, None] * stride_vn + offs_d[None, :] * stride_vd, mask=cols[:, None] < seq,
                    other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    o = acc / l_i[:, None]
    o_base = o_ptr + batch.to(tl.int64) * stride_ob + head.to(tl.int64) * stride_oh
    tl.store(o_base + rows[:, None] * stride_om + offs_d[None, :] * stride_od, o.to(o_ptr.dtype.element_ty),
             mask=rows[:, None] < seq)
    tl.store(lse_ptr + pid_bh.to(tl.int64) * seq + rows, m_i + tl.log(l_i), mask=rows < seq)


@triton.jit
def _query_block(CAUSAL: tl.constexpr):
    # The query block of this program. Causal: the last query blocks see the most keys; started first, they do
    # not leave a tail at the end.
    if CAUSAL:
        pid_m = tl.num_programs(0) - 1 - tl.program_id(0)
    else:
        pid_m = tl.program_id(0)
    return pid_m


@triton.jit
def _softmax_step(s, l_i, m_i, rows, cols, seq, qk_scale, CAUSAL_MASK: tl.constexpr, BOUNDS_MASK: tl.constexpr):
    # One key block of the online softmax in the log2 domain (qk_scale holds log2(e)), from the raw scores
    # s = q k^T: the block's probabilities p, the factor alpha that rescales what was summed before, the new
    # running sum and max. Each probability is one exp2 of one fused multiply-add; masks are compile-time.
    if CAUSAL_MASK or BOUNDS_MASK:
        if CAUSAL_MASK:
            # Rows in range see keys <= row < seq; rows past the end are never stored.
            keep = rows[:, None] >= cols[None, :]
        else:
            keep = cols[None, :] < seq
        s = tl.where(keep, s * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
    else:
        m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
        p = tl.math.exp2(s * qk_scale - m_new[:, None])
    alpha = tl.math.exp2(m_i - m_new)
    return p, alpha, l_i * alpha + tl.sum(p, 1), m_new


@triton.jit
def _flash_forward_steps(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
                         rows, offs_d, start, end, seq, qk_scale,
                         BLOCK_N: tl.constexpr, CAUSAL_MASK: tl.constexpr, BOUNDS_MASK: tl.constexpr):
    # Keys [start, end) in BLOCK_N steps for the resident query tile q; scores in the log2 domain (qk_scale holds
    # log2(e)), so each probability is one exp2 of one fused multiply-add. Masks are compile-time: the off-diagonal
    # steps, nearly all of them, run without any.
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in range(start, end, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + offs_n
        k_ptrs = k_base + cols[:, None] * stride_kn + offs_d[None, :] * stride_kd
        v_ptrs = v_base + cols[:, None] * stride_vn + offs_d[None, :] * stride_vd
        if BOUNDS_MASK:
            k = tl.load(k_ptrs, mask=cols[:, None] < seq, other=0.0)
        else:
            k = tl.load(k_ptrs)
        p, alpha, l_i, m_new = _softmax_step(tl.dot(q, tl.trans(k)), l_i, m_i, rows, cols, seq, qk_scale,
                                             CAUSAL_MASK, BOUNDS_MASK)
        if BOUNDS_MASK:
            v = tl.load(v_ptrs, mask=cols[:, None] < seq, other=0.0)
        else:
            v = tl.load(v_ptrs)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
    return acc, l_i, m_i


@triton.autotune(configs=_flash_configs(), key=["seq", "HEAD_DIM", "CAUSAL"],
                 prune_configs_by={"early_config_prune": _prune_flash}, do_bench=do_bench)
@triton.jit
def attention_flash_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr,
                           stride_qb, stride_qh, stride_qm, stride_qd,
                           stride_kb, stride_kh, stride_kn, stride_kd,
                           stride_vb, stride_vh, stride_vn, stride_vd,
                           stride_ob, stride_oh, stride_om, stride_od,
                           n_heads, group, seq, qk_scale,
                           HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # FA2: the query tile stays in registers while K/V blocks stream past it. Causal: only the key blocks at or
    # below the diagonal are visited (half the work), and only the diagonal ones are masked. Programs of one head
    # run side by side (the query block is the fastest grid axis), so its K/V are read from L2, not HBM, by all.
    # Reads q once and K/V once per query block; writes o and lse.
    tl.static_assert(BLOCK_M % BLOCK_N == 0)
    pid_m = _query_block(CAUSAL)
    pid_bh = tl.program_id(1)
    batch = pid_bh // n_heads
    head = pid_bh % n_heads
    kv_head = head // group
    start_m = pid_m * BLOCK_M
    rows = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q_base = q_ptr + batch.to(tl.int64) * stride_qb + head.to(tl.int64) * stride_qh
    k_base = k_ptr + batch.to(tl.int64) * stride_kb + kv_head.to(tl.int64) * stride_kh
    v_base = v_ptr + batch.to(tl.int64) * stride_vb + kv_head.to(tl.int64) * stride_vh
    q = tl.load(q_base + rows[:, None] * stride_qm + offs_d[None, :] * stride_qd, mask=rows[:, None] < seq,
                other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    # Keys [0, mid) take no mask. Causal: every row sees every key before the tile's first row (all < seq).
    # Otherwise: every whole BLOCK_N step.
    mid = start_m if CAUSAL else (seq // BLOCK_N) * BLOCK_N
    acc, l_i, m_i = _flash_forward_steps(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_kd, stride_vn,
                                         stride_vd, rows, offs_d, 0, mid, seq, qk_scale, BLOCK_N, False, False)
    # Then the diagonal under the causal mask, or the partial last block when seq is not a multiple of BLOCK_N;
    # loads stop at the end of the sequence.
    end = tl.minimum(start_m + BLOCK_M, seq) if CAUSAL else seq
    acc, l_i, m_i = _flash_forward_steps(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_kd, stride_vn,
                                         stride_vd, rows, offs_d, mid, end, seq, qk_scale, BLOCK_N, CAUSAL, True)
    o = acc / l_i[:, None]
    o_base = o_ptr + batch.to(tl.int64) * stride_ob + head.to(tl.int64) * stride_oh
    tl.store(o_base + rows[:, None] * stride_om + offs_d[None, :] * stride_od, o.to(o_ptr.dtype.element_ty),
             mask=rows[:, None] < seq)
    # m is in the log2 domain: lse = ln(sum exp(s)) = (m + log2(l)) * ln(2).
    tl.store(lse_ptr + pid_bh.to(tl.int64) * seq + rows, (m_i + tl.math.log2(l_i)) * 0.6931471805599453,
             mask=rows < seq)


@triton.jit
def _flash_tma_steps(acc, l_i, m_i, q, k_desc, v_desc, kv_row, rows, start, end, seq, qk_scale,
                     BLOCK_N: tl.constexpr, CAUSAL_MASK: tl.constexpr, BOUNDS_MASK: tl.constexpr):
    # As _flash_forward_steps, with K/V tiles brought in by the Tensor Memory Accelerator: one descriptor load a
    # tile, no address arithmetic, straight into shared memory. Rows past this head's keys are the next head's
    # (or zeros past the tensor's end): finite, and masked out of the scores like any key past the end.
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in range(start, end, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + offs_n
        k = k_desc.load([kv_row + start_n, 0])
        p, alpha, l_i, m_new = _softmax_step(tl.dot(q, tl.trans(k)), l_i, m_i, rows, cols, seq, qk_scale,
                                             CAUSAL_MASK, BOUNDS_MASK)
        v = v_desc.load([kv_row + start_n, 0])
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
    return acc, l_i, m_i


@triton.autotune(configs=_flash_configs(_tma_block_shapes), key=["seq", "HEAD_DIM", "CAUSAL"],
                 prune_configs_by={"early_config_prune": _prune_flash}, do_bench=do_bench)
@triton.jit
def attention_flash_tma_kernel(q_desc, k_desc, v_desc, o_ptr, lse_ptr, n_heads, n_kv_heads, seq, qk_scale,
                               HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
                               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # attention_flash_kernel with Hopper's TMA loads: q, k, v contiguous, seen as (rows, head_dim) matrices of
    # B·H·S and B·H_kv·S rows, each program reading its head's rows through a descriptor. o and lse are stored
    # through pointers, masked at the end of the sequence (a descriptor store would spill into the next head).
    tl.static_assert(BLOCK_M % BLOCK_N == 0)
    pid_m = _query_block(CAUSAL)
    pid_bh = tl.program_id(1)
    kv_head = (pid_bh % n_heads) // (n_heads // n_kv_heads)
    kv_row = ((pid_bh // n_heads) * n_kv_heads + kv_head) * seq
    start_m = pid_m * BLOCK_M
    rows = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q = q_desc.load([pid_bh * seq + start_m, 0])
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    mid = start_m if CAUSAL else (seq // BLOCK_N) * BLOCK_N  # as in attention_flash_kernel
    acc, l_i, m_i = _flash_tma_steps(acc, l_i, m_i, q, k_desc, v_desc, kv_row, rows, 0, mid, seq, qk_scale,
                                     BLOCK_N, False, False)
    # Keys past the end of the sequence: masked by the causal mask on the diagonal (row < seq), else by the bounds.
    end = tl.minimum(start_m + BLOCK_M, seq) if CAUSAL else seq
    acc, l_i, m_i = _flash_tma_steps(acc, l_i, m_i, q, k_desc, v_desc, kv_row, rows, mid, end, seq, qk_scale,
                                     BLOCK_N, CAUSAL, not CAUSAL)
    o = acc / l_i[:, None]
    offsets = pid_bh.to(tl.int64) * seq * HEAD_DIM + rows[:, None] * HEAD_DIM + offs_d[None, :]
    tl.store(o_ptr + offsets, o.to(o_ptr.dtype.element_ty), mask=rows[:, None] < seq)
    tl.store(lse_ptr + pid_bh.to(tl.int64) * seq + rows, (m_i + tl.math.log2(l_i)) * 0.6931471805599453,
             mask=rows < seq)
