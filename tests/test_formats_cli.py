"""Outside problem formats through kernelkit's commands and API: `kernelkit check` and `bench` of a KernelBench
problem and solution, a folder of problems (a level) and a GPU MODE task; the format's own verdict beside
kernelkit's; the level summary and compare between two solution sets; `kernelkit export` and its round trip; bad
paths; a case too big for the device. CPU only, on the small problems in tests/fixtures/formats.

Workers run in this process here (``in_process_workers``): spawning one costs seconds on a small machine, and the
runner's isolation is tested in test_runner.py; one test (``test_workers_import_the_generated_op_file``) spawns a
real worker to show the generated op file loads there.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import kernelkit as kk
from kernelkit import formats, runner
from kernelkit.cli import app
from kernelkit.formats.jobs import verdict_jobs
from kernelkit.jobs.check import check_case
from kernelkit.results import Status
from kernelkit.runs.verdicts import run_verdicts
from kernelkit.spec import Case, dtype_name
from kernelkit.target import open_target

FIXTURES = Path(__file__).parent / "fixtures" / "formats"
KB, GM = FIXTURES / "kernelbench", FIXTURES / "gpumode"
cli = CliRunner()


class InProcessWorker:
    """runner.Worker's interface, running each job here."""

    def __init__(self, device: str, log_path: Path) -> None:
        self.device = device

    def run(self, job, timeout: float):
        return job.execute(self.device)

    def stop(self) -> None:
        pass


@pytest.fixture
def in_process_workers(monkeypatch: pytest.MonkeyPatch, fresh_cache: Path, cpu_process: None) -> None:
    from kernelkit.measure import ceilings

    monkeypatch.setattr(runner, "Worker", InProcessWorker)
    monkeypatch.setattr(ceilings, "calibrate", no_ceilings)  # minutes on a busy CPU; % of ceiling is not tested here


def no_ceilings(device: str, force: bool = False):
    raise kk.KernelkitError("not calibrated in these tests")


def invoke(*args: str):
    result = cli.invoke(app, [*args, "--device", "cpu"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def test_check_a_problem_and_a_wrong_solution_says_why_beside_kernelbench(in_process_workers: None):
    result = invoke("check", str(KB / "relu.py"), "--solution", str(KB / "relu_wrong.py"))
    assert result.exit_code == 1, result.output
    assert "relu" in result.output and "INCORRECT_NUMERICS" in result.output
    assert "the format's own verdict, beside kernelkit's" in result.output
    assert "relu (solution): KernelBench: incorrect (0/5 trials" in result.output

    weak = invoke("check", str(KB / "softmax_wide.py"), "--solution", str(KB / "softmax_zeros.py"), "--json")
    data = json.loads(weak.stdout)
    assert {r["status"] for r in data["results"] if r["impl"] == "solution"} == {"WEAK"}
    [verdict] = data["verdicts"]
    assert verdict["format"] == "KernelBench" and verdict["format_ok"] and not verdict["agree"]
    assert verdict["kernelkit"] == "WEAK" and verdict["why"].startswith("a trivial output passes these inputs")


def test_check_a_level_matches_solutions_by_name(in_process_workers: None):
    result = invoke("check", str(KB / "level"), "--solution", str(KB / "level_solutions"), "--json")
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    got = {(r["op"], r["impl"]): r["status"] for r in data["results"]}
    assert got[("2_scale", "solution")] == "INCORRECT_NUMERICS" and got[("1_relu6", "solution")] == "PASSED"
    sides = {v["op"]: (v["format_ok"], v["kernelkit"], v["agree"]) for v in data["verdicts"]}
    assert sides == {"1_relu6": (True, "PASSED", True), "2_scale": (False, "INCORRECT_NUMERICS", True),
                     "3_row_sum": (True, "PASSED", True)}
    alone = invoke("check", str(KB / "level"), "--no-verdicts")  # no solutions: each reference is the solution
    assert alone.exit_code == 0, alone.output
    assert alone.output.count("PASSED") == 3 and "own verdict" not in alone.output


def test_check_a_gpumode_task_with_its_own_and_a_wrong_submission(in_process_workers: None):
    good = invoke("check", str(GM / "vectoradd_py"))
    assert good.exit_code == 0, good.output
    assert "vectoradd_py (submission): GPU MODE: pass (3 tests, 1 benchmark); kernelkit: PASSED" in good.output
    wrong = invoke("check", str(GM / "vectoradd_py"), "--solution", str(GM / "vectoradd_py" / "submission_wrong.py"))
    assert wrong.exit_code == 1 and "INCORRECT_NUMERICS" in wrong.output
    assert "GPU MODE: fail (3 of 3 tests, 1 of 1 benchmark failed" in wrong.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["check", "/no/such/problem.py"], "no such file"),
        (["check", str(FIXTURES)], "is neither a KernelBench problem"),
        (["check", "square", "--solution", str(KB / "relu_solution.py")], "--solution is for a KernelBench problem"),
        (["check", str(KB / "relu.py"), "--solution", "/no/such/solution.py"], "no such solution"),
        (["bench", str(KB / "level"), "--solution", str(KB / "relu_solution.py")], "folder of solution files"),
        (["check", str(GM / "vectoradd_py"), "--solution", str(KB / "level")], "a submission file"),
    ],
)
def test_bad_paths_exit_2_with_one_line(args: list[str], message: str, fresh_cache: Path):
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())  # rich wraps long lines
    assert "Traceback" not in result.output


def test_bench_a_level_prints_its_summary_stores_it_and_compares_two_solution_sets(
    in_process_workers: None, tmp_path: Path,
):
    better = tmp_path / "better"
    better.mkdir()
    shutil.copy(KB / "level_solutions" / "1_relu6.py", better / "1_relu6.py")
    fixed = (KB / "level" / "2_scale.py").read_text().replace("class Model(", "class ModelNew(")
    (better / "2_scale.py").write_text(fixed)
    shutil.copy(KB / "level_solutions" / "level_1_problem_3_sample_0_kernel.py", better / "3_row_sum.py")
    store = tmp_path / "runs.sqlite"
    # Strict mode, where bench has it (on for a stored run), calls this process's test doubles tampering.
    lax = ["--no-strict"] if "--no-strict" in cli.invoke(app, ["bench", "--help"], terminal_width=300).output else []
    common = ("--impl", "solution", "--impl", "eager", "--budget", "0.01", "--store", str(store), *lax)
    first = invoke("bench", str(KB / "level"), "--solution", str(KB / "level_solutions"), *common)
    second = invoke("bench", str(KB / "level"), "--solution", str(better), *common)
    assert first.exit_code == 1, first.output  # 2_scale's solution is wrong
    assert "level summary" in first.output and "3 problems, 2 correct" in first.output
    assert "fast_0 = " in first.output and "fast_2 = " in first.output and "geometric-mean speedup" in first.output
    assert second.exit_code == 0, second.output
    assert "3 problems, 3 correct" in second.output
    with kk_store(store) as db:
        [newest, oldest] = db.runs(2)
        assert newest.env["solution"] == str(better) and oldest.env["solution"] == str(KB / "level_solutions")
        assert newest.env["user_file"] == str(KB / "level") and newest.env["format"] == "kernelbench-level"
    compared = cli.invoke(app, ["compare", "latest-1", "latest", "--store", str(store)])
    assert compared.exit_code == 0, compared.output
    assert "1_relu6/solution/" in compared.output and "2_scale/solution/" in compared.output


def test_a_problem_without_a_solution_counts_in_the_level_summary_as_not_correct():
    class Result:  # a BenchResult's fields that the summary reads
        def __init__(self, op: str, impl: str, speedup: float | None) -> None:
            self.op, self.impl, self.status = op, impl, Status.PASSED
            self.speedups = {} if speedup is None else {"eager": type("Ratio", (), {"value": speedup})()}

    results = [Result("a", "solution", 2.5), Result("a", "eager", None), Result("b", "eager", None)]
    scores = formats.summary.scores_from_results(results, ops=["a", "b", "c"])
    assert [(s.name, s.correct, s.speedup) for s in scores] == [("a", True, 2.5), ("b", False, None),
                                                                ("c", False, None)]
    summary = formats.level_summary(scores)
    assert summary.fast[2.0] == pytest.approx(1 / 3) and summary.geomean_speedup == pytest.approx(2.5)


def kk_store(path: Path):
    from kernelkit.store import Store

    return Store.open(path)


def test_bench_a_gpumode_task_prints_its_ranking_score(in_process_workers: None):
    result = invoke("bench", str(GM / "softmax_py"), "--impl", "submission", "--impl", "eager", "--budget", "0.01",
                    "--no-store")
    assert result.exit_code == 0, result.output
    assert "GPU MODE score (geometric mean of the benchmark times" in result.output
    assert "submission " in result.output.split("GPU MODE score")[1]


def test_the_api_takes_a_solution_too(in_process_workers: None):
    report = kk.check(str(KB / "relu.py"), solution=str(KB / "relu_solution.py"), device="cpu", isolate=False)
    assert [(r.impl, r.status) for r in report.results] == [("reference", Status.PASSED), ("solution", Status.PASSED)]
    sweep = kk.bench_op(str(KB / "relu.py"), solution=str(KB / "relu_solution.py"), impls=["solution"],
                        baselines=False, device="cpu", budget=0.01)
    assert [(r.impl, r.status) for r in sweep.results] == [("solution", Status.PASSED)]
    opened = open_target(str(KB / "relu.py"), "cpu", str(KB / "relu_solution.py"))
    assert opened.format == "kernelbench" and opened.solution == str(KB / "relu_solution.py")
    assert opened.user_file == str(KB / "relu.py") and opened.source.endswith(".py")
    planned = verdict_jobs(KB / "level", KB / "level_solutions")
    assert [(p.op, p.impl) for p in planned] == [("1_relu6", "solution"), ("2_scale", "solution"),
                                                 ("3_row_sum", "solution")]
    [row] = run_verdicts(verdict_jobs(KB / "relu.py", KB / "relu_solution.py"), report.results, "cpu")
    assert row.side is not None and row.side.agree and row.side.format_ok


def test_export_round_trip_through_the_cli(in_process_workers: None, tmp_path: Path):
    solution, problem = tmp_path / "sq_solution.py", tmp_path / "sq_problem.py"
    wrote = invoke("export", "square", "--impl", "eager", "--format", "kernelbench", "-o", str(solution),
                   "--problem", str(problem), "--sizes", "9x5")
    assert wrote.exit_code == 0, wrote.output
    checked = invoke("check", str(problem), "--solution", str(solution))
    assert checked.exit_code == 0, checked.output
    assert "sq_problem (solution): KernelBench: correct (5/5 trials" in checked.output

    task = tmp_path / "square_py"
    wrote = invoke("export", "square", "--impl", "eager", "--format", "gpumode", "-o", str(task / "submission.py"),
                   "--problem", str(task), "--sizes", "9x5,1x3")
    assert wrote.exit_code == 0, wrote.output
    checked = invoke("check", str(task))
    assert checked.exit_code == 0, checked.output
    assert "square_py (submission): GPU MODE: pass (2 tests, 2 benchmarks); kernelkit: PASSED" in checked.output

    again = invoke("export", "square", "--impl", "eager", "--format", "kernelbench", "-o", str(solution))
    assert again.exit_code == 2 and "exists; pass --force" in again.output
    assert invoke("export", "square", "--impl", "eager", "--format", "kernelbench", "-o", str(solution),
                  "--force").exit_code == 0
    for args, message in ((("--impl", "fastest", "--format", "gpumode"), "no impl 'fastest'"),
                          (("--impl", "eager", "--format", "leetgpu"), "unknown format 'leetgpu'")):
        bad = invoke("export", "square", *args, "-o", str(tmp_path / "x.py"))
        assert bad.exit_code == 2 and message in bad.output


def test_a_problem_too_big_for_the_device_is_skipped_with_the_reason(fresh_cache: Path, tmp_path: Path):
    text = (KB / "relu.py").read_text().replace(
        "    return [torch.randn(batch_size, dim)]",
        '    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")')
    (tmp_path / "huge.py").write_text(text)
    [op] = formats.load_ops(tmp_path / "huge.py")
    result = check_case(Case("t", op.name, "reference", (0,), dtype_name(torch.float32), 0), op, "cpu")
    assert result.status is Status.SKIPPED
    assert result.message.startswith("out of memory on this machine: ") and "80.00 GiB" in result.message


@pytest.mark.slow
def test_workers_import_the_generated_op_file(fresh_cache: Path):
    report = kk.check(str(KB / "relu.py"), solution=str(KB / "relu_wrong.py"), device="cpu")
    assert [(r.impl, r.status) for r in report.results] == [
        ("reference", Status.PASSED), ("solution", Status.INCORRECT_NUMERICS)]


def test_an_impls_own_out_of_memory_is_its_runtime_error(fresh_cache: Path, tmp_path: Path):
    (tmp_path / "greedy.py").write_text((KB / "relu_solution.py").read_text().replace(
        "class ModelNew(nn.Module):",
        'def _greedy(*args):\n    raise RuntimeError("CUDA error: out of memory")\n\n\nclass ModelNew(nn.Module):'
    ).replace("return torch.where(x > 0, x, torch.zeros_like(x))", "return _greedy(x)"))
    [op] = formats.load_ops(KB / "relu.py", tmp_path / "greedy.py")
    result = check_case(Case("t", op.name, "solution", op.sizes[0], dtype_name(torch.float32), 0), op, "cpu")
    assert result.status is Status.RUNTIME_ERROR and "out of memory" in result.message


GPU_OOM_PROBLEM = '''"""A problem whose input does not fit any GPU."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2


def get_inputs():
    return [torch.empty(400 * 2**30 // 4, device="cuda")]  # 400 GiB


def get_init_inputs():
    return []
'''


@pytest.mark.gpu
def test_on_a_gpu_a_level_runs_in_workers_and_a_problem_too_big_is_skipped(fresh_cache: Path, tmp_path: Path):
    level = tmp_path / "level"
    shutil.copytree(KB / "level", level)
    (level / "4_huge.py").write_text(GPU_OOM_PROBLEM)
    report = kk.check(str(level), device="cuda")
    got = {r.op: r for r in report.results}
    assert all(got[name].status is Status.PASSED for name in ("1_relu6", "2_scale", "3_row_sum"))
    assert got["4_huge"].status is Status.SKIPPED and got["4_huge"].message.startswith("out of memory on this GPU")
    result = cli.invoke(app, ["bench", str(level), "--device", "cuda", "--impl", "reference", "--impl", "eager",
                              "--budget", "0.2", "--no-store"])
    assert "4 problems, 3 correct" in result.output, result.output
    assert "fast_0 = " in result.output and "out of memory on this GPU" in result.output
