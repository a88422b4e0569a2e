"""The README's "Write your own op" walkthrough, run block by block as a new user would: the files it shows are
written as they are, its commands run (check passes on the first try, bench times the impls), its Python runs."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelkit.cli import app

README = Path(__file__).resolve().parent.parent / "README.md"
pytestmark = pytest.mark.slow


def walkthrough_blocks() -> list[tuple[str, str]]:
    """(language, code) of every fenced block of the section, in order."""
    text = README.read_text()
    section = text.split("\n## Write your own op\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```(\w+)\n(.*?)```", section, flags=re.S)


def test_the_walkthrough_shows_two_files_its_commands_and_python():
    kinds = [(lang, code.splitlines()[0]) for lang, code in walkthrough_blocks()]
    assert kinds[0] == ("cuda", "// rmsnorm.cu: one thread block per row; each thread sums the squares of a strided "
                                "slice, then a shared reduction.")
    assert kinds[1] == ("python", "# rmsnorm_ops.py")
    assert [lang for lang, _ in kinds[2:]] == ["bash", "python", "bash"]


def test_the_walkthrough_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cpu_process):
    monkeypatch.chdir(tmp_path)
    runnable = []
    for lang, code in walkthrough_blocks():
        first = code.splitlines()[0]
        name = re.match(r"(?://|#) (\S+\.(?:cu|py))", first)
        if name:  # a file the user writes
            (tmp_path / name.group(1).rstrip(":")).write_text(code)
        else:
            runnable.append((lang, code))

    (_, commands), (_, python), (_, loop) = runnable
    check, bench = [shlex.split(line)[1:] for line in commands.strip().splitlines()]
    checked = CliRunner().invoke(app, [*check, "--json"])
    assert checked.exit_code == 0, checked.output
    results = {(r["impl"], tuple(r["size"])): r for r in json.loads(checked.stdout)["results"]}
    for size in ((7, 48), (1, 33)):
        assert results[("eager_rsqrt", size)]["status"] == "PASSED"
        assert results[("triton_rows", size)]["status"] == "PASSED", results[("triton_rows", size)]
        cuda = results[("cuda_rows", size)]
        assert cuda["status"] == "SKIPPED" and ("it compiled" in cuda["message"] or "no CUDA compiler" in
                                                cuda["message"]), cuda
    assert not any("full size" in w for r in results.values() for w in r["warnings"])  # shapes= is declared

    benched = CliRunner().invoke(app, [*bench, "--json", str(tmp_path / "bench.json")])
    assert benched.exit_code == 0, benched.output
    timed = {r["impl"]: r for r in json.loads((tmp_path / "bench.json").read_text())["results"]}
    for impl in ("eager_rsqrt", "triton_rows", "eager", "compile"):
        assert timed[impl]["status"] == "PASSED" and timed[impl]["measurement"]["samples"], timed[impl]
    assert timed["triton_rows"]["speedups"]["eager"]["value"] > 0
    assert timed["cuda_rows"]["status"] == "SKIPPED"

    exec(compile(python, "README walkthrough", "exec"), {})  # its own asserts: every case PASSED or SKIPPED

    # The store -> compare -> report loop: two stored runs, listed, compared case by case, one page of both.
    for line in loop.strip().splitlines():
        done = CliRunner().invoke(app, shlex.split(line)[1:])
        assert done.exit_code == 0, (line, done.output)
    listed = CliRunner().invoke(app, ["runs", "--store", "runs.sqlite", "--json"])
    assert [r["status"] for r in json.loads(listed.stdout)["runs"]] == ["finished", "finished"]
    compared = json.loads(CliRunner().invoke(app, ["compare", "latest-1", "latest", "--store", "runs.sqlite",
                                                   "--json"]).stdout)
    assert {c["impl"] for c in compared["changes"] if c["verdict"]} >= {"eager_rsqrt", "triton_rows"}
    assert (tmp_path / "report.html").stat().st_size > 10_000


def test_without_shapes_the_walkthrough_op_gets_a_message_pointing_at_shapes(tmp_path, monkeypatch, cpu_process):
    import kernelkit as kk

    monkeypatch.chdir(tmp_path)
    for _, code in walkthrough_blocks()[:2]:
        name = re.match(r"(?://|#) (\S+\.(?:cu|py))", code.splitlines()[0]).group(1).rstrip(":")
        text = code.replace("    shapes=lambda M, N: ((M, N), (N,)),", "") if name.endswith(".py") else code
        (tmp_path / name).write_text(text)
    report = kk.check(str(tmp_path / "rmsnorm_ops.py"), device="cpu", isolate=False, impls=["triton_rows"],
                      sizes=[(7, 48)])
    (result,) = report.results
    assert result.status.value == "INCORRECT_NUMERICS"
    assert any("gets a tensor of the case's full size" in w and "shapes=lambda M, N" in w for w in result.warnings)
