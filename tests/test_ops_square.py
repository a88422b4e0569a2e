"""The square op: every impl against the reference, each backend at edge shapes, on CPU (interpreter, simulator),
and every impl at edge shapes on a GPU.

Two ops below reuse square's impls on other inputs: non-contiguous tensors, and views that start off a 16-byte
boundary. They are module-level so ``kk.check(__file__)`` finds them, in this process or in a worker.
"""

from __future__ import annotations

import re

import pytest
import torch

import kernelkit as kk
from kernelkit.ops import square as square_module
from kernelkit.results import Status
from kernelkit.runs.check import plan
from kernelkit.spec import dtype_name
from opkit import (
    FP,
    NoLaunch,
    assert_every_impl_passed,
    assert_expected_on_cpu,
    check_on_gpu,
    each_input,
    edges_once_per_backend,
    misaligned,
    permuted,
    summary,
    variant,
)

NUMBA_DTYPES = (torch.float32, torch.float16)  # the dtypes of square's Numba impls
# Tiny CPU shapes (the simulator runs ~100 us per thread), each at an edge:
CPU_SHAPES = [
    (33, 17),  # odd in both dimensions: partial blocks, a vector tail (561 = 4 * 140 + 1)
    (1, 257),  # one row, one past a power of two
    (3, 5, 7),  # 3-D: the rowwise impls fold the leading dimensions
]
IMPLS = square_module.square.impls  # not the op itself: kk.check(__file__) would check it a second time
# One impl per backend at every CPU shape: the learner's first versions, whose row and column index math is what
# odd dimensions, one row and 3-D folding test. The flat impls see only numel: CPU_SHAPES[0] (partial blocks, a
# vector tail) and test_flat_impls_span_several_blocks_on_cpu test that. CUDA C++ only compiles on the CPU.
AT_EDGES = {("square", name) for name in ("eager", "triton_rowwise", "numba_2d", "cuda_2d")}
CUDA_VEC4_KERNELS = ["square_vec4_f32_kernel", "square_vec4_f16_kernel", "square_vec4_bf16_kernel"]


square_permuted = variant(square_module.square, "square_permuted", each_input(permuted, 1),
                          sizes=[(1823, 781), (5, 67, 3)], cpu_sizes=[(33, 17), (3, 5, 7)])
square_misaligned = variant(square_module.square, "square_misaligned", each_input(misaligned, 1),
                            sizes=[(1823, 781), (1, 4099)], cpu_sizes=[(1, 257)])



# ---- CPU --------------------------------------------------------------------------------------------------


def test_each_backend_at_edge_shapes_and_every_impl_on_cpu(cpu_process: None) -> None:
    cases = edges_once_per_backend(plan("square", device="cpu", sizes=CPU_SHAPES, dtypes=FP)[1],
                                   {"square": square_module.square}, AT_EDGES, CPU_SHAPES[0])
    report = kk.run_cases(cases, "cpu", isolate=False)
    assert len(report.results) == (len(AT_EDGES) * len(CPU_SHAPES) + len(IMPLS) - len(AT_EDGES)) * len(FP)
    assert_expected_on_cpu(report, NUMBA_DTYPES)
    tuned = [r.details["autotune"]["square_flat_kernel"] for r in report.results
             if r.impl == "triton_flat" and r.status is Status.PASSED]
    assert tuned and all(re.match(r"BLOCK_SIZE=\d+, num_warps=\d+, num_stages=\d+$", t["config"]) for t in tuned)


def test_flat_impls_span_several_blocks_on_cpu(cpu_process: None) -> None:
    # 21003 elements: more than one program at every autotuned BLOCK_SIZE (at most 8192), with a partial last
    # one; and 41 grid-stride steps per simulated thread, the last of them partial.
    report = kk.check("square", impls=["triton_flat", "numba_flat"], device="cpu", isolate=False,
                      sizes=[(3, 7001)], dtypes=[torch.float32])
    assert [r.status for r in report.results] == [Status.PASSED] * 2, summary(report)


def test_non_contiguous_and_misaligned_inputs_on_cpu(cpu_process: None) -> None:
    assert not permuted((33, 17), torch.float32, "cpu", 0).is_contiguous()
    assert misaligned((1, 257), torch.float16, "cpu", 0).data_ptr() % 16 != 0
    report = kk.check(__file__, device="cpu", isolate=False, dtypes=[torch.float32, torch.float16])
    assert {r.op for r in report.results} == {"square_permuted", "square_misaligned"}
    assert_expected_on_cpu(report, NUMBA_DTYPES)


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
    for name in ("launch", "triton_kernels", "CUDA_2D", "CUDA_VEC4"):
        monkeypatch.setattr(square_module, name, NoLaunch(name))
    for dtype in (torch.float32, torch.float16):
        x = torch.empty(shape, dtype=dtype)
        for name, impl in IMPLS.items():
            # cuda_inline_vec4's empty-input rule is in its C++ wrapper (tests/test_backend_inline.py, on a GPU).
            if (impl.dtypes and dtype not in impl.dtypes) or name == "cuda_inline_vec4":
                continue
            y = impl.fn(x)
            assert (y.shape, y.dtype, y.device) == (x.shape, x.dtype, x.device), name


# ---- GPU: each case in a spawned worker, so this process's CPU-mode environment cannot leak in -------------


@pytest.mark.gpu
@pytest.mark.slow
def test_every_impl_on_large_tensors_on_gpu() -> None:
    report = check_on_gpu("square", IMPLS)  # 4096x4096, 1823x781, 1x4097 in fp32, bf16, fp16
    assert_every_impl_passed(report, IMPLS, {"triton_flat": "square_flat_kernel"})


@pytest.mark.gpu
@pytest.mark.slow
def test_non_contiguous_and_misaligned_inputs_on_gpu() -> None:
    report = check_on_gpu(__file__, IMPLS)
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
