"""KernelBench problems as kernelkit ops: loading, weights and inputs as KernelBench shares them, both verdicts side
by side, level folders, the level summary math, the load-only scan, and exported solutions. CPU only; the
problems are small ones written for these tests (tests/fixtures/formats/kernelbench)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import torch

import kernelkit as kk
from kernelkit import formats
from kernelkit.errors import LoadError, SpecError
from kernelkit.formats import kernelbench, scan
from kernelkit.formats.jobs import VerdictJob
from kernelkit.jobs.check import check_case
from kernelkit.results import Status
from kernelkit.spec import Case, Op, dtype_name
from kernelkit.target import load

KB = Path(__file__).parent / "fixtures" / "formats" / "kernelbench"
GPUMODE = Path(__file__).parent / "fixtures" / "formats" / "gpumode"


def judge(op: Op, impl: str, seed: int = 0) -> kk.CaseResult:
    size = op.sizes_for("cpu")[0]
    return check_case(Case("formats-test", op.name, impl, size, dtype_name(op.dtypes[0]), seed), op, "cpu")


def one_op(problem: str, solution: str | Path | None = None, **kwargs) -> Op:
    [op] = formats.load_ops(KB / problem, KB / solution if isinstance(solution, str) else solution, **kwargs)
    return op


def test_problem_and_solution_pass_with_one_fixed_size_and_kernelbench_tolerance():
    op = one_op("relu.py", "relu_solution.py")
    assert op.name == "relu" and list(op.impls) == ["reference", "solution"]
    assert op.sizes == op.cpu_sizes == op.bench_sizes == [(16, 300)]  # the first input's shape
    assert op.tolerance_for(torch.float32) == (1e-4, 1e-4)
    assert [judge(op, impl).status for impl in op.impls] == [Status.PASSED, Status.PASSED]
    loose = one_op("relu.py", tolerance=kernelbench.KERNELBENCH_V01_TOLERANCE)
    assert loose.tolerance_for(torch.float32) == (1e-2, 1e-2)


def test_inputs_are_seeded_fixed_in_size_and_leave_the_global_generator_alone():
    op = one_op("relu.py")
    before = torch.get_rng_state()
    a = op.make_inputs((16, 300), torch.float32, torch.device("cpu"), 3)
    b = op.make_inputs((16, 300), torch.float32, torch.device("cpu"), 3)
    c = op.make_inputs((16, 300), torch.float32, torch.device("cpu"), 4)
    assert torch.equal(torch.get_rng_state(), before)
    assert torch.equal(a[0], b[0]) and not torch.equal(a[0], c[0])
    torch.manual_seed(3)
    assert torch.equal(a[0], torch.randn(16, 300))  # KernelBench's draw: manual_seed, then get_inputs() on the CPU
    with pytest.raises(SpecError, match="fixed by get_inputs.*16x300.*cannot run at size 8x8"):
        op.make_inputs((8, 8), torch.float32, torch.device("cpu"), 0)
    with pytest.raises(SpecError, match="inputs_on"):
        one_op("relu.py", inputs_on="gpu")


def test_weights_are_shared_through_the_seed_only_as_kernelbench_does():
    same = one_op("linear.py", "linear_solution.py")
    assert judge(same, "solution").status is Status.PASSED
    assert formats.kernelbench_verdict(KB / "linear.py", KB / "linear_solution.py", device="cpu").correct
    # A ModelNew that draws a parameter before its nn.Linear gets other weights: no state_dict is copied.
    reordered = one_op("linear.py", "linear_reordered.py")
    result = judge(reordered, "solution")
    assert result.status is Status.INCORRECT_NUMERICS
    verdict = formats.kernelbench_verdict(KB / "linear.py", KB / "linear_reordered.py", device="cpu")
    assert verdict.compiled and not verdict.correct and verdict.trials_passed == 0
    assert formats.side_by_side(verdict, result).agree


def test_a_worker_keeps_the_models_of_one_problem_only_and_counts_them_as_its_own_cache():
    from kernelkit.jobs.check import kept_bytes

    first, second = one_op("linear.py", "linear_solution.py"), one_op("relu.py")
    assert judge(first, "solution").status is Status.PASSED
    held = kernelbench.held_bytes("cpu")
    assert held >= 2 * 4 * 8 * 16  # the Linear's weights, in the reference's float32 and float64 and the solution's
    assert kept_bytes("cpu") >= held
    assert judge(second, "reference").status is Status.PASSED
    assert kernelbench.held_bytes("cpu") == 0  # relu has no weights; linear's were let go


def test_a_wrong_solution_fails_both_verdicts():
    op = one_op("relu.py", "relu_wrong.py")
    result = judge(op, "solution")
    verdict = formats.kernelbench_verdict(KB / "relu.py", KB / "relu_wrong.py", device="cpu")
    assert result.status is Status.INCORRECT_NUMERICS
    assert (verdict.correct, verdict.trials_passed, verdict.trials, len(verdict.max_difference)) == (False, 0, 5, 5)
    assert "output mismatch in 5 of 5 trials" in verdict.describe()


def test_zeros_pass_kernelbench_but_kernelkit_calls_the_case_weak():
    op = one_op("softmax_wide.py", "softmax_zeros.py")
    result = judge(op, "solution")
    verdict = formats.kernelbench_verdict(KB / "softmax_wide.py", KB / "softmax_zeros.py", device="cpu")
    assert verdict.correct and verdict.trials_passed == 5
    assert result.status is Status.WEAK and "all zeros" in result.message
    side = formats.side_by_side(verdict, result)
    assert not side.agree
    assert side.line().startswith("KernelBench: correct; kernelkit: WEAK — a trivial output passes these inputs")
    assert judge(op, "reference").status is Status.WEAK  # the problem itself is weak, whatever the solution


def test_a_random_model_passes_kernelkit_and_fails_kernelbench_even_as_its_own_solution():
    op = one_op("dropout.py")
    assert judge(op, "reference").status is Status.PASSED  # every call draws from the same fixed seed
    problem = kernelbench.load_problem(KB / "dropout.py")
    verdict = formats.kernelbench_verdict(problem, problem.model, device="cpu")
    assert not verdict.correct  # KernelBench runs Model, then ModelNew: the generator has moved on
    line = formats.side_by_side(verdict, judge(op, "reference")).line()
    assert line.startswith("KernelBench: incorrect; kernelkit: PASSED — KernelBench says output mismatch")


def test_the_verdict_as_a_worker_job_defaults_to_the_reference_as_its_solution():
    outcome = VerdictJob("kernelbench", str(KB / "relu.py")).execute("cpu")
    assert outcome.status is Status.PASSED and outcome.verdict is not None and outcome.verdict.ok
    loose = VerdictJob("kernelbench", str(KB / "relu.py"), str(KB / "relu_wrong.py"), tolerance=1.0).execute("cpu")
    assert loose.verdict is not None and loose.verdict.ok  # leaky relu's 0.1x is within atol = rtol = 1
    broken = VerdictJob("kernelbench", str(KB / "broken.py")).execute("cpu")
    assert broken.status is Status.RUNTIME_ERROR and "broken.py failed (line 5)" in broken.message


def test_kernelbench_casts_integer_inputs_to_the_precision_and_kernelkit_does_not():
    op = one_op("cross_entropy.py")
    inputs = op.make_inputs((8, 10), torch.float32, torch.device("cpu"), 0)
    assert inputs[1].dtype == torch.int64  # only floating inputs take the case's dtype
    result = judge(op, "reference")
    assert result.status is Status.PASSED
    problem = kernelbench.load_problem(KB / "cross_entropy.py")
    verdict = formats.kernelbench_verdict(problem, problem.model, device="cpu")
    assert verdict.compiled and not verdict.correct and "expected target dtype" in verdict.message
    assert not formats.side_by_side(verdict, result).agree


def test_a_problem_that_fails_to_import_names_its_file_and_line(tmp_path: Path):
    with pytest.raises(LoadError, match=r"broken.py failed \(line 5\): ModuleNotFoundError"):
        formats.load_ops(KB / "broken.py")
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\n\nclass Model(torch.nn.Module:\n    pass\n\ndef get_inputs():\n    return []\n")
    with pytest.raises(LoadError, match=r"syntax error in .*bad.py:3"):
        formats.load_ops(bad)
    plain = tmp_path / "plain.py"
    plain.write_text("X = 1\n")
    with pytest.raises(LoadError, match="neither a KernelBench problem"):
        formats.load_ops(plain)


def test_a_solution_that_fails_to_import_is_a_compile_error_not_a_failed_load(tmp_path: Path):
    bad = tmp_path / "sol.py"
    bad.write_text("import torch\n\nclass ModelNew(torch.nn.Module):\n    scale = undefined_name\n")
    op = one_op("relu.py", bad)
    result = judge(op, "solution")
    assert result.status is Status.COMPILE_ERROR and "sol.py failed (line 4): NameError" in result.message
    assert judge(op, "reference").status is Status.PASSED
    verdict = formats.kernelbench_verdict(KB / "relu.py", bad, device="cpu")
    assert not verdict.compiled and verdict.describe().startswith("KernelBench: not compiled")


def test_each_file_is_its_own_module(tmp_path: Path):
    other = tmp_path / "relu.py"
    other.write_text((KB / "relu.py").read_text().replace("torch.relu(x)", "-x"))
    mine, theirs = kernelbench.load_problem(KB / "relu.py"), kernelbench.load_problem(other)
    assert mine.module.__name__ != theirs.module.__name__
    assert sys.modules[mine.module.__name__] is mine.module  # registered: Triton and pickling look modules up
    assert judge(one_op("relu.py", other), "solution").status is Status.COMPILE_ERROR  # it has no ModelNew


def test_a_level_folder_matches_solutions_by_name_and_runs_through_kk_check(fresh_cache: Path):
    source = formats.source_file(KB / "level", KB / "level_solutions")
    assert Path(source).is_relative_to(fresh_cache)
    report = kk.check(source, device="cpu", isolate=False)
    got = {(r.op, r.impl): r.status for r in report.results}
    assert got == {
        ("1_relu6", "reference"): Status.PASSED, ("1_relu6", "solution"): Status.PASSED,
        ("2_scale", "reference"): Status.PASSED, ("2_scale", "solution"): Status.INCORRECT_NUMERICS,
        # level_1_problem_3_sample_0_kernel.py: KernelBench's name for a generated sample; sample 1 is wrong
        ("3_row_sum", "reference"): Status.PASSED, ("3_row_sum", "solution"): Status.PASSED,
    }
    assert formats.source_file(KB / "level", KB / "level_solutions") == source  # same arguments, same file


def test_a_problem_of_a_level_that_does_not_load_fails_its_cases(tmp_path: Path):
    shutil.copy(KB / "level" / "1_relu6.py", tmp_path / "1_relu6.py")
    shutil.copy(KB / "broken.py", tmp_path / "2_broken.py")
    assert formats.detect(tmp_path) == "kernelbench-level"
    ops = formats.load_ops(tmp_path)
    assert [op.name for op in ops] == ["1_relu6", "2_broken"]
    result = judge(ops[1], "reference")  # the op's inputs cannot be made: the op's error, not an impl's
    assert result.status is Status.INPUT_ERROR and "2_broken.py failed (line 5)" in result.message


def test_detect_reads_the_files_without_importing_them(tmp_path: Path):
    assert formats.detect(KB / "relu.py") == "kernelbench"
    assert formats.detect(KB / "level") == "kernelbench-level"
    assert formats.detect(GPUMODE / "vectoradd_py") == "gpumode"
    assert formats.detect(KB / "relu_solution.py") is None
    assert formats.detect(tmp_path) is None


def test_level_summary_math_on_fake_numbers():
    scores = [
        formats.ProblemScore("a", True, 0.5), formats.ProblemScore("b", True, 1.5),
        formats.ProblemScore("c", True, 3.0), formats.ProblemScore("d", False, 10.0),
        formats.ProblemScore("e", False, None), formats.ProblemScore("f", True, None),
    ]
    summary = formats.level_summary(scores)
    assert (summary.n, summary.n_correct) == (6, 4)
    # fast_p counts every problem in the denominator; a fast but incorrect one never counts
    assert summary.fast == {0.0: pytest.approx(3 / 6), 1.0: pytest.approx(2 / 6), 2.0: pytest.approx(1 / 6)}
    assert summary.geomean_speedup == pytest.approx((0.5 * 1.5 * 3.0) ** (1 / 3))
    assert "fast_1 = 0.33" in summary.describe()
    empty = formats.level_summary([])
    assert empty.fast[0.0] == 0.0 and empty.geomean_speedup is None
    assert formats.geometric_mean([2.0, 8.0]) == pytest.approx(4.0)
    with pytest.raises(ValueError, match="positive"):
        formats.geometric_mean([1.0, 0.0])


def test_scan_loads_every_problem_without_running_it(tmp_path: Path):
    level = tmp_path / "KernelBench" / "level1"
    level.mkdir(parents=True)
    for f in (KB / "level").glob("*.py"):
        shutil.copy(f, level / f.name)
    shutil.copy(KB / "broken.py", level / "4_broken.py")
    results = scan.scan(tmp_path)["level1"]
    assert [(r.path.name, r.loaded, r.stage) for r in results] == [
        ("1_relu6.py", True, ""), ("2_scale.py", True, ""), ("3_row_sum.py", True, ""),
        ("4_broken.py", False, "import"),
    ]
    assert results[2].input_shapes == ((6, 1000),) and results[2].output_shapes == ((6,),)
    assert results[2].input_bytes == 6 * 1000 * 4
    assert "not_a_real_module_for_kernelkit" in results[3].message


def test_an_exported_solution_passes_against_a_hand_written_problem(tmp_path: Path, cpu_process: None):
    square = load("kernelkit.ops.square")["square"]
    solution = formats.export_submission(square, "eager", "kernelbench", tmp_path / "square_solution.py")
    op = one_op("square.py", solution)
    assert judge(op, "solution").status is Status.PASSED
    assert formats.kernelbench_verdict(KB / "square.py", solution, device="cpu").correct
    # The op exported as a problem too: the pair loads with this loader and passes both verdicts.
    problem = formats.export_problem(square, "kernelbench", tmp_path / "square_problem.py", sizes=[(5, 7)])
    [exported] = formats.load_ops(problem, solution)
    assert exported.sizes == [(5, 7)] and judge(exported, "solution").status is Status.PASSED
    assert formats.kernelbench_verdict(problem, solution, device="cpu").correct
    with pytest.raises(LoadError, match="no impl 'fastest'"):
        formats.export_submission(square, "fastest", "kernelbench", tmp_path / "x.py")
    with pytest.raises(SpecError, match="unknown format"):
        formats.export_submission(square, "eager", "leetgpu", tmp_path / "x.py")  # type: ignore[arg-type]
