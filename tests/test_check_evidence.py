"""What a check leaves beside its statuses when asked: the determinism note (--determinism), failing cases saved
with the command that checks each again (--save-failing), and compute-sanitizer's tools (--sanitize TOOL)."""

import shlex
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import kernelkit as kk
from kernelkit.cli import app
from kernelkit.jobs import sanitize
from kernelkit.jobs.evidence import determinism_note, differing_elements
from kernelkit.results import Status

PLANTED = str(Path(__file__).parent / "planted" / "planted_evidence.py")
pytestmark = pytest.mark.slow


def test_bitwise_differences_are_counted_element_by_element():
    a = torch.tensor([1.0, 0.0, float("nan"), 2.0])
    b = torch.tensor([1.0, -0.0, float("nan"), 2.0 + 2e-7])
    assert differing_elements(a, a.clone()) == 0
    assert differing_elements(a, b) == 2  # -0.0 is not 0.0 bit for bit; the same NaN is the same NaN
    assert differing_elements(a, b.double()) is None and differing_elements(a, a[:2]) is None
    assert differing_elements(torch.zeros(0), torch.zeros(0)) == 0
    assert determinism_note((a,), (a.clone(),)) == ""
    assert determinism_note((a, a), (a, b)).startswith("not deterministic: output 1 differs in 2 elements (of 4)")


@pytest.mark.parametrize("strict", [False, True])
def test_determinism_notes_an_impl_whose_two_calls_differ_and_keeps_its_status(strict):
    report = kk.check(PLANTED, impls=["eager_noisy", "eager_exact"], device="cpu", strict=strict, determinism=True)
    got = {r.impl: r for r in report.results}
    noisy, exact = got["eager_noisy"], got["eager_exact"]
    assert noisy.status is Status.PASSED and exact.status is Status.PASSED, (noisy.message, exact.message)
    note = next(w for w in noisy.warnings if w.startswith("not deterministic"))
    assert note.startswith("not deterministic: output 0 differs in ") and "elements (of 128)" in note
    assert noisy.details["determinism"] == note and noisy.to_dict()["details"]["determinism"] == note
    assert not exact.warnings and exact.details["determinism"].startswith("deterministic")
    plain = kk.check(PLANTED, impls=["eager_noisy"], device="cpu", strict=strict)
    assert not plain.results[0].warnings and "determinism" not in plain.results[0].details  # only when asked


@pytest.mark.parametrize("strict", [False, True])
def test_save_failing_writes_plain_tensors_and_a_command_that_checks_the_case_again(tmp_path, strict):
    folder = tmp_path / "failing"
    report = kk.check(PLANTED, impls=["eager_wrong", "eager_exact"], device="cpu", strict=strict, seeds=2,
                      save_failing=folder)
    wrong = [r for r in report.results if r.impl == "eager_wrong"]
    assert [r.status for r in wrong] == [Status.INCORRECT_NUMERICS] * 2
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        f"evidence-eager_wrong-16x8-float32-seed{s}.{ext}" for s in (0, 1) for ext in ("pt", "txt"))
    saved = torch.load(wrong[1].details["saved"], weights_only=True)
    assert set(saved) == {"input.0", "expected.0", "actual.0"}
    assert all(type(t) is torch.Tensor and t.device.type == "cpu" for t in saved.values())
    x = saved["input.0"]
    torch.testing.assert_close(saved["expected.0"], (x * x).double())
    torch.testing.assert_close(saved["actual.0"], x * x + 1)
    command = (folder / "evidence-eager_wrong-16x8-float32-seed1.txt").read_text()
    assert command.count("\n") == 1 and command.startswith("kernelkit check ")
    for part in ("--impl eager_wrong", "--sizes 16x8", "--dtypes float32", "--seeds 2", "--device cpu"):
        assert part in command
    assert ("--no-strict" in command) is not strict
    if not strict:  # the command runs as written and fails the same case
        done = CliRunner().invoke(app, [*shlex.split(command)[1:], "--json"])
        assert done.exit_code == 1, done.output
        assert '"status": "INCORRECT_NUMERICS"' in done.stdout


def test_the_cli_takes_the_options_and_says_which_path_judged_the_run(tmp_path):
    strict = CliRunner().invoke(app, ["check", PLANTED, "--impl", "eager_noisy", "--device", "cpu", "--determinism"])
    assert strict.exit_code == 0, strict.output
    assert "strict mode (the default)" in strict.output and "not deterministic: output 0 differs in" in strict.output
    fast = CliRunner().invoke(app, ["check", PLANTED, "--impl", "eager_wrong", "--device", "cpu", "--no-strict",
                                    "--save-failing", str(tmp_path)])
    assert fast.exit_code == 1, fast.output
    assert "fast path (--no-strict)" in fast.output and "1 failing case(s) saved in" in fast.output
    assert len(list(tmp_path.glob("*.pt"))) == 1


def test_sanitize_runs_the_tool_asked_for_over_the_same_check():
    args = ["square", "--sanitize", "racecheck", "--device", "cuda", "--sanitize=initcheck"]
    for tool in sanitize.SANITIZERS:
        line = sanitize.command(args, "/cuda/bin/compute-sanitizer", tool)
        assert line[:3] == ["/cuda/bin/compute-sanitizer", "--tool", tool]
        assert line[-4:] == ["check", "square", "--device", "cuda"]
    with pytest.raises(ValueError, match="unknown compute-sanitizer tool"):
        sanitize.command(args, "/cuda/bin/compute-sanitizer", "leakcheck")
    assert sanitize.errors_in("========= ERROR SUMMARY: 3 errors\n========= ERROR SUMMARY: 1 error") == 4
    assert sanitize.errors_in("========= RACECHECK SUMMARY: 5 hazards displayed (2 errors, 3 warnings)") == 2
    assert sanitize.errors_in("========= ERROR SUMMARY: 0 errors") == 0
    hit = ('========= Program hit cudaErrorInvalidValue (error 1) due to "invalid argument" on CUDA API call to '
           'cudaPointerGetAttributes.\n=========     Saved host backtrace up to driver entry point at error\n')
    assert sanitize.api_calls_in(hit * 2 + "========= Invalid __global__ write of size 4 bytes\n") == (
        "cudaErrorInvalidValue from cudaPointerGetAttributes",) * 2
    refused = CliRunner().invoke(app, ["check", "square", "--sanitize", "leakcheck"])
    assert refused.exit_code == 2 and "racecheck" in refused.output


PROBE = "cudaErrorInvalidValue from cudaPointerGetAttributes"


@pytest.mark.parametrize(("code", "errors", "api", "exit_code", "words"), [
    (0, 0, 0, 0, "memcheck: no errors"),
    (sanitize.ERROR_EXIT, 3, 0, 1, "memcheck: 3 error(s)"),
    (2, 0, 0, 2, "no errors found, but the check under it exited 2"),  # e.g. an unknown impl: its usage error
    # API calls that returned an error (a library's probe) are listed, not a kernel's error: exit 0 with the note
    (sanitize.ERROR_EXIT, 34, 34, 0, f"no errors in the kernels; 34 CUDA API call(s) returned an error ({PROBE})"),
    (sanitize.ERROR_EXIT, 5, 2, 1, "memcheck: 3 error(s); and 2 CUDA API call(s) returned an error"),
])
def test_sanitize_tells_the_tools_errors_from_the_checks_own_failure(monkeypatch, code, errors, api, exit_code,
                                                                     words):
    monkeypatch.setattr(sanitize, "run", lambda args, tool: sanitize.SanitizerRun(code, errors, "the check's output",
                                                                                 (PROBE,) * api))
    done = CliRunner().invoke(app, ["check", "square", "--sanitize", "memcheck"])
    assert done.exit_code == exit_code, done.output
    assert words in " ".join(done.output.split())
