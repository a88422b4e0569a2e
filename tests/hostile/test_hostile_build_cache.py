"""A header edited behind an -I include path must miss the build cache (it once returned a stale cubin)."""

from pathlib import Path

from kernelkit.backends.cuda.build import include_dirs, local_includes


def test_headers_found_through_include_paths_are_keyed(tmp_path: Path):
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "config.cuh").write_text('#define BLOCK 128\n#include <more.cuh>\n')
    (inc / "more.cuh").write_text("#define WIDTH 4\n")
    source = '#include "config.cuh"\n#include <cuda_fp16.h>\nextern "C" __global__ void k() {}\n'
    search = include_dirs(["-O3", "-I", str(inc)], tmp_path)
    before = local_includes(source, tmp_path, set(), search)
    assert len(before) == 2  # the quoted header found through -I, and the angled one it includes
    (inc / "more.cuh").write_text("#define WIDTH 8\n")
    assert local_includes(source, tmp_path, set(), search) != before


def test_include_path_options_in_every_spelling(tmp_path: Path):
    found = include_dirs(["-Ia", "-I", "b", "--include-path=/c", "--include-path", "d", "-DX=1"], tmp_path)
    assert found == [tmp_path / "a", tmp_path / "b", Path("/c"), tmp_path / "d"]
