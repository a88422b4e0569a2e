"""The bias_gelu op: every impl against the reference at edge shapes, its cost model, and planted wrong impls.

Three ops below reuse bias_gelu's reference: two on other inputs (non-contiguous, and views off a 16-byte
boundary) with every impl of bias_gelu, and one with planted wrong impls that the check must call wrong. They are
module-level so ``kk.check(__file__)`` finds them, in this process or in a worker; ``impls=`` picks which run.
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

import kernelkit as kk
from kernelkit import verify
from kernelkit.backends.sass import disassemble, memory_ops
from kernelkit.ops import bias_gelu as bias_gelu_module
from kernelkit.results import Status
from kernelkit.spec import dtype_name, seeded_normal
from opkit import (
    FP,
    NoLaunch,
    assert_every_impl_passed,
    assert_expected_on_cpu,
    check_on_gpu,
    misaligned,
    permuted,
    summary,
    variant,
)

# Tiny CPU shapes (the Triton interpreter runs ~1 ms per program), each at an edge:
CPU_SHAPES = [
    (7, 33),  # odd in both dimensions: partial tiles; N not a multiple of any vector width
    (1, 257),  # one row, one past a power of two
    (3, 1),  # one column: bias is one number; the Triton tile is one column wide
    (9, 1500),  # two 1024-wide column tiles, the second partial; several row tiles
    (2, 3, 40),  # 3-D: the leading dimensions fold into rows, bias still indexes the last
]
IMPLS = bias_gelu_module.bias_gelu.impls  # not the op itself: kk.check(__file__) would check it a second time
CUDA_KERNELS = ["bias_gelu_vec_f32_kernel", "bias_gelu_vec_f16_kernel", "bias_gelu_vec_bf16_kernel"]
reference = bias_gelu_module.bias_gelu.reference


def _permuted_inputs(size, dtype, device, seed):
    """Non-contiguous x (drawn with its dimensions reversed) and bias (every other element of 2N)."""
    return permuted(size, dtype, device, 2 * seed), seeded_normal((2 * size[-1],), dtype, device, 2 * seed + 1)[::2]


def _misaligned_inputs(size, dtype, device, seed):
    """Contiguous x and bias, each a view one element into a fresh (256-byte aligned) buffer: off 16 bytes."""
    return misaligned(size, dtype, device, 2 * seed), misaligned(size[-1:], dtype, device, 2 * seed + 1)


# GPU sizes: N = 781 (scalar path anyway), 784 and 4104 (multiples of 8: only the alignment test keeps the CUDA
# kernel off its vector path); 3000 x 4104 takes a dozen grid-stride steps on an H100.
bias_gelu_permuted = variant(bias_gelu_module.bias_gelu, "bias_gelu_permuted", _permuted_inputs,
                             sizes=[(1823, 781), (64, 4104)], cpu_sizes=[(7, 33)])
bias_gelu_misaligned = variant(bias_gelu_module.bias_gelu, "bias_gelu_misaligned", _misaligned_inputs,
                               sizes=[(1823, 784), (3000, 4104)], cpu_sizes=[(5, 24)])

# Planted bugs a fused kernel could have; the check must call both INCORRECT_NUMERICS. N > 1 in every size: with
# one column, bias by row is bias[0] everywhere, which is right.
bias_gelu_planted = kk.op(sizes=[(1823, 781)], cpu_sizes=[(7, 33), (1, 257)], dtypes=list(FP),
                          inputs=bias_gelu_module.bias_gelu.make_inputs, name="bias_gelu_planted")(reference)
PLANTED = ["eager_bias_after_gelu", "eager_bias_by_row"]


@bias_gelu_planted.impl("eager_bias_after_gelu")
def _bias_after_gelu(x, bias):
    return F.gelu(x, approximate="tanh") + bias


@bias_gelu_planted.impl("eager_bias_by_row")
def _bias_by_row(x, bias):
    return F.gelu(x + bias[torch.arange(x.shape[0], device=x.device) % bias.numel(), None], approximate="tanh")





# ---- CPU --------------------------------------------------------------------------------------------------


def test_every_impl_at_edge_shapes_on_cpu(cpu_process: None, can_compile: bool) -> None:
    report = kk.check("bias_gelu", device="cpu", isolate=False, sizes=CPU_SHAPES, dtypes=list(FP))
    assert len(report.results) == len(IMPLS) * len(CPU_SHAPES) * len(FP)
    assert_expected_on_cpu(report)
    for r in report.results:
        if r.impl == "cuda_fused_vec" and can_compile:  # the check compiles every kernel before "no GPU"
            assert all(name in r.message for name in CUDA_KERNELS), r.message
    tuned = [r.details["autotune"]["bias_gelu_fused_kernel"] for r in report.results
             if r.impl == "triton_fused" and r.status is Status.PASSED]
    assert tuned and all(re.match(r"TILE=\d+, num_warps=\d+, num_stages=\d+$", t["config"]) for t in tuned)


def test_non_contiguous_and_misaligned_inputs_on_cpu(cpu_process: None) -> None:
    x, bias = _permuted_inputs((7, 33), torch.float32, "cpu", 0)
    assert not x.is_contiguous() and not bias.is_contiguous()
    x, bias = _misaligned_inputs((5, 24), torch.float16, "cpu", 0)
    assert x.data_ptr() % 16 and bias.data_ptr() % 16
    report = kk.check(__file__, impls=list(IMPLS), device="cpu", isolate=False, dtypes=[torch.float32, torch.float16])
    assert {r.op for r in report.results} == {"bias_gelu_permuted", "bias_gelu_misaligned"}
    assert_expected_on_cpu(report)


def test_planted_wrong_impls_are_incorrect_numerics() -> None:
    report = kk.check(__file__, impls=PLANTED, device="cpu", isolate=False)
    assert len(report.results) == len(PLANTED) * 2 * len(FP)
    assert all(r.status is Status.INCORRECT_NUMERICS for r in report.results), summary(report)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the interpreter's numpy, on purpose
def test_fused_gelu_at_extreme_values_on_cpu(cpu_process: None) -> None:
    # The kernels compute h * sigmoid(2u), not 0.5 h (1 + tanh(u)): far out in both tails, where h^3 overflows
    # and exp underflows, they must still give the reference's -0 and h, and NaN must stay NaN.
    h = torch.tensor([-1e30, -100.0, -20.0, -9.5, -5.0, -1e-3, 0.0, 1e-3, 3.0, 20.0, 1e4, 1e30, float("nan")])
    x = torch.stack([h, h])
    bias = torch.tensor([0.0] * (h.numel() - 1) + [1.0])
    y = bias_gelu_module.bias_gelu_triton_fused(x, bias)
    expected = reference(x.double(), bias.double()).float()
    torch.testing.assert_close(y, expected, atol=1e-6, rtol=2e-6, equal_nan=True)


def test_cuda_kernels_compile_vectorized_and_fully_resident(can_compile: bool) -> None:
    if not can_compile:
        pytest.skip("neither NVRTC (cuda.core) nor nvcc is here")
    kernels = IMPLS["cuda_fused_vec"].kernels
    assert [k.name for k in kernels] == CUDA_KERNELS
    for kernel in kernels:
        built = kernel.compile("sm_90")
        assert built.arch == "sm_90" and built.cubin[:4] == b"\x7fELF", built
        dis = disassemble(built.cubin)
        if dis.missing:
            continue
        # The host sizes the grid to 8 blocks of 256 threads per SM: that needs <= 32 registers a thread, and
        # __launch_bounds__ must get there without spilling to local memory.
        usage, sass = dis.usage[kernel.name], dis.sass[kernel.name]
        assert usage.registers <= 32 and not usage.local, usage
        memory = memory_ops(sass)
        assert memory.global_loads.get(128) and memory.global_stores.get(128), memory  # 16-byte vectors
        assert not (memory.local_loads or memory.local_stores), memory


def test_cost_model_counts_fused_and_unfused_traffic() -> None:
    op = bias_gelu_module.bias_gelu
    mn, n = 4096 * 4096, 4096
    for dtype, size in ((torch.float32, 4), (torch.bfloat16, 2)):
        x, bias = torch.empty((4096, 4096), dtype=dtype, device="meta"), torch.empty(n, dtype=dtype, device="meta")
        assert op.cost((x, bias), ()) == ((2 * mn + n) * size, 10 * mn)
        assert bias_gelu_module.unfused_bytes(x, bias) == (4 * mn + n) * size
        assert bias_gelu_module.unfused_bytes(x, bias) - bias_gelu_module.fused_bytes(x, bias) == 2 * mn * size
    for m, n in op.bench_sizes[-2:]:  # the large sweep points dwarf the H100's 50 MiB L2, in every dtype
        x, bias = (torch.empty(shape, dtype=torch.bfloat16, device="meta") for shape in ((m, n), (n,)))
        assert bias_gelu_module.fused_bytes(x, bias) >= 256 * 2**20


@pytest.mark.parametrize("shape", [(0, 5), (4, 0), (0, 0)])
def test_empty_input_gives_empty_output_without_a_launch(shape: tuple[int, int], monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    monkeypatch.setattr(bias_gelu_module, "triton_kernels", NoLaunch("triton_kernels"))
    monkeypatch.setattr(bias_gelu_module, "CUDA_FUSED_VEC", NoLaunch("CUDA_FUSED_VEC"))
    x, bias = torch.empty(shape, dtype=torch.float16), torch.empty(shape[-1], dtype=torch.float16)
    for name, impl in IMPLS.items():
        y = impl.fn(x, bias)
        assert (y.shape, y.dtype, y.device) == (x.shape, x.dtype, x.device), name


@pytest.mark.parametrize("impl", ["triton_fused", "cuda_fused_vec"])
def test_fused_impls_reject_a_bias_that_does_not_fit(impl: str) -> None:
    x = torch.zeros(4, 8)
    with pytest.raises(ValueError, match=r"bias \(N,\)"):
        IMPLS[impl].fn(x, torch.zeros(4))  # bias by rows: eager would broadcast it wrongly or fail
    with pytest.raises(ValueError, match="one dtype"):
        IMPLS[impl].fn(x, torch.zeros(8, dtype=torch.float64))


# ---- GPU: each case in a spawned worker, so this process's CPU-mode environment cannot leak in -------------


@pytest.mark.gpu
@pytest.mark.slow
def test_every_impl_on_large_tensors_on_gpu() -> None:
    # 1823x781, 1x4097, 4096x4096, 8192x3072; fp32, bf16, fp16
    report = check_on_gpu("bias_gelu", IMPLS, impls=list(IMPLS))
    assert_every_impl_passed(report, IMPLS, {"triton_fused": "bias_gelu_fused_kernel"})


@pytest.mark.gpu
@pytest.mark.slow
def test_non_contiguous_and_misaligned_inputs_on_gpu() -> None:
    report = check_on_gpu(__file__, IMPLS, impls=list(IMPLS))
    assert {r.op for r in report.results} == {"bias_gelu_permuted", "bias_gelu_misaligned"}
    assert {(r.impl, r.dtype) for r in report.results if r.status is Status.PASSED} >= {
        ("cuda_fused_vec", dtype_name(dtype)) for dtype in FP}


@pytest.mark.gpu
@pytest.mark.parametrize("offset", [0, 1])  # 16-byte aligned (vector path where N allows), or one element off
@pytest.mark.parametrize("dtype", FP)
def test_cuda_fused_vec_paths_and_column_tracking_on_gpu(offset: int, dtype: torch.dtype) -> None:
    # (3000, 4104): N a multiple of 4 and 8, and the grid-stride step (132 * 8 * 256 items on an H100) is no
    # multiple of the row's vectors, so each thread's column wraps at a different place every step.
    # (1537, 781): the scalar path. (1, 7) and (5, 16): fewer items than threads.
    for m, n in ((3000, 4104), (1537, 781), (1, 7), (5, 16)):
        x = torch.randn(m * n + offset, device="cuda").to(dtype)[offset:].view(m, n)
        bias = torch.randn(n + offset, device="cuda").to(dtype)[offset:]
        y = bias_gelu_module.bias_gelu_cuda_fused_vec(x, bias)
        ref, lo = reference(x.double(), bias.double()), reference(x, bias)
        atol, rtol = bias_gelu_module.bias_gelu.tolerance_for(dtype)
        comparison = verify.compare(y, ref, atol, rtol, verify.reference_error(lo, ref))
        assert comparison.ok, (m, n, comparison)
