"""The softmax ops: every impl against the reference at edge shapes, on CPU (Triton interpreter; CUDA compiled
only) and on a GPU; properties of the reference and of the impls that run here; the backward reference against
autograd of the forward reference.

The ops below reuse softmax's impls on other inputs: huge logits (without the max subtracted, exp overflows),
-inf entries (masking), non-contiguous tensors; planted wrong impls on them must fail. They are module-level so
``kk.check(__file__)`` finds them, in this process or in a worker.
"""

from __future__ import annotations

import math

import pytest
import torch

import kernelkit as kk
from kernelkit.backends.sass import disassemble, find_tool
from kernelkit.ops import softmax as softmax_module
from kernelkit.results import Status
from kernelkit.spec import seeded_normal
from opkit import (
    CPU_FP,
    FP,
    KernelSpy,
    NoLaunch,
    assert_expected_on_cpu,
    assert_matches_reference,
    assert_statuses,
    non_contiguous,
    variant,
)

# Tiny CPU shapes (the interpreter runs ~1 ms per program), each at an edge. No N = 1: every softmax row is then
# [1.0] and every backward row [0.0], outputs a constant would match, so the check calls such a case WEAK.
CPU_SHAPES = [
    (7, 33),  # odd: 33 of a 64-wide block; 7 short rows share one rowwise program
    (1, 257),  # one row, one past a power of two
    (2, 3, 65),  # 3-D: the leading dimensions fold into rows
    (2, 9001),  # the online and chunked kernels take three 4096-wide steps, the last partial
]
FWD = softmax_module.softmax.impls  # not the ops themselves: kk.check(__file__) would check them a second time
BWD = softmax_module.softmax_backward.impls
CPU_FORWARD = ["eager", "eager_fivepass", "triton_rowwise", "triton_online"]  # the forward impls that run here
PLANTED = {"eager_no_max_subtraction", "eager_sum_over_rows", "eager_no_dot_product"}
CUDA_KERNELS = [f"softmax_{kind}warp_{dt}_kernel" for kind in ("", "backward_") for dt in ("f32", "f16", "bf16")]


def _large_inputs(size, dtype, device, seed):
    """Logits ~1e4 (clamped to fp16's range): exp overflows in every dtype unless the row max is subtracted."""
    return (seeded_normal(size, torch.float32, device, seed).mul(1e4).clamp(-6e4, 6e4).to(dtype),)


def _masked_inputs(size, dtype, device, seed):
    """Normal logits with every third entry -inf, the pattern shifted by one per row: each row keeps finite ones."""
    rows, n = math.prod(size[:-1]), size[-1]
    masked = (torch.arange(n)[None, :] + torch.arange(rows)[:, None]) % 3 == 0
    return (seeded_normal(size, dtype, device, seed).masked_fill(masked.reshape(size).to(device), float("-inf")),)


def _permuted_inputs(size, dtype, device, seed):
    return (non_contiguous(seeded_normal(size, dtype, device, seed)),)


def _permuted_backward_inputs(size, dtype, device, seed):
    return tuple(non_contiguous(t) for t in softmax_module.backward_inputs(size, dtype, device, seed))


_GPU_SIZES = [(1823, 781), (1, 4097), (64, 262144), (37, 32769)]


softmax_large = variant(softmax_module.softmax, "softmax_large", _large_inputs, sizes=_GPU_SIZES,
                        cpu_sizes=CPU_SHAPES[:3])
softmax_masked = variant(softmax_module.softmax, "softmax_masked", _masked_inputs, sizes=_GPU_SIZES,
                         cpu_sizes=CPU_SHAPES[:3])
# (1, 257) would stay contiguous: a dimension of one has no layout.
softmax_permuted = variant(softmax_module.softmax, "softmax_permuted", _permuted_inputs,
                           sizes=[(1823, 781), (5, 67, 300)], cpu_sizes=[(7, 33), (2, 3, 65)])
softmax_backward_permuted = variant(softmax_module.softmax_backward, "softmax_backward_permuted",
                                    _permuted_backward_inputs, sizes=[(1823, 781), (5, 67, 300)],
                                    cpu_sizes=[(7, 33), (2, 3, 65)])


@softmax_large.impl("eager_no_max_subtraction")
def _planted_no_max(x):
    """Planted bug: exp(x) / sum(exp(x)) is softmax on paper, inf / inf = NaN for logits past ~88 (fp32)."""
    e = torch.exp(x)
    return e / e.sum(dim=-1, keepdim=True)


@softmax_masked.impl("eager_sum_over_rows")
def _planted_sum_over_rows(x):
    """Planted bug: normalised over the leading dimension instead of the last."""
    e = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=0, keepdim=True)


@softmax_backward_permuted.impl("eager_no_dot_product")
def _planted_no_dot(y, dy):
    """Planted bug: dx = y * dy, the sum(y * dy) term forgotten."""
    return y * dy


# ---- CPU: the checker -------------------------------------------------------------------------------------


def test_every_impl_at_edge_shapes_on_cpu(cpu_process: None) -> None:
    for op, impls in (("softmax", FWD), ("softmax_backward", BWD)):
        report = kk.check(op, device="cpu", isolate=False, sizes=CPU_SHAPES, dtypes=list(FP))
        assert len(report.results) == len(impls) * len(CPU_SHAPES) * len(FP)
        assert {r.op for r in report.results} == {op}
        assert_expected_on_cpu(report, compiled=FP, planted=PLANTED)


def test_huge_masked_and_non_contiguous_inputs_and_planted_bugs_on_cpu(cpu_process: None) -> None:
    assert not _permuted_inputs((7, 33), torch.float32, "cpu", 0)[0].is_contiguous()
    assert not any(t.is_contiguous() for t in _permuted_backward_inputs((2, 3, 65), torch.float16, "cpu", 0))
    report = kk.check(__file__, device="cpu", isolate=False, dtypes=list(CPU_FP))
    assert {r.op for r in report.results} == {"softmax_large", "softmax_masked", "softmax_permuted",
                                              "softmax_backward_permuted"}
    assert {r.impl for r in report.results} >= PLANTED
    assert_expected_on_cpu(report, compiled=FP, planted=PLANTED)
    # Normal logits cannot catch the missing max subtraction: that is what the huge ones are for.
    x = seeded_normal((7, 33), torch.float32, "cpu", 0)
    assert_matches_reference(_planted_no_max(x), softmax_module.softmax.reference, x)


# ---- CPU: the references ----------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(7, 33), (1, 257), (2, 3, 65), (1, 1), (4, 1), (0, 5), (3, 0)])
def test_backward_reference_is_autograd_of_the_forward_reference(shape: tuple[int, ...]) -> None:
    x = seeded_normal(shape, torch.float64, "cpu", 1).requires_grad_()
    dy = seeded_normal(shape, torch.float64, "cpu", 2)
    y = softmax_module.softmax(x)
    (expected,) = torch.autograd.grad(y, x, dy)
    dx = softmax_module.softmax_backward(y.detach(), dy)
    torch.testing.assert_close(dx, expected, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(BWD["eager"].fn(y.detach(), dy), expected, rtol=1e-12, atol=1e-15)


def test_backward_inputs_are_probabilities_in_the_case_dtype() -> None:
    for dtype in FP:
        y, dy = softmax_module.backward_inputs((5, 300), dtype, torch.device("cpu"), 3)
        assert y.dtype == dy.dtype == dtype and y.shape == dy.shape == (5, 300)
        assert (y >= 0).all() and torch.allclose(y.double().sum(-1), torch.ones(5, dtype=torch.float64), atol=0.02)
        assert not torch.equal(y, softmax_module.backward_inputs((5, 300), dtype, torch.device("cpu"), 4)[0])


# ---- CPU: properties of the reference and of the impls that run here ----------------------------------------

_SUM_TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3}  # ~N roundings of 2**-24 or 2**-11, values <= 1


def _softmax_impl(name: str):
    return softmax_module.softmax.reference if name == "reference" else FWD[name].fn


@pytest.mark.parametrize("impl", ["reference", *CPU_FORWARD])
def test_rows_sum_to_one_even_for_huge_logits(impl: str, cpu_process: None) -> None:
    fn = _softmax_impl(impl)
    for dtype in CPU_FP:
        for scale in (1.0, 1e4):
            x = (seeded_normal((5, 100), torch.float32, "cpu", 7) * scale).clamp(-6e4, 6e4).to(dtype)
            y = fn(x)
            assert y.isfinite().all() and (y >= 0).all(), (dtype, scale)
            sums = y.double().sum(-1)
            assert (sums - 1).abs().max() <= _SUM_TOLERANCE[dtype], (dtype, scale, sums)


@pytest.mark.parametrize("impl", ["reference", *CPU_FORWARD])
def test_shift_invariance(impl: str, cpu_process: None) -> None:
    fn = _softmax_impl(impl)
    # Logits on a 2**-6 grid in [-4, 4]: adding 8, or 1000 in fp32, is exact, so x - max is unchanged.
    x = (seeded_normal((6, 77), torch.float32, "cpu", 5) * 64).round().clamp(-256, 256) / 64
    for dtype, shift in ((torch.float32, 1000.0), (torch.float16, 8.0)):
        base = fn(x.to(dtype))
        torch.testing.assert_close(fn((x + shift).to(dtype)), base, rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(fn((x - shift).to(dtype)), base, rtol=1e-6, atol=1e-7)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the interpreter's numpy, on the row of -inf: 0 * inf
@pytest.mark.parametrize("impl", ["reference", *CPU_FORWARD])
def test_minus_infinity_entries(impl: str, cpu_process: None) -> None:
    fn = _softmax_impl(impl)
    for dtype in CPU_FP:
        x = seeded_normal((4, 40), dtype, "cpu", 9)
        x[0, ::2] = float("-inf")  # masked half: exactly 0 there, the rest sums to 1
        x[1, 1:] = float("-inf")  # one finite entry: exactly 1 there
        x[2, :] = float("-inf")  # nothing finite: NaN, as torch.softmax gives
        y = fn(x)
        assert (y[0, ::2] == 0).all() and abs(float(y[0].double().sum()) - 1) <= _SUM_TOLERANCE[dtype]
        assert y[1, 0] == 1 and (y[1, 1:] == 0).all()
        assert y[2].isnan().all()
        assert_matches_reference(y[3], softmax_module.softmax.reference, x[3])


def test_rows_of_one_element(cpu_process: None) -> None:
    x = seeded_normal((3, 1), torch.float32, "cpu", 0)
    for name in CPU_FORWARD:
        assert torch.equal(FWD[name].fn(x), torch.ones_like(x)), name
    y, dy = torch.ones_like(x), x
    for name in ("eager", "triton_rowwise"):
        assert torch.equal(BWD[name].fn(y, dy), torch.zeros_like(x)), name


def test_triton_rowwise_hands_long_rows_to_the_looped_kernels(cpu_process: None, monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    spy = KernelSpy(softmax_module.triton_kernels)
    monkeypatch.setattr(softmax_module, "triton_kernels", spy)
    forward, backward = softmax_module.softmax, softmax_module.softmax_backward
    cases = [  # (op, n_cols, the kernel triton_rowwise must launch): at and one past each register limit
        (forward, softmax_module.ROWWISE_MAX_N, "softmax_rowwise_kernel"),
        (forward, softmax_module.ROWWISE_MAX_N + 1, "softmax_online_kernel"),
        (backward, softmax_module.BACKWARD_ROWWISE_MAX_N, "softmax_backward_rowwise_kernel"),
        (backward, softmax_module.BACKWARD_ROWWISE_MAX_N + 1, "softmax_backward_chunked_kernel"),
    ]
    for op, n_cols, kernel in cases:
        inputs = op.make_inputs((2, n_cols), torch.float32, torch.device("cpu"), 0)
        spy.used.clear()
        out = op.impls["triton_rowwise"].fn(*inputs)
        assert spy.used == [kernel], (op.name, n_cols, spy.used)
        assert_matches_reference(out, op.reference, *inputs)


def test_launch_heuristics() -> None:
    assert [softmax_module.rowwise_num_warps(b) for b in (64, 1024, 2048, 4096, 32768)] == [4, 4, 8, 16, 16]
    assert softmax_module.rows_per_program(64, 7) == 8  # 16 would fit the tile; 8 covers the 7 rows
    assert softmax_module.rows_per_program(64, 100) == 16
    assert softmax_module.rows_per_program(1024, 8192) == 1
    threads = softmax_module.cuda_threads
    assert [threads(n) for n in (1, 33, 1000, 4096, 16384, 32768, 262144)] == [32, 32, 64, 256, 1024, 1024, 1024]
    # The CUDA kernels hold aligned rows in registers while n <= threads x 32 (forward), x 16 (backward).
    assert all(threads(n) * 32 >= n for n in (1000, 4096, 8192, 32768))
    assert all(threads(n) * 16 >= n for n in (1000, 4096, 8192, 16384))


@pytest.mark.parametrize("shape", [(0,), (0, 5), (4, 0), (2, 0, 3)])
def test_empty_input_gives_empty_output_without_a_launch(shape: tuple[int, ...], monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    for name in ("triton_kernels", "CUDA_WARP", "CUDA_BACKWARD_WARP"):
        monkeypatch.setattr(softmax_module, name, NoLaunch(name))
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.empty(shape, dtype=dtype)
        outputs = {f"softmax {name}": impl.fn(x) for name, impl in FWD.items()}
        outputs.update({f"softmax_backward {name}": impl.fn(x, x) for name, impl in BWD.items()})
        for name, y in outputs.items():
            assert (y.shape, y.dtype, y.device) == (x.shape, x.dtype, x.device), name


def test_cuda_kernels_compile_for_sm90_without_spills(cpu_process: None, can_compile: bool) -> None:
    if not can_compile:
        pytest.skip("neither NVRTC (cuda.core) nor nvcc is here")
    kernels = [*FWD["cuda_warp"].kernels, *BWD["cuda_warp"].kernels]
    assert sorted(k.name for k in kernels) == sorted(CUDA_KERNELS)
    for kernel in kernels:
        built = kernel.compile("sm_90")
        assert built.arch == "sm_90" and built.cubin[:4] == b"\x7fELF", built
        if find_tool("cuobjdump"):
            # The rows held "in registers" must be: local memory would mean ptxas spilled them.
            usage = disassemble(built.cubin).usage[kernel.name]
            assert (usage.local, usage.stack) == (0, 0), (kernel.name, usage)


# ---- GPU: each case in a spawned worker, so this process's CPU-mode environment cannot leak in -------------


@pytest.mark.gpu
@pytest.mark.slow
def test_every_impl_at_the_default_sizes_on_gpu() -> None:
    for op, impls in (("softmax", FWD), ("softmax_backward", BWD)):
        report = kk.check(op, device="cuda")  # edges, a row past one block, one past each register limit
        assert {r.impl for r in report.results} == set(impls)
        assert_statuses(report, lambda r: Status.PASSED, PLANTED)


@pytest.mark.gpu
@pytest.mark.slow
def test_huge_masked_and_non_contiguous_inputs_and_planted_bugs_on_gpu() -> None:
    assert_statuses(kk.check(__file__, device="cuda"), lambda r: Status.PASSED, PLANTED)


@pytest.mark.gpu
@pytest.mark.parametrize("offset", [0, 1])  # 1: the rows start off a 16-byte boundary, so no vector path
@pytest.mark.parametrize("dtype", FP)
def test_every_path_of_the_kernels_on_gpu(offset: int, dtype: torch.dtype) -> None:
    # Around each path switch: warp-size blocks, one vector, the register limits (16384 backward, 32768 forward).
    for n_cols in (1, 2, 8, 33, 1000, 4096, 16384, 16385, 32768, 32769, 100_000):
        rows = 3
        base = seeded_normal((rows * n_cols + offset,), dtype, "cuda", n_cols)
        x = base[offset:].view(rows, n_cols)
        for name in ("triton_rowwise", "triton_online", "cuda_warp"):
            assert_matches_reference(FWD[name].fn(x), softmax_module.softmax.reference, x)
        y = torch.empty_like(base)[offset:].view(rows, n_cols).copy_(softmax_module.softmax(x))  # as x is
        dy = seeded_normal((rows * n_cols + offset,), dtype, "cuda", n_cols + 1)[offset:].view(rows, n_cols)
        for name in ("triton_rowwise", "cuda_warp"):
            assert_matches_reference(BWD[name].fn(y, dy), softmax_module.softmax_backward.reference, y, dy)
