"""The attention ops: every impl against the reference in the Triton interpreter at small sizes (forward and
backward; full, causal and grouped-query), the references against torch's own math in float64, properties of the
kernels (causality, the saved lse, strided, empty and bad inputs), planted wrong impls, and flash_attention as a
differentiable operator under torch.compile; on a GPU, every impl at the default sizes.

The planted ops below reuse the reference and inputs on impls with one bug each; they are module-level so
``kk.check(__file__)`` finds them, in this process or in a worker.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

import kernelkit as kk
from kernelkit.errors import BackendUnavailable
from kernelkit.ops import attention as attention_module
from kernelkit.ops.attention import function, launch
from kernelkit.results import CaseResult, Status
from kernelkit.spec import seeded_normal
from opkit import assert_statuses

FORWARD_OPS = ["attention", "attention_causal", "attention_gqa"]
WITH_LSE_OPS = ["attention_with_lse", "attention_causal_with_lse", "attention_gqa_with_lse"]
BACKWARD_OPS = ["attention_backward", "attention_causal_backward", "attention_gqa_backward"]
PLANTED = {"eager_no_scale", "eager_sees_next_key", "eager_heads_modulo", "eager_no_delta", "eager_dk_unscaled"}
CPU = torch.device("cpu")


# ---- planted bugs: each must fail the check (the real impls pass these very cases in the tests below) ---------

@kk.op(sizes=[(2, 4, 1000, 64)], cpu_sizes=[(1, 2, 77, 64)], dtypes=[torch.float16, torch.float32],
       inputs=attention_module.forward_inputs)
def attention_causal_planted(q, k, v):
    return attention_module.reference(q, k, v, causal=True)


@attention_causal_planted.impl("eager_no_scale")
def _planted_no_scale(q, k, v):
    """Planted bug: softmax(q kᵀ) v, the 1/sqrt(d) forgotten."""
    mask = torch.ones(q.shape[2], q.shape[2], dtype=torch.bool, device=q.device).triu(1)
    return torch.softmax((q @ k.transpose(-2, -1)).masked_fill(mask, float("-inf")), dim=-1) @ v


@attention_causal_planted.impl("eager_sees_next_key")
def _planted_next_key(q, k, v):
    """Planted bug: the causal mask off by one, query i sees key i + 1 too."""
    mask = torch.ones(q.shape[2], q.shape[2], dtype=torch.bool, device=q.device).triu(2)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    return torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v


@kk.op(sizes=[(2, 8, 2, 1000, 128)], cpu_sizes=[(1, 4, 2, 45, 32)], dtypes=[torch.float16, torch.float32],
       inputs=attention_module.forward_inputs)
def attention_gqa_planted(q, k, v):
    return attention_module.reference(q, k, v, causal=True)


@attention_gqa_planted.impl("eager_heads_modulo")
def _planted_heads_modulo(q, k, v):
    """Planted bug: query head h reads key/value head h % kv_heads instead of h // group (tiled, not interleaved)."""
    group = q.shape[1] // k.shape[1]
    return attention_module.reference(q, k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1), causal=True)


@kk.op(sizes=[(2, 4, 1000, 64)], cpu_sizes=[(1, 2, 77, 64)], dtypes=[torch.float16, torch.float32],
       inputs=attention_module.backward_inputs(True))
def attention_causal_backward_planted(q, k, v, o, lse, do):
    return attention_module.backward_reference(q, k, v, do, causal=True)


def _planted_gradients(q, k, v, lse, do, *, delta: bool, dk_scale: bool):
    scale = 1 / math.sqrt(q.shape[-1])
    mask = torch.ones(q.shape[2], q.shape[2], dtype=torch.bool, device=q.device).triu(1)
    p = torch.exp((q.float() @ k.float().transpose(-2, -1) * scale).masked_fill(mask, float("-inf")) - lse[..., None])
    dp = do.float() @ v.float().transpose(-2, -1)
    ds = p * (dp - (p * dp).sum(-1, keepdim=True)) if delta else p * dp
    dk = ds.transpose(-2, -1) @ q.float() * (scale if dk_scale else 1.0)
    return (ds @ k.float() * scale).to(q.dtype), dk.to(q.dtype), (p.transpose(-2, -1) @ do.float()).to(q.dtype)


@attention_causal_backward_planted.impl("eager_no_delta")
def _planted_no_delta(q, k, v, o, lse, do):
    """Planted bug: dS = P ∘ dP, the rowsum(dO ∘ O) term forgotten."""
    return _planted_gradients(q, k, v, lse, do, delta=False, dk_scale=True)


@attention_causal_backward_planted.impl("eager_dk_unscaled")
def _planted_dk_unscaled(q, k, v, o, lse, do):
    """Planted bug: dK = dSᵀ Q without the softmax scale."""
    return _planted_gradients(q, k, v, lse, do, delta=True, dk_scale=False)


# ---- helpers -------------------------------------------------------------------------------------------------

def _expected_on(device: str) -> Callable[[CaseResult], tuple[Status, str]]:
    """The status each (not planted) impl must end in on ``device``, and a word its message must hold."""
    def expected(r: CaseResult) -> tuple[Status, str]:
        if r.impl.startswith("eager_sdpa") and device == "cpu":
            return Status.SKIPPED, "CUDA kernel"
        if r.impl.startswith("eager_sdpa") and r.status is Status.SKIPPED:
            return Status.SKIPPED, "refuses"  # a backend that declines the case, nothing else
        if r.impl.startswith("triton") and device == "cuda" and r.dtype == "float32":
            return Status.SKIPPED, "interpreter"
        return Status.PASSED, ""

    return expected


def _inputs(size, dtype=torch.float32, seed=0, causal=True):
    return attention_module.backward_inputs(causal)(size, dtype, CPU, seed)


# ---- CPU: the checker ---------------------------------------------------------------------------------------

def _check_on_cpu(name: str) -> list:
    """Every impl of ``name`` in fp16 at its first CPU size and in fp32 at its last (the interpreter is slow)."""
    op = attention_module.__dict__[name]
    results = []
    for size, dtype in ((op.cpu_sizes[0], torch.float16), (op.cpu_sizes[-1], torch.float32)):
        report = kk.check(name, device="cpu", isolate=False, sizes=[size], dtypes=[dtype])
        assert_statuses(report, _expected_on("cpu"), PLANTED)
        results += report.results
    assert len(results) == 2 * len(op.impls)
    return results


@pytest.mark.parametrize("name", FORWARD_OPS)
def test_every_forward_impl_on_cpu(name: str, cpu_process: None) -> None:
    assert {r.impl for r in _check_on_cpu(name)} == {"eager_naive", "triton_online", "triton_flash", "triton_flash_tma",
                                                      "triton_flash_ws", "eager_sdpa_flash", "eager_sdpa_cudnn",
                                                      "eager_sdpa_efficient"}


@pytest.mark.parametrize("name", BACKWARD_OPS)
def test_every_backward_impl_on_cpu(name: str, cpu_process: None) -> None:
    assert {r.impl for r in _check_on_cpu(name)} == {"eager_naive", "triton_flash", "triton_flash_dq_atomic",
                                                      "eager_sdpa_flash", "eager_sdpa_cudnn", "eager_sdpa_efficient"}


def test_planted_bugs_fail_on_cpu(cpu_process: None) -> None:
    report = kk.check(__file__, device="cpu", isolate=False)
    assert {r.impl for r in report.results} == PLANTED
    assert_statuses(report, _expected_on("cpu"), PLANTED)


# ---- CPU: the references and the cost model -----------------------------------------------------------------

@pytest.mark.parametrize(("size", "causal"), [((2, 3, 50, 16), False), ((2, 3, 50, 16), True),
                                                ((1, 6, 2, 33, 8), True), ((1, 2, 1, 9, 4), False)])
def test_reference_is_torch_sdpa_math_in_float64(size, causal) -> None:
    q, k, v = attention_module.forward_inputs(size, torch.float64, CPU, 1)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=k.shape[1] != q.shape[1])
    torch.testing.assert_close(attention_module.reference(q, k, v, causal), expected, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize(("size", "causal"), [((2, 3, 50, 16), False), ((2, 3, 50, 16), True),
                                                ((1, 6, 2, 33, 8), True)])
def test_backward_reference_is_autograd_of_the_forward_reference(size, causal) -> None:
    q, k, v, o, lse, do = _inputs(size, torch.float64, 2, causal)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    out = attention_module.reference(q, k, v, causal)
    expected = torch.autograd.grad(out, (q, k, v), do)
    got = attention_module.backward_reference(q.detach(), k.detach(), v.detach(), do, causal)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-10, atol=1e-12)
    # The factory's saved o and lse are the forward's, in the case dtype (lse always fp32).
    torch.testing.assert_close(o, out.detach().to(o.dtype), rtol=1e-6, atol=1e-6)
    q16, k16, v16, o16, lse16, do16 = _inputs(size, torch.float16, 2, causal)
    assert (o16.dtype, lse16.dtype, tuple(lse16.shape)) == (torch.float16, torch.float32, tuple(q16.shape[:3]))


def test_flops_count_causal_as_half_and_backward_as_two_and_a_half() -> None:
    ops = attention_module
    q, k, v = ops.forward_inputs((2, 4, 100, 64), torch.float16, CPU, 0)
    full = 4 * 2 * 4 * 100 * 100 * 64
    assert ops.attention.cost((q, k, v), ())[1] == full
    assert ops.attention_causal.cost((q, k, v), ())[1] == full // 2
    assert ops.attention.cost((q, k, v), ())[0] == 4 * q.numel() * 2  # read q, k, v, write o (fp16)
    backward = ops.backward_inputs(True)((2, 4, 100, 64), torch.float16, CPU, 0)
    assert ops.attention_causal_backward.cost(backward, ())[1] == full // 2 * 5 // 2
    assert ops.attention_causal_backward.cost(backward, ())[0] == 8 * q.numel() * 2 + 2 * 4 * 100 * 4
    gqa = ops.forward_inputs((1, 8, 2, 64, 32), torch.bfloat16, CPU, 0)
    assert [t.shape[1] for t in gqa] == [8, 2, 2]
    assert ops.attention_gqa.cost(gqa, ())[1] == 4 * 8 * 64 * 64 * 32 // 2  # counted per query head
    assert ops.attention_gqa.cost(gqa, ())[0] == (2 * 8 + 2 * 2) * 64 * 32 * 2


# ---- CPU: properties of the kernels ------------------------------------------------------------------------

@pytest.mark.parametrize("name", WITH_LSE_OPS)
def test_every_training_forward_impl_saves_the_right_lse_on_cpu(name: str, cpu_process: None) -> None:
    report = kk.check(name, device="cpu", isolate=False, dtypes=[torch.float32])  # fp32: lse checked to 1e-5
    assert {r.impl for r in report.results} == {"eager_naive", "triton_online", "triton_flash", "triton_flash_tma",
                                                "triton_flash_ws"}
    assert_statuses(report, _expected_on("cpu"), PLANTED)
    q, k, v = attention_module.forward_inputs((1, 2, 9, 16), torch.float16, CPU, 0)
    o, lse = attention_module.__dict__[name].reference(q, k, v)
    assert (o.dtype, lse.dtype, lse.shape) == (torch.float16, torch.float32, q.shape[:3])


@pytest.mark.parametrize("kernel", ["online", "flash"])
def test_causal_rows_never_see_later_keys(kernel: str, cpu_process: None) -> None:
    q, k, v = attention_module.forward_inputs((1, 2, 77, 64), torch.float32, CPU, 4)
    o, lse = launch.forward(q, k, v, True, kernel)
    for cut in (1, 33, 64):  # inside the first tile, past a key step, on a tile boundary
        k2, v2 = k.clone(), v.clone()
        k2[:, :, cut:] += 5.0
        v2[:, :, cut:] -= 7.0
        o2, lse2 = launch.forward(q, k2, v2, True, kernel)
        assert torch.equal(o2[:, :, :cut], o[:, :, :cut]) and torch.equal(lse2[:, :, :cut], lse[:, :, :cut]), cut
        assert not torch.equal(o2[:, :, cut:], o[:, :, cut:]), cut


def test_strided_inputs_give_the_contiguous_answer(cpu_process: None) -> None:
    # q, k, v as a model makes them: (batch, seq, heads, head_dim) viewed as (batch, heads, seq, head_dim).
    q, k, v, o, lse, do = _inputs((1, 4, 2, 45, 32), torch.float16, 5)
    strided = [t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v, o, do)]
    assert not any(t.is_contiguous() for t in strided)
    sq, sk, sv, so, sdo = strided
    for kernel in ("online", "flash", "flash_tma"):
        assert torch.equal(launch.forward(sq, sk, sv, True, kernel)[0], launch.forward(q, k, v, True, kernel)[0])
    expected = launch.backward(q, k, v, o, lse, do, True)
    for got, want in zip(launch.backward(sq, sk, sv, so, lse, sdo, True), expected, strict=True):
        assert torch.equal(got, want)


@pytest.mark.parametrize("size", [(1, 2, 0, 64), (0, 2, 16, 32), (2, 4, 2, 0, 16)])
def test_empty_inputs_give_empty_outputs_without_a_launch(size, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launch, "forward_kernels", SimpleNamespace())  # any launch: AttributeError
    monkeypatch.setattr(launch, "backward_kernels", SimpleNamespace())
    q, k, v, o, lse, do = _inputs(size, torch.float16)
    for kernel in ("online", "flash", "flash_tma"):
        out, saved = launch.forward(q, k, v, True, kernel)
        assert (out.shape, out.dtype, saved.shape) == (q.shape, q.dtype, q.shape[:3])
    for dq_atomic in (False, True):
        grads = launch.backward(q, k, v, o, lse, do, True, dq_atomic)
        assert [(g.shape, g.dtype) for g in grads] == [(t.shape, t.dtype) for t in (q, k, v)]
        assert all(g.eq(0).all() for g in grads[1:])


def test_bad_inputs_give_clear_errors() -> None:
    q, k, v = attention_module.forward_inputs((1, 4, 16, 32), torch.float16, CPU, 0)
    cases = [
        ((q[0], k, v), "must be \\(batch, heads, seq, head_dim\\)"),
        ((q, k[:, :3], v[:, :3]), "multiple of the 3 key/value heads"),
        ((q, k[:, :, :8], v[:, :, :8]), "same sequence"),
        ((q[..., :24], k[..., :24], v[..., :24]), "head_dim 24 is not supported"),
        ((q, k.float(), v), "share one dtype"),
        ((q, k, v[:, :2]), "k and v must have the same shape"),
        ((q.to(torch.int32), k.to(torch.int32), v.to(torch.int32)), "share one dtype"),
    ]
    for args, message in cases:
        with pytest.raises(ValueError, match=message):
            launch.forward(*args, causal=False)
    _, _, _, o, lse, do = _inputs((1, 4, 16, 32), torch.float16)
    with pytest.raises(ValueError, match="lse must be"):
        launch.backward(q, k, v, o, lse[:, :, :8], do, True)
    with pytest.raises(ValueError, match="o and do must match"):
        launch.backward(q, k, v, o.float(), lse, do, True)
    with pytest.raises(ValueError, match="unknown forward kernel"):
        launch.forward(q, k, v, True, "tiled")
    # fp32 is for the interpreter: on any other device the kernels refuse it (the check calls that SKIPPED).
    meta = [t.float().to("meta") for t in (q, k, v)]
    with pytest.raises(BackendUnavailable, match="float32 runs in the Triton interpreter"):
        launch.forward(*meta, causal=True)
    with pytest.raises(BackendUnavailable, match="float32 runs in the Triton interpreter"):
        launch.backward(*meta, meta[0], lse.to("meta"), meta[0], True)


def test_gpu_configs_fit_the_kernels_tiling(monkeypatch: pytest.MonkeyPatch, cpu_process: None) -> None:
    from kernelkit.ops.attention import triton as forward_kernels
    from kernelkit.ops.attention import triton_backward as backward_kernels

    for module in (forward_kernels, backward_kernels):
        monkeypatch.setattr(module, "interpreting", lambda: False)
    forward = forward_kernels._flash_configs()
    dkdv = backward_kernels._dkdv_configs(dq_atomic=True)
    dq = backward_kernels._dq_configs()
    # The diagonal is walked in whole steps: the resident tile is a multiple of the streamed one.
    assert all(c.kwargs["BLOCK_M"] % c.kwargs["BLOCK_N"] == 0 for c in forward + dq)
    assert all(c.kwargs["BLOCK_N"] % c.kwargs["BLOCK_M"] == 0 for c in dkdv)
    assert all(c.pre_hook is not None for c in dkdv)  # the atomic variant zeroes its fp32 dQ before every launch
    assert any(c.kwargs["BLOCK_M"] == 128 for c in forward)
    at_128 = forward_kernels._prune_flash(forward, {}, HEAD_DIM=128)
    assert at_128 and all(c.num_warps == 8 or c.kwargs["BLOCK_M"] == 64 for c in at_128)
    assert forward_kernels._prune_flash(forward, {}, HEAD_DIM=64) == forward
    assert {c.num_warps for c in backward_kernels._prune_dkdv(dkdv, {}, HEAD_DIM=128)} == {8}
    assert backward_kernels._prune_dkdv(dkdv, {}, HEAD_DIM=64) == dkdv
    # The TMA kernel's configs size the descriptors' boxes to their tiles before every launch.
    descriptors = {name: SimpleNamespace(block_shape=[1, 1]) for name in ("q_desc", "k_desc", "v_desc")}
    config = forward_kernels._flash_configs(forward_kernels._tma_block_shapes)[0]
    config.pre_hook({**descriptors, **config.kwargs, "HEAD_DIM": 64})
    assert [descriptors[n].block_shape for n in ("q_desc", "k_desc", "v_desc")] == [[128, 64], [64, 64], [64, 64]]
    # In the interpreter, tiles small enough that the CPU sizes take partial and multi-step diagonals.
    assert 77 % forward_kernels.INTERPRETED_BLOCK_N and forward_kernels.INTERPRETED_BLOCK_M > \
        forward_kernels.INTERPRETED_BLOCK_N


# ---- CPU: flash_attention, the differentiable operator -----------------------------------------------------

def _transformer_attention(x, w_qkv, heads, kv_heads, attend):
    """The attention half of a transformer block: project, split heads, attend causally, merge, add x."""
    b, s, e = x.shape
    d = e // heads
    q, k, v = (x @ w_qkv).split([heads * d, kv_heads * d, kv_heads * d], dim=-1)
    q, k, v = (t.view(b, s, -1, d).transpose(1, 2) for t in (q, k, v))
    return x + attend(q, k, v).transpose(1, 2).reshape(b, s, e)


def _gradients(loss_of, *leaves):
    leaves = [t.detach().clone().requires_grad_() for t in leaves]
    loss_of(*leaves).backward()
    return [t.grad for t in leaves]


@pytest.mark.parametrize("name, size", [("attention_causal_with_lse", (1, 2, 33, 16)),
                                        ("attention_gqa_with_lse", (1, 4, 2, 33, 16))])
def test_torch_op_takes_dq_dk_dv_from_the_paired_backward_impl(name: str, size, cpu_process: None) -> None:
    """kk.torch_op of a training forward: its gradient comes from the backward op's impl of the same name, which
    returns three gradients (q, k, v) from the saved o and lse; they match autograd of the reference in float64."""
    op = getattr(attention_module, name)
    q, k, v = (t.requires_grad_() for t in op.make_inputs(size, torch.float32, torch.device("cpu"), 0))
    o, _lse = kk.torch_op(op, "triton_flash")(q, k, v)
    grad = torch.randn_like(o)
    got = torch.autograd.grad(o, (q, k, v), grad)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    expected = torch.autograd.grad(op.reference(q64, k64, v64)[0], (q64, k64, v64), grad.double())
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g.double(), e, atol=1e-5, rtol=1e-4)


def test_flash_attention_is_differentiable_and_compiles_fullgraph(cpu_process: None) -> None:
    heads, kv_heads, e = 4, 2, 128
    x = seeded_normal((1, 45, e), torch.float32, CPU, 6)
    w = seeded_normal((e, (heads + 2 * kv_heads) * e // heads), torch.float32, CPU, 7) / math.sqrt(e)
    dy = seeded_normal((1, 45, e), torch.float32, CPU, 8)

    def loss(attend):
        return lambda x, w: (_transformer_attention(x, w, heads, kv_heads, attend) * dy).sum()

    flash = loss(lambda q, k, v: function.flash_attention(q, k, v, causal=True))
    expected = _gradients(loss(lambda q, k, v: attention_module.reference(q, k, v, True)), x.double(), w.double())
    eager = _gradients(flash, x, w)
    for got, want in zip(eager, expected, strict=True):
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5)
    # One graph, the two operators opaque inside it: no break; the same kernels give the same gradients.
    compiled = _gradients(torch.compile(flash, fullgraph=True, backend="aot_eager"), x, w)
    for got, want in zip(compiled, eager, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    assert attention_module.flash_attention is function.flash_attention


# ---- GPU: each case in a spawned worker, so this process's CPU-mode environment cannot leak in -------------

@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("name", FORWARD_OPS + WITH_LSE_OPS + BACKWARD_OPS)
def test_every_impl_at_the_default_sizes_on_gpu(name: str) -> None:
    report = kk.check(name, device="cuda", dtypes=[torch.bfloat16, torch.float16, torch.float32])
    assert {r.impl for r in report.results} == set(attention_module.__dict__[name].impls)
    assert_statuses(report, _expected_on("cuda"), PLANTED)


@pytest.mark.gpu
@pytest.mark.slow
def test_planted_bugs_fail_on_gpu() -> None:
    assert_statuses(kk.check(__file__, device="cuda"), _expected_on("cuda"), PLANTED)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_flash_attention_in_a_compiled_block_matches_sdpa_on_gpu(dtype: torch.dtype) -> None:
    heads, kv_heads, e, s = 16, 4, 2048, 1000  # head_dim 128, groups of 4, a sequence of no whole tile
    x = seeded_normal((2, s, e), dtype, "cuda", 9)
    w = (seeded_normal((e, (heads + 2 * kv_heads) * e // heads), torch.float32, "cuda", 10) / math.sqrt(e)).to(dtype)
    dy = seeded_normal((2, s, e), dtype, "cuda", 11)

    def loss(attend):
        return lambda x, w: (_transformer_attention(x, w, heads, kv_heads, attend).float() * dy).sum()

    compiled = torch.compile(loss(lambda q, k, v: function.flash_attention(q, k, v, causal=True)), fullgraph=True)
    got = _gradients(compiled, x, w)
    reference = _gradients(loss(lambda q, k, v: attention_module.reference(q, k, v, True)), x.float(), w.float())
    low = _gradients(loss(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)),
                     x, w)
    for g, ref, lo in zip(got, reference, low, strict=True):
        # At most ~2x SDPA's own error against fp32, the checker's rule.
        allowed = 2 * (lo.float() - ref).abs().max() + 1e-3 * ref.abs().max()
        assert (g.float() - ref).abs().max() <= allowed
