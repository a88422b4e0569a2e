import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from kernelkit.cli import app

cli = CliRunner()


def test_every_command_has_help():
    import typer.main

    registered = sorted(typer.main.get_command(app).commands)  # every command, those added later too
    named = {"check", "ops", "bench", "calibrate", "runs", "compare", "report", "profile", "ncu", "asm", "codegen"}
    assert named <= set(registered)
    for command in ([], *([name] for name in registered)):
        result = cli.invoke(app, [*command, "--help"])
        assert result.exit_code == 0, (command, result.output)
        assert "Usage" in result.output
    assert "against the op's reference" in cli.invoke(app, ["check", "--help"]).output
    assert "--fail-if-slower" in cli.invoke(app, ["compare", "--help"]).output


def test_ops_lists_builtin_ops_and_impls():
    result = cli.invoke(app, ["ops"])
    assert result.exit_code == 0
    for name in ("square", "eager", "triton_rowwise", "numba_2d", "cuda_2d"):
        assert name in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["check", "nosuchop", "--device", "cpu"], "unknown op 'nosuchop'"),
        (["check", "square", "--device", "cpu", "--impl", "fast"], "unknown impl 'fast'"),
        (["check", "square", "--device", "cpu", "--sizes", "big"], "bad size 'big'"),
        (["check", "square", "--device", "cpu", "--dtypes", "int3"], "unknown dtype 'int3'"),
        (["check", "square", "--device", "tpu"], "unknown device 'tpu'"),
        (["check", "square", "--device", "cpu", "--timeout", "0"], "--timeout must be positive"),
    ],
)
def test_bad_arguments_exit_2_with_a_clear_message(args, message):
    result = cli.invoke(app, args)
    assert result.exit_code == 2
    assert message in result.output


@pytest.mark.slow
def test_check_json_and_exit_code_zero_when_all_pass():
    proc = subprocess.run(
        [sys.executable, "-m", "kernelkit", "check", "square", "--device", "cpu", "--impl", "eager",
         "--sizes", "16x9", "--dtypes", "float32,bf16", "--seeds", "2", "--json"],
        capture_output=True, text=True, timeout=180, env={**os.environ},
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["device"] == "cpu" and data["planned"] == 4
    assert [(r["dtype"], r["seed"], r["status"]) for r in data["results"]] == [
        ("float32", 0, "PASSED"), ("float32", 1, "PASSED"), ("bfloat16", 0, "PASSED"), ("bfloat16", 1, "PASSED"),
    ]
    assert data["results"][0]["bytes"] == 2 * 16 * 9 * 4
