"""The M <= 16 GEMVs of the low-bit linear ops: ``triton_gemv_unrolled`` in the interpreter against the reference
at edge shapes (M = 1, 3, 16; K = 128 and 4096; N = 1000 and ragged blocks; 2, 4 and 8 bits), where each impl
skips and why, ``cuda_gemv``'s kernels compiled for sm_90 one at a time, its launch arguments against the
kernels' signatures, and its lanes run on the host (a host build of gemv.cu by nvcc); on a GPU (gpu marker),
``cuda_gemv`` and the unrolled GEMV against the reference at the target weights (Llama-3-8B layers) and at every
M tile, ragged N, each quantization, fp16, and a misaligned x.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from kernelkit.backends.cuda import CudaKernel
from kernelkit.errors import BackendUnavailable
from kernelkit.ops import lowbit
from kernelkit.ops.lowbit import gemv_launch
from kernelkit.ops.lowbit import inputs as lowbit_inputs
from opkit import assert_matches_reference, nvcc_host_build, write_lowbit_args

CPU = torch.device("cpu")


def _inputs(bits, group_size, symmetric, size, dtype, seed=0, device=CPU):
    return lowbit_inputs.seeded_inputs(bits, group_size, symmetric)(size, dtype, torch.device(device), seed)


def _check(name, bits, group_size, symmetric, size, dtype, device=CPU):
    args = _inputs(bits, group_size, symmetric, size, dtype, device=device)
    out = lowbit.OPS[bits].impls[name].fn(*args)
    assert out.shape == (size[0], size[1]) and out.dtype == dtype, (name, size)
    assert_matches_reference(out, lowbit.OPS[bits].reference, *args)
    return out


# ---- triton_gemv_unrolled in the interpreter ----------------------------------------------------------------

# (bits, group_size, symmetric, (M, N, K), dtype), each with its reason. The interpreter's config: 64 rows a
# program, steps of 4 tiles of 8 words, K split in 2 (~2 s for the slowest case here).
UNROLLED_CASES = [
    (4, 128, False, (1, 1000, 128), torch.float16),  # N = 1000: 16 row blocks, the last one of 40; a half step
    (4, 128, False, (3, 40, 4096), torch.float16),  # long K: 16 steps in 2 splits, 3 rows of x meeting in one sum
    (4, 128, False, (16, 24, 128), torch.float32),  # M = 16, the most rows taken
    (8, None, True, (3, 33, 100), torch.float32),  # int8 per channel: a padded word, K past the last tile
    (2, 64, False, (1, 24, 200), torch.float16),  # 2 bits: 16 codes a word, a short last group
    (4, 32, True, (2, 65, 192), torch.float16),  # symmetric groups of 32 (4 a word tile); 65 rows: one past 64
]


@pytest.mark.parametrize("bits, group_size, symmetric, size, dtype", UNROLLED_CASES)
def test_unrolled_gemv_matches_the_reference_in_the_interpreter(bits, group_size, symmetric, size, dtype,
                                                               cpu_process) -> None:
    _check("triton_gemv_unrolled", bits, group_size, symmetric, size, dtype)


def test_unrolled_gemv_split_sums_are_the_calls_own(cpu_process) -> None:
    # 128 words in 2 splits of one step each: a second call starts from a zeroed workspace of its own.
    args = _inputs(4, 128, False, (2, 40, 1024), torch.float16)
    first = lowbit.linear_w4.impls["triton_gemv_unrolled"].fn(*args)
    assert_matches_reference(first, lowbit.linear_w4.reference, *args)
    assert torch.equal(lowbit.linear_w4.impls["triton_gemv_unrolled"].fn(*args), first)


def test_unrolled_configs_keep_a_step_of_1024_words_and_split_ones_zero_their_workspace() -> None:
    from kernelkit.ops.lowbit import triton_gemv_unrolled as unrolled

    for config in unrolled.UNROLLED_CONFIGS:
        assert config.kwargs["BLOCK_N"] * config.kwargs["BLOCK_KW"] == 1024, config
        assert (config.pre_hook is None) == (config.kwargs["SPLIT_K"] == 1)
    assert unrolled.UNROLLED_MIN_BLOCK_N == 8
    # a split is whole steps of UNROLL tiles: 4096 int4 codes (512 words) at kw64 x 4 in 4 splits are 2 steps of 128
    assert unrolled.words_per_split(512, 64 * unrolled.UNROLL_TILES, 4) == 256


def test_unrolled_gemv_compiles_for_sm_90_without_spills() -> None:
    # The interpreter runs what a GPU build may refuse (a global read inside the kernel) and cannot show spills:
    # the int4 g128 kernel at its first config, compiled in a child process (~5-10 s).
    from kernelkit.profiling.asm import report_for

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRITON_INTERPRET", "1")  # as in a CPU run: the child compiles all the same
        report = report_for("linear_w4", "triton_gemv_unrolled", arch="sm_90", size=(1, 4096, 4096),
                            dtype=torch.bfloat16, config=0, ir="ptx")
    (kernel,) = report.kernels
    assert kernel.name == "lowbit_gemv_unrolled_kernel" and ".target sm_90" in kernel.listings["ptx"]
    assert kernel.resources.spill_stores == 0 and kernel.resources.spill_loads == 0


# ---- where each impl applies --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["triton_gemv_unrolled", "cuda_gemv"])
def test_both_skip_past_16_rows_before_any_launch(name: str) -> None:
    args = _inputs(4, 128, False, (17, 8, 128), torch.float16)
    with pytest.raises(BackendUnavailable, match="M <= 16 rows.*got M = 17"):
        lowbit.linear_w4.impls[name].fn(*args)


@pytest.mark.parametrize("bits, group_size, symmetric, size, dtype, reason", [
    (4, 128, False, (1, 8, 1000), torch.bfloat16, "K must be a multiple of 32 at 4 bits, got K = 1000"),
    (8, None, True, (1, 8, 72), torch.float16, "K must be a multiple of 16 at 8 bits, got K = 72"),
    (4, 16, False, (1, 8, 128), torch.float16, "group_size must be at least 32 at 4 bits, got 16"),
    (4, 128, False, (1, 8, 128), torch.float32, "bfloat16 and float16 activations, not torch.float32"),
])
def test_cuda_gemv_says_why_it_does_not_apply(bits, group_size, symmetric, size, dtype, reason) -> None:
    args = _inputs(bits, group_size, symmetric, size, dtype)
    with pytest.raises(BackendUnavailable, match=reason):
        lowbit.OPS[bits].impls["cuda_gemv"].fn(*args)


def test_cuda_gemv_takes_scales_in_the_activation_dtype_only() -> None:
    x, packed, scales, zeros, group_size = _inputs(4, 128, False, (1, 8, 256), torch.float16)
    with pytest.raises(BackendUnavailable, match="scales in the activation dtype"):
        lowbit.linear_w4.impls["cuda_gemv"].fn(x, packed, scales.float(), zeros, group_size)


def test_cuda_gemv_is_registered_for_4_and_8_bits_in_16_bit_dtypes() -> None:
    for bits, op in lowbit.OPS.items():
        assert ("cuda_gemv" in op.impls) == (bits in (4, 8))
        assert "triton_gemv_unrolled" in op.impls
    impl = lowbit.linear_w4.impls["cuda_gemv"]
    assert impl.backend == "cuda" and set(impl.dtypes) == {torch.bfloat16, torch.float16}
    assert {k.name for k in impl.kernels} == {gemv_launch.kernel_name(4, d, m) for d in gemv_launch.DTYPES
                                              for m in gemv_launch.M_TILES}
    # M rounds up to a power-of-two tile: 3 rows run the 4-row kernel, 9 the 16-row one
    assert [gemv_launch.m_tile(m) for m in (1, 2, 3, 4, 5, 8, 9, 16)] == [1, 2, 4, 4, 8, 8, 16, 16]


def test_cuda_gemv_launches_what_its_kernel_signature_takes(monkeypatch) -> None:
    # No GPU here: each launch's arguments go through the kernel's own checks (its C signature: dtypes, 16-byte
    # alignment of the int4* weights, the count) for the CPU, and the grid and scalars are compared with the plan.
    launched = []

    def launch(kernel, grid, block, *args, shared_mem=0):
        launched.append((kernel.name, grid, block, kernel.marshal(*args, device="cpu")[-6:]))

    monkeypatch.setattr(CudaKernel, "launch", launch)
    x, packed, scales, zeros, group_size = _inputs(4, 128, False, (3, 1000, 256), torch.bfloat16)
    lowbit.linear_w4.impls["cuda_gemv"].fn(x, packed, scales, zeros, group_size)
    # the words 4 bytes past a 16-byte boundary (a view into a larger tensor): the launcher copies them
    shifted = torch.empty(packed.numel() + 1, dtype=torch.int32)[1:].view_as(packed)
    shifted.copy_(packed)
    lowbit.linear_w4.impls["cuda_gemv"].fn(x[:1], shifted, scales, zeros, group_size)
    args = _inputs(8, None, True, (16, 24, 64), torch.float16)
    lowbit.linear_w8.impls["cuda_gemv"].fn(*args)
    # (kernel, blocks of 8 rows, threads, (M, N, chunks, groups, group shift, has zeros)): 256 int4 codes are 8
    # chunks of 32 in 2 groups of 4 chunks; 64 int8 codes are 4 chunks of 16, one group a row, no zeros.
    assert launched == [("lowbit_gemv_w4_bf16_m4_kernel", 125, 128, [3, 1000, 8, 2, 2, 1]),
                        ("lowbit_gemv_w4_bf16_m1_kernel", 125, 128, [1, 1000, 8, 2, 2, 1]),
                        ("lowbit_gemv_w8_f16_m16_kernel", 3, 128, [16, 24, 4, 1, 30, 0])]


def test_cuda_gemv_kernels_compile_for_sm_90_each_alone(can_compile: bool) -> None:
    if not can_compile:
        pytest.skip("neither NVRTC nor nvcc is here")
    # The corners (fewest and most rows, both code widths, both dtypes; ~0.4 s each: all twenty at once take
    # ~10 s, and the checker compiles an op's ten before it says "no GPU"). Each cubin holds its kernel alone.
    names = [kernel.name for kernel in gemv_launch.KERNELS.values()]
    for key in [(4, torch.bfloat16, 1), (4, torch.float16, 16), (8, torch.float16, 1), (8, torch.bfloat16, 16)]:
        kernel = gemv_launch.KERNELS[key]
        cubin = kernel.compile("sm_90").cubin
        assert [name for name in names if name.encode() in cubin] == [kernel.name]


# ---- cuda_gemv's lanes on the CPU ----------------------------------------------------------------------------
# gemv.cu's per-lane arithmetic (lane_sums: loads, the code-to-float trick, groups, tails) is __host__ __device__:
# a host build runs every lane of every warp, summed as the warp's shuffles would, on the op's own inputs. The
# GPU-only parts (the shuffles, the store, the grid) are left to the gpu tests.

HOST_HARNESS = r"""
// Every lane of every warp of gemv.cu's kernels, run on the host; y in fp32 (the kernel rounds it to T).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gemv.cu"

template <typename V>
static std::vector<V> read_file(const std::string& path, size_t count) {
    std::vector<V> data(count ? count : 1);
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f || std::fread(data.data(), sizeof(V), count, f) != count) std::exit(3);
    std::fclose(f);
    return data;
}

template <typename T, int BITS, int M_TILE>
static void emulate(const std::string& dir, int m_rows, int n, int chunks, int groups, int shift, int has_zeros) {
    const size_t k = size_t(chunks) * 128 / BITS;
    const auto x = read_file<T>(dir + "/x.bin", m_rows * k);
    const auto w = read_file<int4>(dir + "/w.bin", size_t(n) * chunks);
    const auto s = read_file<T>(dir + "/s.bin", size_t(n) * groups);
    const auto z = read_file<unsigned char>(dir + "/z.bin", has_zeros ? size_t(n) * groups : 0);
    std::vector<float> y(size_t(m_rows) * n);
    for (int row0 = 0; row0 < n; row0 += kRows) {
        float total[M_TILE][kRows] = {};
        for (int lane = 0; lane < kWarp; ++lane) {
            float acc[M_TILE][kRows] = {};
            lane_sums<T, BITS, M_TILE, Unroll<M_TILE>::value>(lane, row0, x.data(), w.data(), s.data(), z.data(),
                                                              m_rows, n, chunks, groups, shift, has_zeros, acc);
            for (int m = 0; m < M_TILE; ++m)
                for (int r = 0; r < kRows; ++r) total[m][r] += acc[m][r];
        }
        for (int m = 0; m < m_rows; ++m)
            for (int r = 0; r < kRows && row0 + r < n; ++r) y[size_t(m) * n + row0 + r] = total[m][r];
    }
    FILE* f = std::fopen((dir + "/y.bin").c_str(), "wb");
    std::fwrite(y.data(), sizeof(float), y.size(), f);
    std::fclose(f);
}

// argv: folder, kernel name (as gemv.cu's), M, N, chunks, groups, group shift, has zeros
int main(int argc, char** argv) {
    if (argc != 9) return 2;
    const std::string dir = argv[1], name = argv[2];
    int v[6];
    for (int i = 0; i < 6; ++i) v[i] = std::atoi(argv[3 + i]);
#define CASE(NAME, T, BITS, M_TILE) \
    if (name == NAME) return emulate<T, BITS, M_TILE>(dir, v[0], v[1], v[2], v[3], v[4], v[5]), 0;
    CASE("lowbit_gemv_w4_bf16_m4_kernel", __nv_bfloat16, 4, 4)
    CASE("lowbit_gemv_w4_f16_m1_kernel", __half, 4, 1)
    CASE("lowbit_gemv_w4_f16_m16_kernel", __half, 4, 16)
    CASE("lowbit_gemv_w8_bf16_m2_kernel", __nv_bfloat16, 8, 2)
    CASE("lowbit_gemv_w8_f16_m16_kernel", __half, 8, 16)
    return 4;
}
"""

# (bits, group_size, symmetric, (M, N, K), dtype, kernel): each lane path. N = 1001: the last warp's second row
# past N; K = 4128: 129 chunks (a second step for one lane) and a last group of 32 codes; M = 3 and 13 in tiles of
# 4 and 16 (rows of x past M); per-channel int4 with zeros; groups of 32 (one a chunk); int8 with groups of 64;
# M <= 2 sums a chunk before scaling it, M >= 4 scales each code.
HOST_CASES = [
    (4, 128, False, (3, 1001, 4128), torch.bfloat16, "lowbit_gemv_w4_bf16_m4_kernel"),
    (4, None, False, (1, 40, 256), torch.float16, "lowbit_gemv_w4_f16_m1_kernel"),
    (4, 32, True, (9, 17, 512), torch.float16, "lowbit_gemv_w4_f16_m16_kernel"),
    (8, 64, False, (2, 33, 1024), torch.bfloat16, "lowbit_gemv_w8_bf16_m2_kernel"),
    (8, None, True, (13, 24, 64), torch.float16, "lowbit_gemv_w8_f16_m16_kernel"),
]


@pytest.fixture(scope="module")
def host_harness(tmp_path_factory: pytest.TempPathFactory) -> str:
    return nvcc_host_build(tmp_path_factory.mktemp("gemv_host"), HOST_HARNESS, Path(gemv_launch.__file__).parent)


@pytest.mark.parametrize("bits, group_size, symmetric, size, dtype, kernel", HOST_CASES)
def test_cuda_gemv_lanes_match_the_reference_on_the_host(bits, group_size, symmetric, size, dtype, kernel,
                                                         host_harness, tmp_path) -> None:
    x, packed, scales, zeros, group_size = args = _inputs(bits, group_size, symmetric, size, dtype, seed=1)
    m, n, k = size
    codes = gemv_launch.codes_per_chunk(bits)
    shift = gemv_launch.PER_CHANNEL_SHIFT if group_size is None else (group_size // codes).bit_length() - 1
    assert gemv_launch.kernel_name(bits, dtype, gemv_launch.m_tile(m)) == kernel
    write_lowbit_args(tmp_path, x, packed, scales, zeros)
    subprocess.run([host_harness, str(tmp_path), kernel, str(m), str(n), str(k // codes), str(scales.shape[1]),
                    str(shift), str(int(zeros is not None))], check=True, timeout=60)
    y = torch.from_numpy(np.fromfile(tmp_path / "y.bin", dtype=np.float32)).view(m, n)
    assert_matches_reference(y.to(dtype), lowbit.OPS[bits].reference, *args)


# ---- GPU ----------------------------------------------------------------------------------------------------

NEW = ["cuda_gemv", "triton_gemv_unrolled"]
TARGET_WEIGHTS = [(4096, 4096), (14336, 4096), (4096, 14336)]


@pytest.mark.gpu
@pytest.mark.parametrize("name", NEW)
@pytest.mark.parametrize("n, k", TARGET_WEIGHTS)
@pytest.mark.parametrize("bits, group_size, symmetric", [(4, 128, False), (8, None, True)])
@pytest.mark.parametrize("m", [1, 16])
def test_both_match_the_reference_at_the_target_weights_on_gpu(bits, group_size, symmetric, m, n, k,
                                                               name) -> None:
    # One test a (kernel, weight, M): a failure names the kernel and the shape, and the others still run.
    _check(name, bits, group_size, symmetric, (m, n, k), torch.bfloat16, device="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("name", NEW)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_every_m_tile_and_ragged_shape_on_gpu(name: str, dtype: torch.dtype) -> None:
    # Every M up to 16 (each tile, full and partial); N = 1000 (a partial block of 8 rows, a warp's second row
    # past N at 1001); K = 128 (4 chunks: 28 idle lanes) and 4128 (129 chunks: one lane of a second step);
    # K = 32, one chunk; each quantization the CUDA kernel takes, int4 groups of 32 (one group a chunk).
    for m in range(1, 17):
        _check(name, 4, 128, False, (m, 1000, 1024), dtype, device="cuda")
    for bits, group_size, symmetric, size in [(4, 128, False, (1, 1001, 128)), (4, 128, False, (3, 24, 4128)),
                                              (4, None, False, (2, 40, 32)), (4, 32, True, (5, 1000, 4096)),
                                              (8, None, True, (1, 1000, 4096)), (8, 64, False, (7, 333, 1024)),
                                              (8, 16, False, (16, 64, 16))]:
        _check(name, bits, group_size, symmetric, size, dtype, device="cuda")


@pytest.mark.gpu
def test_cuda_gemv_copies_a_misaligned_x_and_leaves_it_alone() -> None:
    x, packed, scales, zeros, group_size = _inputs(4, 128, False, (3, 512, 1024), torch.bfloat16, device="cuda")
    storage = torch.empty(x.numel() + 1, dtype=x.dtype, device="cuda")
    shifted = storage[1:].view_as(x)  # 2 bytes past a 16-byte boundary
    shifted.copy_(x)
    out = lowbit.linear_w4.impls["cuda_gemv"].fn(shifted, packed, scales, zeros, group_size)
    assert_matches_reference(out, lowbit.linear_w4.reference, x, packed, scales, zeros, group_size)
    assert torch.equal(shifted, x)


@pytest.mark.gpu
def test_the_checker_passes_or_skips_both_at_the_default_sizes_on_gpu() -> None:
    import kernelkit as kk
    from kernelkit.results import Status

    for op in (lowbit.linear_w4, lowbit.linear_w8):
        report = kk.check(op.name, device="cuda", impls=NEW, dtypes=[torch.bfloat16])
        for r in report.results:
            m, _, k = r.size
            applies = m <= 16 and (r.impl != "cuda_gemv" or k % 32 == 0)
            assert r.status is (Status.PASSED if applies else Status.SKIPPED), (r.case_id, r.status, r.message)


@pytest.mark.gpu
@pytest.mark.parametrize("config", range(4), ids=lambda i: f"config{i}")
@pytest.mark.parametrize("m", [1, 16])
def test_each_unrolled_config_alone_is_right_every_time_on_gpu(config: int, m: int, monkeypatch) -> None:
    # triton_gemv_unrolled failed 1-3 of its target cases in two GPU runs and none in a third, while every config
    # passes in the interpreter: the autotuner's pick varies from run to run, so each config is forced here (a
    # wrong one fails every time), at the longest K, five calls each (a race fails some of them). The one found
    # wrong that way, (4, 256, 4, 1, 1), is out of the list.
    from kernelkit.ops.lowbit import triton_gemv_unrolled as unrolled

    assert len(unrolled.UNROLLED_CONFIGS) == 4  # the parametrization's range
    kernel = unrolled.lowbit_gemv_unrolled_kernel
    monkeypatch.setattr(kernel, "configs", [unrolled.UNROLLED_CONFIGS[config]])
    monkeypatch.setattr(kernel, "cache", {})
    args = _inputs(4, 128, False, (m, 4096, 14336), torch.bfloat16, device="cuda")
    outs = [lowbit.linear_w4.impls["triton_gemv_unrolled"].fn(*args) for _ in range(5)]
    for out in outs:
        assert_matches_reference(out, lowbit.linear_w4.reference, *args)
    split = unrolled.UNROLLED_CONFIGS[config].kwargs["SPLIT_K"]
    if split == 1:  # one program a row block and K in order: the same bits every call
        assert all(torch.equal(out, outs[0]) for out in outs)


@pytest.mark.gpu
@pytest.mark.parametrize("bits, group_size, symmetric", [(4, 128, False), (8, None, True)])
def test_cuda_auto_takes_the_tensor_core_gemv_to_16_rows_and_triton_past_them_on_gpu(bits, group_size, symmetric,
                                                                                     monkeypatch) -> None:
    taken: list[str] = []
    monkeypatch.setattr(gemv_launch, "cuda_gemv_mma", lambda p, run=gemv_launch.cuda_gemv_mma: (
        taken.append("mma"), run(p))[1])
    for m in (1, 16, 17, 64):
        _check("cuda_auto", bits, group_size, symmetric, (m, 1024, 4096), torch.bfloat16, device="cuda")
    assert taken == ["mma", "mma"]
    layer = lowbit.LowBitLinear.from_linear(torch.nn.Linear(4096, 512).cuda(), bits=bits, group_size=group_size,
                                            dtype=torch.bfloat16)
    assert layer.impl_for(torch.device("cuda")) == "cuda_auto"
    x = torch.randn(3, 4096, device="cuda", dtype=torch.bfloat16)
    assert layer(x).shape == (3, 512)
