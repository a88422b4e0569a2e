"""profile, ncu and asm without --impl: profile takes every impl that can run here in turn, ncu the op's first
optimized impl (named), and an unknown impl is an error that lists the op's impls."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelkit.cli import app

OPS = '''
import kernelkit as kk


@kk.op(sizes=[(8, 8)], cpu_sizes=[(8, 8)])
def double(x):
    return x * 2


@double.impl("eager_ok")
def double_ok(x):
    return x + x


@double.impl("eager_broken")
def double_broken(x):
    raise ValueError("this impl is broken on purpose")


@double.impl("cuda_pretend")
def double_cuda(x):
    return x + x
'''


@pytest.fixture
def ops_file(tmp_path: Path) -> str:
    path = tmp_path / "defaults_ops.py"
    path.write_text(textwrap.dedent(OPS))
    return str(path)


def test_profile_without_impl_profiles_each_impl_that_runs_here(ops_file, tmp_path):
    result = CliRunner().invoke(app, ["profile", ops_file, "--device", "cpu", "--steps", "1",
                                      "--out", str(tmp_path / "prof")])
    assert result.exit_code == 1, result.output  # one impl raised: reported, the others still ran
    assert "profile double/eager_ok/8x8/float32" in result.output
    assert "error (eager_broken)" in result.output and "broken on purpose" in result.output
    assert "skipped cuda_pretend" in result.output
    assert "profiled 1 of 3 impls (eager_ok)" in result.output


def test_ncu_without_impl_names_the_first_optimized_impl(ops_file):
    result = CliRunner().invoke(app, ["ncu", "square"])
    assert "ncu: profiling triton_rowwise, the op's first optimized impl" in result.output
    assert result.exit_code != 0  # no GPU or no ncu here


@pytest.mark.parametrize("command", ["profile", "ncu", "asm"])
def test_an_unknown_impl_lists_the_ops_impls(command):
    result = CliRunner().invoke(app, [command, "square", "--impl", "nope", *(["--device", "cpu"] if command ==
                                                                             "profile" else [])])
    assert result.exit_code == 2, result.output
    assert "'nope'" in result.output and "triton_rowwise" in result.output and "cuda_vec4" in result.output
