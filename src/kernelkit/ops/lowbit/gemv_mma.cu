// int4 and int8 weight-only GEMV / small-M GEMM on tensor cores: y (M, N) = x (M, K) @ W.T for M <= 16, W as
// 4- or 8-bit codes packed along K into int32 words (packing.py: code k of row n in word k / P at bits (k % P) BITS),
// w = (q - z) s per group of columns (or per channel), x in bf16 or fp16, fp32 sums (mma.sync m16n8k16).
//
// Why: gemv.cu dequantizes a code to fp32 and multiplies it on the FMA pipe: ~5 SASS instructions a code (mask,
// FFMA to q - z, FFMA with x, and the x and address work), so at M = 1 a 14336x4096 int4 layer is as much issue
// work as its 29 MiB take to stream from HBM, and the kernel reached ~35% of the copy rate. Here two codes become a
// pair of 16-bit floats in one LOP3 (each code OR-ed into the mantissa of a magic number: 128.0 in bf16, 1024.0 in
// fp16, reads as magic + q), one packed subtract makes q - z and one packed multiply (q - z) s, rounded once to the
// activation dtype exactly as the reference dequantizes; the products and sums run on the tensor cores: ~2.2
// issued instructions a code for int4 in the sm_90 SASS. An 8-bit code does not fit a bf16's 7 mantissa bits: int8
// makes q - z in fp16 and converts it to bf16 (exact: |q - z| < 256) before the multiply.
//
// Layout: a block of kWarps warps owns R tiles of 16 rows of W (the MMA's M); each warp takes consecutive K blocks
// at a time (its slice of K) for all R tiles, and each lane of a quad (lane % 4 = j) loads one 16-byte chunk (4
// words: 32 int4 or 16 int8 codes) of each of its rows g = lane / 4 and g + 8 of each tile: a quad reads 64
// contiguous bytes of a row a block, all of a warp's loads of a K block in flight before its first MMA. The MMA's
// k order is a permutation of K (a dot product does not care): a word gives P pairs (int4: codes t and t + 4, t < 4; int8: t and t + 2, t < 2), and
// each MMA step takes two pairs of a word (the MMA's k 2j, 2j + 1 and 2j + 8, 2j + 9) for rows g and g + 8; the x
// fragment is gathered in the same order by byte permutes of the word's activations (one 16-byte load for int4,
// 8 bytes for int8) and used by all R tiles. x's rows are the MMA's N: 8 a fragment, so M <= 8 is one MMA a step
// and M <= 16 two. The warps' sums meet in shared memory.
//
// Each extern "C" kernel is one (bits, dtype, M tile), compiled alone (-DLOWBIT_GEMV_MMA_<name>, or
// LOWBIT_GEMV_MMA_ALL). The arithmetic of a lane (code pairs, dequantization, x pairs, step fragments) is
// __host__ __device__, so a host build runs a warp's fragments through an emulated MMA
// (tests/test_ops_lowbit_gemv_mma.py).

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "x_prefetch.cuh"  // prefetch_l2_once: x into L2 at the start, once for the grid

namespace gemv_mma {

// The launch shape, compiled in: gemv_launch.py launches the defaults; scripts/gpu-gemv-tune builds and times
// others. On an H200 (2026-11-27), 4-16 warps and 2-8 K blocks combined with x staged in shared memory, the next
// K blocks loaded while the current ones multiply, or persistent blocks taking tile after tile: none more than 4%
// faster than these defaults at any of the 12 int4/int8 target cases, most slower (up to 25% at M = 1).
#ifndef GEMV_MMA_WARPS
#define GEMV_MMA_WARPS 8
#endif
// Row tiles (16 rows of W each) a block owns, and the loads a lane keeps in flight before its first MMA (in K
// blocks x tiles), per kernel: every x fragment a warp loads feeds all of a block's tiles. At M = 16, x (16 x K)
// is as many bytes per block as 16 rows of int4 W, and every block reads it again (from L2): two tiles a block
// read it half as often. H200, 2026-11-27, int4 M = 16 (scripts/gpu-gemv-tune, cold, kk us, the three target
// weights): 1 tile and 4 loads 12.2 / 35.9 / 33.3; 2 tiles and 2 loads 11.7 / 26.0 / 26.3; 2 and 4, 11.4 / 31.2 /
// 24.6; 4 and 4, 15.8 / 29.5 / 36.8. int8 at M = 16 keeps 1 tile (2 tiles: 0.9-1.2x its time at the three
// weights); M <= 8 keeps 1 (x is small).
// GEMV_MMA_TILES and GEMV_MMA_UNROLL, where given, set both for the kernel being built (gpu-gemv-tune's variants).
#define GEMV_MMA_W4_M16_TILES 2
#define GEMV_MMA_W4_M16_UNROLL 2

constexpr int kWarp = 32;
constexpr int kWarps = GEMV_MMA_WARPS;  // warps a block: 256 threads over the same rows, each a slice of K
constexpr int kTileRows = 16;           // the MMA's M

template <int BITS, int M_TILE>
struct LaunchShape {
    static constexpr bool kW4M16 = BITS == 4 && M_TILE > 8;
#ifdef GEMV_MMA_TILES
    static constexpr int kTiles = GEMV_MMA_TILES;
#else
    static constexpr int kTiles = kW4M16 ? GEMV_MMA_W4_M16_TILES : 1;
#endif
#ifdef GEMV_MMA_UNROLL
    static constexpr int kUnroll = GEMV_MMA_UNROLL;
#else
    static constexpr int kUnroll = kW4M16 ? GEMV_MMA_W4_M16_UNROLL : 4;
#endif
};

#define GEMV_MMA_HD __host__ __device__ __forceinline__

template <bool C, typename A, typename B>
struct Pick {
    using type = A;
};
template <typename A, typename B>
struct Pick<false, A, B> {
    using type = B;
};

// A word's codes: int4 has 8, taken as 4 pairs (t, t + 4); int8 has 4, taken as 2 pairs (t, t + 2). A lane's
// 16-byte chunk holds 4 words; a quad's K block is 4 chunks. A pair is built in the 16-bit float B: the
// activation dtype for int4, fp16 for int8 (an 8-bit code needs 8 mantissa bits; bf16 has 7).
template <typename T, int BITS>
struct Codes {
    static constexpr int kPairs = 16 / BITS;
    static constexpr int kChunkCodes = 128 / BITS;
    static constexpr int kBlockCodes = 4 * kChunkCodes;
    static constexpr unsigned kMask = BITS == 4 ? 0x000F000Fu : 0x00FF00FFu;
    using Build = typename Pick<BITS == 4, T, __half>::type;
};

// A 16-bit float type's magic number (128.0 in bf16, 1024.0 in fp16: a code OR-ed into its mantissa's low bits
// reads as magic + code) and its bits for rounding a float.
template <typename T>
struct Half;
template <>
struct Half<__nv_bfloat16> {
    static constexpr unsigned kMagic = 0x4300u;  // 128.0: ulp 1 on [128, 256)
    GEMV_MMA_HD static unsigned short bits(float v) {
        const __nv_bfloat16 h = __float2bfloat16_rn(v);
        return *reinterpret_cast<const unsigned short*>(&h);
    }
    GEMV_MMA_HD static float value(unsigned short b) {
        __nv_bfloat16 h;
        *reinterpret_cast<unsigned short*>(&h) = b;
        return __bfloat162float(h);
    }
};
template <>
struct Half<__half> {
    static constexpr unsigned kMagic = 0x6400u;  // 1024.0: ulp 1 on [1024, 2048)
    GEMV_MMA_HD static unsigned short bits(float v) {
        const __half h = __float2half_rn(v);
        return *reinterpret_cast<const unsigned short*>(&h);
    }
    GEMV_MMA_HD static float value(unsigned short b) {
        __half h;
        *reinterpret_cast<unsigned short*>(&h) = b;
        return __half2float(h);
    }
};

GEMV_MMA_HD unsigned pack(unsigned short lo, unsigned short hi) { return unsigned(lo) | (unsigned(hi) << 16); }

// Pair t of a word as (magic + q, magic + q') in B: one shift and one LOP3.
template <typename T, int BITS>
GEMV_MMA_HD unsigned code_pair(unsigned word, int t) {
    using C = Codes<T, BITS>;
    constexpr unsigned kMagic2 = Half<typename C::Build>::kMagic * 0x00010001u;
#ifdef __CUDA_ARCH__
    // (a & b) | c in one LOP3: written out, the compiler makes two (each takes one immediate).
    unsigned out;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(out) : "r"(word >> (BITS * t)), "n"(C::kMask), "r"(kMagic2));
    return out;
#else
    return ((word >> (BITS * t)) & C::kMask) | kMagic2;
#endif
}

// (pair - (magic + z)) * s for both halves, rounded once to T: q - z is exact in B (a small integer), so this is
// the reference's dequantization (q - z) s rounded to the activation dtype. offset2 = (magic + z) twice in B,
// scale2 = s twice in T.
template <typename T, int BITS>
GEMV_MMA_HD unsigned dequant_pair(unsigned pair, unsigned offset2, unsigned scale2) {
    using B = typename Codes<T, BITS>::Build;
#ifdef __CUDA_ARCH__
    if constexpr (Half<T>::kMagic == 0x4300u) {
        __nv_bfloat162 q;
        if constexpr (Half<B>::kMagic == 0x4300u) {
            q = __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&pair),
                        *reinterpret_cast<const __nv_bfloat162*>(&offset2));
        } else {  // int8 for bf16: q - z made in fp16, then to bf16 (exact: |q - z| < 256)
            const float2 f = __half22float2(__hsub2(*reinterpret_cast<const __half2*>(&pair),
                                                    *reinterpret_cast<const __half2*>(&offset2)));
            q = __floats2bfloat162_rn(f.x, f.y);
        }
        const __nv_bfloat162 w = __hmul2(q, *reinterpret_cast<const __nv_bfloat162*>(&scale2));
        return *reinterpret_cast<const unsigned*>(&w);
    } else {
        const __half2 q = __hsub2(*reinterpret_cast<const __half2*>(&pair),
                                  *reinterpret_cast<const __half2*>(&offset2));
        const __half2 w = __hmul2(q, *reinterpret_cast<const __half2*>(&scale2));
        return *reinterpret_cast<const unsigned*>(&w);
    }
#else
    unsigned short out[2];
    for (int h = 0; h < 2; ++h) {
        const float q = Half<B>::value((pair >> (16 * h)) & 0xFFFFu) - Half<B>::value((offset2 >> (16 * h)) & 0xFFFFu);
        out[h] = Half<T>::bits(q * Half<T>::value((scale2 >> (16 * h)) & 0xFFFFu));  // exact product, one rounding
    }
    return pack(out[0], out[1]);
#endif
}

// The (magic + z) pair of a group, in B: z sits in the mantissa's low bits (z < 16 in bf16, < 256 in fp16).
template <typename T, int BITS>
GEMV_MMA_HD unsigned offset_pair(unsigned char zero) {
    return (Half<typename Codes<T, BITS>::Build>::kMagic | zero) * 0x00010001u;
}
GEMV_MMA_HD unsigned scale_pair(unsigned short scale_bits) { return pack(scale_bits, scale_bits); }

GEMV_MMA_HD unsigned byte_perm(unsigned a, unsigned b, unsigned selector) {
#ifdef __CUDA_ARCH__
    return __byte_perm(a, b, selector);
#else
    const unsigned long long both = (unsigned long long)a | ((unsigned long long)b << 32);
    unsigned out = 0;
    for (int i = 0; i < 4; ++i) out |= unsigned((both >> (8 * ((selector >> (4 * i)) & 7))) & 0xFF) << (8 * i);
    return out;
#endif
}

// The x pairs of one word of a lane's chunk, in the order code_pair gives the weights. int4: eight consecutive
// activations v0..v7 (16 bytes) -> (v_t, v_{t+4}); int8: four, v0..v3 (8 bytes) -> (v_t, v_{t+2}).
GEMV_MMA_HD void x_pairs(uint4 raw, unsigned (&out)[4]) {
    out[0] = byte_perm(raw.x, raw.z, 0x5410);  // (v0, v4)
    out[1] = byte_perm(raw.x, raw.z, 0x7632);  // (v1, v5)
    out[2] = byte_perm(raw.y, raw.w, 0x5410);  // (v2, v6)
    out[3] = byte_perm(raw.y, raw.w, 0x7632);  // (v3, v7)
}
GEMV_MMA_HD void x_pairs(uint2 raw, unsigned (&out)[2]) {
    out[0] = byte_perm(raw.x, raw.y, 0x5410);  // (v0, v2)
    out[1] = byte_perm(raw.x, raw.y, 0x7632);  // (v1, v3)
}

// A word's dequantized pairs of one row.
template <typename T, int BITS>
GEMV_MMA_HD void weight_pairs(unsigned word, unsigned offset2, unsigned scale2,
                              unsigned (&out)[Codes<T, BITS>::kPairs]) {
#pragma unroll
    for (int t = 0; t < Codes<T, BITS>::kPairs; ++t)
        out[t] = dequant_pair<T, BITS>(code_pair<T, BITS>(word, t), offset2, scale2);
}

// The MMA registers of step st of a word (pairs 2 st and 2 st + 1: the MMA's k 2j.. and 2j + 8..) from the lane's
// pairs for rows g and g + 8 and for x.
template <int P>
GEMV_MMA_HD void step_fragments(int st, const unsigned (&row_g)[P], const unsigned (&row_g8)[P],
                                const unsigned (&x)[P], unsigned (&a)[4], unsigned (&b)[2]) {
    const int t = 2 * st;
    a[0] = row_g[t];       // (row g,     k 2j, 2j + 1)
    a[1] = row_g8[t];      // (row g + 8, k 2j, 2j + 1)
    a[2] = row_g[t + 1];   // (row g,     k 2j + 8, 2j + 9)
    a[3] = row_g8[t + 1];  // (row g + 8, k 2j + 8, 2j + 9)
    b[0] = x[t];
    b[1] = x[t + 1];
}

}  // namespace gemv_mma

#ifdef __CUDA_ARCH__

namespace gemv_mma {

template <typename T>
__device__ __forceinline__ void mma(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    if constexpr (Half<T>::kMagic == 0x4300u) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%0, %1, %2, %3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    } else {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%0, %1, %2, %3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
}

// Weights are read once: skip L1, read-only path.
__device__ __forceinline__ uint4 load_weights(const int4* p) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

template <typename T>
__device__ __forceinline__ void store(T* p, float v) {
    *reinterpret_cast<unsigned short*>(p) = Half<T>::bits(v);
}

// Block b owns rows 16 R b .. 16 R b + 16 R - 1 (R = LaunchShape's kTiles: tile t is rows 16 t.. of those); warp
// w the K blocks w U + i kWarps U + u, U = kUnroll / R (at least 1: the K blocks a warp loads at once), each
// for all R tiles. x (M, K), w (N, chunks)
// 16-byte chunks, s and z (N, groups); group of code k: k >> group_shift (30 per channel).
template <typename T, int BITS, int M_TILE>
__device__ __forceinline__ void gemv_mma_rows(const T* __restrict__ x_ptr, const int4* __restrict__ w_ptr,
                                              const T* __restrict__ s_ptr, const unsigned char* __restrict__ z_ptr,
                                              T* __restrict__ y_ptr, int m_rows, int n, int chunks, int groups,
                                              int group_shift, int has_zeros) {
    using C = Codes<T, BITS>;
    constexpr int NB = M_TILE / 8;  // MMAs a step and tile: 8 rows of x each
    constexpr int P = C::kPairs;
    constexpr int R = LaunchShape<BITS, M_TILE>::kTiles;
    constexpr int U = LaunchShape<BITS, M_TILE>::kUnroll / R > 0 ? LaunchShape<BITS, M_TILE>::kUnroll / R : 1;
    // Rows padded by one word: the sum below reads consecutive rows from consecutive threads, M_TILE words apart
    // without it (an M_TILE-way bank conflict: ncu, int4 M = 16 at 14336x4096, 94% of shared-load wavefronts).
    __shared__ float partial[kWarps][kTileRows * R][M_TILE + 1];
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    const int g = lane / 4, j = lane % 4;
    const int row0 = blockIdx.x * kTileRows * R;
    long long rows[R][2];
#pragma unroll
    for (int t = 0; t < R; ++t) {  // rows past N read N - 1
        rows[t][0] = min(row0 + 16 * t + g, n - 1);
        rows[t][1] = min(row0 + 16 * t + g + 8, n - 1);
    }
    const long long k = (long long)chunks * C::kChunkCodes;
    const int blocks = chunks / 4;
    long long x_row[NB];
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) x_row[nb] = min(nb * 8 + g, m_rows - 1) * k;  // rows past M read M - 1
    float acc[R][NB][4] = {};
    prefetch_l2_once(x_ptr, (long long)m_rows * k * sizeof(T));  // x's reads below then hit L2 (x_prefetch.cuh)

    for (int kb0 = warp * U; kb0 < blocks; kb0 += kWarps * U) {
        uint4 words[U][R][2];
        unsigned short scale_bits[U][R][2];
        unsigned char zero[U][R][2];
        // Unconditional loads, all issued before the first MMA: a block past K reads the last one again (its
        // step is skipped below); a load under a condition was issued only after the previous block's MMAs.
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int chunk = min(kb0 + u, blocks - 1) * 4 + j;
#pragma unroll
            for (int t = 0; t < R; ++t) {
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const long long at = rows[t][r] * groups + (((long long)chunk * C::kChunkCodes) >> group_shift);
                    words[u][t][r] = load_weights(w_ptr + rows[t][r] * chunks + chunk);
                    scale_bits[u][t][r] = reinterpret_cast<const unsigned short*>(s_ptr)[at];
                    zero[u][t][r] = has_zeros ? z_ptr[at] : (unsigned char)(1 << (BITS - 1));
                }
            }
        }
        // One K block's dequantization and MMAs. A whole iteration runs its U steps without a branch between
        // them, so the compiler may issue the later steps' x loads early; only the last, partial one checks.
        auto step = [&](int u) {
            const long long k0 = (long long)(kb0 + u) * C::kBlockCodes + C::kChunkCodes * j;  // lane's first code
            unsigned offset2[R][2], scale2[R][2];
#pragma unroll
            for (int t = 0; t < R; ++t) {
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    offset2[t][r] = offset_pair<T, BITS>(zero[u][t][r]);
                    scale2[t][r] = scale_pair(scale_bits[u][t][r]);
                }
            }
#pragma unroll
            for (int wd = 0; wd < 4; ++wd) {
                unsigned xp[NB][P];  // the word's x pairs, loaded once for all R tiles
#pragma unroll
                for (int nb = 0; nb < NB; ++nb) {
                    const T* at = x_ptr + x_row[nb] + k0 + (32 / BITS) * wd;  // the word's first activation
                    if constexpr (BITS == 4) {
                        x_pairs(__ldg(reinterpret_cast<const uint4*>(at)), xp[nb]);
                    } else {
                        x_pairs(__ldg(reinterpret_cast<const uint2*>(at)), xp[nb]);
                    }
                }
#pragma unroll
                for (int t = 0; t < R; ++t) {
                    const uint4& wg4 = words[u][t][0];
                    const uint4& wg84 = words[u][t][1];
                    const unsigned word_g = wd == 0 ? wg4.x : wd == 1 ? wg4.y : wd == 2 ? wg4.z : wg4.w;
                    const unsigned word_g8 = wd == 0 ? wg84.x : wd == 1 ? wg84.y : wd == 2 ? wg84.z : wg84.w;
                    unsigned wg[P], wg8[P];
                    weight_pairs<T, BITS>(word_g, offset2[t][0], scale2[t][0], wg);
                    weight_pairs<T, BITS>(word_g8, offset2[t][1], scale2[t][1], wg8);
#pragma unroll
                    for (int nb = 0; nb < NB; ++nb) {
#pragma unroll
                        for (int st = 0; st < P / 2; ++st) {
                            unsigned a[4], b[2];
                            step_fragments<P>(st, wg, wg8, xp[nb], a, b);
                            mma<T>(acc[t][nb], a, b);
                        }
                    }
                }
            }
        };
        if (kb0 + U <= blocks) {
#pragma unroll
            for (int u = 0; u < U; ++u) step(u);
        } else {
#pragma unroll
            for (int u = 0; u < U; ++u) {
                if (kb0 + u >= blocks) break;
                step(u);
            }
        }
    }
    // acc[t][nb]: (row 16 t + g, x rows nb 8 + 2j, + 1), (row 16 t + g + 8, the same): the warps' sums meet in
    // shared memory.
#pragma unroll
    for (int t = 0; t < R; ++t) {
#pragma unroll
        for (int nb = 0; nb < NB; ++nb) {
            partial[warp][16 * t + g][nb * 8 + 2 * j] = acc[t][nb][0];
            partial[warp][16 * t + g][nb * 8 + 2 * j + 1] = acc[t][nb][1];
            partial[warp][16 * t + g + 8][nb * 8 + 2 * j] = acc[t][nb][2];
            partial[warp][16 * t + g + 8][nb * 8 + 2 * j + 1] = acc[t][nb][3];
        }
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < kTileRows * R * M_TILE; idx += blockDim.x) {
        const int r = idx % (kTileRows * R), m = idx / (kTileRows * R);  // consecutive threads: consecutive rows
        float sum = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) sum += partial[w][r][m];
        if (m < m_rows && row0 + r < n) store(y_ptr + (long long)m * n + row0 + r, sum);
    }
}

}  // namespace gemv_mma

#define LOWBIT_GEMV_MMA_BODY(T, BITS, M_TILE)                                                                  \
    gemv_mma::gemv_mma_rows<T, BITS, M_TILE>(x_ptr, w_ptr, s_ptr, z_ptr, y_ptr, m_rows, n, chunks, groups,       \
                                             group_shift, has_zeros)

// Every kernel: grid ceil(N / (16 R)) blocks of 256 threads, R = LaunchShape's kTiles. x (M, K) with M <= M_TILE,
// K = chunks x 32 (int4) or 16 (int8) codes, whole K blocks of 4 chunks; w (N, chunks) 16-byte chunks; s (N,
// groups) in x's dtype; z (N, groups) uint8 (read when has_zeros); y (M, N).
// Spelled out, not made by a macro: the launcher reads each kernel's parameters from this text
// (backends/cuda/signature.py).

#if defined(LOWBIT_GEMV_MMA_ALL) || defined(LOWBIT_GEMV_MMA_lowbit_gemv_mma_w4_bf16_m8_kernel)
extern "C" __global__ void __launch_bounds__(gemv_mma::kWarps * gemv_mma::kWarp)
lowbit_gemv_mma_w4_bf16_m8_kernel(const __nv_bfloat16* x_ptr, const int4* w_ptr, const __nv_bfloat16* s_ptr,
    const unsigned char* z_ptr, __nv_bfloat16* y_ptr, int m_rows, int n, int chunks, int groups, int group_shift,
    int has_zeros) { LOWBIT_GEMV_MMA_BODY(__nv_bfloat16, 4, 8); }
#endif
#if defined(LOWBIT_GEMV_MMA_ALL) || defined(LOWBIT_GEMV_MMA_lowbit_gemv_mma_w4_bf16_m16_kernel)
extern "C" __global__ void __launch_bounds__(gemv_mma::kWarps * gemv_mma::kWarp)
lowbit_gemv_mma_w4_bf16_m16_kernel(const __nv_bfloat16* x_ptr, const int4* w_ptr, const __nv_bfloat16* s_ptr,
    const unsigned char* z_ptr, __nv_bfloat16* y_ptr, int m_rows, int n, int chunks, int groups, int group_shift,
    int has_zeros) { LOWBIT_GEMV_MMA_BODY(__nv_bfloat16, 4, 16); }
#endif
#if defined(LOWBIT_GEMV_MMA_ALL) || defined(LOWBIT_GEMV_MMA_lowbit_gemv_mma_w4_f16_m8_kernel)
extern "C" __global__ void __launch_bounds__(gemv_mma::kWarps * gemv_mma::kWarp)
lowbit_gemv_mma_w4_f16_m8_kernel(const __half* x_ptr, const int4* w_ptr, const __half* s_ptr,
    const unsigned char* z_ptr, __half* y_ptr, int m_rows, int n, int chunks, int groups, int group_shift,
    int has_zeros) { LOWBIT_GEMV_MMA_BODY(__half, 4, 8); }
#endif
#if defined(LOWBIT_GEMV_MMA_ALL) || defined(LOWBIT_GEMV_MMA_lowbit_gemv_mma_w4_f16_m16_kernel)
extern "C" __global__ void __launch_bounds__(gemv_mma::kWarps * gemv_mma::kWarp)
lowbit_gemv_mma_w4_f16_m16_kernel(const __half* x_ptr, const int4* w_ptr, const __half* s_ptr,
    const unsigned char* z_ptr, __half* y_ptr, int m_rows, int n, int chunks, int groups, int group_shift,
    int has_zeros) { LOWBIT_GEMV_MMA_BODY(__half, 4, 16); }
#endif
#if defined(LOWBIT_GEMV_MMA_ALL) || defined(LOWBIT_GEMV_MMA_lowbit_gemv_mma_w8_bf16_m8_kernel)
extern "C" __global__ void __launch_bounds__(gemv_mma::kWarps * gemv_mma::kWarp)
lowbit_gemv_mma_w8_bf16_m8_kernel(const __nv_bfloat16* x_ptr, const int4* w_ptr, const __nv_bfloat16* s_ptr,
    const unsigned char* z_ptr, __nv_bfloat16* y_ptr, int m_rows, int n, int chunks, int groups, int group_shift,
    int has_zeros) { LOWBIT_GEMV_MMA_BODY(__nv_bfloat16, 8, 8); }
#endif
#if defined(LOWBIT_GEMV_MMA_ALL) || defined(LOWBIT_GEMV_MMA_lowbit_gemv_mma_w8_bf16_m16_kernel)
extern "C" __global__ void __launch_bounds__(gemv_mma::kWarps * gemv_mma::kWarp)
lowbit_gemv_mma_w8_bf16_m16_kernel(const __nv_bfloat16* x_ptr, const int4* w_ptr, const __nv_bfloat16* s_ptr,
    const unsigned char* z_ptr, __nv_bfloat16* y_ptr, int m_rows, int n, int chunks, int groups, int group_shift,
    int has_zeros) { LOWBIT_GEMV_MMA_BODY(__nv_bfloat16, 8, 16); }
#endif
#if defined(LOWBIT_GEMV_MMA_ALL) || defined(LOWBIT_GEMV_MMA_lowbit_gemv_mma_w8_f16_m8_kernel)
extern "C" __global__ void __launch_bounds__(gemv_mma::kWarps * gemv_mma::kWarp)
lowbit_gemv_mma_w8_f16_m8_kernel(const __half* x_ptr, const int4* w_ptr, const __half* s_ptr,
    const unsigned char* z_ptr, __half* y_ptr, int m_rows, int n, int chunks, int groups, int group_shift,
    int has_zeros) { LOWBIT_GEMV_MMA_BODY(__half, 8, 8); }
#endif
#if defined(LOWBIT_GEMV_MMA_ALL) || defined(LOWBIT_GEMV_MMA_lowbit_gemv_mma_w8_f16_m16_kernel)
extern "C" __global__ void __launch_bounds__(gemv_mma::kWarps * gemv_mma::kWarp)
lowbit_gemv_mma_w8_f16_m16_kernel(const __half* x_ptr, const int4* w_ptr, const __half* s_ptr,
    const unsigned char* z_ptr, __half* y_ptr, int m_rows, int n, int chunks, int groups, int group_shift,
    int has_zeros) { LOWBIT_GEMV_MMA_BODY(__half, 8, 16); }
#endif

#endif  // __CUDA_ARCH__
