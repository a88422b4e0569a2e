"""Triton kernels of the attention backward, FA2-style: dQ, dK, dV recomputed from the saved row statistics.

With S = scale * Q Kᵀ, P = exp(S - lse) (lse saved by the forward), dO the output's gradient:
    dV = Pᵀ dO,  dP = dO Vᵀ,  dS = P ∘ (dP - delta) with delta = rowsum(dO ∘ O),  dQ = scale dS K,  dK = scale dSᵀ Q.
Nothing of size S² is stored: P and dS are rebuilt tile by tile. Three launches: ``delta``; then dK and dV, one
program per key block looping over the query blocks (and over the query heads that share the key/value head);
then dQ, one program per query block looping over the key blocks (deterministic, no atomics; S and dP are
computed twice, in each of the last two kernels: 7 block products per tile instead of 5). The ``_dq_atomic``
variant instead adds each tile's dQ into an fp32 buffer from the dK/dV kernel (5 products, no second pass, at the
price of fp32 atomics and a rounding order that changes run to run).

Layout: q, o, do, dq (B, H, S, D) and k, v, dk, dv (B, H_kv, S, D), all contiguous (the launcher copies others);
lse and delta (B, H, S) float32; bf16 or fp16 on a GPU, fp32 too in the interpreter. Imported on first use only
(see backends/lazy.py).
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernelkit.backends.triton import do_bench, interpreting

DELTA_BLOCK_M = 64
# The interpreter's cost is per Triton op, whatever the tile size: tiles as large as the CPU test sequences, which
# still leave two diagonal steps and a partial last block (dK/dV: 32 query rows a step under 64 resident keys).
INTERPRETED_BLOCK_M, INTERPRETED_BLOCK_N = 32, 64


# (BLOCK_M, BLOCK_N, num_warps, num_stages). dK/dV: BLOCK_N keys stay resident (K, V in shared memory, the fp32
# dK and dV accumulators in registers), BLOCK_M query rows a step, BLOCK_N a multiple of it so the diagonal steps
# tile the block exactly, and 64 keys a warpgroup (the wgmma tile height: fewer would have both warpgroups compute
# the same Sᵀ and dPᵀ). At head_dim 128 the accumulators alone take 128 registers a thread: compiled for sm_90
# (triton 3.9) the 8-warp tiles spill 48 (32 x 128) and 284 bytes a thread (64 x 128, FlashAttention-2's own
# tile; with dQ atomics 164 and 312), the 4-warp ones 300 to 720 bytes, so those run at head_dim 64 only.
DKDV_SHAPES = [(64, 128, 8, 2), (32, 128, 8, 2), (64, 64, 4, 2), (32, 64, 4, 3)]
# dQ: BLOCK_M query rows stay resident (Q, dO in shared memory, the fp32 dQ accumulator in registers), 64 a
# warpgroup; BLOCK_N keys a step. None spills at head_dim 128 on sm_90 (159 to 229 registers).
DQ_SHAPES = [(128, 64, 8, 2), (128, 64, 8, 3), (128, 32, 8, 3), (64, 64, 4, 3)]


def _configs(shapes: list[tuple[int, int, int, int]], **options) -> list[triton.Config]:
    return [triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=s, **options)
            for m, n, w, s in shapes]


def _dkdv_configs(dq_atomic: bool) -> list[triton.Config]:
    hook = {"pre_hook": _zero_dq_accumulator} if dq_atomic else {}
    if interpreting():
        return _configs([(INTERPRETED_BLOCK_M, INTERPRETED_BLOCK_N, 4, 1)], **hook)
    return _configs(DKDV_SHAPES, **hook)


def _dq_configs() -> list[triton.Config]:
    if interpreting():
        return _configs([(INTERPRETED_BLOCK_N, INTERPRETED_BLOCK_M, 4, 1)])
    return _configs(DQ_SHAPES)


def _zero_dq_accumulator(nargs: dict) -> None:
    # Before every launch, tuning runs included: the atomics add into it.
    nargs["dq_ptr"].zero_()


def _prune_dkdv(configs: list[triton.Config], named_args: dict, **kwargs) -> list[triton.Config]:
    """At head_dim 128, 8 warps only (see DKDV_SHAPES)."""
    if kwargs.get("HEAD_DIM", 0) >= 128 and not interpreting():
        return [c for c in configs if c.num_warps == 8]
    return configs


@triton.jit
def attention_backward_delta_kernel(o_ptr, do_ptr, delta_ptr, seq, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr):
    # delta = rowsum(dO * O), the softmax backward's row term, once per row for both later kernels.
    # Reads O and dO (2 B H S D elements), writes B H S floats.
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    base = tl.program_id(1).to(tl.int64) * seq * HEAD_DIM
    offsets = base + rows[:, None] * HEAD_DIM + offs_d[None, :]
    o = tl.load(o_ptr + offsets, mask=rows[:, None] < seq, other=0.0).to(tl.float32)
    do = tl.load(do_ptr + offsets, mask=rows[:, None] < seq, other=0.0).to(tl.float32)
    tl.store(delta_ptr + tl.program_id(1).to(tl.int64) * seq + rows, tl.sum(o * do, 1), mask=rows < seq)


@triton.jit
def _dkdv_steps(dk, dv, k, v, q_base, do_base, dq_base, lse_base, delta_base, cols, offs_d, start, end, seq,
                qk_scale, sm_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, CAUSAL_MASK: tl.constexpr,
                BOUNDS_MASK: tl.constexpr, DQ_ATOMIC: tl.constexpr):
    # Query rows [start, end) in BLOCK_M steps against the resident key block (k, v: BLOCK_N x D). Computed
    # transposed (keys down, queries across) so that Pᵀ and dSᵀ come out of the products in the layout the dV and
    # dK products take. Past the end, rows load q = dO = 0 and lse = +inf, so their P is exactly 0.
    for start_m in range(start, end, BLOCK_M):
        start_m = tl.multiple_of(start_m, BLOCK_M)
        rows = start_m + tl.arange(0, BLOCK_M)
        offsets = rows[:, None] * HEAD_DIM + offs_d[None, :]
        if BOUNDS_MASK:
            q = tl.load(q_base + offsets, mask=rows[:, None] < seq, other=0.0)
            lse = tl.load(lse_base + rows, mask=rows < seq, other=float("inf"))
        else:
            q = tl.load(q_base + offsets)
            lse = tl.load(lse_base + rows)
        s_t = tl.dot(k, tl.trans(q))
        p_t = tl.math.exp2(s_t * qk_scale - lse[None, :] * 1.4426950408889634)
        if CAUSAL_MASK:
            p_t = tl.where(rows[None, :] >= cols[:, None], p_t, 0.0)
        if BOUNDS_MASK:
            do = tl.load(do_base + offsets, mask=rows[:, None] < seq, other=0.0)
            delta = tl.load(delta_base + rows, mask=rows < seq, other=0.0)
        else:
            do = tl.load(do_base + offsets)
            delta = tl.load(delta_base + rows)
        dv = tl.dot(p_t.to(do.dtype), do, dv)
        dp_t = tl.dot(v, tl.trans(do))
        ds_t = (p_t * (dp_t - delta[None, :])).to(q.dtype)
        dk = tl.dot(ds_t, q, dk)
        if DQ_ATOMIC:
            dq = tl.dot(tl.trans(ds_t), k) * sm_scale
            tl.atomic_add(dq_base + offsets, dq, mask=rows[:, None] < seq, sem="relaxed")
    return dk, dv


@triton.jit
def _dkdv_program(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, dq_ptr,
                  n_heads, n_kv_heads, seq, qk_scale, sm_scale,
                  HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, DQ_ATOMIC: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # One program per key block of one (batch, key/value head): dK and dV accumulate over every query row of every
    # query head in the group, so they are written once, without atomics. Causal: only query rows from the block's
    # first key on; the diagonal steps are masked, the rest not.
    tl.static_assert(BLOCK_N % BLOCK_M == 0)
    pid_bkv = tl.program_id(1)
    batch = pid_bkv // n_kv_heads
    kv_head = pid_bkv % n_kv_heads
    group = n_heads // n_kv_heads
    start_n = tl.program_id(0) * BLOCK_N
    cols = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    kv_offsets = pid_bkv.to(tl.int64) * seq * HEAD_DIM + cols[:, None] * HEAD_DIM + offs_d[None, :]
    # Keys past the end load as 0: their rows of dK and dV are garbage-free zeros-in, never stored.
    k = tl.load(k_ptr + kv_offsets, mask=cols[:, None] < seq, other=0.0)
    v = tl.load(v_ptr + kv_offsets, mask=cols[:, None] < seq, other=0.0)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    n_full = (seq // BLOCK_M) * BLOCK_M
    if CAUSAL:
        middle = start_n + BLOCK_N  # a multiple of BLOCK_M
    else:
        middle = 0
    for g in range(group):
        bh = batch * n_heads + kv_head * group + g
        q_base = q_ptr + bh.to(tl.int64) * seq * HEAD_DIM
        do_base = do_ptr + bh.to(tl.int64) * seq * HEAD_DIM
        dq_base = dq_ptr + bh.to(tl.int64) * seq * HEAD_DIM
        lse_base = lse_ptr + bh.to(tl.int64) * seq
        delta_base = delta_ptr + bh.to(tl.int64) * seq
        if CAUSAL:
            dk, dv = _dkdv_steps(dk, dv, k, v, q_base, do_base, dq_base, lse_base, delta_base, cols, offs_d,
                                 start_n, tl.minimum(middle, seq), seq, qk_scale, sm_scale,
                                 HEAD_DIM, BLOCK_M, True, True, DQ_ATOMIC)
        dk, dv = _dkdv_steps(dk, dv, k, v, q_base, do_base, dq_base, lse_base, delta_base, cols, offs_d,
                             middle, n_full, seq, qk_scale, sm_scale,
                             HEAD_DIM, BLOCK_M, False, False, DQ_ATOMIC)
        dk, dv = _dkdv_steps(dk, dv, k, v, q_base, do_base, dq_base, lse_base, delta_base, cols, offs_d,
                             tl.maximum(middle, n_full), seq, seq, qk_scale, sm_scale,
                             HEAD_DIM, BLOCK_M, False, True, DQ_ATOMIC)
    tl.store(dk_ptr + kv_offsets, (dk * sm_scale).to(dk_ptr.dtype.element_ty), mask=cols[:, None] < seq)
    tl.store(dv_ptr + kv_offsets, dv.to(dv_ptr.dtype.element_ty), mask=cols[:, None] < seq)


@triton.autotune(configs=_dkdv_configs(dq_atomic=False), key=["seq", "HEAD_DIM", "CAUSAL"],
                 prune_configs_by={"early_config_prune": _prune_dkdv}, do_bench=do_bench)
@triton.jit
def attention_backward_dkdv_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, dq_ptr,
                                   n_heads, n_kv_heads, seq, qk_scale, sm_scale,
                                   HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
                                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # Reads K, V once, Q, dO, lse and delta once per key block; writes dK, dV.
    _dkdv_program(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, dq_ptr,
                  n_heads, n_kv_heads, seq, qk_scale, sm_scale, HEAD_DIM, CAUSAL, False, BLOCK_M, BLOCK_N)


@triton.autotune(configs=_dkdv_configs(dq_atomic=True), key=["seq", "HEAD_DIM", "CAUSAL"],
                 prune_configs_by={"early_config_prune": _prune_dkdv}, do_bench=do_bench)
@triton.jit
def attention_backward_dkdv_dq_atomic_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr,
                                             dq_ptr, n_heads, n_kv_heads, seq, qk_scale, sm_scale,
                                             HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
                                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # As attention_backward_dkdv_kernel, and adds every tile's scale dS K into the fp32 dQ buffer dq_ptr
    # (zeroed by the configs' pre_hook before each launch): one fp32 atomic per dQ element per key block.
    _dkdv_program(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, dq_ptr,
                  n_heads, n_kv_heads, seq, qk_scale, sm_scale, HEAD_DIM, CAUSAL, True, BLOCK_M, BLOCK_N)


@triton.jit
def _dq_steps(dq, q, do, lse, delta, k_base, v_base, rows, offs_d, start, end, seq, qk_scale,
              HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL_MASK: tl.constexpr, BOUNDS_MASK: tl.constexpr):
    # Keys [start, end) in BLOCK_N steps against the resident query tile; keys past the end get P = 0.
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in range(start, end, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + offs_n
        offsets = cols[:, None] * HEAD_DIM + offs_d[None, :]
        if BOUNDS_MASK:
            k = tl.load(k_base + offsets, mask=cols[:, None] < seq, other=0.0)
            v = tl.load(v_base + offsets, mask=cols[:, None] < seq, other=0.0)
        else:
            k = tl.load(k_base + offsets)
            v = tl.load(v_base + offsets)
        s = tl.dot(q, tl.trans(k))
        p = tl.math.exp2(s * qk_scale - lse[:, None])
        if CAUSAL_MASK:
            p = tl.where(rows[:, None] >= cols[None, :], p, 0.0)
        elif BOUNDS_MASK:
            p = tl.where(cols[None, :] < seq, p, 0.0)
        dp = tl.dot(do, tl.trans(v))
        ds = (p * (dp - delta[:, None])).to(k.dtype)
        dq = tl.dot(ds, k, dq)
    return dq


@triton.autotune(configs=_dq_configs(), key=["seq", "HEAD_DIM", "CAUSAL"], do_bench=do_bench)
@triton.jit
def attention_backward_dq_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr,
                                 n_heads, n_kv_heads, seq, qk_scale, sm_scale,
                                 HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
                                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # One program per query block of one (batch, head), the forward's loop again: dQ += dS K over the key blocks
    # (causal: up to the diagonal). Reads Q, dO once and K, V once per query block; writes dQ.
    tl.static_assert(BLOCK_M % BLOCK_N == 0)
    if CAUSAL:
        pid_m = tl.num_programs(0) - 1 - tl.program_id(0)  # the longest rows first, as in the forward
    else:
        pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    batch = pid_bh // n_heads
    kv_head = (pid_bh % n_heads) // (n_heads // n_kv_heads)
    start_m = pid_m * BLOCK_M
    rows = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    offsets = pid_bh.to(tl.int64) * seq * HEAD_DIM + rows[:, None] * HEAD_DIM + offs_d[None, :]
    q = tl.load(q_ptr + offsets, mask=rows[:, None] < seq, other=0.0)
    do = tl.load(do_ptr + offsets, mask=rows[:, None] < seq, other=0.0)
    lse = tl.load(lse_ptr + pid_bh.to(tl.int64) * seq + rows, mask=rows < seq, other=float("inf"))
    lse = lse * 1.4426950408889634  # to the log2 domain of qk_scale
    delta = tl.load(delta_ptr + pid_bh.to(tl.int64) * seq + rows, mask=rows < seq, other=0.0)
    kv_base = (batch * n_kv_heads + kv_head).to(tl.int64) * seq * HEAD_DIM
    dq = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    if CAUSAL:
        dq = _dq_steps(dq, q, do, lse, delta, k_ptr + kv_base, v_ptr + kv_base, rows, offs_d, 0, start_m, seq,
                       qk_scale, HEAD_DIM, BLOCK_N, False, False)
        dq = _dq_steps(dq, q, do, lse, delta, k_ptr + kv_base, v_ptr + kv_base, rows, offs_d, start_m,
                       tl.minimum(start_m + BLOCK_M, seq), seq, qk_scale, HEAD_DIM, BLOCK_N, True, True)
    else:
        n_full = (seq // BLOCK_N) * BLOCK_N
        dq = _dq_steps(dq, q, do, lse, delta, k_ptr + kv_base, v_ptr + kv_base, rows, offs_d, 0, n_full, seq,
                       qk_scale, HEAD_DIM, BLOCK_N, False, False)
        dq = _dq_steps(dq, q, do, lse, delta, k_ptr + kv_base, v_ptr + kv_base, rows, offs_d, n_full, seq, seq,
                       qk_scale, HEAD_DIM, BLOCK_N, False, True)
    tl.store(dq_ptr + offsets, (dq * sm_scale).to(dq_ptr.dtype.element_ty), mask=rows[:, None] < seq)
