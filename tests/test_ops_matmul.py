"""The matmul ops: every impl against the reference at edge shapes (CPU: Triton interpreter, CUDA compiled only;
GPU: the default sizes), the references against float64 math, the inputs, the cost model, the tolerance rule
(TF32's error passes the TF32 op and fails the fp32 one), planted bugs, split-K's ranges and the config pruning.

The ops defined below take the built-in references' inputs and tolerances; their planted impls must fail. They are
module-level so ``kk.check(__file__)`` finds them.
"""

from __future__ import annotations

import math

import numpy
import pytest
import torch

import kernelkit as kk
from kernelkit.ops import matmul as mm
from kernelkit.ops.matmul import ladder, tolerance
from kernelkit.results import Status
from opkit import CPU_FP, assert_expected_on_cpu, assert_statuses, misaligned, summary

CPU = torch.device("cpu")
BUILTIN = ("matmul", "matmul_bt", "matmul_tf32", "matmul_fp8")
PLANTED = {"eager_k_off_by_one", "eager_tf32_operands_in_fp32", "eager_bf16_operands", "eager_unscaled"}


def _truncated(x: torch.Tensor, bits: int) -> torch.Tensor:
    """fp32 x with the lowest ``bits`` mantissa bits cleared: 13 gives TF32 (as tensor cores read fp32), 16 bf16."""
    return (x.view(torch.int32) & ~((1 << bits) - 1)).view(torch.float32)


# ---- ops with planted bugs: the checker must catch each one ---------------------------------------------------

@kk.op(sizes=mm.SIZES, cpu_sizes=mm.CPU_SIZES, dtypes=[torch.float32], inputs=mm.matmul_inputs,
       tolerance=dict(mm.matmul.tolerance))
def matmul_fp32_rule(a, b):
    return a @ b


@kk.op(sizes=mm.SIZES, cpu_sizes=mm.CPU_SIZES, dtypes=[torch.float32], inputs=mm.matmul_inputs,
       tolerance=dict(mm.matmul_tf32.tolerance))
def matmul_tf32_rule(a, b):
    return a @ b


@kk.op(sizes=mm.SIZES, cpu_sizes=mm.CPU_SIZES, dtypes=list(CPU_FP), inputs=mm.matmul_inputs)
def matmul_planted(a, b):
    return a @ b


@kk.op(sizes=mm.FP8_SIZES, cpu_sizes=mm.FP8_CPU_SIZES, dtypes=[torch.bfloat16], inputs=mm.matmul_fp8_inputs,
       tolerance=dict(mm.matmul_fp8.tolerance))
def matmul_fp8_planted(a, b, scale_a, scale_b):
    return mm.matmul_fp8.reference(a, b, scale_a, scale_b)


@matmul_planted.impl("eager_k_off_by_one")
def _k_off_by_one(a, b):
    """Planted bug: the K loop stops one step short (k < K - 1)."""
    return a[:, :-1] @ b[:-1]


def _tf32_operands(a, b):
    """TF32 tensor cores' arithmetic: both operands truncated to 10 mantissa bits, products summed in fp32."""
    return _truncated(a, 13) @ _truncated(b, 13)


matmul_tf32_rule.impl("eager_tf32_operands")(_tf32_operands)
matmul_fp32_rule.impl("eager_tf32_operands_in_fp32")(_tf32_operands)  # planted: TF32 where fp32 was asked


@matmul_tf32_rule.impl("eager_bf16_operands")
def _bf16_operands(a, b):
    """Planted bug: operands cut to bfloat16's 7 mantissa bits, 8x TF32's error."""
    return _truncated(a, 16) @ _truncated(b, 16)


@matmul_fp8_planted.impl("eager_unscaled")
def _unscaled(a, b, scale_a, scale_b):
    """Planted bug: scale_b forgotten."""
    return ((a.float() @ b.float()) * scale_a).to(torch.bfloat16)


# ---- CPU: the checker -------------------------------------------------------------------------------------

def test_matmul_every_impl_at_edge_shapes_on_cpu(cpu_process: None) -> None:
    report = kk.check("matmul", device="cpu", isolate=False, dtypes=list(CPU_FP))
    assert len(report.results) == len(mm.matmul.impls) * len(mm.CPU_SIZES) * len(CPU_FP)
    assert_expected_on_cpu(report, compiled=[torch.float32])
    # CUDA rungs take fp32 only: their fp16 cases are SKIPPED before compiling, saying so
    assert all("float32 only" in r.message for r in report.results if r.backend == "cuda" and r.dtype == "float16")


def _without_compile(op: kk.Op) -> list[str]:
    """The op's impls but ``compile``: inductor's C++ build takes ~10 s a case here (the GPU tests run it)."""
    return [name for name in op.impls if name != "compile"]


def test_bt_tf32_and_fp8_impls_on_cpu(cpu_process: None) -> None:
    report = kk.check("matmul_bt", device="cpu", isolate=False, sizes=[(33, 29, 17), (1, 16, 40)],
                      dtypes=list(CPU_FP))
    report.results += kk.check("matmul_tf32", device="cpu", isolate=False, sizes=[(33, 29, 17), (65, 8, 8)],
                               impls=_without_compile(mm.matmul_tf32)).results
    fp8 = kk.check("matmul_fp8", device="cpu", isolate=False, impls=_without_compile(mm.matmul_fp8))
    report.results += fp8.results
    assert {r.op for r in report.results} == {"matmul_bt", "matmul_tf32", "matmul_fp8"}
    assert {r.impl for r in fp8.results} == {"eager", "triton_blocked", "triton_persistent", "triton_tma"}
    assert_expected_on_cpu(report, compiled=[torch.float32])  # the CUDA rungs take fp32 only


def test_planted_bugs_fail_and_tf32_error_passes_only_the_tf32_op(cpu_process: None) -> None:
    report = kk.check(__file__, device="cpu", isolate=False)
    got = {(r.op, r.impl) for r in report.results}
    assert ("matmul_tf32_rule", "eager_tf32_operands") in got and ("matmul_planted", "eager_k_off_by_one") in got
    assert_statuses(report, lambda r: Status.PASSED, PLANTED)


# ---- CPU: references, inputs, cost --------------------------------------------------------------------------

@pytest.mark.parametrize("size", [(33, 29, 17), (1, 16, 40), (5, 1, 3), (1, 1, 1), (4, 3, 0), (0, 3, 4)])
def test_references_match_float64_sums(size: tuple[int, int, int]) -> None:
    m, n, k = size
    a = torch.randn(m, k, dtype=torch.float64)
    b = torch.randn(k, n, dtype=torch.float64)
    expected = (a[:, :, None] * b[None, :, :]).sum(dim=1)  # sum over k of a[m, k] b[k, n]; zeros when K = 0
    torch.testing.assert_close(mm.matmul(a, b), expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(mm.matmul_tf32(a, b), expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(mm.matmul_bt(a, b.T.contiguous()), expected, rtol=1e-12, atol=1e-12)
    sa, sb = torch.tensor(0.5, dtype=torch.float64), torch.tensor(3.0, dtype=torch.float64)
    torch.testing.assert_close(mm.matmul_fp8(a, b, sa, sb), 1.5 * expected, rtol=1e-12, atol=1e-12)


def test_fp8_reference_dequantizes_then_rounds_to_bfloat16() -> None:
    a8, b8, sa, sb = mm.matmul_fp8_inputs((33, 32, 48), torch.bfloat16, CPU, 0)
    out = mm.matmul_fp8(a8, b8, sa, sb)
    exact = (a8.double() * sa.double()) @ (b8.double() * sb.double())
    assert out.dtype == torch.bfloat16 and out.shape == (33, 32)
    torch.testing.assert_close(out.double(), exact, rtol=2**-8, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_inputs_are_seeded_and_scaled_to_unit_output_variance(dtype: torch.dtype) -> None:
    a, b = mm.matmul_inputs((64, 64, 4096), dtype, CPU, 3)
    assert a.shape == (64, 4096) and b.shape == (4096, 64) and a.dtype == b.dtype == dtype
    assert torch.equal(a, mm.matmul_inputs((64, 64, 4096), dtype, CPU, 3)[0])
    assert not torch.equal(a, mm.matmul_inputs((64, 64, 4096), dtype, CPU, 4)[0])
    c = a.double() @ b.double()
    assert 0.8 < float(c.var()) < 1.2  # O(1) at any K: K^-1/4 on each operand
    abt, bt = mm.matmul_bt_inputs((64, 32, 128), dtype, CPU, 0)
    assert abt.shape == (64, 128) and bt.shape == (32, 128)


def test_fp8_inputs_use_e4m3_range_with_column_major_b() -> None:
    a8, b8, sa, sb = mm.matmul_fp8_inputs((40, 32, 64), torch.bfloat16, CPU, 1)
    assert a8.dtype == b8.dtype == torch.float8_e4m3fn and a8.shape == (40, 64) and b8.shape == (64, 32)
    assert a8.is_contiguous() and b8.stride() == (1, 64)  # column-major: the layout torch._scaled_mm wants
    assert float(a8.float().abs().max()) == mm.FP8_MAX and float(b8.float().abs().max()) == mm.FP8_MAX
    assert sa.dtype == sb.dtype == torch.float32 and sa.dim() == 0 and float(sa) > 0


def test_cost_is_2mnk_flops_and_one_pass_over_a_b_c() -> None:
    m, n, k = 33, 29, 17
    for dtype, size in ((torch.float32, 4), (torch.float16, 2)):
        a, b = mm.matmul_inputs((m, n, k), dtype, CPU, 0)
        assert mm.matmul.cost((a, b), ()) == ((m * k + k * n + m * n) * size, 2 * m * n * k)
        a, bt = mm.matmul_bt_inputs((m, n, k), dtype, CPU, 0)
        assert mm.matmul_bt.cost((a, bt), ()) == ((m * k + k * n + m * n) * size, 2 * m * n * k)
    inputs = mm.matmul_fp8_inputs((m, 32, 48), torch.bfloat16, CPU, 0)
    assert mm.matmul_fp8.cost(inputs, ()) == (m * 48 + 48 * 32 + m * 32 * 2, 2 * m * 32 * 48)


def test_sizes_hold_the_edge_shapes() -> None:
    sizes = mm.SIZES
    assert (1823, 1029, 781) in sizes and any(m == 1 for m, _, _ in sizes)
    assert any(k % 8 and k % 4 == 0 for _, _, k in sizes)  # a K tail for BK = 8 on the vector paths
    assert (256, 256, 65536) in mm.BENCH_SIZES and (8192, 8192, 8192) in mm.BENCH_SIZES
    assert all(k % 16 == 0 and n % 16 == 0 for _, n, k in mm.FP8_SIZES + mm.FP8_BENCH_SIZES)  # cuBLASLt's rule


# ---- CPU: the tolerance rule --------------------------------------------------------------------------------

def test_tolerance_formulas() -> None:
    assert mm.LONGEST_K == 65536 and mm.FP8_LONGEST_K == 8192
    atol, _ = tolerance.fp32_tolerance(65536)
    assert atol == pytest.approx(4 * 2**-24 * 256)
    assert tolerance.accumulation_atol(2**-24, 4 * 1024) == pytest.approx(2 * tolerance.accumulation_atol(2**-24, 1024))
    tf32_atol, tf32_rtol = tolerance.tf32_tolerance(65536)
    assert tf32_rtol == 2**-10 and 50 < tf32_atol / atol < 100  # TF32's operand error dwarfs fp32's summation
    assert mm.matmul.tolerance_for(torch.bfloat16) == kk.spec.TOLERANCES[torch.bfloat16]  # the project's rule


@pytest.mark.parametrize("k", [17, 781, 4096])
def test_tf32_operand_error_sits_between_the_fp32_and_tf32_tolerances(k: int) -> None:
    a, b = mm.matmul_inputs((256, 256, k), torch.float32, CPU, 5)
    ref = a.double() @ b.double()
    err = (_tf32_operands(a, b).double() - ref).abs()
    fp32_atol, fp32_rtol = mm.matmul.tolerance_for(torch.float32)
    tf32_atol, tf32_rtol = mm.matmul_tf32.tolerance_for(torch.float32)
    assert bool((err <= tf32_atol + tf32_rtol * ref.abs()).all())
    assert float(err.max()) > 10 * fp32_atol


def test_fp32_sequential_summation_fits_the_fp32_tolerance() -> None:
    """One running fp32 sum per output, the least accurate order a correct kernel uses, at K = 65536: numpy's
    float32 cumsum adds strictly in order (its products rounded too, which FMA would not do: a worse case)."""
    k = 65536
    a, b = mm.matmul_inputs((256, 1, k), torch.float32, CPU, 2)
    products = (a * b[:, 0]).numpy()
    running = numpy.cumsum(products, axis=1, dtype=numpy.float32)[:, -1]
    exact = (a.double() * b[:, 0].double()).sum(dim=1)
    err = (torch.from_numpy(running).double() - exact).abs().max()
    atol, _ = mm.matmul.tolerance_for(torch.float32)
    assert 0 < float(err) < atol / 2


# ---- CPU: launchers, split-K, the ladder's routing, config pruning -----------------------------------------------

def test_splitk_with_empty_trailing_range_and_non_contiguous_b(cpu_process: None) -> None:
    from kernelkit.ops.matmul import triton as mt

    a, b = mm.matmul_inputs((9, 20, 40), torch.float32, CPU, 0)
    b_strided = b.T.contiguous().T  # column-major B: the kernels read any strides
    for split in (1, 2, 3):  # 3: ranges of 32, 8 and 0 K (32-wide K-blocks)
        out = mt.matmul_splitk(a, b_strided, torch.float32, "ieee", split_k=split)
        torch.testing.assert_close(out, a @ b, rtol=1e-5, atol=1e-5)


def test_split_count() -> None:
    from kernelkit.ops.matmul import triton as mt

    assert mt.split_count(256, 256, 65536, 132) == 32  # 4 tiles x 32 ranges fill 132 SMs
    assert mt.split_count(4096, 4096, 4096, 132) == 1  # 1024 tiles fill it alone
    assert mt.split_count(256, 256, 2048, 132) == 2  # ranges no shorter than SPLITK_MIN_K
    assert mt.split_count(1, 1, 10**7, 132) == 64  # at most SPLITK_MAX


def test_triton_empty_and_zero_k(cpu_process: None) -> None:
    from kernelkit.ops.matmul import triton as mt

    zeros_k = mt.matmul_blocked(torch.ones(3, 0), torch.ones(0, 5), torch.float32)
    assert torch.equal(zeros_k, torch.zeros(3, 5))
    for launch in (mt.matmul_blocked, mt.matmul_persistent, mt.matmul_tma, mt.matmul_splitk):
        assert launch(torch.ones(0, 4), torch.ones(4, 5), torch.float32).shape == (0, 5)


def test_bad_operands_raise_clear_errors() -> None:
    fn = mm.matmul.impls["triton_blocked"].fn
    with pytest.raises(ValueError, match="disagree on K"):
        fn(torch.ones(3, 4), torch.ones(5, 6))
    with pytest.raises(ValueError, match="one dtype"):
        fn(torch.ones(3, 4), torch.ones(4, 6, dtype=torch.float16))
    with pytest.raises(ValueError, match="2-D"):
        fn(torch.ones(2, 3, 4), torch.ones(4, 6))
    with pytest.raises(ValueError, match="float32"):
        mm.matmul.impls["cuda_warptile"].fn(torch.ones(3, 4, dtype=torch.float16), torch.ones(4, 6))
    a8, b8, sa, sb = mm.matmul_fp8_inputs((4, 16, 32), torch.bfloat16, CPU, 0)
    with pytest.raises(ValueError, match="column-major"):
        mm.matmul_fp8.impls["triton_blocked"].fn(a8, b8.contiguous(), sa, sb)
    with pytest.raises(kk.BackendUnavailable, match="multiples of 16"):
        mm.matmul_fp8.impls["eager"].fn(a8[:, :24], b8[:24], sa, sb)


def test_ladder_routes_unaligned_rows_to_scalar_kernels() -> None:
    a, b = mm.matmul_inputs((8, 12, 16), torch.float32, CPU, 0)
    c = torch.empty(8, 12)
    assert ladder.vector_aligned(a, b, c)
    assert not ladder.vector_aligned(misaligned((8, 16), torch.float32, CPU, 0), b, c)  # 4 bytes off
    odd_a, odd_b = mm.matmul_inputs((8, 12, 17), torch.float32, CPU, 0)
    assert not ladder.vector_aligned(odd_a, odd_b, c)  # K = 17: rows of A start off 16 bytes
    assert [r.name for r in ladder.RUNGS] == ["naive", "coalesced", "smem", "tile1d", "tile2d", "vec4", "warptile"]
    assert ladder.NAIVE.grid(100, 40) == (4, 2) and ladder.WARPTILE.grid(100, 300) == (3, 1)
    assert all(r.unaligned is not None for r in (ladder.VEC4, ladder.WARPTILE))


def test_autotune_configs_pruned_per_operand_family(cpu_process: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelkit.backends import triton as kk_triton
    from kernelkit.ops.matmul import triton as mt

    configs = mt.matmul_kernel.configs
    args = lambda dtype, m=4096: {"a_ptr": torch.empty(0, dtype=dtype), "M": m}  # noqa: E731
    assert mt.prune_configs(configs, args(torch.float32)) == [mt.INTERPRETER_CONFIG]
    monkeypatch.setattr(kk_triton, "interpreting", lambda: False)  # as on a GPU
    assert mt.prune_configs(configs, args(torch.bfloat16)) == mt.CONFIGS_16BIT
    assert mt.prune_configs(configs, args(torch.float8_e4m3fn)) == mt.CONFIGS_FP8
    assert mt.prune_configs(configs, args(torch.float32), INPUT_PRECISION="tf32") == mt.CONFIGS_TF32
    assert mt.prune_configs(configs, args(torch.float32), INPUT_PRECISION="ieee") == mt.CONFIGS_FP32
    short = mt.prune_configs(configs, args(torch.float16, m=1))
    assert short and all(c.kwargs["BLOCK_M"] <= mt.SHORT_M for c in short)
    assert mt.prune_configs(mt.matmul_splitk_kernel.configs, args(torch.bfloat16)) == mt.SPLITK_CONFIGS_16BIT


# ---- GPU ---------------------------------------------------------------------------------------------------

def impls_for(op: kk.Op, dtype: torch.dtype) -> list[str]:
    """The impls of ``op`` that take ``dtype`` (the CUDA rungs take float32 only)."""
    return [name for name, impl in op.impls.items() if not impl.dtypes or dtype in impl.dtypes]


@pytest.mark.gpu
@pytest.mark.parametrize("name", BUILTIN)
def test_every_impl_passes_at_the_default_sizes_on_gpu(name: str) -> None:
    op = getattr(mm, name)
    for dtype in op.dtypes:
        impls = impls_for(op, dtype)
        report = kk.check(name, device="cuda", impls=impls, dtypes=[dtype], timeout=300)
        assert len(report.results) == len(impls) * len(op.sizes)
        bad = [row for row in summary(report) if row[4] != "PASSED"]
        assert not bad, bad


@pytest.mark.gpu
def test_planted_bugs_fail_on_gpu() -> None:
    assert_statuses(kk.check(__file__, device="cuda", timeout=300), lambda r: Status.PASSED, PLANTED)


@pytest.mark.gpu
def test_misaligned_operands_take_the_scalar_paths_on_gpu() -> None:
    a = misaligned((129, 132), torch.float32, "cuda", 0)  # rows of 132 floats, the buffer 4 bytes off
    b = misaligned((132, 260), torch.float32, "cuda", 1)
    expected = a.double() @ b.double()
    for rung in ladder.RUNGS:
        out = ladder.launch(rung, a, b)
        assert math.isclose(float((out.double() - expected).abs().max()), 0.0, abs_tol=1e-3), rung.name
