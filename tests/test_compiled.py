"""The `compile` baseline: torch.compile of every op's reference, built lazily, compile time kept apart."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from typer.testing import CliRunner

import kernelkit as kk
from kernelkit.backends import compiled
from kernelkit.cli import app
from kernelkit.errors import SpecError
from kernelkit.target import load, make_cases


def make_op():
    @kk.op(sizes=[(8, 3)])
    def cube(x):
        return x * x * x

    @cube.impl("eager")
    def cube_eager(x):
        return x.pow(3)

    return cube


def test_every_op_has_a_compile_baseline_that_runs_only_when_named():
    op = make_op()
    impl = op.get_impl("compile")
    assert (impl.name, impl.backend) == ("compile", "compile")
    assert list(op.impls) == ["eager"] and "compile" not in op.impls  # a run of "every impl" is the user's impls
    assert list(op.all_impls()) == ["eager", "compile"] and op.baselines == {"compile": impl}
    assert op.get_impl("compile") is impl  # built once per op
    with pytest.raises(KeyError):
        op.get_impl("fast")
    cases = make_cases("src", [op], "cpu", impls=["compile"])
    assert [c.impl for c in cases] == ["compile"]
    assert {c.impl for c in make_cases("src", [op], "cpu")} == {"eager"}


def test_a_registered_impl_named_compile_replaces_the_baseline():
    op = make_op()

    @op.impl("compile")
    def my_compile(x):
        return x.pow(3)

    assert op.get_impl("compile").fn is my_compile
    assert op.baselines == {} and list(op.all_impls()) == ["eager", "compile"]


def test_looking_the_baseline_up_compiles_nothing_and_imports_no_inductor():
    code = textwrap.dedent("""
        import sys
        from kernelkit.target import open_target
        op = open_target("square", "cpu").op()
        assert op.get_impl("compile").backend == "compile"
        loaded = [m for m in sys.modules if m.startswith(("torch._inductor", "torch._dynamo"))]
        assert not loaded, loaded
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_square_compile_passes_and_compile_time_is_kept_apart():
    # The fast path: strict mode's probe at every dimension doubled would compile a second signature.
    report = kk.check("square", impls=["compile"], device="cpu", isolate=False, sizes=[(7, 5)],
                      dtypes=[torch.float32], strict=False)
    assert [r.status for r in report.results] == [kk.Status.PASSED], report.results[0].message
    op = load("kernelkit.ops.square")["square"]
    ref = compiled.compiled_reference(op)
    assert len(ref.compile_seconds) == 1  # check calls the impl twice (second input): one signature, one compile
    assert kk.compile_seconds("square") == pytest.approx(sum(ref.compile_seconds))
    assert kk.compile_seconds("square") > 0 and kk.compile_seconds("square", mode="max-autotune") == 0
    x = torch.randn(7, 5)
    torch.testing.assert_close(op.get_impl("compile").fn(x), x * x)
    assert len(ref.compile_seconds) == 1  # seen signature: run time only


def test_each_new_signature_compiles_past_dynamos_recompile_limit():
    # A counting backend stands in for inductor: what is tested is that the 9th+ signature still compiles
    # (Dynamo's default limit of 8 would run it eagerly, silently) and that each first call is timed as compile.
    from torch._dynamo.testing import CompileCounter

    def shifted(x):
        return x + 1

    counter = CompileCounter()
    ref = compiled.CompiledReference("shifted", "default", torch.compile(shifted, backend=counter, dynamic=False))
    for n in range(1, 11):
        torch.testing.assert_close(ref(torch.zeros(n)), torch.ones(n))
    ref(torch.zeros(3))
    assert counter.frame_count == 10
    assert len(ref.compile_seconds) == 10


def test_compile_modes_resolve_from_argument_environment_or_default(monkeypatch):
    monkeypatch.delenv(compiled.MODE_ENV, raising=False)
    assert compiled.resolve_mode() == "default"
    assert compiled.resolve_mode("max-autotune") == "max-autotune"
    monkeypatch.setenv(compiled.MODE_ENV, "reduce-overhead")
    assert compiled.resolve_mode() == "reduce-overhead"
    monkeypatch.setenv(compiled.MODE_ENV, "fastest")
    with pytest.raises(SpecError, match=r"'fastest' \(from \$KERNELKIT_COMPILE_MODE\); use one of .*max-autotune"):
        compiled.resolve_mode()
    with pytest.raises(SpecError, match="unknown torch.compile mode 'turbo'; use one of default"):
        compiled.resolve_mode("turbo")


def test_check_rejects_an_unknown_compile_mode_with_exit_2():
    result = CliRunner().invoke(app, ["check", "square", "--device", "cpu", "--compile-mode", "fastest"])
    assert result.exit_code == 2
    assert "unknown torch.compile mode 'fastest'" in result.output and "max-autotune" in result.output


MODE_OPS = '''
import os
import kernelkit as kk

@kk.op(sizes=[(6, 5)], cpu_sizes=[(6, 5)])
def twice(x):
    return 2 * x

@twice.impl("eager_sees_mode")
def eager_sees_mode(x):
    mode = os.environ.get("KERNELKIT_COMPILE_MODE")
    if mode != "reduce-overhead":
        raise RuntimeError(f"the worker sees compile mode {mode!r}")
    return x + x
'''


@pytest.mark.slow
def test_check_compile_mode_reaches_the_workers_and_the_baseline_passes(tmp_path):
    path = tmp_path / "mode_ops.py"
    path.write_text(MODE_OPS)
    env = {k: v for k, v in os.environ.items() if k != compiled.MODE_ENV}
    proc = subprocess.run(
        [sys.executable, "-m", "kernelkit", "check", str(path), "--device", "cpu", "--impl", "eager_sees_mode",
         "--impl", "compile", "--compile-mode", "reduce-overhead", "--json"],
        capture_output=True, text=True, timeout=240, env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads(proc.stdout)["results"]
    assert [(r["impl"], r["backend"], r["status"]) for r in results] == [
        ("eager_sees_mode", "eager", "PASSED"), ("compile", "compile", "PASSED"),
    ]
