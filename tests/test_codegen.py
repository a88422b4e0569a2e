"""`kernelkit codegen`: the code inductor generates for an op's reference, printed and saved."""

import textwrap

import pytest
import torch
from typer.testing import CliRunner

import kernelkit as kk
from kernelkit.cli import app
from kernelkit.errors import CompileError
from kernelkit.profiling.codegen import GeneratedCode
from kernelkit.spec import parse_size

cli = CliRunner()


@pytest.fixture(scope="module")
def square_cpu():
    """One capture shared by the tests below: inductor compiles on CPU take seconds."""
    return kk.codegen("square", size="5x3", dtype="float32", device="cpu")


def test_codegen_returns_the_cpp_kernel_inductor_wrote_for_that_case(square_cpu):
    assert (square_cpu.op, square_cpu.size, square_cpu.dtype) == ("square", (5, 3), torch.float32)
    assert square_cpu.device == "cpu" and square_cpu.mode == "default"
    (source,) = square_cpu.sources
    assert 'extern "C"' in source and "cpp_fused_mul" in source  # the C++ kernel, not only the wrapper
    assert "empty_strided_cpu((5, 3), (3, 1), torch.float32)" in source  # specialised to this case's shape
    assert square_cpu.stem == "square_5x3_float32"


def test_codegen_saves_one_file_per_graph(square_cpu, tmp_path):
    (path,) = square_cpu.save(tmp_path / "out")
    assert path == tmp_path / "out" / "square_5x3_float32.py"
    assert path.read_text() == square_cpu.sources[0]
    compile(path.read_text(), str(path), "exec")  # a Python module, as TORCH_LOGS=output_code shows it
    split = GeneratedCode("f", (2,), torch.float16, "cpu", "default", ("# one", "# two"))
    assert [p.name for p in split.save(tmp_path)] == ["f_2_float16_graph1.py", "f_2_float16_graph2.py"]
    assert "graph 2 of 2" in split.text


def test_cli_prints_and_saves_the_code(tmp_path):
    result = cli.invoke(app, ["codegen", "square", "--size", "5x3", "--dtype", "fp32", "--device", "cpu",
                                "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    saved = tmp_path / "square_5x3_float32.py"
    assert saved.exists() and "cpp_fused_mul" in result.output
    assert saved.read_text() in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nosuchop"], "unknown op 'nosuchop'"),
        (["square", "--size", "big"], "bad size 'big'"),
        (["square", "--dtype", "int3"], "unknown dtype 'int3'"),
        (["square", "--compile-mode", "fastest"], "unknown torch.compile mode 'fastest'"),
        (["square", "--device", "tpu"], "unknown device 'tpu'"),
    ],
)
def test_bad_arguments_exit_2_with_a_clear_message(args, message):
    result = cli.invoke(app, ["codegen", *args] + ([] if "--device" in args else ["--device", "cpu"]))
    assert result.exit_code == 2
    assert message in result.output


def test_a_file_of_several_ops_needs_op(tmp_path):
    path = tmp_path / "two_ops.py"
    path.write_text(textwrap.dedent("""
        import kernelkit as kk

        @kk.op(sizes=[(4,)])
        def double(x):
            return 2 * x

        @kk.op(sizes=[(4,)])
        def half(x):
            return x / 2
    """))
    result = cli.invoke(app, ["codegen", str(path), "--device", "cpu"])
    assert result.exit_code == 2 and "defines 2 ops (double, half)" in result.output
    result = cli.invoke(app, ["codegen", str(path), "--device", "cpu", "--op", "triple"])
    assert result.exit_code == 2 and "no op 'triple'" in result.output


def test_a_reference_with_nothing_to_compile_is_a_clear_compile_error():
    @kk.op(sizes=[(4,)])
    def identity(x):
        return x

    with pytest.raises(CompileError, match="generated no code for 'identity'"):
        kk.codegen(identity, device="cpu")


@pytest.mark.gpu
def test_codegen_on_a_gpu_is_triton():
    generated = kk.codegen("square", size=parse_size("1823x781"), dtype=torch.bfloat16, device="cuda")
    assert any("@triton.jit" in s for s in generated.sources)

