"""The square op: every impl against the reference at edge shapes, on CPU (interpreter, simulator) and on a GPU.

Two ops below reuse square's impls on other inputs: non-contiguous tensors, and views that start off a 16-byte
boundary. They are module-level so ``kk.check(__file__)`` finds them, in this process or in a worker.
"""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import pytest
import torch

import kernelkit as kk
from kernelkit.ops import square as square_module
from kernelkit.results import Status
from kernelkit.spec import dtype_name, seeded_normal

FP = (torch.float32, torch.float16, torch.bfloat16)
# Tiny CPU shapes (the simulator runs ~100 us per thread), each at an edge:
CPU_SHAPES = [
    (33, 17),  # odd in both dimensions: partial blocks, a vector tail (561 = 4 * 140 + 1)
    (1, 257),  # one row, one past a power of two
    (3, 5, 7),  # 3-D: the rowwise impls fold the leading dimensions
]
IMPLS = square_module.square.impls  # not the op itself: kk.check(__file__) would check it a second time
CUDA_VEC4_KERNELS = ["square_vec4_f32_kernel", "square_vec4_f16_kernel", "square_vec4_bf16_kernel"]


def _permuted_inputs(size, dtype, device, seed):
    """A non-contiguous tensor of ``size``: drawn with its dimensions reversed, then permuted back."""
    x = seeded_normal(tuple(reversed(size)), dtype, device, seed)
    return (x.permute(*reversed(range(x.dim()))),)


def _misaligned_inputs(size, dtype, device, seed):
    """A contiguous view one element into a fresh (256-byte aligned) buffer: off every 16-byte boundary."""
    flat = seeded_normal((math.prod(size) + 1,), dtype, device, seed)
    return (flat[1:].view(size),)


@kk.op(sizes=[(1823, 781), (5, 67, 3)], cpu_sizes=[(33, 17), (3, 5, 7)], dtypes=list(FP), inputs=_permuted_inputs)
def square_permuted(x):
    return x * x


@kk.op(sizes=[(1823, 781), (1, 4099)], cpu_sizes=[(1, 257)], dtypes=list(FP), inputs=_misaligned_inputs)
def square_misaligned(x):
    return x * x


for _op in (square_permuted, square_misaligned):
    for _name, _impl in IMPLS.items():
        _op.impl(_name, kernels=_impl.kernels, dtypes=_impl.dtypes)(_impl.fn)


def _expected_on_cpu(impl: str, dtype: torch.dtype) -> Status:
    """What each impl can do without a GPU: eager runs, Triton (not bf16) and Numba (fp32, fp16) are emulated."""
    if impl == "eager":
        return Status.PASSED
    if impl.startswith("triton"):
        return Status.SKIPPED if dtype == torch.bfloat16 else Status.PASSED
    if impl.startswith("numba"):
        return Status.PASSED if dtype in (torch.float32, torch.float16) else Status.SKIPPED
    return Status.SKIPPED  # CUDA C++: compiled, then no GPU


def _summary(report: kk.RunReport) -> list[tuple[str, str, str, str, str]]:
    return [(r.op, r.impl, "x".join(map(str, r.size)), r.dtype, r.status.value) for r in report.results]






# ---- CPU --------------------------------------------------------------------------------------------------


def test_every_impl_at_edge_shapes_on_cpu(cpu_process: None) -> None:
    report = kk.check("square", device="cpu", isolate=False, sizes=CPU_SHAPES, dtypes=list(FP))
    assert len(report.results) == len(IMPLS) * len(CPU_SHAPES) * len(FP)
    for r in report.results:
        assert r.status is _expected_on_cpu(r.impl, getattr(torch, r.dtype)), (r.case_id, r.status, r.message)
    tuned = [r.details["autotune"]["square_flat_kernel"] for r in report.results
             if r.impl == "triton_flat" and r.status is Status.PASSED]
    assert tuned and all(re.match(r"BLOCK_SIZE=\d+, num_warps=\d+, num_stages=\d+$", t["config"]) for t in tuned)


def test_flat_impls_span_several_blocks_on_cpu(cpu_process: None) -> None:
    # 21003 elements: more than one program at every autotuned BLOCK_SIZE (at most 8192), with a partial last
    # one; and 41 grid-stride steps per simulated thread, the last of them partial.
    report = kk.check("square", impls=["triton_flat", "numba_flat"], device="cpu", isolate=False,
                      sizes=[(3, 7001)], dtypes=[torch.float32])
    assert [r.status for r in report.results] == [Status.PASSED] * 2, _summary(report)


def test_non_contiguous_and_misaligned_inputs_on_cpu(cpu_process: None) -> None:
    assert not _permuted_inputs((33, 17), torch.float32, "cpu", 0)[0].is_contiguous()
    assert _misaligned_inputs((1, 257), torch.float16, "cpu", 0)[0].data_ptr() % 16 != 0
    report = kk.check(__file__, device="cpu", isolate=False, dtypes=[torch.float32, torch.float16])
    assert {r.op for r in report.results} == {"square_permuted", "square_misaligned"}
    for r in report.results:
        assert r.status is _expected_on_cpu(r.impl, getattr(torch, r.dtype)), (r.case_id, r.status, r.message)


def test_cuda_kernels_compile_for_sm90_without_a_gpu(cpu_process: None, can_compile: bool) -> None:
    if not can_compile:
        pytest.skip("neither NVRTC (cuda.core) nor nvcc is here")
    kernels = [*IMPLS["cuda_2d"].kernels, *IMPLS["cuda_vec4"].kernels]
    assert [k.name for k in kernels] == ["square_2d_kernel", *CUDA_VEC4_KERNELS]
    for kernel in kernels:
        built = kernel.compile("sm_90")
        assert built.arch == "sm_90" and built.cubin[:4] == b"\x7fELF", built
    if not torch.cuda.is_available():  # the check compiles every listed kernel before it says "no GPU"
        (result,) = kk.check("square", impls=["cuda_vec4"], device="cpu", isolate=False, sizes=[(4, 4)],
                             dtypes=[torch.float16]).results
        assert result.status is Status.SKIPPED and all(name in result.message for name in CUDA_VEC4_KERNELS)


@pytest.mark.parametrize("shape", [(0,), (0, 5), (4, 0, 3)])
def test_empty_input_gives_empty_output_without_a_launch(shape: tuple[int, ...], monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    def no_launch(*args, **kwargs):
        raise AssertionError("launched a kernel on an empty input")

    for name in ("launch", "_triton_flat_kernel", "_triton_rowwise_kernel"):
        monkeypatch.setattr(square_module, name, no_launch)
    never = SimpleNamespace(launch=no_launch)
    monkeypatch.setattr(square_module, "CUDA_2D", never)
    monkeypatch.setattr(square_module, "CUDA_VEC4", {dtype: never for dtype in FP})
    for dtype in (torch.float32, torch.float16):
        x = torch.empty(shape, dtype=dtype)
        for name, impl in IMPLS.items():
            # cuda_inline_vec4's empty-input rule is in its C++ wrapper (tests/test_backend_inline.py, on a GPU).
            if (impl.dtypes and dtype not in impl.dtypes) or name == "cuda_inline_vec4":
                continue
            y = impl.fn(x)
            assert (y.shape, y.dtype, y.device) == (x.shape, x.dtype, x.device), name


# ---- GPU: each case in a spawned worker, so this process's CPU-mode environment cannot leak in -------------


def _check_on_gpu(target: str) -> kk.RunReport:
    report = kk.check(target, device="cuda")
    for r in report.results:
        dtype = getattr(torch, r.dtype)
        impl = IMPLS[r.impl]
        runs_here = not impl.dtypes or dtype in impl.dtypes
        assert r.status is (Status.PASSED if runs_here else Status.SKIPPED), (r.case_id, r.status, r.message)
    return report


@pytest.mark.gpu
@pytest.mark.slow
def test_every_impl_on_large_tensors_on_gpu() -> None:
    report = _check_on_gpu("square")  # 4096x4096, 1823x781, 1x4097 in fp32, bf16, fp16
    assert {r.impl for r in report.results if r.status is Status.PASSED} == set(IMPLS)
    for r in report.results:
        if r.impl == "triton_flat":
            assert r.details["autotune"]["square_flat_kernel"]["tuned"] is True, r.case_id


@pytest.mark.gpu
@pytest.mark.slow
def test_non_contiguous_and_misaligned_inputs_on_gpu() -> None:
    report = _check_on_gpu(__file__)
    assert {r.op for r in report.results} == {"square_permuted", "square_misaligned"}
    assert {(r.impl, r.dtype) for r in report.results if r.status is Status.PASSED} >= {
        ("cuda_vec4", dtype_name(dtype)) for dtype in FP}


@pytest.mark.gpu
@pytest.mark.parametrize("offset", [0, 1, 3, 8])  # aligned; 1 and 3 elements off 16 B; 8 elements: aligned again
@pytest.mark.parametrize("dtype", FP)
def test_cuda_vec4_at_every_alignment_and_tail_on_gpu(offset: int, dtype: torch.dtype) -> None:
    base = torch.randn(3 * 2**20 + 16, device="cuda").to(dtype)
    # Shorter than one vector; odd tails; more elements than one full wave of threads covers (H100: 132 SMs x
    # 2048 threads x 4 or 8 elements), so threads take several grid-stride steps.
    for n in (1, 7, 4097, 3 * 2**20 + 5):
        x = base[offset:offset + n]
        y = square_module.square_cuda_vec4(x)
        torch.testing.assert_close(y, x * x, atol=0, rtol=0)  # one rounding of the exact square, as PyTorch
