"""``cuda_gemv_mma`` (gemv_mma.cu): int4 and int8 codes made 16-bit floats two at a time for mma.sync m16n8k16.
Here: where it is registered and where it says it does not apply, its launch arguments against the kernels'
signatures, its eight kernels compiled for sm_90 one at a time, and a warp's fragments run on the host (a host
build of the kernel's lane arithmetic by nvcc, through an MMA emulated from the PTX ISA's fragment layout); on a
GPU (gpu marker), the kernel against the reference at the target weights, at every M, ragged N and each
quantization.
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

NAME = "cuda_gemv_mma"


def _inputs(group_size, symmetric, size, dtype, seed=0, device="cpu", bits=4):
    return lowbit_inputs.seeded_inputs(bits, group_size, symmetric)(size, dtype, torch.device(device), seed)


# ---- where it applies ----------------------------------------------------------------------------------------


def test_it_is_an_int4_and_int8_impl_in_16_bit_dtypes_with_four_kernels_each() -> None:
    assert NAME not in lowbit.linear_w2.impls
    for bits, op in ((4, lowbit.linear_w4), (8, lowbit.linear_w8)):
        impl = op.impls[NAME]
        assert impl.backend == "cuda" and set(impl.dtypes) == {torch.bfloat16, torch.float16}
        assert {k.name for k in impl.kernels} == {f"lowbit_gemv_mma_w{bits}_{d}_m{m}_kernel" for d in ("bf16", "f16")
                                                  for m in (8, 16)}


@pytest.mark.parametrize("bits, group_size, size, dtype, reason", [
    (4, 128, (17, 8, 128), torch.bfloat16, "M <= 16 rows.*got M = 17"),
    (4, 32, (1, 8, 96), torch.bfloat16, "multiple of 128 at 4 bits, got K = 96"),
    (8, 16, (1, 8, 96), torch.bfloat16, "multiple of 64 at 8 bits, got K = 96"),
    (4, 16, (1, 8, 128), torch.float16, "group_size must be at least 32 at 4 bits, got 16"),
    (8, 8, (1, 8, 128), torch.float16, "group_size must be at least 16 at 8 bits, got 8"),
    (4, 128, (1, 8, 128), torch.float32, "bfloat16 and float16 activations, not torch.float32"),
])
def test_it_says_why_it_does_not_apply(bits, group_size, size, dtype, reason) -> None:
    with pytest.raises(BackendUnavailable, match=reason):
        lowbit.OPS[bits].impls[NAME].fn(*_inputs(group_size, False, size, dtype, bits=bits))


def test_it_takes_scales_in_the_activation_dtype_only() -> None:
    x, packed, scales, zeros, group_size = _inputs(128, False, (1, 8, 256), torch.float16)
    with pytest.raises(BackendUnavailable, match="scales in the activation dtype"):
        lowbit.linear_w4.impls[NAME].fn(x, packed, scales.float(), zeros, group_size)


def test_it_launches_what_its_kernel_signature_takes(monkeypatch) -> None:
    # No GPU here: each launch's arguments go through the kernel's own checks (its C signature) for the CPU.
    launched = []

    def launch(kernel, grid, block, *args, shared_mem=0):
        launched.append((kernel.name, grid, block, kernel.marshal(*args, device="cpu")[-6:]))

    monkeypatch.setattr(CudaKernel, "launch", launch)
    lowbit.linear_w4.impls[NAME].fn(*_inputs(128, False, (3, 1000, 256), torch.bfloat16))
    lowbit.linear_w4.impls[NAME].fn(*_inputs(None, True, (9, 40, 128), torch.float16))
    lowbit.linear_w8.impls[NAME].fn(*_inputs(None, True, (1, 17, 192), torch.bfloat16, bits=8))
    # (kernel, blocks of 16 rows (32 for int4 at M tile 16), threads, (M, N, 16-byte chunks a row, groups, log2 group or
    # 30, has zeros))
    assert launched == [("lowbit_gemv_mma_w4_bf16_m8_kernel", 63, 256, [3, 1000, 8, 2, 7, 1]),
                        ("lowbit_gemv_mma_w4_f16_m16_kernel", 2, 256, [9, 40, 4, 1, 30, 0]),
                        ("lowbit_gemv_mma_w8_bf16_m8_kernel", 2, 256, [1, 17, 12, 1, 30, 0])]


def test_the_launcher_counts_the_row_tiles_the_kernels_are_built_with() -> None:
    source = (Path(gemv_launch.__file__).parent / "gemv_mma.cu").read_text()
    assert f"#define GEMV_MMA_W4_M16_TILES {gemv_launch.MMA_W4_M16_TILES}\n" in source
    assert "kTiles = kW4M16 ? GEMV_MMA_W4_M16_TILES : 1;" in source
    assert [gemv_launch.row_tiles(b, m) for b in (4, 8) for m in (8, 16)] == [1, gemv_launch.MMA_W4_M16_TILES, 1, 1]


def test_its_kernels_compile_for_sm_90_each_alone(can_compile: bool) -> None:
    if not can_compile:
        pytest.skip("neither NVRTC nor nvcc is here")
    names = [kernel.name for kernel in gemv_launch.MMA_KERNELS.values()]
    for kernel in gemv_launch.MMA_KERNELS.values():
        cubin = kernel.compile("sm_90").cubin
        assert [name for name in names if name.encode() in cubin] == [kernel.name]


# ---- a warp's fragments on the host ---------------------------------------------------------------------------
# gemv_mma.cu's lane arithmetic (code pairs, dequantization, x pairs, step fragments) is __host__ __device__: the
# harness gives each of a warp's 32 lanes its chunks as the kernel does, and an MMA emulated from the PTX ISA's
# m16n8k16 fragment layout (A row-major 16 x 16, B 16 x 8, C 16 x 8) multiplies them. One warp walks every K
# block (the kernel's warps split K and add their sums: the same total).

HOST_HARNESS = r"""
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gemv_mma.cu"

using namespace gemv_mma;

template <typename V>
static std::vector<V> read_file(const std::string& path, size_t count) {
    std::vector<V> data(count ? count : 1);
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f || std::fread(data.data(), sizeof(V), count, f) != count) std::exit(3);
    std::fclose(f);
    return data;
}

template <typename T>
static float half_of(unsigned u, int h) { return Half<T>::value((u >> (16 * h)) & 0xFFFFu); }

// D += A B for one warp, from the lanes' registers: groupID g = lane / 4, j = lane % 4.
template <typename T>
static void mma_host(const unsigned (&a)[32][4], const unsigned (&b)[32][2], float (&d)[32][4]) {
    float A[16][16], B[16][8];
    for (int lane = 0; lane < 32; ++lane) {
        const int g = lane / 4, j = lane % 4;
        for (int h = 0; h < 2; ++h) {
            A[g][2 * j + h] = half_of<T>(a[lane][0], h);
            A[g + 8][2 * j + h] = half_of<T>(a[lane][1], h);
            A[g][2 * j + 8 + h] = half_of<T>(a[lane][2], h);
            A[g + 8][2 * j + 8 + h] = half_of<T>(a[lane][3], h);
            B[2 * j + h][g] = half_of<T>(b[lane][0], h);
            B[2 * j + 8 + h][g] = half_of<T>(b[lane][1], h);
        }
    }
    for (int lane = 0; lane < 32; ++lane) {
        const int g = lane / 4, j = lane % 4;
        for (int i = 0; i < 4; ++i) {
            const int row = g + 8 * (i / 2), col = 2 * j + i % 2;
            float sum = 0.0f;
            for (int kk = 0; kk < 16; ++kk) sum += A[row][kk] * B[kk][col];
            d[lane][i] += sum;
        }
    }
}

template <typename T, int BITS, int M_TILE>
static void emulate(const std::string& dir, int m_rows, int n, int chunks, int groups, int shift, int has_zeros) {
    using C = Codes<T, BITS>;
    constexpr int NB = M_TILE / 8, P = C::kPairs;
    const long long k = (long long)chunks * C::kChunkCodes;
    const auto x = read_file<unsigned short>(dir + "/x.bin", size_t(m_rows) * k);
    const auto w = read_file<unsigned>(dir + "/w.bin", size_t(n) * chunks * 4);
    const auto s = read_file<unsigned short>(dir + "/s.bin", size_t(n) * groups);
    const auto z = read_file<unsigned char>(dir + "/z.bin", has_zeros ? size_t(n) * groups : 0);
    std::vector<float> y(size_t(m_rows) * n);
    const int blocks = chunks / 4;
    for (int row0 = 0; row0 < n; row0 += 16) {
        static float acc[NB][32][4];
        for (auto& per_nb : acc) for (auto& lane : per_nb) for (float& v : lane) v = 0.0f;
        for (int kb = 0; kb < blocks; ++kb) {
            static unsigned wg[32][4][P], wg8[32][4][P], xp[NB][32][4][P];
            for (int lane = 0; lane < 32; ++lane) {
                const int g = lane / 4, j = lane % 4, chunk = kb * 4 + j;
                const long long rows[2] = {std::min(row0 + g, n - 1), std::min(row0 + g + 8, n - 1)};
                for (int r = 0; r < 2; ++r) {
                    const long long at = rows[r] * groups + (((long long)chunk * C::kChunkCodes) >> shift);
                    const unsigned offset2 = offset_pair<T, BITS>(has_zeros ? z[at] : 1 << (BITS - 1));
                    const unsigned scale2 = scale_pair(s[at]);
                    for (int wd = 0; wd < 4; ++wd)
                        weight_pairs<T, BITS>(w[(rows[r] * chunks + chunk) * 4 + wd], offset2, scale2,
                                              r == 0 ? wg[lane][wd] : wg8[lane][wd]);
                }
                for (int nb = 0; nb < NB; ++nb) {
                    const long long base = std::min(nb * 8 + g, m_rows - 1) * k + (long long)kb * C::kBlockCodes
                                           + C::kChunkCodes * j;
                    for (int wd = 0; wd < 4; ++wd) {
                        const unsigned short* v = &x[base + (32 / BITS) * wd];
                        if constexpr (BITS == 4) {
                            x_pairs(make_uint4(pack(v[0], v[1]), pack(v[2], v[3]), pack(v[4], v[5]),
                                               pack(v[6], v[7])), xp[nb][lane][wd]);
                        } else {
                            x_pairs(make_uint2(pack(v[0], v[1]), pack(v[2], v[3])), xp[nb][lane][wd]);
                        }
                    }
                }
            }
            for (int wd = 0; wd < 4; ++wd)
                for (int st = 0; st < P / 2; ++st)
                    for (int nb = 0; nb < NB; ++nb) {
                        unsigned a[32][4], b[32][2];
                        for (int lane = 0; lane < 32; ++lane)
                            step_fragments<P>(st, wg[lane][wd], wg8[lane][wd], xp[nb][lane][wd], a[lane], b[lane]);
                        mma_host<T>(a, b, acc[nb]);
                    }
        }
        for (int nb = 0; nb < NB; ++nb)
            for (int lane = 0; lane < 32; ++lane)
                for (int i = 0; i < 4; ++i) {
                    const int row = lane / 4 + 8 * (i / 2), m = nb * 8 + 2 * (lane % 4) + i % 2;
                    if (m < m_rows && row0 + row < n) y[size_t(m) * n + row0 + row] = acc[nb][lane][i];
                }
    }
    FILE* f = std::fopen((dir + "/y.bin").c_str(), "wb");
    std::fwrite(y.data(), sizeof(float), y.size(), f);
    std::fclose(f);
}

// argv: folder, bits, dtype (bf16 or f16), M tile, M, N, chunks, groups, group shift, has zeros
int main(int argc, char** argv) {
    if (argc != 11) return 2;
    const std::string dir = argv[1], dtype = argv[3];
    const int bits = std::atoi(argv[2]), tile = std::atoi(argv[4]);
    int v[6];
    for (int i = 0; i < 6; ++i) v[i] = std::atoi(argv[5 + i]);
#define CASE(BITS, NAME, T, TILE) \
    if (bits == BITS && dtype == NAME && tile == TILE) \
        return emulate<T, BITS, TILE>(dir, v[0], v[1], v[2], v[3], v[4], v[5]), 0;
    CASE(4, "bf16", __nv_bfloat16, 8)
    CASE(4, "bf16", __nv_bfloat16, 16)
    CASE(4, "f16", __half, 8)
    CASE(4, "f16", __half, 16)
    CASE(8, "bf16", __nv_bfloat16, 8)
    CASE(8, "bf16", __nv_bfloat16, 16)
    CASE(8, "f16", __half, 8)
    CASE(8, "f16", __half, 16)
    return 4;
}
"""

# (group_size, symmetric, (M, N, K), dtype): each path of the lanes. N = 1000 and 40: a partial last block of 16
# rows (row N - 1 read again, not stored); M = 3, 9, 16: rows of x past M within a fragment, two fragments.
HOST_CASES = [
    (4, 128, False, (3, 1000, 256), torch.bfloat16),  # g128: a group a K block; zeros; 2 K blocks
    (4, 32, True, (9, 40, 384), torch.float16),  # groups of one lane's chunk; symmetric (z = 8); two fragments of x
    (4, None, False, (16, 24, 128), torch.bfloat16),  # per channel, M = 16 exactly
    (4, 64, False, (1, 17, 512), torch.float16),  # M = 1; one row past a block of 16
    (8, None, True, (1, 40, 256), torch.bfloat16),  # int8 per channel, symmetric (z = 128): q - z made in fp16
    (8, 16, False, (11, 33, 192), torch.bfloat16),  # int8 groups of a lane's chunk, zeros up to 255; 3 K blocks
    (8, 64, False, (2, 1000, 128), torch.float16),  # int8 in fp16 (magic 1024 holds 8 bits)
]


@pytest.fixture(scope="module")
def host_harness(tmp_path_factory: pytest.TempPathFactory) -> str:
    return nvcc_host_build(tmp_path_factory.mktemp("gemv_mma_host"), HOST_HARNESS, Path(gemv_launch.__file__).parent)


@pytest.mark.parametrize("bits, group_size, symmetric, size, dtype", HOST_CASES)
def test_a_warp_s_fragments_match_the_reference_on_the_host(bits, group_size, symmetric, size, dtype, host_harness,
                                                            tmp_path) -> None:
    x, packed, scales, zeros, group_size = args = _inputs(group_size, symmetric, size, dtype, seed=1, bits=bits)
    m, n, k = size
    shift = gemv_launch.PER_CHANNEL_SHIFT if group_size is None else group_size.bit_length() - 1
    write_lowbit_args(tmp_path, x, packed, scales, zeros)
    tile = 8 if m <= 8 else 16
    subprocess.run([host_harness, str(tmp_path), str(bits), gemv_launch.DTYPES[dtype], str(tile), str(m), str(n),
                    str(k // gemv_launch.codes_per_chunk(bits)), str(scales.shape[1]), str(shift),
                    str(int(zeros is not None))], check=True, timeout=120)
    y = torch.from_numpy(np.fromfile(tmp_path / "y.bin", dtype=np.float32)).view(m, n)
    assert_matches_reference(y.to(dtype), lowbit.OPS[bits].reference, *args)


def test_the_host_emulation_fails_a_wrong_permutation(host_harness, tmp_path) -> None:
    # The emulation is not blind: the same inputs with x's words swapped pairwise (the k order the fragments
    # assume broken) give a wrong answer.
    x, packed, scales, zeros, group_size = args = _inputs(128, False, (1, 32, 128), torch.bfloat16, seed=2)
    swapped = x.view(1, -1, 2, 8).flip(2).reshape(1, -1)
    write_lowbit_args(tmp_path, swapped, packed, scales, zeros)
    subprocess.run([host_harness, str(tmp_path), "4", "bf16", "8", "1", "32", "4", "1", "7", "1"], check=True,
                   timeout=60)
    y = torch.from_numpy(np.fromfile(tmp_path / "y.bin", dtype=np.float32)).view(1, 32)
    with pytest.raises(AssertionError):
        assert_matches_reference(y.to(torch.bfloat16), lowbit.linear_w4.reference, *args)


# ---- GPU ----------------------------------------------------------------------------------------------------


def _check_gpu(group_size, symmetric, size, dtype, bits=4) -> None:
    args = _inputs(group_size, symmetric, size, dtype, device="cuda", bits=bits)
    out = lowbit.OPS[bits].impls[NAME].fn(*args)
    assert out.shape == size[:2] and out.dtype == dtype
    assert_matches_reference(out, lowbit.OPS[bits].reference, *args)


@pytest.mark.gpu
@pytest.mark.parametrize("n, k", [(4096, 4096), (14336, 4096), (4096, 14336)])
@pytest.mark.parametrize("bits, group_size, symmetric", [(4, 128, False), (8, None, True)])
@pytest.mark.parametrize("m", [1, 16])
def test_it_matches_the_reference_at_the_target_weights_on_gpu(m, bits, group_size, symmetric, n, k) -> None:
    _check_gpu(group_size, symmetric, (m, n, k), torch.bfloat16, bits)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_every_m_and_each_quantization_on_gpu(dtype) -> None:
    for m in range(1, 17):
        _check_gpu(128, False, (m, 1000, 1024), dtype)
        _check_gpu(None, True, (m, 1000, 1024), dtype, bits=8)
    for bits, group_size, symmetric, size in [(4, None, False, (2, 40, 128)), (4, 32, True, (5, 1001, 4096)),
                                              (4, 64, False, (16, 17, 640)), (4, 128, True, (1, 14336, 128)),
                                              (8, 16, False, (3, 1001, 192)), (8, 64, False, (9, 40, 4096))]:
        _check_gpu(group_size, symmetric, size, dtype, bits)
