"""profile, ncu and asm take a problem and its --solution as check and bench do: the op file kernelkit generates
for them, impl `solution`; a bad solution, size, dtype or memory limit is named once, exit 2; Ctrl-C while the
CLI imports is exit 130 and one line."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from kernelkit.cli import app

KB = Path(__file__).parent / "fixtures" / "formats" / "kernelbench"


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def test_profile_takes_a_problem_and_its_solution(tmp_path: Path, cpu_process: None):
    done = invoke("profile", str(KB / "relu.py"), "--solution", str(KB / "relu_solution.py"), "--impl", "solution",
                  "--device", "cpu", "--steps", "2", "--out", str(tmp_path))
    assert done.exit_code == 0, done.output
    assert "aten::where" in done.output  # the solution's own torch.where, not the reference's relu
    assert [p.name for p in tmp_path.glob("*.trace.json")] == ["relu_solution_16x300_float32_cpu.trace.json"]


def test_a_solution_the_tools_cannot_use_is_named(tmp_path: Path, cpu_process: None):
    missing = invoke("asm", str(KB / "relu.py"), "--solution", str(tmp_path / "nope.py"))
    assert missing.exit_code == 2 and "no such solution" in missing.output
    not_a_problem = invoke("ncu", "square", "--solution", str(KB / "relu_solution.py"))
    assert not_a_problem.exit_code == 2 and "--solution is for a KernelBench problem" in not_a_problem.output
    eager = invoke("asm", str(KB / "relu.py"), "--solution", str(KB / "relu_solution.py"), "--impl", "solution")
    assert eager.exit_code == 2 and "solution" in eager.output, eager.output


def test_a_bad_size_or_dtype_is_named_once_before_anything_runs(cpu_process: None):
    for command in ("profile", "asm", "ncu"):
        done = invoke(command, "square", "--size", "10x")
        assert done.exit_code == 2 and done.output.count("bad size '10x'") == 1, (command, done.output)
    done = invoke("asm", "square", "--dtype", "f33")
    assert done.exit_code == 2 and done.output.count("unknown dtype 'f33'") == 1


def test_a_memory_limit_past_any_machine_is_an_argument_error(cpu_process: None):
    done = invoke("check", "square", "--device", "cpu", "--max-memory", "99999999999T")
    assert done.exit_code == 2 and "more than any machine has" in done.output
    assert "Traceback" not in done.output and "OverflowError" not in done.output


def test_ctrl_c_while_the_cli_imports_exits_130_without_a_traceback(monkeypatch, capsys):
    import builtins
    import sys

    from kernelkit import _entry

    real_import = builtins.__import__

    def interrupted(name, *args, **kwargs):
        if name == "kernelkit.cli":
            raise KeyboardInterrupt
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "kernelkit.cli", raising=False)
    monkeypatch.setenv("KERNELKIT_NO_SUPERVISOR", "1")  # the command itself, in this process
    monkeypatch.setattr(builtins, "__import__", interrupted)
    try:
        _entry.main()
    except SystemExit as exc:
        assert exc.code == 130
    else:
        raise AssertionError("main() returned")
    assert capsys.readouterr().err == "interrupted\n"
