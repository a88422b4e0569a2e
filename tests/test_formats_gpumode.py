"""GPU MODE leaderboard tasks as kernelkit ops: task.yml read as YAML (and the errors for a bad one), specs as sizes,
the task's own seeds, its import layout (../utils.py), check_implementation's verdict beside kernelkit's, and
exported tasks and submissions. CPU only; the tasks are small ones written for these tests
(tests/fixtures/formats/gpumode)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import kernelkit as kk
from kernelkit import formats
from kernelkit.errors import LoadError, SpecError
from kernelkit.formats import gpumode
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


def test_a_task_becomes_one_op_with_a_size_per_test_and_benchmark_spec():
    _, op = task_and_op("vectoradd_py")
    assert op.name == "vectoradd_py" and list(op.impls) == ["reference", "submission"]
    # (size, seed) of each test, then of each benchmark: GPU MODE's leaderboard mode checks those too
    assert op.sizes == op.cpu_sizes == [(7, 4242), (33, 5236), (33, 1001), (64, 31232)]
    assert op.bench_sizes == [(64, 31232)]
    assert op.size_text((7, 4242)) == "size=7 seed=4242"
    assert op.dtypes == [torch.float16]  # read off generate_input
    assert op.tolerance_for(torch.float16) == (1e-3, 1e-3)  # make_match_reference(..., rtol=1e-3, atol=1e-3)
    assert "size = (size, seed)" in op.description


def test_submission_and_reference_pass_every_test_and_seed_zero_is_the_tasks_own():
    task, op = task_and_op("vectoradd_py")
    for size in op.sizes:
        assert [judge(op, impl, size).status for impl in op.impls] == [Status.PASSED, Status.PASSED]
    a, b, c, layout = op.make_inputs((7, 4242), torch.float16, torch.device("cpu"), 0)  # the data's tensors, its layout
    want = task.reference.generate_input(size=7, seed=4242)
    assert torch.equal(a, want[0]) and torch.equal(b, want[1]) and c.shape == (7, 7) and isinstance(layout, str)
    with pytest.raises(SpecError, match="makes its own dtypes .float16.; it cannot run in float32"):
        op.make_inputs((7, 4242), torch.float32, torch.device("cpu"), 0)
    other = op.make_inputs((7, 4242), torch.float16, torch.device("cpu"), 5)
    mixed = task.reference.generate_input(size=7, seed=gpumode.combine_seed(4242, 5))  # eval.py's _combine
    assert torch.equal(other[0], mixed[0])
    assert formats.gpumode_verdict(task).describe() == "GPU MODE: pass (3 tests, 1 benchmark)"


def test_a_wrong_submission_fails_both_verdicts():
    task, op = task_and_op("vectoradd_py", "submission_wrong.py")
    result = judge(op, "submission", op.sizes[0])
    verdict = formats.gpumode_verdict(task)
    assert result.status is Status.INCORRECT_NUMERICS
    assert not verdict.passed and [t.passed for t in verdict.tests] == [False, False, False, False]
    assert "mismatched elements" in verdict.tests[0].message
    side = formats.side_by_side(verdict, result)
    assert side.agree and side.line().startswith("GPU MODE: incorrect; kernelkit: INCORRECT_NUMERICS")


def test_data_that_is_one_tensor_and_the_tasks_tolerance():
    task, op = task_and_op("softmax_py")
    assert op.sizes == [(1, 129, 11), (17, 64, 12), (256, 1024, 13)] and op.dtypes == [torch.float32]
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


# What GPU MODE's task.yml files use: a comment header, flow-style entries, a nested mapping (config), block text
# whose lines look like YAML, integer timeouts. The block-style test entry is YAML too.
TASK_YML = """# name: demo
files:
  - {"name": "utils.py", "source": "../utils.py"}

description: |
  Some text.
  - a list in the text is not an entry

  tests: neither is this

config:
  main: "eval.py"

tests:
  - {"n": 4, "causal": True, "case": "band", "seed": 1}
  - {"n": 8, "causal": false, "groups": [2, 3], "seed": 2}  # a comment
  - n: 16
    causal: no
    seed: 3

gpus:
  - B200
test_timeout: 180
ranking_by: "geom"
"""


def test_task_yml_is_read_as_yaml(tmp_path: Path):
    path = tmp_path / "task.yml"
    path.write_text(TASK_YML)
    spec = gpumode.read_task_yml(path)
    assert spec["tests"] == [{"n": 4, "causal": True, "case": "band", "seed": 1},
                             {"n": 8, "causal": False, "groups": [2, 3], "seed": 2},
                             {"n": 16, "causal": False, "seed": 3}]
    assert spec["files"] == [{"name": "utils.py", "source": "../utils.py"}]
    assert spec["description"].splitlines() == ["Some text.", "- a list in the text is not an entry", "",
                                                "tests: neither is this"]
    assert spec["config"] == {"main": "eval.py"} and spec["gpus"] == ["B200"] and spec["test_timeout"] == 180
    codec = gpumode.ShapeCodec.of(spec["tests"])
    sizes = [codec.encode(t) for t in spec["tests"]]
    assert sizes == [(4, 1, 0, 1, 0), (8, 0, 1, 2, 1), (16, 0, 1, 3, 0)]  # n, causal, case, seed, groups (indices)
    assert [codec.decode(s) for s in sizes] == spec["tests"]
    assert "case: 0='band', 1=None" in codec.describe()
    with pytest.raises(SpecError, match="has 5 numbers"):
        codec.decode((4, 1))
    path.write_text("# nothing but a comment\n")
    assert gpumode.read_task_yml(path) == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tests:\n  - {n: [1, 2}\n", r"task.yml:2:\d+: not valid YAML: expected ',' or ']'"),
        ("tests:\n\t- {n: 1}\n", r"task.yml:2:1: not valid YAML: found character '\\t'"),
        (b"ranking_by: \"g\xe9om\"\n", r"task.yml: not valid YAML: not utf-8 text \(at byte 14: invalid continuation"),
        ("ranking_by: \"\x07\"\n", "task.yml: not valid YAML: character #x0007 at position 13 is not allowed"),
        ("- {n: 1}\n- {n: 2}\n", "task.yml: not a GPU MODE task: its top level is a list"),
        ("tests: {n: 1}\n", "task.yml: tests must be a list of mappings, got a dict"),
        ("tests:\n  - {n: 1}\n  - 4\n", "task.yml: entry 2 of tests is 4, not a mapping"),
        ("files:\n  - utils.py\n", "task.yml: entry 1 of files is 'utils.py', not a mapping"),
    ],
    ids=["unclosed-bracket", "tab-indent", "not-utf8", "a-control-character", "a-list", "tests-a-mapping",
         "test-a-number", "files-names"],
)
def test_a_bad_task_yml_is_a_load_error_naming_the_file_and_the_problem(tmp_path: Path, text: str | bytes,
                                                                          message: str):
    path = tmp_path / "task.yml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(LoadError, match=message) as info:
        gpumode.read_task_yml(path)
    assert str(info.value).startswith(str(path)) and "\n" not in str(info.value)


def test_an_unreadable_task_yml_says_so(tmp_path: Path):
    (tmp_path / "task.yml").mkdir()  # what open() cannot read, even as root
    with pytest.raises(LoadError, match=r"task.yml: cannot read it: Is a directory"):
        gpumode.read_task_yml(tmp_path / "task.yml")


def test_a_task_with_a_bad_task_yml_is_one_line_at_the_command_line(tmp_path: Path, fresh_cache: Path):
    from kernelkit.cli import app

    task = tmp_path / "vectoradd_py"
    shutil.copytree(GM / "vectoradd_py", task)
    (task / "task.yml").write_text("tests:\n  - {size: 7, seed: 4242\n")
    result = CliRunner().invoke(app, ["check", str(task), "--device", "cpu"])
    assert result.exit_code == 2, result.output
    said = "".join(result.output.split())  # rich wraps long lines, also inside a path
    assert "task.yml:3:1:notvalidYAML:expected','or'}'" in said and "Traceback" not in result.output


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
    assert result.status is Status.SKIPPED and "makes its inputs on a GPU, and this machine has none" in result.message


def test_the_verdict_as_a_worker_job():
    outcome = VerdictJob("gpumode", str(GM / "vectoradd_py"), str(GM / "vectoradd_py" / "submission_wrong.py")
                         ).execute("cpu")
    assert outcome.status is Status.PASSED and outcome.verdict is not None and not outcome.verdict.ok
    missing = VerdictJob("gpumode", str(GM)).execute("cpu")
    assert missing.status is Status.RUNTIME_ERROR and "no task.yml" in missing.message


def test_a_task_runs_through_kk_check(fresh_cache: Path):
    report = kk.check(formats.source_file(GM / "softmax_py"), device="cpu", isolate=False)
    assert [(r.impl, r.status) for r in report.results] == [("reference", Status.PASSED)] * 3 + [
        ("submission", Status.PASSED)] * 3


def test_an_exported_task_and_submission_load_and_pass(tmp_path: Path, cpu_process: None):
    square = load("kernelkit.ops.square")["square"]
    folder = formats.export_problem(square, "gpumode", tmp_path / "square_py", sizes=[(33, 17), (1, 5)])
    submission = formats.export_submission(square, "eager", "gpumode", folder / "submission.py")
    assert formats.detect(folder) == "gpumode"
    task = gpumode.load_task(folder)
    op = gpumode.task_op(task)
    assert op.sizes[:2] == [(33, 17, 1000), (1, 5, 1001)] and task.submission_path == submission
    for size in op.sizes:
        assert judge(op, "submission", size).status is Status.PASSED
    assert formats.gpumode_verdict(task).passed
