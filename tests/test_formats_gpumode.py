"""GPU MODE leaderboard tasks as kernelkit ops: task.yml read without PyYAML, specs as sizes, the task's own seeds,
its import layout (../utils.py), check_implementation's verdict beside kernelkit's, and exported tasks and
submissions. CPU only; the tasks are small ones written for these tests (tests/fixtures/formats/gpumode)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import kernelkit as kk
from kernelkit import formats
from kernelkit.errors import LoadError, SpecError
from kernelkit.formats import _taskyml, gpumode
from kernelkit.formats.jobs import VerdictJob
from kernelkit.jobs.check import check_case
from kernelkit.results import Status
from kernelkit.spec import Case, Op, dtype_name
from kernelkit.target import load

GM = Path(__file__).parent / "fixtures" / "formats" / "gpumode"


def judge(op: Op, impl: str, size: tuple[int, ...], seed: int = 0) -> kk.CaseResult:
    return check_case(Case("formats-test", op.name, impl, size, dtype_name(op.dtypes[0]), seed), op, "cpu")


def task_and_op(name: str, submission: str | Path | None = None, **kwargs) -> tuple[gpumode.Task, Op]:
    chosen = GM / name / submission if isinstance(submission, str) else submission
    task = gpumode.load_task(GM / name, chosen)
    return task, gpumode.task_op(task, **kwargs)


def test_a_task_becomes_one_op_with_a_size_per_test_spec():
    _, op = task_and_op("vectoradd_py")
    assert op.name == "vectoradd_py" and list(op.impls) == ["reference", "submission"]
    assert op.sizes == op.cpu_sizes == [(7, 4242), (33, 5236), (33, 1001)]  # (size, seed) of each test
    assert op.bench_sizes == [(64, 31232)]
    assert op.dtypes == [torch.float16]  # read off generate_input
    assert op.tolerance_for(torch.float16) == (1e-3, 1e-3)  # make_match_reference(..., rtol=1e-3, atol=1e-3)
    assert "size = (size, seed)" in op.description


def test_submission_and_reference_pass_every_test_and_seed_zero_is_the_tasks_own():
    task, op = task_and_op("vectoradd_py")
    for size in op.sizes:
        assert [judge(op, impl, size).status for impl in op.impls] == [Status.PASSED, Status.PASSED]
    a, b, c = op.make_inputs((7, 4242), torch.float16, torch.device("cpu"), 0)
    want = task.reference.generate_input(size=7, seed=4242)
    assert torch.equal(a, want[0]) and torch.equal(b, want[1]) and c.shape == (7, 7)
    with pytest.raises(SpecError, match="makes its own dtypes .float16.; it cannot run in float32"):
        op.make_inputs((7, 4242), torch.float32, torch.device("cpu"), 0)
    other = op.make_inputs((7, 4242), torch.float16, torch.device("cpu"), 5)
    mixed = task.reference.generate_input(size=7, seed=gpumode.combine_seed(4242, 5))  # eval.py's _combine
    assert torch.equal(other[0], mixed[0])
    assert formats.gpumode_verdict(task).describe() == "GPU MODE: pass (3 tests)"


def test_a_wrong_submission_fails_both_verdicts():
    task, op = task_and_op("vectoradd_py", "submission_wrong.py")
    result = judge(op, "submission", op.sizes[0])
    verdict = formats.gpumode_verdict(task)
    assert result.status is Status.INCORRECT_NUMERICS
    assert not verdict.passed and [t.passed for t in verdict.tests] == [False, False, False]
    assert "mismatched elements" in verdict.tests[0].message
    side = formats.side_by_side(verdict, result)
    assert side.agree and side.line().startswith("GPU MODE: incorrect; kernelkit: INCORRECT_NUMERICS")


def test_data_that_is_one_tensor_and_the_tasks_tolerance():
    task, op = task_and_op("softmax_py")
    assert op.sizes == [(1, 129, 11), (17, 64, 12)] and op.dtypes == [torch.float32]
    assert op.tolerance_for(torch.float32) == (1e-6, 1e-4)
    for size in op.sizes:
        assert judge(op, "submission", size).status is Status.PASSED
    assert formats.gpumode_verdict(task).passed


def test_writing_into_the_data_is_allowed_because_each_call_gets_a_clone():
    _, op = task_and_op("vectoradd_py")
    assert judge(op, "submission", op.sizes[0]).status is Status.PASSED
    _, raw = task_and_op("vectoradd_py", copy_inputs=False)  # without the clone, kernelkit sees the write
    result = judge(raw, "submission", raw.sizes[0])
    assert result.status is Status.INPUT_MUTATED and "argument 2" in result.message


def test_a_submission_that_fails_to_import_is_a_compile_error(tmp_path: Path):
    bad = tmp_path / "submission.py"
    bad.write_text("from task import input_t\n\n\nVALUE = 1 / 0\n")
    task, op = task_and_op("vectoradd_py", bad)
    result = judge(op, "submission", op.sizes[0])
    assert result.status is Status.COMPILE_ERROR
    assert "submission.py failed (line 4): ZeroDivisionError" in result.message
    assert judge(op, "reference", op.sizes[0]).status is Status.PASSED
    assert not formats.gpumode_verdict(task).passed


def test_the_tasks_plain_module_names_resolve_only_while_it_loads(monkeypatch: pytest.MonkeyPatch):
    sentinel = type(sys)("utils")
    monkeypatch.setitem(sys.modules, "utils", sentinel)
    task, _ = task_and_op("vectoradd_py")
    assert sys.modules["utils"] is sentinel  # what held the name before is back
    assert "task" not in sys.modules and "reference" not in sys.modules
    assert task.reference.make_match_reference.__module__ != "utils"  # the task's own ../utils.py
    with pytest.raises(LoadError, match="no task.yml"):
        gpumode.load_task(GM)


def test_task_yml_is_read_without_pyyaml(tmp_path: Path):
    path = tmp_path / "task.yml"
    path.write_text(
        '# name: demo\nfiles:\n  - {"name": "utils.py", "source": "../utils.py"}\n\ndescription: |\n'
        "  Some text.\n  - a list in the text is not an entry\n\ntests:\n"
        '  - {"n": 4, "causal": True, "case": "band", "seed": 1}\n'
        '  - {"n": 8, "causal": false, "groups": [2, 3], "seed": 2}  # a comment\n'
        'gpus:\n  - B200\nranking_by: "geom"\n'
    )
    spec = _taskyml._read_simple_yml(path.read_text(), path)
    assert spec["tests"] == [{"n": 4, "causal": True, "case": "band", "seed": 1},
                             {"n": 8, "causal": False, "groups": [2, 3], "seed": 2}]
    assert spec["files"] == [{"name": "utils.py", "source": "../utils.py"}]
    assert spec["gpus"] == ["B200"] and spec["ranking_by"] == "geom" and spec["description"] is None
    codec = gpumode.ShapeCodec.of(spec["tests"])
    sizes = [codec.encode(t) for t in spec["tests"]]
    assert sizes == [(4, 1, 0, 1, 0), (8, 0, 1, 2, 1)]  # n, causal, case (by index), seed, groups (by index)
    assert [codec.decode(s) for s in sizes] == spec["tests"]
    assert "case: 0='band', 1=None" in codec.describe()
    with pytest.raises(SpecError, match="has 5 numbers"):
        codec.decode((4, 1))
    path.write_text("tests:\n  - {n: [1, 2}\n")
    with pytest.raises(LoadError, match="cannot read"):
        _taskyml._read_simple_yml(path.read_text(), path)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the case runs where there is a GPU")
def test_a_task_that_makes_its_inputs_on_a_gpu_is_skipped_here(tmp_path: Path):
    (tmp_path / "task.yml").write_text('tests:\n  - {"size": 4, "seed": 1}\n')
    (tmp_path / "reference.py").write_text(
        "import torch\n\ndef ref_kernel(data):\n    return data * 2\n\n"
        "def generate_input(size, seed):\n    gen = torch.Generator(device='cuda')\n"
        "    return torch.randn(size, device='cuda', generator=gen)\n\n"
        "def check_implementation(data, output):\n    return True, ''\n"
    )
    op = gpumode.task_op(gpumode.load_task(tmp_path))
    result = judge(op, "reference", (4, 1))
    assert result.status is Status.SKIPPED and "needs a GPU" in result.message


def test_the_verdict_as_a_worker_job():
    outcome = VerdictJob("gpumode", str(GM / "vectoradd_py"), str(GM / "vectoradd_py" / "submission_wrong.py")
                         ).execute("cpu")
    assert outcome.status is Status.PASSED and outcome.verdict is not None and not outcome.verdict.ok
    missing = VerdictJob("gpumode", str(GM)).execute("cpu")
    assert missing.status is Status.RUNTIME_ERROR and "no task.yml" in missing.message


def test_a_task_runs_through_kk_check(fresh_cache: Path):
    report = kk.check(formats.source_file(GM / "softmax_py"), device="cpu", isolate=False)
    assert [(r.impl, r.status) for r in report.results] == [("reference", Status.PASSED)] * 2 + [
        ("submission", Status.PASSED)] * 2


def test_an_exported_task_and_submission_load_and_pass(tmp_path: Path, cpu_process: None):
    square = load("kernelkit.ops.square")["square"]
    folder = formats.export_problem(square, "gpumode", tmp_path / "square_py", sizes=[(33, 17), (1, 5)])
    submission = formats.export_submission(square, "eager", "gpumode", folder / "submission.py")
    assert formats.detect(folder) == "gpumode"
    task = gpumode.load_task(folder)
    op = gpumode.task_op(task)
    assert op.sizes == [(33, 17, 1000), (1, 5, 1001)] and task.submission_path == submission
    for size in op.sizes:
        assert judge(op, "submission", size).status is Status.PASSED
    assert formats.gpumode_verdict(task).passed
