"""CUDA C++ backend: parsing, compiling (NVRTC, nvcc, caches), argument checks on CPU; launches on a GPU."""

from __future__ import annotations

import runpy
import shutil
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from kernelkit.backends.cuda import (
    CudaKernel,
    Param,
    cuda_kernel,
    extern_c_kernels,
    grid_1d,
    kernel_params,
    launch_dims,
)
from kernelkit.backends.cuda import build as cuda_build
from kernelkit.cache import cache_dir, content_key
from kernelkit.errors import BackendUnavailable, CompileError, LaunchError, LoadError

pytestmark = pytest.mark.usefixtures("fresh_cache")  # an empty disk cache per test, never the user's

# Reference: out = x * x. One thread per element; reads 4 bytes and writes 4 bytes per element.
SQUARE_SRC = r"""
extern "C" __global__ void square_kernel(const float* __restrict__ x_ptr, float* out_ptr, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out_ptr[i] = x_ptr[i] * x_ptr[i];
}
"""

BROKEN_SRC = r"""
extern "C" __global__ void broken_kernel(float* x_ptr) {
    x_ptr[0] = undefined_in_broken_kernel;
}
"""


def _can_compile() -> bool:
    try:
        cuda_build.find_compiler()
    except BackendUnavailable:
        return False
    return True


needs_compiler = pytest.mark.skipif(not _can_compile(), reason="neither NVRTC (cuda.core) nor nvcc is here")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")






def _without_nvrtc(monkeypatch: pytest.MonkeyPatch) -> None:
    # None in sys.modules makes `import cuda.core` raise ImportError, as when cuda-core is not installed.
    monkeypatch.setitem(sys.modules, "cuda.core", None)
    monkeypatch.setitem(sys.modules, "cuda.core.experimental", None)


# ---- the cache helpers -------------------------------------------------------------------------------------


def test_cache_dir_follows_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELKIT_CACHE_DIR", str(tmp_path / "kk"))
    assert cache_dir("cuda") == tmp_path / "kk" / "cuda" and (tmp_path / "kk" / "cuda").is_dir()
    monkeypatch.delenv("KERNELKIT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "kernelkit"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir("cuda") == tmp_path / "home" / ".cache" / "kernelkit" / "cuda"


def test_content_key_is_length_prefixed() -> None:
    assert content_key("ab", "c") != content_key("a", "bc")
    assert content_key("ab", b"c") == content_key(b"ab", "c")
    assert len(content_key()) == 64


# ---- compiling ---------------------------------------------------------------------------------------------


@needs_compiler
def test_compile_square_for_sm90() -> None:
    built = CudaKernel(SQUARE_SRC, "square_kernel").compile("sm_90")
    assert (built.name, built.arch, built.cached) == ("square_kernel", "sm_90", False)
    assert built.compiler in ("nvrtc", "nvcc") and built.seconds > 0
    assert built.cubin[:4] == b"\x7fELF"
    assert str(built).startswith(f"square_kernel: sm_90 cubin by {built.compiler.upper()} in ")


@needs_compiler
def test_second_compile_is_cached_in_memory_and_on_disk(fresh_cache: Path) -> None:
    kernel = CudaKernel(SQUARE_SRC, "square_kernel")
    first = kernel.compile("sm_90")
    again = kernel.compile("sm_90")
    assert again.cached and again.cubin == first.cubin and str(again).endswith("(from cache)")
    other_process_like = CudaKernel(SQUARE_SRC, "square_kernel").compile("sm_90")
    assert other_process_like.cached and other_process_like.cubin == first.cubin
    files = sorted(p.name for p in (fresh_cache / "cuda").iterdir())
    assert len(files) == 1 and files[0].endswith(".cubin")  # no temp file left behind
    assert not CudaKernel(SQUARE_SRC, "square_kernel").compile("sm_80").cached  # the arch is in the key


@needs_compiler
def test_corrupt_cache_file_is_rebuilt(fresh_cache: Path) -> None:
    good = CudaKernel(SQUARE_SRC, "square_kernel").compile("sm_90")
    (cached_file,) = (fresh_cache / "cuda").iterdir()
    cached_file.write_bytes(good.cubin[: len(good.cubin) // 2])  # truncated, as by a crash mid-write
    rebuilt = CudaKernel(SQUARE_SRC, "square_kernel").compile("sm_90")
    assert not rebuilt.cached and rebuilt.cubin == good.cubin
    assert cached_file.read_bytes() == good.cubin


@needs_compiler
def test_user_options_reach_the_compiler() -> None:
    src = 'extern "C" __global__ void scale_kernel(float* x_ptr) { x_ptr[0] *= SCALE; }\n'
    with pytest.raises(CompileError):
        CudaKernel(src, "scale_kernel").compile("sm_90")
    assert CudaKernel(src, "scale_kernel", options=["-DSCALE=2.0f"]).compile("sm_90").cubin[:4] == b"\x7fELF"


@needs_compiler
def test_cuda_headers_are_found() -> None:
    assert CudaKernel(SCALARS_SRC, "scalars_kernel").compile("sm_90").cubin[:4] == b"\x7fELF"


@needs_compiler
def test_editing_an_included_file_misses_the_cache(tmp_path: Path) -> None:
    (tmp_path / "helper.cuh").write_text("#define SCALE 2.0f\n")
    (tmp_path / "k.cu").write_text('#include "helper.cuh"\n'
                                   'extern "C" __global__ void k_kernel(float* x) { x[0] *= SCALE; }\n')
    assert not cuda_kernel(tmp_path / "k.cu", "k_kernel").compile("sm_90").cached
    assert cuda_kernel(tmp_path / "k.cu", "k_kernel").compile("sm_90").cached
    (tmp_path / "helper.cuh").write_text("#define SCALE 3.0f\n")
    assert not cuda_kernel(tmp_path / "k.cu", "k_kernel").compile("sm_90").cached


@needs_compiler
def test_error_in_module_level_string_points_at_this_file(line_of) -> None:
    with pytest.raises(CompileError) as info:
        CudaKernel(BROKEN_SRC, "broken_kernel").compile("sm_90")
    line = line_of("x_ptr[0] = undefined_in_broken_kernel;")
    assert f"{__file__}({line}): error" in info.value.log
    assert "broken_kernel" in str(info.value) and "undefined_in_broken_kernel" in info.value.log


@needs_compiler
def test_error_in_dedented_local_string_points_at_this_file(line_of) -> None:
    kernel = cuda_kernel(textwrap.dedent("""
        extern "C" __global__ void local_kernel(float* x_ptr) {
            x_ptr[0] = 1.0f;
            x_ptr[1] = undefined_in_local_kernel;
        }
    """), "local_kernel")
    with pytest.raises(CompileError) as info:
        kernel.compile("sm_90")
    assert f"{__file__}({line_of('x_ptr[1] = undefined_in_local_kernel;')}): error" in info.value.log


@needs_compiler
def test_error_in_cu_file_points_at_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.cu"
    path.write_text('// a header comment\n\nextern "C" __global__ void bad_kernel(float* x_ptr) {\n'
                    "    x_ptr[0] = not_declared;\n}\n")
    with pytest.raises(CompileError) as info:
        cuda_kernel(path, "bad_kernel").compile("sm_90")
    assert f"{path}(4): error" in info.value.log


def test_source_text_is_located_nearest_the_call() -> None:
    lines = ['k = """', "  a(", "  b;", '"""', 'j = """a(', 'b;"""', "call()"]  # two copies of the text
    assert cuda_build.locate_source("\na(\nb;\n", lines, call_line=7) == 4  # the nearer one, begun on its quote line
    assert cuda_build.locate_source("\na(\nb;\n", lines, call_line=1) == 1
    assert cuda_build.locate_source("not in the file", lines, call_line=7) == 7


def test_relative_cu_path_is_found_beside_the_caller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "square.cu").write_text(SQUARE_SRC)
    (tmp_path / "user_op.py").write_text(
        "from kernelkit.backends.cuda import cuda_kernel\n"
        "KERNEL = cuda_kernel('square.cu', 'square_kernel')\n"
    )
    monkeypatch.chdir(Path(__file__).parent)  # not where the .cu is
    kernel = runpy.run_path(str(tmp_path / "user_op.py"))["KERNEL"]
    assert kernel.origin == (str(tmp_path / "square.cu"), 1) and kernel.source == SQUARE_SRC


def test_missing_cu_file_is_a_load_error(tmp_path: Path) -> None:
    with pytest.raises(LoadError) as info:
        cuda_kernel(tmp_path / "nowhere.cu", "square_kernel")
    assert str(tmp_path / "nowhere.cu") in str(info.value) and "absolute path" in str(info.value)
    with pytest.raises(LoadError, match="nowhere_either.cu"):
        cuda_kernel("nowhere_either.cu", "square_kernel")


TWO_KERNELS = r"""
extern "C" __global__ void add_kernel(float* x) {}
extern "C" {
__global__ void sub_kernel(float* x) {}
}
__global__ void mul_kernel(float* x) {}   // C++ linkage: its symbol is mangled
"""


def test_missing_kernel_name_lists_the_defined_ones() -> None:
    assert extern_c_kernels(TWO_KERNELS) == ["add_kernel", "sub_kernel"]
    with pytest.raises(CompileError) as info:
        CudaKernel(TWO_KERNELS, "div_kernel").compile("sm_90")
    assert "it defines: add_kernel, sub_kernel" in str(info.value) and "did you forget" not in str(info.value)
    with pytest.raises(CompileError, match='did you forget extern "C"'):
        CudaKernel(TWO_KERNELS, "mul_kernel").compile("sm_90")


# ---- signatures and argument checks ------------------------------------------------------------------------

MESSY_SRC = r"""
#include <cuda_fp16.h>
template <typename T> __device__ T twice(T v) { return v + v; }  // not a kernel
extern "C" __global__ void __launch_bounds__(256, 2)
messy_kernel(  const float *__restrict__ x_ptr,   // input, (n,) float32
               __half* y_ptr, /* output, "a, b" in a comment */
               __nv_bfloat16 *z_ptr,
               const unsigned int n,
               long long stride_xm, int64_t m, size_t nbytes,
               double alpha, __half h, __nv_bfloat16 beta, bool flag,
               unsigned char* mask_ptr, uint8_t *u8_ptr, int8_t* i8_ptr, int16_t* i16_ptr,
               uint32_t u32, uint64_t u64, char c, float4* v4_ptr, void* any_ptr, std::int64_t k)
{ }
"""


def test_messy_signature_is_parsed() -> None:
    params = kernel_params(MESSY_SRC, "messy_kernel")
    assert [str(p) for p in params] == [
        "float* x_ptr", "__half* y_ptr", "__nv_bfloat16* z_ptr", "unsigned int n", "long long stride_xm",
        "int64_t m", "size_t nbytes", "double alpha", "__half h", "__nv_bfloat16 beta", "bool flag",
        "unsigned char* mask_ptr", "uint8_t* u8_ptr", "int8_t* i8_ptr", "int16_t* i16_ptr", "uint32_t u32",
        "uint64_t u64", "char c", "float4* v4_ptr", "void* any_ptr", "int64_t k",
    ]
    assert params[0] == Param("x_ptr", "float", 1)


def test_messy_arguments_marshal_to_c_types() -> None:
    kernel = CudaKernel(MESSY_SRC, "messy_kernel")
    t = lambda dtype: torch.zeros(8, dtype=dtype)  # noqa: E731
    x = t(torch.float32)
    values = kernel.marshal(
        x, t(torch.float16), t(torch.bfloat16), 2**32 - 1, -5, 2**40, 2**64 - 1, 0.5, 1.5, 1.5,
        True, t(torch.uint8), t(torch.uint8), t(torch.int8), t(torch.int16), 7, 2**63, -128, t(torch.float32),
        t(torch.int64), np.int64(3), device="cpu",
    )
    pointers = (0, 1, 2, 11, 12, 13, 14, 18, 19)
    assert values[0] == x.data_ptr() and all(type(values[i]) is int for i in pointers)
    # Integers that fit in int64 stay Python ints (the driver copies only the parameter's bytes).
    assert values[3:7] == [2**32 - 1, -5, 2**40, 2**64 - 1] and type(values[6]) is np.uint64
    assert values[15:18] == [7, 2**63, -128] and type(values[16]) is np.uint64
    assert type(values[20]) is np.int64
    assert [type(v) for v in values[7:11]] == [np.float64, np.float16, np.uint16, np.bool_]
    assert values[9] == 0x3FC0  # 1.5 as bfloat16 bits


SQUARE = CudaKernel(SQUARE_SRC, "square_kernel")
X = torch.randn(6, 5)


@pytest.mark.parametrize(
    ("args", "device", "expected"),
    [
        pytest.param((X, X, 30), "cuda:0", ["'x_ptr'", "cpu", ".cuda()"], id="cpu-tensor"),
        pytest.param((X.t(), X, 30), "cpu", ["'x_ptr'", ".contiguous()"], id="non-contiguous"),
        pytest.param((X, X.double(), 30), "cpu", ["'out_ptr'", "torch.float64", "torch.float32"], id="dtype"),
        pytest.param((X, X), "cpu", ["square_kernel", "int n", "given 2"], id="too-few"),
        pytest.param((X, X, 30, 1), "cpu", ["square_kernel", "takes 3", "given 4"], id="too-many"),
        pytest.param((X, X, 2**31), "cpu", ["'n'", "2147483648", "out of range"], id="int-overflow"),
        pytest.param((X, X, 30.0), "cpu", ["'n'", "needs an integer", "float"], id="float-for-int"),
        pytest.param((X.numpy(), X, 30), "cpu", ["'x_ptr'", "torch.Tensor", "ndarray"], id="not-a-tensor"),
    ],
)
def test_bad_arguments_are_named(args: tuple[object, ...], device: str, expected: list[str]) -> None:
    with pytest.raises(LaunchError) as info:
        SQUARE.marshal(*args, device=device)
    for text in expected:
        assert text in str(info.value)


def test_good_arguments_pass() -> None:
    x_addr, out_addr, n = SQUARE.marshal(X, X, 30, device="cpu")
    assert (x_addr, out_addr, n) == (X.data_ptr(), X.data_ptr(), 30)
    weight = torch.nn.Parameter(X.clone())  # a Tensor subclass takes the slow path, and passes
    assert SQUARE.marshal(weight, X, 30, device="cpu")[0] == weight.data_ptr()


def test_vector_pointer_must_be_aligned() -> None:
    kernel = CudaKernel('extern "C" __global__ void v_kernel(float4* v_ptr) {}', "v_kernel")
    base = torch.zeros(64)
    assert kernel.marshal(base, device="cpu") == [base.data_ptr()]
    with pytest.raises(LaunchError, match="'v_ptr'.*16-byte aligned"):
        kernel.marshal(base[1:], device="cpu")


def test_launch_dimensions_are_checked() -> None:
    assert launch_dims("k", 3, (16, 16)) == ((3,), (16, 16))
    assert grid_1d(1000) == (4, 256) and grid_1d(0, 128) == (0, 128)
    with pytest.raises(LaunchError, match="zero dimension.*skip the launch"):
        launch_dims("k", *grid_1d(0))
    with pytest.raises(LaunchError, match="2048 threads, CUDA's limit is 1024"):
        launch_dims("k", 1, (32, 64))
    with pytest.raises(LaunchError, match="1 to 3 ints"):
        launch_dims("k", (1, 1, 1, 1), 32)
    with pytest.raises(LaunchError, match="outside CUDA's limits"):
        launch_dims("k", (1, 70000), 32)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_launch_without_gpu_is_backend_unavailable() -> None:
    with pytest.raises(BackendUnavailable, match="no GPU"):
        SQUARE.launch(1, 32, X, X, 30)


# ---- the compilers -----------------------------------------------------------------------------------------


@needs_nvcc
def test_nvcc_fallback_when_nvrtc_cannot_be_imported(monkeypatch: pytest.MonkeyPatch, line_of) -> None:
    _without_nvrtc(monkeypatch)
    built = CudaKernel(SQUARE_SRC, "square_kernel").compile("sm_90")
    assert built.compiler == "nvcc" and built.cubin[:4] == b"\x7fELF" and "by NVCC" in str(built)
    with pytest.raises(CompileError) as info:
        CudaKernel(BROKEN_SRC, "broken_kernel").compile("sm_90")
    assert f"{__file__}({line_of('x_ptr[0] = undefined_in_broken_kernel;')}): error" in info.value.log


def test_no_compiler_at_all_is_backend_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    _without_nvrtc(monkeypatch)
    monkeypatch.setattr(cuda_build.shutil, "which", lambda name: None)
    with pytest.raises(BackendUnavailable, match=r"pip install 'kernelkit\[cuda\]'"):
        CudaKernel(SQUARE_SRC, "square_kernel").compile("sm_90")


# ---- on a GPU ----------------------------------------------------------------------------------------------


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("shape", [(1823, 781), (1, 1), (1, 257)])  # odd sizes; a partial block; a block + 1
def test_square_matches_reference_on_gpu(shape: tuple[int, int]) -> None:
    x = torch.randn(shape, device="cuda")
    out = torch.empty_like(x)
    SQUARE.launch(*grid_1d(x.numel()), x, out, x.numel())
    torch.testing.assert_close(out, x * x, rtol=0, atol=0)  # one IEEE multiply: bitwise equal


SCALARS_SRC = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void scalars_kernel(float* out_ptr, float a, double b, long long n, __half h,
                                          __nv_bfloat16 bf, bool flag, unsigned char u, unsigned int big,
                                          int neg, short s) {
    out_ptr[0] = a; out_ptr[1] = (float)b; out_ptr[2] = (float)n; out_ptr[3] = __half2float(h);
    out_ptr[4] = __bfloat162float(bf); out_ptr[5] = flag ? 1.0f : 0.0f; out_ptr[6] = (float)u;
    out_ptr[7] = (float)big; out_ptr[8] = (float)neg; out_ptr[9] = (float)s;
}
"""


@pytest.mark.gpu
@needs_gpu
def test_scalars_reach_the_kernel_intact() -> None:
    # Every value is exact in float32, so any byte lost or misplaced on the way shows.
    values = [1.25, -2.5, 3 * 2**33, 0.75, -1.5, True, 200, 2**31 + 2**24, -7, -300]
    out = torch.zeros(len(values), device="cuda")
    CudaKernel(SCALARS_SRC, "scalars_kernel").launch(1, 1, out, *values)
    assert out.tolist() == [float(v) for v in values]


REVERSE_SRC = r"""
extern "C" __global__ void reverse_kernel(const float* x_ptr, float* out_ptr, int n) {
    extern __shared__ float tile[];  // n floats of dynamic shared memory: one block does the whole row
    for (int i = threadIdx.x; i < n; i += blockDim.x) tile[i] = x_ptr[i];
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) out_ptr[i] = tile[n - 1 - i];
}
"""


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("n", [1000, 40_000])  # 4 KB; 160 KB, past the 48 KiB a kernel gets without asking
def test_dynamic_shared_memory(n: int) -> None:
    x = torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    CudaKernel(REVERSE_SRC, "reverse_kernel").launch(1, 256, x, out, n, shared_mem=4 * n)
    torch.testing.assert_close(out, x.flip(0), rtol=0, atol=0)


@pytest.mark.gpu
@needs_gpu
def test_launch_runs_on_the_current_stream() -> None:
    x = torch.randn(4096, device="cuda")
    out = torch.zeros_like(x)
    side, reader = torch.cuda.Stream(), torch.cuda.Stream()
    # Load every kernel used below first: a first use loads a module, which waits for the whole device.
    SQUARE.launch(*grid_1d(x.numel()), x, out, x.numel())
    out.zero_().clone().count_nonzero().item()
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU clock cycles, queued on the side stream only
        SQUARE.launch(*grid_1d(x.numel()), x, out, x.numel())
    with torch.cuda.stream(reader):  # a third stream: waits for neither; a launch elsewhere would be done
        early = out.clone()
    reader.synchronize()
    assert not side.query() and early.count_nonzero().item() == 0
    side.synchronize()
    torch.testing.assert_close(out, x * x, rtol=0, atol=0)
