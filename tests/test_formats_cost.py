"""FLOPs and bytes of a problem counted from its reference (measure/count.py), where they put it on the roofline,
and a problem's reference benched once, as the eager baseline. CPU only, on small problems written here; the
ceilings are the made-up CPU ones of tests/conftest.py (copy 20 GB/s, fp32 0.1 TFLOP/s a thread)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

import kernelkit as kk
from kernelkit import formats, runner
from kernelkit.formats import kernelbench
from kernelkit.measure import count
from kernelkit.measure.measurement import BenchResult
from kernelkit.report.bench_table import _rate_cell, built_lines, ceiling_text
from kernelkit.report.roofline import binding
from kernelkit.results import Status
from kernelkit.runs.bench import plan_groups
from kernelkit.verify import as_outputs
from test_formats_cli import InProcessWorker

M, K, N = 96, 160, 128  # no two alike: the count must be 2*M*N*K, not a square's 2*n^3

MATMUL = f'''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn({M}, {K}), torch.randn({K}, {N})]


def get_init_inputs():
    return []
'''

ALIASED = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x.view(-1)  # the output is the input's own memory


def get_inputs():
    return [torch.randn(8, 100)]


def get_init_inputs():
    return []
'''

KB = Path(__file__).parent / "fixtures" / "formats" / "kernelbench"


def problem(tmp_path: Path, text: str, name: str = "1_matmul.py") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def case_cost(op: kk.Op) -> tuple[int, int | None]:
    inputs = op.make_inputs(op.sizes[0], torch.float32, torch.device("cpu"), 0)
    return op.cost(inputs, as_outputs(op.reference(*inputs)))


@pytest.fixture
def in_process(monkeypatch: pytest.MonkeyPatch, cpu_process: None) -> None:
    monkeypatch.setattr(runner, "Worker", InProcessWorker)  # seconds of worker start-up saved; same jobs


def test_a_matmul_problem_counts_2mnk_flops_on_meta_and_compares_them_with_fp32(tmp_path: Path):
    [op] = formats.load_ops(problem(tmp_path, MATMUL))
    assert isinstance(op.flops_fn, count.CountedFlops)  # counted, not declared
    nbytes, flops = case_cost(op)
    assert flops == 2 * M * N * K
    assert nbytes == 4 * (M * K + K * N + M * N)
    assert op.compute_dtype == "fp32"  # TF32 matmuls are off by default: the fp32 rate
    found = count.count(op.reference, op.make_inputs(op.sizes[0], torch.float32, torch.device("cpu"), 0))
    assert (found.flops, found.where) == (2 * M * N * K, "meta")  # no data touched, no weights made


def test_a_model_with_weights_is_built_on_meta_for_the_count_and_its_own_weights_stay(tmp_path: Path):
    [op] = formats.load_ops(KB / "linear.py")  # nn.Linear(64, 48) on 8 rows
    x = op.make_inputs(op.sizes[0], torch.float32, torch.device("cpu"), 0)
    before = op.reference(*x)
    found = count.count(op.reference, x)
    assert (found.flops, found.where) == (2 * 8 * 64 * 48, "meta")
    assert torch.equal(op.reference(*x), before)  # the CPU model is the one it was: the meta one is its own


def test_a_reference_that_reads_its_data_is_counted_on_the_inputs_themselves():
    a, b = torch.randn(M, K), torch.randn(K, N)
    before = a.clone()

    def reads(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = x @ y
        return out * float(x.abs().max())  # .item() cannot run on meta

    found = count.count(reads, (a, b))
    assert (found.flops, found.where) == (2 * M * N * K, "cpu")
    assert torch.equal(a, before)


def test_a_matmul_problem_benches_compute_bound_with_tflops_and_pct_of_the_fp32_ceiling(tmp_path: Path,
                                                                                        in_process: None):
    sweep = kk.bench_op(str(problem(tmp_path, MATMUL)), device="cpu", mode="hot", budget=0.05,
                        baselines=("eager",))
    [eager] = sweep.results
    m = eager.measurement
    assert eager.status is Status.PASSED and m is not None and m.ceiling is not None
    assert m.flops == 2 * M * N * K and m.bytes == 4 * (M * K + K * N + M * N)
    assert m.ceiling.flops_kind == "fp32" and m.ceiling.pct_flops is not None
    assert binding(m).bound == "compute"  # 20 FLOP/byte, right of the made-up ridge
    assert _rate_cell(m).endswith("TFLOP/s") and ceiling_text(m).endswith("flops")


def test_an_elementwise_problem_is_memory_bound_by_inputs_plus_outputs(tmp_path: Path, in_process: None):
    [op] = formats.load_ops(KB / "relu.py")
    assert case_cost(op) == (2 * 16 * 300 * 4, 0)  # relu: no FLOPs the counter knows; x read, y written
    assert op.compute_dtype == ""  # no FLOPs: no matmul rate to compare with
    sweep = kk.bench_op(str(KB / "relu.py"), device="cpu", mode="hot", budget=0.05, baselines=("eager",))
    [eager] = sweep.results
    m = eager.measurement
    assert m is not None and m.bytes == 2 * 16 * 300 * 4 and not m.flops
    assert binding(m).bound == "memory" and _rate_cell(m).endswith("GB/s")


def test_an_output_that_is_the_input_is_counted_once(tmp_path: Path):
    [op] = formats.load_ops(problem(tmp_path, ALIASED, "1_view.py"))
    assert case_cost(op) == (8 * 100 * 4, 0)


def test_a_declared_cost_wins_over_the_count(tmp_path: Path):
    declared = MATMUL + "\n\ndef get_flops(a, b):\n    return 7\n\n\ndef get_bytes(a, b):\n    return 11\n"
    path = problem(tmp_path, declared)
    [op] = formats.load_ops(path)
    assert case_cost(op) == (11, 7)  # the problem file's own get_flops / get_bytes
    mine = kernelbench.problem_op(kernelbench.load_problem(path), flops=lambda a, b: 5, bytes=lambda a, b: 3)
    assert case_cost(mine) == (3, 5)  # the caller's beat the file's


def test_the_count_runs_once_per_input_signature(tmp_path: Path):
    calls: list[str] = []

    @kk.op(sizes=[(8, 8)], dtypes=[torch.float32])
    def mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        calls.append(a.device.type)
        return a @ b

    counted = count.counted(mm)
    a = torch.randn(8, 8)
    assert counted.cost((a, a), (a @ a,))[1] == 2 * 8**3
    assert counted.cost((a + 1, a), (a @ a,))[1] == 2 * 8**3  # same shapes: the count is kept
    assert calls == ["meta"]
    assert counted.cost((torch.randn(4, 8), a), (a,))[1] == 2 * 4 * 8 * 8 and calls == ["meta", "meta"]


def test_fp32_convolutions_compare_with_tf32_where_cudnn_runs_them_on_tensor_cores(monkeypatch: pytest.MonkeyPatch):
    conv, mm = {"convolution": 90, "mm": 10}, {"mm": 90, "convolution": 10}
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)  # PyTorch's default
    assert count.compute_kind(torch.float32, conv) == "tf32"
    assert count.compute_kind(torch.float32, mm) == "fp32"  # matmul TF32 is off by default
    assert count.compute_kind(torch.bfloat16, conv) == "bf16" and count.compute_kind(None, mm) == ""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    assert count.compute_kind(torch.float32, conv) == "fp32"
    mixed = (torch.ones(4, dtype=torch.bfloat16), torch.ones(1), torch.ones(3, dtype=torch.int64))
    assert count.dominant_dtype(mixed) == torch.bfloat16  # most floating bytes; integers never count


def test_a_problem_bench_times_its_reference_once_as_the_eager_baseline(in_process: None):
    sweep = kk.bench_op(str(KB / "relu.py"), solution=str(KB / "relu_solution.py"), device="cpu", mode="hot",
                        budget=0.05, baselines=("eager",))
    assert sorted((r.impl, r.role) for r in sweep.results) == [("eager", "baseline"), ("solution", "impl")]
    [solution] = [r for r in sweep.results if r.impl == "solution"]
    assert solution.status is Status.PASSED and "eager" in solution.speedups


def test_baselines_can_leave_compile_out_and_a_built_compile_says_what_it_cost():
    op = formats.load_ops(KB / "relu.py")[0]
    source = "formats-test"
    both = plan_groups(source, [op], "cpu", [], [], [], True, as_eager="reference")
    eager_only = plan_groups(source, [op], "cpu", [], [], [], ("eager",), as_eager="reference")
    assert [c.impl for c in both[0].cases] == ["compile"] and both[0].eager
    assert eager_only[0].cases == [] and eager_only[0].eager
    named = plan_groups(source, [op], "cpu", ["reference"], [], [], True, as_eager="reference")
    assert named[0].cases == [] and named[0].eager  # naming the reference names eager: timed once
    with pytest.raises(kk.KernelkitError, match="unknown baseline.*'eagr'"):
        plan_groups(source, [op], "cpu", [], [], [], ("eagr",))
    built = BenchResult("relu", "compile", "compile", (16, 300), "float32", "cpu", "hot", Status.PASSED,
                        role="baseline", details={"compile_seconds": 8.14})
    [line] = built_lines([built])
    assert "built its baseline in 8.1 s;" in line and "--no-compile" in line
    [line] = built_lines([built, replace(built, details={"compile_seconds": 2.0}), replace(built, details={})])
    assert "in 10.1 s over 2 cases (median 8.1 s, max 8.1 s)" in line


def test_a_timing_worker_that_never_computed_the_cost_settles_the_matmul_rate(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)

    @kk.op(sizes=[(2, 3, 16, 16)], dtypes=[torch.float32])
    def conv(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.conv2d(x, x[:4])

    @kk.op(sizes=[(8, 8)], dtypes=[torch.float32], compute_dtype="tf32")
    def mm(a: torch.Tensor) -> torch.Tensor:
        return a @ a

    x = torch.randn(2, 3, 16, 16)
    assert count.settle_kind(count.counted(conv), (x,)) == "tf32"  # cuDNN runs fp32 convolutions on TF32
    assert count.settle_kind(count.counted(mm), (torch.randn(8, 8),)) == "tf32"  # declared: kept
    assert count.settle_kind(count.counted(mm), (torch.randn(8, 8, dtype=torch.bfloat16),)) == "tf32"


def test_a_level_benched_without_solutions_scores_its_references_as_eager():
    from kernelkit.formats import summary

    def timed(op: str, impl: str, status: Status = Status.PASSED) -> BenchResult:
        return BenchResult(op, impl, "eager", (4,), "float32", "cpu", "hot", status, role="baseline")

    results = [timed("1_a", "eager"), timed("2_b", "eager", Status.RUNTIME_ERROR), timed("1_a", "compile")]
    assert summary.solution_impl(results) == "eager"  # the reference was timed once, as eager
    scores = summary.scores_from_results(results, None, ["1_a", "2_b", "3_c"])
    assert [(s.name, s.correct, s.speedup) for s in scores] == [("1_a", True, 1.0), ("2_b", False, None),
                                                                 ("3_c", False, None)]
