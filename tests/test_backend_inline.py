"""load_inline backend: compile-only checks, errors and the disk cache on CPU; builds, calls and reuse on a GPU.

Without a GPU the real compiles are two: ops/square/inline.cu once for the module (nvcc -cubin beside c++
-fsyntax-only, ~20-40 s on 2 cores) and one broken source (nvcc stops at its error, ~10-30 s).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import kernelkit.ops
from kernelkit import backends
from kernelkit.backends.cuda import BuiltExtension, InlineExtension, default_arch, inline_plan, load_inline
from kernelkit.backends.cuda import inline as inline_backend
from kernelkit.backends.cuda.inline_plan import find_nvcc
from kernelkit.errors import BackendUnavailable, CompileError, LoadError, SpecError
from kernelkit.spec import Impl

pytestmark = pytest.mark.usefixtures("fresh_cache")  # an empty disk cache per test, never the user's

SQUARE_CU = Path(kernelkit.ops.__file__).parent / "square" / "inline.cu"
SQUARE_DECL = "torch::Tensor square_vec4(torch::Tensor x);"
# Module level, so a second process that runs this file gets the same extension, hence the same cache key.
SQUARE_EXT = load_inline("square_vec4_ext", cpp_sources=SQUARE_DECL, cuda_sources=SQUARE_CU, functions=["square_vec4"])

BROKEN_CUDA = r"""
torch::Tensor broken(torch::Tensor x) {
    return x * undefined_in_broken_source;
}
"""


def _has_nvcc() -> bool:
    try:
        find_nvcc(loadable=False)
    except BackendUnavailable:
        return False
    return True


needs_nvcc = pytest.mark.skipif(not _has_nvcc(), reason="nvcc (the CUDA toolkit) is not installed")
without_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks what happens where no GPU is present")


def _square_ext(**flags: tuple[str, ...]) -> InlineExtension:
    return load_inline("square_vec4_ext", cpp_sources=SQUARE_DECL, cuda_sources=SQUARE_CU, functions=["square_vec4"],
                       **flags)






@pytest.fixture(scope="module")
def square_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("inline-cache")


@pytest.fixture(scope="module")
def square_built(square_cache: Path) -> BuiltExtension:
    """SQUARE_EXT compiled once for the module: a compile-only check without a GPU, a real build with one."""
    if not _has_nvcc():
        pytest.skip("nvcc (the CUDA toolkit) is not installed")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KERNELKIT_CACHE_DIR", str(square_cache))
        return SQUARE_EXT.compile()


# ---- CPU: the compile-only check and its cache --------------------------------------------------------------


@pytest.mark.slow
def test_square_builds_once_then_comes_from_the_disk_cache(square_built: BuiltExtension, square_cache: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    assert not square_built.cached and square_built.arch == default_arch()
    assert square_built.name == "square_vec4_ext" and f"{square_built.seconds:.1f} s" in str(square_built)
    monkeypatch.setenv("KERNELKIT_CACHE_DIR", str(square_cache))
    start = time.perf_counter()
    again = _square_ext().compile()  # a new object: nothing in memory, so this is the disk cache
    assert again.cached and time.perf_counter() - start < 1.0
    assert "(from cache" in str(again) and again.arch == square_built.arch
    assert SQUARE_EXT.compile().cached  # and in memory


@pytest.mark.slow
@without_gpu
def test_without_a_gpu_compile_checks_and_loads_nothing(square_built: BuiltExtension, square_cache: Path) -> None:
    assert square_built.module is None and "compile-only check" in str(square_built)
    assert (square_cache / "inline" / SQUARE_EXT.key() / "checked").is_file()
    with pytest.raises(BackendUnavailable, match="no GPU: cannot call square_vec4_ext.square_vec4"):
        SQUARE_EXT.square_vec4(torch.ones(4))


@pytest.mark.slow
@without_gpu
def test_an_impl_listing_the_extension_compiles_it_then_skips(square_built: BuiltExtension) -> None:
    impl = Impl("cuda_inline_vec4", "cuda", lambda x: SQUARE_EXT.square_vec4(x), kernels=(SQUARE_EXT,),
                dtypes=(torch.float32,))
    with pytest.raises(BackendUnavailable, match=r"no GPU.*square_vec4_ext"):
        backends.ensure_runnable(impl, torch.float32, "cpu")


@needs_nvcc
@pytest.mark.slow
def test_compile_error_points_at_the_line_in_this_file(line_of) -> None:
    ext = load_inline("broken_ext", cpp_sources="torch::Tensor broken(torch::Tensor x);", cuda_sources=BROKEN_CUDA,
                      functions=["broken"])
    with pytest.raises(CompileError) as info:
        ext.compile()
    line = line_of("return x * undefined_in_broken_source;")
    assert re.search(rf"{re.escape(__file__)}[(:]{line}\b", info.value.log), info.value.log
    assert "broken_ext" in str(info.value) and "undefined_in_broken_source" in info.value.log


def test_missing_source_file_is_a_load_error_with_the_resolved_path() -> None:
    with pytest.raises(LoadError) as info:
        load_inline("missing_ext", cpp_sources=SQUARE_DECL, cuda_sources="no_such_dir/square.cu",
                    functions=["square_vec4"])
    assert str(Path(__file__).parent / "no_such_dir" / "square.cu") in str(info.value)


@pytest.mark.parametrize(("cpp", "functions", "message"), [
    (SQUARE_DECL, ["square_vec8"], "'square_vec8' (in functions=) is in neither cpp_sources nor cuda_sources"),
    ("// declares nothing", ["square_vec4"], "'square_vec4' (in functions=) is defined in cuda_sources but not"),
    ("/* torch::Tensor square_vec4(torch::Tensor x); */", ["square_vec4"], "declared in cpp_sources"),
], ids=["typo", "declared-in-cuda-only", "commented-out"])
def test_a_function_the_sources_do_not_declare_fails_before_building(cpp: str, functions: list[str], message: str,
                                                                     fresh_cache: Path) -> None:
    ext = load_inline("undeclared_ext", cpp_sources=cpp, cuda_sources=SQUARE_CU, functions=functions)
    with pytest.raises(CompileError, match=re.escape(message)):
        ext.compile()
    assert not (fresh_cache / "inline").exists()  # no compiler ran, nothing was cached


@needs_nvcc
def test_key_changes_with_flags_sources_and_arch() -> None:
    base = _square_ext().key()
    assert _square_ext().key() == base == SQUARE_EXT.key()  # same inputs, same key
    changed = [_square_ext(extra_cuda_cflags=("-O3",)).key(), _square_ext(extra_cflags=("-O3",)).key(),
               load_inline("square_vec4_ext", cpp_sources=SQUARE_DECL + "\n", cuda_sources=SQUARE_CU,
                           functions=["square_vec4"]).key(),
               _square_ext().key("sm_80" if default_arch() != "sm_80" else "sm_90")]
    assert len({base, *changed}) == len(changed) + 1


@without_gpu
def test_missing_nvcc_is_backend_unavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(inline_plan, "DEFAULT_CUDA_HOME", tmp_path / "cuda")
    with pytest.raises(BackendUnavailable, match="install the CUDA toolkit"):
        _square_ext().compile()


def test_names_are_checked_when_declared() -> None:
    with pytest.raises(SpecError, match="Python identifier"):
        load_inline("square-ext", cpp_sources=SQUARE_DECL, functions=["square_vec4"])
    with pytest.raises(SpecError, match="'compile' is hidden"):
        load_inline("ext", cpp_sources="void compile();", functions=["compile"])
    with pytest.raises(AttributeError, match="square_vec8"):
        SQUARE_EXT.square_vec8  # noqa: B018 - not in functions: no build, a plain AttributeError


def test_ninja_output_is_reduced_to_the_compiler_messages() -> None:
    output = ("Error building extension 'square_vec4_ext_0123': [1/3] c++ -MMD -MF main.o.d -c main.cpp\n"
              "[2/3] /usr/local/cuda/bin/nvcc --generate-dependencies-with-compile -c cuda.cu -o cuda.cuda.o\n"
              "FAILED: [code=2] cuda.cuda.o \n/usr/local/cuda/bin/nvcc -c cuda.cu -o cuda.cuda.o\n"
              '/work/ops.py(12): error: identifier "y" is undefined\n\n'
              "1 error detected in the compilation of \"cuda.cu\".\nninja: build stopped: subcommand failed.\n")
    assert inline_backend.compiler_log(output).splitlines() == [
        '/work/ops.py(12): error: identifier "y" is undefined', '1 error detected in the compilation of "cuda.cu".']


@pytest.mark.parametrize(("arch", "torch_arch"), [("sm_90", "9.0"), ("sm_90a", "9.0a"), ("sm_100", "10.0")])
def test_arch_is_spelled_for_torch_cuda_arch_list(arch: str, torch_arch: str) -> None:
    assert inline_backend.torch_arch(arch) == torch_arch


# ---- GPU: the real build, calls, and the cache in a new process -------------------------------------------------


def _misaligned(rows: int, cols: int) -> torch.Tensor:
    """A contiguous view one float into a fresh buffer: 4 bytes off every 16-byte boundary."""
    view = torch.randn(rows * cols + 1, device="cuda")[1:].view(rows, cols)
    assert view.data_ptr() % 16 == 4
    return view


@pytest.mark.gpu
@pytest.mark.parametrize("make", [
    lambda: torch.randn(1823, 781, device="cuda"),  # numel % 4 == 3: the float4 loop and a 3-element tail
    lambda: _misaligned(1823, 781),  # off 16 bytes: the scalar loop for everything
    lambda: torch.randn(1, 3, device="cuda"),  # fewer elements than one float4
    lambda: torch.randn(0, 5, device="cuda"),  # empty: no launch
], ids=["1823x781", "misaligned", "1x3", "empty"])
def test_square_vec4_matches_the_reference(square_built: BuiltExtension, make) -> None:
    assert square_built.module is not None and square_built.arch == default_arch()
    x = make()
    y = SQUARE_EXT.square_vec4(x)
    torch.cuda.synchronize()
    assert y.shape == x.shape and y.dtype == torch.float32 and y.is_contiguous()
    assert torch.equal(y, x * x)  # one fp32 multiplication each: bitwise equal


@pytest.mark.gpu
@pytest.mark.parametrize(("make", "message"), [
    (lambda: torch.ones(8), "must be a CUDA tensor"),
    (lambda: torch.ones(8, device="cuda", dtype=torch.float16), "must be float32"),
    (lambda: torch.ones(8, 4, device="cuda").t(), "must be contiguous"),
], ids=["cpu", "fp16", "transposed"])
def test_square_vec4_rejects_what_it_cannot_square(square_built: BuiltExtension, make, message: str) -> None:
    with pytest.raises(RuntimeError, match=message):
        SQUARE_EXT.square_vec4(make())


@pytest.mark.gpu
def test_an_impl_listing_the_extension_runs_on_the_gpu(square_built: BuiltExtension) -> None:
    impl = Impl("cuda_inline_vec4", "cuda", lambda x: SQUARE_EXT.square_vec4(x), kernels=(SQUARE_EXT,),
                dtypes=(torch.float32,))
    backends.ensure_runnable(impl, torch.float32, "cuda")  # compiles (memory cache), raises nothing


@pytest.mark.slow
def test_a_new_process_gets_the_build_from_the_disk_cache(square_built: BuiltExtension, square_cache: Path) -> None:
    """The same file in a new process: the same key, so a cache hit in under 2 s (and, on a GPU, a working call)."""
    script = (
        "import json, runpy, sys, time, torch\n"
        "ext = runpy.run_path(sys.argv[1])['SQUARE_EXT']\n"
        "torch.cuda.init() if torch.cuda.is_available() else None  # CUDA's own start-up is not the cache's\n"
        "start = time.perf_counter()\n"
        "built = ext.compile()\n"
        "seconds = time.perf_counter() - start\n"
        "x = torch.randn(1823, 781, device='cuda') if torch.cuda.is_available() else None\n"
        "ok = None if x is None else torch.equal(ext.square_vec4(x), x * x)\n"
        "print(json.dumps({'cached': built.cached, 'seconds': seconds, 'ok': ok, 'built': str(built)}))\n"
    )
    src = str(Path(kernelkit.ops.__file__).parents[2])
    env = {**os.environ, "KERNELKIT_CACHE_DIR": str(square_cache),
           "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", script, __file__], capture_output=True, text=True, timeout=300,
                          env=env)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["cached"] and result["seconds"] < 2.0, result
    assert result["ok"] is (True if torch.cuda.is_available() else None), result
