"""triton_flash_ws (ops/attention/triton_ws.py): both loop shapes of the kernel against the float64 reference in the
Triton interpreter (the warp-specialized single loop, masked on every step when causal or ragged, and the plain
two-loop one), its lse fed to the existing backward, its registration through the checker, the rules that prune
configs and skip devices; on a GPU, each loop shape forced and the autotuned impl at seq 4096 and the edges.

The interpreter runs ``tl.range(..., warp_specialize=True)`` as a plain loop and tensor descriptors as copies:
what it checks is the indexing, masking and softmax, not the Hopper partitioning (that is compiled on a GPU only).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
import triton

import kernelkit as kk
from kernelkit.errors import BackendUnavailable
from kernelkit.ops import attention as attention_module
from kernelkit.ops.attention import launch
from kernelkit.results import Status
from kernelkit.spec import seeded_normal
from opkit import assert_statuses

CPU = torch.device("cpu")
# fp32 in the interpreter: products in IEEE fp32, so o and lse agree with the float64 reference to ~1e-6.
FP32_TOLERANCE = dict(rtol=1e-5, atol=1e-5)
LOOP_SHAPES = {"warp_specialized": True, "plain": False}
# (size, why): ragged (77 = 64 + 13 rows: a partial query tile, a partial last key block of 32), whole tiles, and
# grouped-query heads (groups of 2) shorter than one tile.
CPU_CASES = [((1, 2, 77, 64), "ragged"), ((2, 1, 64, 32), "whole tiles"), ((1, 4, 2, 45, 32), "grouped, short")]


def _ws():
    return attention_module.ws_kernels.load()


def _force(monkeypatch: pytest.MonkeyPatch, block_m: int, block_n: int, warp_specialize: bool, num_warps: int = 4,
           num_stages: int = 1) -> None:
    """Make the autotuner run exactly one config (its cache emptied for the test): one loop shape, chosen here."""
    kernel = _ws().attention_flash_ws_kernel
    config = triton.Config({"BLOCK_M": block_m, "BLOCK_N": block_n, "WARP_SPECIALIZE": warp_specialize},
                           num_warps=num_warps, num_stages=num_stages)
    monkeypatch.setattr(kernel, "configs", [config])
    monkeypatch.setattr(kernel, "cache", {})


def _inputs(size, dtype=torch.float32, device=CPU, seed=0):
    return attention_module.forward_inputs(size, dtype, device, seed)


# ---- CPU (Triton interpreter) ------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", LOOP_SHAPES)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(("size", "why"), CPU_CASES, ids=[why for _, why in CPU_CASES])
def test_each_loop_shape_matches_the_reference_on_cpu(size, why, causal, shape, monkeypatch, cpu_process) -> None:
    _force(monkeypatch, 64, 32, LOOP_SHAPES[shape])
    q, k, v = _inputs(size)
    o, lse = _ws().forward(q, k, v, causal)
    expected_o, expected_lse = attention_module.forward_statistics(q.double(), k.double(), v.double(), causal)
    torch.testing.assert_close(o.double(), expected_o, **FP32_TOLERANCE)
    torch.testing.assert_close(lse.double(), expected_lse.double(), **FP32_TOLERANCE)


@pytest.mark.parametrize("shape", LOOP_SHAPES)
def test_causal_rows_never_see_later_keys_on_cpu(shape, monkeypatch, cpu_process) -> None:
    _force(monkeypatch, 64, 32, LOOP_SHAPES[shape])
    q, k, v = _inputs((1, 2, 77, 64), seed=4)
    o, lse = _ws().forward(q, k, v, True)
    for cut in (1, 33, 64):  # inside the first tile, past a key step, on a tile boundary
        k2, v2 = k.clone(), v.clone()
        k2[:, :, cut:] += 5.0
        v2[:, :, cut:] -= 7.0
        o2, lse2 = _ws().forward(q, k2, v2, True)
        assert torch.equal(o2[:, :, :cut], o[:, :, :cut]) and torch.equal(lse2[:, :, :cut], lse[:, :, :cut]), cut
        assert not torch.equal(o2[:, :, cut:], o[:, :, cut:]), cut


def test_saved_lse_drives_the_existing_backward_on_cpu(cpu_process) -> None:
    """The backward (launch.backward, triton_flash's) reads this forward's o and lse as it reads its own."""
    size, causal = (1, 2, 45, 32), True
    q, k, v = _inputs(size, seed=3)
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(5))
    o, lse = _ws().forward(q, k, v, causal)
    got = launch.backward(q, k, v, o, lse, do, causal)
    expected = attention_module.backward_reference(q.double(), k.double(), v.double(), do.double(), causal)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g.double(), e, **FP32_TOLERANCE)


def test_strided_inputs_give_the_contiguous_answer_on_cpu(cpu_process) -> None:
    q, k, v = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in _inputs((1, 2, 77, 64), seed=2))
    assert not q.is_contiguous()  # (B, S, H, D) memory seen as (B, H, S, D): copied for TMA
    o, lse = _ws().forward(q, k, v, False)
    o_ref, lse_ref = _ws().forward(q.contiguous(), k.contiguous(), v.contiguous(), False)
    assert torch.equal(o, o_ref) and torch.equal(lse, lse_ref)


def test_empty_input_gives_empty_outputs_without_a_launch(monkeypatch) -> None:
    monkeypatch.setattr(_ws(), "attention_flash_ws_kernel", None)  # any launch: TypeError
    q, k, v = _inputs((2, 3, 0, 64))
    o, lse = _ws().forward(q, k, v, True)
    assert o.shape == (2, 3, 0, 64) and lse.shape == (2, 3, 0) and lse.dtype == torch.float32


def test_bad_inputs_give_clear_errors() -> None:
    q, k, v = _inputs((1, 2, 16, 48))
    with pytest.raises(ValueError, match="head_dim 48"):
        _ws().forward(q, k, v, False)


@pytest.mark.parametrize("name", ["attention", "attention_causal", "attention_gqa", "attention_with_lse",
                                  "attention_causal_with_lse", "attention_gqa_with_lse"])
def test_registered_impl_passes_the_checker_on_cpu(name: str, cpu_process) -> None:
    report = kk.check(name, impls=["triton_flash_ws"], device="cpu", isolate=False, dtypes=[torch.float32])
    assert {r.impl for r in report.results} == {"triton_flash_ws"}
    assert_statuses(report, lambda r: Status.PASSED)


def _capability(monkeypatch: pytest.MonkeyPatch, major: int) -> SimpleNamespace:
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (major, 0))
    return SimpleNamespace(device=torch.device("cuda"))  # what the prune reads of q


def test_devices_without_tma_or_with_fp32_are_skipped_with_a_reason(monkeypatch) -> None:
    _capability(monkeypatch, 8)
    cuda = torch.device("cuda")
    assert "Hopper" in _ws().unavailable(cuda, torch.bfloat16)
    _capability(monkeypatch, 9)
    assert _ws().unavailable(cuda, torch.bfloat16) is None
    assert "interpreter" in _ws().unavailable(cuda, torch.float32)
    assert _ws().unavailable(CPU, torch.float32) is None
    q, k, v = _inputs((1, 1, 8, 16))
    monkeypatch.setattr(_ws(), "unavailable", lambda device, dtype: "no TMA here")
    with pytest.raises(BackendUnavailable, match="no TMA here"):
        _ws().forward(q, k, v, False)


def _gpu_configs(shapes=None) -> list[triton.Config]:
    return [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "WARP_SPECIALIZE": ws}, num_warps=w, num_stages=s)
            for m, n, w, s, ws in shapes or _ws().HOPPER_SHAPES]


def test_the_autotuner_never_picks_the_warp_specialized_loop() -> None:
    # Wrong results (NaN) from it on an H200 with Triton 3.6 (see triton_ws.py's module doc): a user's call never
    # runs it; the shapes stay for the tests that force it.
    assert _ws().HOPPER_SHAPES and not any(ws for *_, ws in _ws().HOPPER_SHAPES)
    assert all(ws for *_, ws in _ws().WARP_SPECIALIZED_SHAPES)


def test_warp_specialized_configs_are_hoppers_and_fit_the_kernel(monkeypatch) -> None:
    configs = _gpu_configs(_ws().HOPPER_SHAPES + _ws().WARP_SPECIALIZED_SHAPES)
    # Triton 3.6 warp-specializes a Hopper loop at 4 warps only; 128-row query tiles split into two 64-row groups.
    assert all(c.num_warps == 4 and c.kwargs["BLOCK_M"] == 128 for c in configs if c.kwargs["WARP_SPECIALIZE"])
    assert all(c.kwargs["BLOCK_M"] % c.kwargs["BLOCK_N"] == 0 for c in configs)  # the kernel's static_assert
    hopper = _ws()._prune(configs, {"q_ptr": _capability(monkeypatch, 9)}, HEAD_DIM=128)
    assert any(c.kwargs["WARP_SPECIALIZE"] for c in hopper) and any(not c.kwargs["WARP_SPECIALIZE"] for c in hopper)
    blackwell = _ws()._prune(configs, {"q_ptr": _capability(monkeypatch, 10)}, HEAD_DIM=128)
    assert blackwell and not any(c.kwargs["WARP_SPECIALIZE"] for c in blackwell)
    # head_dim 256: only tiles whose query tile and K/V stages fit 227 KB of shared memory remain.
    wide = _ws()._prune(configs, {"q_ptr": _capability(monkeypatch, 9)}, HEAD_DIM=256)
    assert wide and all(c.kwargs["BLOCK_M"] == 64 for c in wide)


# ---- GPU ---------------------------------------------------------------------------------------------------

GPU_CASES = [((1, 4, 4096, 128), False), ((1, 4, 4096, 128), True),  # the benchmark's shape, full and causal
             ((2, 3, 129, 128), True), ((2, 3, 129, 128), False),  # one row past a 128-row tile
             ((1, 4, 1000, 128), False), ((1, 4, 1000, 128), True),  # no whole tile: ragged last key block
             ((2, 4, 2048, 64), True), ((2, 4, 2048, 64), False)]  # head_dim 64


def _within_twice_sdpa_error(q, k, v, causal: bool, o: torch.Tensor) -> None:
    """The project's rule: at most ~2x the error of PyTorch's own bf16 attention against float64."""
    expected, _ = attention_module.forward_statistics(q.double(), k.double(), v.double(), causal)
    low = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    allowed = 2 * (low.double() - expected).abs().max() + 1e-3 * expected.abs().max()
    assert (o.double() - expected).abs().max() <= allowed


@pytest.mark.gpu
@pytest.mark.parametrize("shape", LOOP_SHAPES)
@pytest.mark.parametrize(("size", "causal"), GPU_CASES)
def test_each_loop_shape_matches_the_reference_on_gpu(size, causal, shape, monkeypatch, request) -> None:
    if LOOP_SHAPES[shape] and torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("warp-specialized configs are Hopper's")
    if LOOP_SHAPES[shape]:  # a known defect, kept visible: XPASS when a Triton fixes it
        request.applymarker(pytest.mark.xfail(reason="NaN from Triton 3.6's warp-specialized loop on an H200 "
                                                     "(2026-11-27), not in every run; out of the autotuner"))
    num_warps = 4 if LOOP_SHAPES[shape] else 8
    _force(monkeypatch, 128, 64, LOOP_SHAPES[shape], num_warps=num_warps, num_stages=3)
    q, k, v = _inputs(size, torch.bfloat16, torch.device("cuda"), seed=7)
    o, lse = _ws().forward(q, k, v, causal)
    _within_twice_sdpa_error(q, k, v, causal, o)
    _, expected_lse = attention_module.forward_statistics(q.double(), k.double(), v.double(), causal)
    torch.testing.assert_close(lse.double(), expected_lse.double(), rtol=1e-3, atol=1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize(("size", "causal"), GPU_CASES)
def test_autotuned_impl_matches_the_reference_on_gpu(size, causal) -> None:
    q, k, v = _inputs(size, torch.bfloat16, torch.device("cuda"), seed=8)
    name = "attention_causal" if causal else "attention"
    _within_twice_sdpa_error(q, k, v, causal, attention_module.__dict__[name].impls["triton_flash_ws"].fn(q, k, v))


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_saved_lse_drives_the_existing_backward_on_gpu(causal: bool) -> None:
    """Gradients from this forward's (o, lse) are as close to float64 as those from triton_flash's own."""
    q, k, v = _inputs((1, 4, 1000, 128), torch.bfloat16, torch.device("cuda"), seed=9)
    do = seeded_normal(tuple(q.shape), torch.bfloat16, "cuda", 10)
    expected = attention_module.backward_reference(q.double(), k.double(), v.double(), do.double(), causal)
    theirs = launch.backward(q, k, v, *launch.forward(q, k, v, causal, "flash"), do, causal)
    ours = launch.backward(q, k, v, *_ws().forward(q, k, v, causal), do, causal)
    for a, b, e in zip(ours, theirs, expected, strict=True):
        allowed = 2 * (b.double() - e).abs().max() + 1e-3 * e.abs().max()
        assert (a.double() - e).abs().max() <= allowed


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("name", ["attention", "attention_causal", "attention_gqa", "attention_with_lse"])
def test_registered_impl_passes_the_checker_on_gpu(name: str) -> None:
    report = kk.check(name, impls=["triton_flash_ws"], device="cuda", dtypes=[torch.bfloat16, torch.float16,
                                                                               torch.float32])
    assert_statuses(report, lambda r: (Status.SKIPPED, "interpreter") if r.dtype == "float32" else Status.PASSED)
