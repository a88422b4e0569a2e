"""kernelkit asm: parsers on real tool output (sm_90, made on this CPU with triton's nvdisasm/cuobjdump and NVRTC),
then the built-in square impls compiled for sm_90 without a GPU."""

import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from kernelkit.backends.cuda.asm import ptx_entry
from kernelkit.backends.sass import SassMemory, memory_ops, parse_ptxas_log, parse_res_usage, split_sass
from kernelkit.errors import BackendUnavailable, CompileError, LoadError, SpecError
from kernelkit.profiling.asm import AsmReport, report_for

# nvdisasm -c of ops/square/cuda.cu for sm_90 (NVRTC), trimmed to a few instructions per function.
NVDISASM = """\
//--------------------- .text.square_vec4_f32_kernel --------------------------
        /*0570*/                   LDG.E.128.CONSTANT R4, desc[UR8][R8.64] ;
        /*0680*/                   STG.E.128 desc[UR8][R8.64], R4 ;
        /*07b0*/                   LDG.E.128.CONSTANT R4, desc[UR8][R4.64] ;
        /*0fa0*/                   LDG.E.CONSTANT R2, desc[UR8][R4.64] ;
        /*1080*/                   STG.E desc[UR8][R4.64], R7 ;
//--------------------- .text.square_2d_kernel    --------------------------
	.section	.text.square_2d_kernel,"ax",@progbits
square_2d_kernel:
.text.square_2d_kernel:
        /*00c0*/               @P0 EXIT ;
        /*0120*/                   LDG.E R2, desc[UR4][R2.64] ;
        /*0140*/                   FMUL R7, R2, R2 ;
        /*0150*/                   STG.E desc[UR4][R4.64], R7 ;
        /*0160*/                   EXIT ;
//--------------------- SYMBOLS --------------------------
	.type		.nv.reservedSmem.offset0,@object
"""
# cuobjdump -sass of the same cubin: another header, encodings beside each instruction.
CUOBJDUMP = """\
		Function : square_2d_kernel
	.headerflags	@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                         /* 0x00000a00ff017b82 */
                                                                                  /* 0x000fe20000000800 */
"""
# nvdisasm -c -g of triton_flat (float16): a predicated load under a source-line comment.
TRITON_FP16 = """\
	//## File "/work/main/src/kernelkit/ops/square.py", line 86
        /*0130*/              @!P0 LDG.E.128 R8, desc[UR4][R2.64] ;
	//## File "/work/main/src/kernelkit/ops/square.py", line 85
        /*01b0*/                   STG.E.128 desc[UR4][R4.64], R8 ;
"""
# A float2 load and store, a 16-bit load, and a local array (STL.128) and spills (STL, LDL) under --maxrregcount.
MIXED = """\
        /*00e0*/                   LDG.E.64 R2, desc[UR4][R4.64] ;
        /*0210*/                   STG.E.64 desc[UR4][R8.64], R2 ;
        /*0220*/                   LDG.E.U16 R6, desc[UR4][R6.64] ;
        /*01b0*/                   STL.128 [R1], R4 ;
        /*0110*/                   STL [R1+0x4], R3 ;
        /*0120*/                   LDL R2, [R1+0x4] ;
"""
# A pointer that may point at shared memory: a generic load (LD), which may or may not read global memory.
GENERIC = """\
        /*0090*/                   LDG.E R0, desc[UR4][R2.64] ;
        /*0150*/                   STS [R7], R0 ;
        /*0170*/                   LD.E R3, desc[UR4][R2.64] ;
        /*0190*/                   STG.E desc[UR4][R4.64], R3 ;
"""
RES_USAGE = """\

Resource usage:
 Common:
  GLOBAL:0
 Function square_vec4_f32_kernel:
  REG:32 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:552 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function pressure_kernel:
  REG:24 STACK:536 SHARED:0 LOCAL:0 CONSTANT[0]:548 TEXTURE:0 SURFACE:0 SAMPLER:0
"""
NVRTC_SPILLING_LOG = """\
ptxas info    : Overriding maximum register limit 256 for 'pressure_kernel' with  24 of maxrregcount option
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'pressure_kernel' for 'sm_90'
ptxas info    : Function properties for pressure_kernel
ptxas         .     536 bytes stack frame, 544 bytes spill stores, 876 bytes spill loads
ptxas info    : Used 24 registers, used 0 barriers, 536 bytes cumulative stack size
"""
NVCC_LOG = """\
ptxas info    : Compiling entry function '_Z18square_vec4_kernelPKfPfll' for 'sm_90'
ptxas info    : Function properties for _Z18square_vec4_kernelPKfPfll
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers
"""
TRITON_LOG = """\
ptxas-blackwell info    : Compiling entry function 'square_flat_kernel' for 'sm_90a'
ptxas-blackwell info    : Function properties for square_flat_kernel
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas-blackwell info    : Used 18 registers, used 0 barriers
"""
# NVRTC's PTX of two kernels, bodies cut short.
PTX = """\
.version 9.5
.target sm_90
.address_size 64

	// .globl	scale_kernel

.visible .entry scale_kernel(
	.param .u64 scale_kernel_param_0,
	.param .f32 scale_kernel_param_1
)
{
	ld.global.f32 	%f2, [%rd4];
	ret;

}
	// .globl	copy_kernel
.visible .entry copy_kernel(
	.param .u64 copy_kernel_param_0,
	.param .u64 copy_kernel_param_1
)
{
	st.global.f32 	[%rd7], %f1;
	ret;

}
"""


# ---- parsers ---------------------------------------------------------------------------------------------


def test_split_sass_finds_each_function_and_stops_at_the_next_section():
    functions = split_sass(NVDISASM)
    assert list(functions) == ["square_vec4_f32_kernel", "square_2d_kernel"]
    assert "FMUL" in functions["square_2d_kernel"] and "SYMBOLS" not in functions["square_2d_kernel"]
    assert "STG.E.128" in functions["square_vec4_f32_kernel"] and "FMUL" not in functions["square_vec4_f32_kernel"]
    assert list(split_sass(CUOBJDUMP)) == ["square_2d_kernel"]


def test_memory_ops_counts_global_accesses_by_width():
    functions = split_sass(NVDISASM)
    assert memory_ops(functions["square_vec4_f32_kernel"]) == SassMemory({128: 2, 32: 1}, {128: 1, 32: 1})
    assert memory_ops(functions["square_2d_kernel"]) == SassMemory({32: 1}, {32: 1})
    assert memory_ops(TRITON_FP16) == SassMemory({128: 1}, {128: 1})  # predicated, under line comments
    assert memory_ops(MIXED) == SassMemory({64: 1, 16: 1}, {64: 1}, local_loads=1, local_stores=2)
    assert memory_ops(GENERIC) == SassMemory({32: 1}, {32: 1}, uncounted=1)
    assert memory_ops(CUOBJDUMP) == SassMemory({}, {})


def test_describe_lists_the_widest_first():
    assert SassMemory.describe({32: 1, 128: 2}) == "128-bit x2, 32-bit x1"
    assert SassMemory.describe({}) == "none"


def test_parse_res_usage_reads_each_function():
    usage = parse_res_usage(RES_USAGE)
    assert set(usage) == {"square_vec4_f32_kernel", "pressure_kernel"}
    assert (usage["square_vec4_f32_kernel"].registers, usage["square_vec4_f32_kernel"].stack) == (32, 0)
    pressure = usage["pressure_kernel"]
    assert (pressure.registers, pressure.stack, pressure.shared, pressure.local) == (24, 536, 0, 0)


@pytest.mark.parametrize(
    ("log", "name", "expected"),
    [
        (NVRTC_SPILLING_LOG, "pressure_kernel", (24, 536, 544, 876)),
        (NVCC_LOG, "_Z18square_vec4_kernelPKfPfll", (32, 0, 0, 0)),
        (TRITON_LOG, "square_flat_kernel", (18, 0, 0, 0)),
    ],
)
def test_parse_ptxas_log_reads_registers_and_spills(log, name, expected):
    found = parse_ptxas_log(log)
    assert list(found) == [name]
    r = found[name]
    assert (r.registers, r.stack, r.spill_stores, r.spill_loads) == expected


def test_ptx_entry_keeps_the_header_and_one_kernel():
    copy = ptx_entry(PTX, "copy_kernel")
    assert copy.startswith(".version 9.5\n.target sm_90") and "st.global.f32" in copy
    assert "scale_kernel(" not in copy and "ld.global" not in copy
    assert ptx_entry(PTX, "missing_kernel") == PTX


# ---- CUDA C++ impls (NVRTC, in this process) ---------------------------------------------------------------


def _cli() -> typer.Typer:
    from kernelkit.cli import app

    return app


def test_cli_cuda_vec4_shows_128_bit_loads_and_stores_then_the_sass(tmp_path):
    result = CliRunner().invoke(_cli(), ["asm", "square", "--impl", "cuda_vec4", "--ir", "sass",
                                         "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if "│ square_vec4_f32_kernel" in line)
    assert len(re.findall(r"128-bit x\d+", row)) == 2  # loads and stores
    assert "square_vec4_f16_kernel" not in result.output  # float32 launches the f32 kernel only
    assert "LDG.E.128" in result.output and "STG.E.128" in result.output
    saved = tmp_path / "square_cuda_vec4_4096x4096_float32.square_vec4_f32_kernel.sass"
    assert "LDG.E.128" in saved.read_text()
    assert (tmp_path / "square_cuda_vec4_4096x4096_float32.square_vec4_f32_kernel.ptx").read_text().count(
        ".entry") == 1


def test_cuda_2d_loads_and_stores_32_bits_at_a_time():
    report = report_for("square", "cuda_2d", arch="sm_90")
    (kernel,) = report.kernels
    assert kernel.name == "square_2d_kernel" and report.arch == "sm_90"
    assert kernel.memory == SassMemory({32: 1}, {32: 1})
    assert kernel.resources.registers and kernel.resources.spill_stores == 0
    assert ".entry square_2d_kernel" in kernel.listings["ptx"] and "LDG.E" in kernel.listings["sass"]


def test_cuda_vec4_float16_launches_its_own_kernel():
    (kernel,) = report_for("square", "cuda_vec4", dtype="float16").kernels
    assert kernel.name == "square_vec4_f16_kernel"
    assert kernel.memory is not None and kernel.memory.global_loads.get(128) and kernel.memory.global_loads.get(16)


# ---- Triton impls (compiled for sm_90 in a child process) --------------------------------------------------


@pytest.fixture(scope="module")
def triton_reports() -> dict[str, AsmReport]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_INTERPRET", "1")  # as in a CPU run: the child must compile all the same
        return {impl: report_for("square", impl, ir="ptx") for impl in ("triton_flat", "triton_rowwise")}


@pytest.mark.parametrize("impl", ["triton_flat", "triton_rowwise"])
def test_triton_impls_compile_for_sm_90_without_a_gpu(triton_reports, impl):
    (kernel,) = triton_reports[impl].kernels
    assert kernel.compiler.startswith("triton ")
    assert {"ttir", "ttgir", "llir", "ptx", "sass"} <= set(kernel.listings)
    assert ".target sm_90" in kernel.listings["ptx"] and "EXIT" in kernel.listings["sass"]
    assert kernel.resources.registers is not None and kernel.resources.registers > 0
    assert kernel.resources.spill_stores == 0 and kernel.resources.spill_loads == 0
    assert any(d.startswith("signature: x_ptr: *fp32, y_ptr: *fp32") for d in kernel.details)


def test_triton_flat_float32_loads_and_stores_are_128_bit(triton_reports):
    # BLOCK_SIZE=1024 over 4 warps: 8 floats per thread, two 16-byte accesses each way.
    (kernel,) = triton_reports["triton_flat"].kernels
    assert kernel.memory == SassMemory({128: 2}, {128: 2})
    assert any("autotune config 0 of 4" in d and "BLOCK_SIZE=1024" in d for d in kernel.details)
    assert any(d.startswith("grid (16384,)") for d in kernel.details)  # 4096 * 4096 / 1024


def test_triton_rowwise_is_vectorized_too(triton_reports):
    (kernel,) = triton_reports["triton_rowwise"].kernels
    assert kernel.memory == SassMemory({128: 8}, {128: 8})  # BLOCK_SIZE=4096 over 128 threads
    assert "constexprs: BLOCK_SIZE=4096" in kernel.details


def test_triton_config_picks_an_autotune_config_and_is_checked():
    (kernel,) = report_for("square", "triton_flat", config=1).kernels
    assert any("autotune config 1 of 4" in d and "BLOCK_SIZE=2048" in d for d in kernel.details)
    assert kernel.memory == SassMemory({128: 4}, {128: 4})
    with pytest.raises(SpecError, match="has 4 configs"):
        report_for("square", "triton_flat", config=4)


# ---- what asm cannot show, and bad arguments ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ({"impl": "fast"}, LoadError, "has no impl 'fast'"),
        ({"impl": "numba_flat"}, BackendUnavailable, "does not support Numba impls yet"),
        ({"impl": "eager"}, BackendUnavailable, "runs PyTorch's own kernels"),
        ({"impl": "cuda_2d", "ir": "ttgir"}, SpecError, "ttgir is a Triton IR"),
        ({"impl": "cuda_2d", "ir": "asm"}, SpecError, "unknown IR 'asm'"),
        ({"impl": "cuda_2d", "arch": "hopper"}, SpecError, "bad arch 'hopper'"),
        ({"impl": "cuda_2d", "dtype": "bf16"}, SpecError, "supports float32 only"),
    ],
)
def test_bad_requests_raise_clear_errors(args, error, message):
    impl = args.pop("impl")
    with pytest.raises(error, match=message):
        report_for("square", impl, **args)


@pytest.mark.parametrize(("impl", "where"), [("triton_syntax_error", r"planted_triton_syntax\.py, line \d+"),
                                             ("cuda_syntax_error", r"planted_ops\.py\(\d+\): error")])
def test_a_kernel_that_does_not_build_is_a_compile_error_at_its_line(impl, where):
    planted = Path(__file__).parent / "planted" / "planted_ops.py"
    with pytest.raises(CompileError, match=where):
        report_for(str(planted), impl, op_name="planted")


@pytest.mark.parametrize(("impl", "message"), [("fast", "has no impl 'fast'"), ("numba_2d", "not support Numba")])
def test_cli_exits_2_with_the_reason(impl, message, tmp_path):
    result = CliRunner().invoke(_cli(), ["asm", "square", "--impl", impl, "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert message in result.output
    assert not list(tmp_path.iterdir())
