import json
import os
import subprocess
import sys

import psutil
import pytest
from typer.testing import CliRunner

from kernelkit.cli import app

cli = CliRunner()


def _group(process: psutil.Process) -> int | None:
    try:
        return os.getpgid(process.pid)
    except OSError:  # gone meanwhile
        return None


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


def test_ops_name_shows_one_op_and_json_lists_every_impl():
    one = cli.invoke(app, ["ops", "softmax"])
    assert one.exit_code == 0 and "triton_online" in one.output and "bench sizes (GPU): 8192x1000" in one.output
    assert "square" not in one.output
    listed = json.loads(cli.invoke(app, ["ops", "--json"]).output)
    softmax = next(op for op in listed if op["name"] == "softmax")
    assert {i["name"] for i in softmax["impls"]} >= {"eager", "triton_rowwise", "cuda_warp", "compile"}
    wrong = cli.invoke(app, ["ops", "softmx"])
    assert wrong.exit_code == 2 and "did you mean 'softmax'" in wrong.output


@pytest.mark.parametrize("command", [["--version"], ["--help"], ["runs"], ["compare", "--help"], ["report", "--help"],
                                     ["ops"]])
def test_commands_that_need_no_tensor_answer_without_importing_torch(command, tmp_path):
    # `kernelkit --version` took 8.8 s on a busy machine, most of it torch's import. `ops` reads its cached catalog
    # (the first listing in a cache builds it, importing every op), so it is asked twice.
    probe = ("import sys, runpy; sys.argv = ['kernelkit', *sys.argv[1:]]\n"
             "try:\n    runpy.run_module('kernelkit', run_name='__main__')\n"
             "except SystemExit as e:\n    code = e.code\n"
             "print('TORCH' if 'torch' in sys.modules else 'NO TORCH', code, file=sys.stderr)")
    env = {**os.environ, "KERNELKIT_CACHE_DIR": os.environ.get("KERNELKIT_CACHE_DIR", str(tmp_path / "cache"))}
    for _ in range(2 if command == ["ops"] else 1):
        done = subprocess.run([sys.executable, "-c", probe, *command], capture_output=True, text=True, env=env,
                              timeout=120)
    assert done.stderr.strip().splitlines()[-1] in ("NO TORCH 0", "NO TORCH None"), done.stderr


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
    with subprocess.Popen(
        [sys.executable, "-m", "kernelkit", "check", "square", "--device", "cpu", "--impl", "eager",
         "--sizes", "16x9", "--dtypes", "float32,bf16", "--seeds", "2", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ}, start_new_session=True,
    ) as proc:
        stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 0, stderr
    # Nothing of the command's own session outlives it: its workers, and multiprocessing's resource tracker (reaped
    # by the command, not left to a PID 1 that may reap nothing), zombies included.
    left = [p.info for p in psutil.process_iter(["pid", "name", "status"]) if _group(p) == proc.pid]
    assert not left, left
    data = json.loads(stdout)
    assert data["device"] == "cpu" and data["planned"] == 4
    assert [(r["dtype"], r["seed"], r["status"]) for r in data["results"]] == [
        ("float32", 0, "PASSED"), ("float32", 1, "PASSED"), ("bfloat16", 0, "PASSED"), ("bfloat16", 1, "PASSED"),
    ]
    assert data["results"][0]["bytes"] == 2 * 16 * 9 * 4
