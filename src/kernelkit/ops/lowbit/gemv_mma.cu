// int4 weight-only GEMV / small-M GEMM on tensor cores: y (M, N) = x (M, K) @ W.T for M <= 16, W as 4-bit codes
// packed along K into int32 words (packing.py: code k of row n in word k / 8 at bits (k % 8) * 4), w = (q - z) s
// per group of columns (or per channel), x in bf16 or fp16, fp32 accumulation (mma.sync m16n8k16).
//
// Why: gemv.cu dequantizes a code to fp32 and multiplies it on the FMA pipe: ~5 SASS instructions a code (mask,
// FFMA to q - z, FFMA with x, and the x and address work), so at M = 1 a 14336x4096 layer is as much issue work as
// its 29 MiB take to stream from HBM and the kernel reaches ~35% of the copy rate. Here two codes become a pair of
// 16-bit floats in one LOP3 (the code OR-ed into the mantissa of 128.0 in bf16, 1024.0 in fp16: a float 128 + q),
// one packed subtract makes q - z and one packed multiply (q - z) s, rounded once to the activation dtype exactly
// as the reference dequantizes; the products and sums run on the tensor cores. ~2 instructions a code.
//
// Layout: a block of kWarps warps owns 16 rows of W (the MMA's M); each warp takes kUnroll consecutive K blocks of
// 128 codes at a time (its slice of K), and each lane of a quad (lane % 4 = j) loads one 16-byte chunk (32 codes)
// of each of its rows g = lane / 4 and g + 8: a quad reads 64 contiguous bytes of a row a block, all of a warp's
// kUnroll x 2 loads in flight before its first MMA. The MMA's k order is a permutation of K (a dot product does not
// care): step s (0..7) of a block, lane j's pair t (0, 1) holds the codes of word s / 2 of its chunk at
// t' = (s % 2) 2 + t and t' + 4, i.e. k = 128 kb + 32 j + 8 (s / 2) + t' + {0, 4}; the x fragment is gathered in the
// same order (two byte permutes of one 16-byte load give a word's four pairs). x's rows are the MMA's N: 8 a
// fragment, so M <= 8 is one MMA a step and M <= 16 two. The warps' sums meet in shared memory.
//
// Each extern "C" kernel is one (dtype, M tile), compiled alone (-DLOWBIT_GEMV_MMA_<name>, or LOWBIT_GEMV_MMA_ALL).
// The arithmetic of a lane (code pairs, dequantization, x pairs) is __host__ __device__, so a host build can run
// a warp's fragments through an emulated MMA (tests/test_ops_lowbit_gemv_mma.py).

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace gemv_mma {

constexpr int kWarp = 32;
constexpr int kWarps = 8;        // warps a block: 256 threads over the same 16 rows, each a slice of K
constexpr int kUnroll = 4;       // K blocks a warp loads before its first MMA: 2 rows x 4 x 16 bytes a lane
constexpr int kRowsPerBlock = 16;
constexpr int kBlockCodes = 128;  // codes of K a block step: 4 lanes x 32 codes
constexpr unsigned kCodeMask = 0x000F000Fu;

#define GEMV_MMA_HD __host__ __device__ __forceinline__

// A 16-bit float type's magic number (the float 128 or 1024, whose mantissa's low 4 bits are a code's value) and
// its bits for rounding a float.
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

// Codes t and t + 4 of a word (t = 0..3) as the pair (magic + q_t, magic + q_{t+4}) in T: one shift and one LOP3.
template <typename T>
GEMV_MMA_HD unsigned code_pair(unsigned word, int t) {
    constexpr unsigned kMagic2 = Half<T>::kMagic * 0x00010001u;
#ifdef __CUDA_ARCH__
    // (a & b) | c in one LOP3: written out, the compiler makes two (each takes one immediate).
    unsigned out;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(out) : "r"(word >> (4 * t)), "n"(kCodeMask), "r"(kMagic2));
    return out;
#else
    return ((word >> (4 * t)) & kCodeMask) | kMagic2;
#endif
}

// (pair - (magic + z)) * s for both halves, each rounded once to T: q - z is exact, so this is the reference's
// dequantization (q - z) s rounded to the activation dtype. offset2 = (magic + z) twice, scale2 = s twice.
template <typename T>
GEMV_MMA_HD unsigned dequant_pair(unsigned pair, unsigned offset2, unsigned scale2) {
#ifdef __CUDA_ARCH__
    if constexpr (sizeof(T) == 2 && Half<T>::kMagic == 0x4300u) {
        const __nv_bfloat162 q = __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&pair),
                                         *reinterpret_cast<const __nv_bfloat162*>(&offset2));
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
        const float q = Half<T>::value((pair >> (16 * h)) & 0xFFFFu) - Half<T>::value((offset2 >> (16 * h)) & 0xFFFFu);
        out[h] = Half<T>::bits(q * Half<T>::value((scale2 >> (16 * h)) & 0xFFFFu));  // exact product, one rounding
    }
    return pack(out[0], out[1]);
#endif
}

// The (magic + z) pair and the scale pair of a group, from its scale (as stored, T) and zero code.
template <typename T>
GEMV_MMA_HD unsigned offset_pair(unsigned char zero) {
    return (Half<T>::kMagic | zero) * 0x00010001u;  // magic + z: z < 16 sits in the mantissa's low bits
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

// The x pairs of one word of a lane's chunk: eight consecutive activations v0..v7 (one 16-byte load, as four
// 32-bit words) -> (v_t, v_{t+4}) for t = 0..3, the order code_pair gives the weights.
GEMV_MMA_HD void x_pairs(uint4 raw, unsigned (&out)[4]) {
    out[0] = byte_perm(raw.x, raw.z, 0x5410);  // (v0, v4)
    out[1] = byte_perm(raw.x, raw.z, 0x7632);  // (v1, v5)
    out[2] = byte_perm(raw.y, raw.w, 0x5410);  // (v2, v6)
    out[3] = byte_perm(raw.y, raw.w, 0x7632);  // (v3, v7)
}

// Word u's four dequantized pairs of one row: (w_t, w_{t+4}) for t = 0..3.
template <typename T>
GEMV_MMA_HD void weight_pairs(unsigned word, unsigned offset2, unsigned scale2, unsigned (&out)[4]) {
#pragma unroll
    for (int t = 0; t < 4; ++t) out[t] = dequant_pair<T>(code_pair<T>(word, t), offset2, scale2);
}

// The A and B fragments of step s of a block (lane's pairs for rows g and g + 8, and for x) -> MMA registers.
// Step s uses word s / 2 of the chunk, pairs t' = (s % 2) 2 and t' + 1 (the MMA's k 2j.. and 2j + 8..).
GEMV_MMA_HD void step_fragments(int s, const unsigned (&row_g)[4], const unsigned (&row_g8)[4],
                                const unsigned (&x)[4], unsigned (&a)[4], unsigned (&b)[2]) {
    const int t = (s % 2) * 2;
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

// Block b owns rows 16 b .. 16 b + 15; warp w the K blocks w kUnroll + i kWarps kUnroll + u. x (M, K), w (N, K / 32)
// 16-byte chunks, s and z (N, groups); group of code k: k >> group_shift (30 per channel).
template <typename T, int M_TILE>
__device__ __forceinline__ void gemv_mma_rows(const T* __restrict__ x_ptr, const int4* __restrict__ w_ptr,
                                              const T* __restrict__ s_ptr, const unsigned char* __restrict__ z_ptr,
                                              T* __restrict__ y_ptr, int m_rows, int n, int chunks, int groups,
                                              int group_shift, int has_zeros) {
    constexpr int NB = M_TILE / 8;  // MMAs a step: 8 rows of x each
    __shared__ float partial[kWarps][kRowsPerBlock][M_TILE];
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    const int g = lane / 4, j = lane % 4;
    const int row0 = blockIdx.x * kRowsPerBlock;
    const long long rows[2] = {min(row0 + g, n - 1), min(row0 + g + 8, n - 1)};  // rows past N read N - 1
    const long long k = (long long)chunks * 32;
    const int blocks = chunks / 4;
    long long x_row[NB];
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) x_row[nb] = min(nb * 8 + g, m_rows - 1) * k;  // rows past M read M - 1
    float acc[NB][4] = {};

    for (int kb0 = warp * kUnroll; kb0 < blocks; kb0 += kWarps * kUnroll) {
        uint4 words[kUnroll][2];
        unsigned short scale_bits[kUnroll][2];
        unsigned char zero[kUnroll][2];
        // Unconditional loads, all issued before the first MMA: a block past K reads the last one again (its
        // step is skipped below); a load under a condition was issued only after the previous block's MMAs.
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const int chunk = min(kb0 + u, blocks - 1) * 4 + j;
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const long long at = rows[r] * groups + (((long long)chunk * 32) >> group_shift);
                words[u][r] = load_weights(w_ptr + rows[r] * chunks + chunk);
                scale_bits[u][r] = reinterpret_cast<const unsigned short*>(s_ptr)[at];
                zero[u][r] = has_zeros ? z_ptr[at] : 8;
            }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            if (kb0 + u >= blocks) break;
            const long long k0 = (long long)(kb0 + u) * kBlockCodes + 32 * j;  // this lane's first code
            unsigned offset2[2], scale2[2];
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                offset2[r] = offset_pair<T>(zero[u][r]);
                scale2[r] = scale_pair(scale_bits[u][r]);
            }
#pragma unroll
            for (int wd = 0; wd < 4; ++wd) {
                const unsigned word_g = wd == 0 ? words[u][0].x : wd == 1 ? words[u][0].y : wd == 2 ? words[u][0].z
                                                                                                      : words[u][0].w;
                const unsigned word_g8 = wd == 0 ? words[u][1].x : wd == 1 ? words[u][1].y : wd == 2 ? words[u][1].z
                                                                                                       : words[u][1].w;
                unsigned wg[4], wg8[4];
                weight_pairs<T>(word_g, offset2[0], scale2[0], wg);
                weight_pairs<T>(word_g8, offset2[1], scale2[1], wg8);
#pragma unroll
                for (int nb = 0; nb < NB; ++nb) {
                    unsigned xp[4];
                    x_pairs(__ldg(reinterpret_cast<const uint4*>(x_ptr + x_row[nb] + k0 + 8 * wd)), xp);
#pragma unroll
                    for (int half = 0; half < 2; ++half) {
                        unsigned a[4], b[2];
                        step_fragments(2 * wd + half, wg, wg8, xp, a, b);
                        mma<T>(acc[nb], a, b);
                    }
                }
            }
        }
    }
    // acc[nb]: (row g, x rows nb 8 + 2j, + 1), (row g + 8, the same): the warps' sums meet in shared memory.
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
        partial[warp][g][nb * 8 + 2 * j] = acc[nb][0];
        partial[warp][g][nb * 8 + 2 * j + 1] = acc[nb][1];
        partial[warp][g + 8][nb * 8 + 2 * j] = acc[nb][2];
        partial[warp][g + 8][nb * 8 + 2 * j + 1] = acc[nb][3];
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < kRowsPerBlock * M_TILE; idx += blockDim.x) {
        const int r = idx % kRowsPerBlock, m = idx / kRowsPerBlock;  // consecutive threads: consecutive rows of y
        float sum = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) sum += partial[w][r][m];
        if (m < m_rows && row0 + r < n) store(y_ptr + (long long)m * n + row0 + r, sum);
    }
}

}  // namespace gemv_mma

#define LOWBIT_GEMV_MMA_BODY(T, M_TILE) \
    gemv_mma::gemv_mma_rows<T, M_TILE>(x_ptr, w_ptr, s_ptr, z_ptr, y_ptr, m_rows, n, chunks, groups, group_shift, \
                                       has_zeros)

// Every kernel: grid ceil(N / 16) blocks of 256 threads. x (M, K) with M <= M_TILE, K = 32 chunks a multiple of
// 128; w (N, chunks) 16-byte chunks; s (N, groups) in x's dtype; z (N, groups) uint8 (read when has_zeros); y (M, N).

#if defined(LOWBIT_GEMV_MMA_ALL) || defined(LOWBIT_GEMV_MMA_lowbit_gemv_mma_w4_bf16_m8_kernel)
extern "C" __global__ void __launch_bounds__(gemv_mma::kWarps * gemv_mma::kWarp)
lowbit_gemv_mma_w4_bf16_m8_kernel(const __nv_bfloat16* x_ptr, const int4* w_ptr, const __nv_bfloat16* s_ptr,
    const unsigned char* z_ptr, __nv_bfloat16* y_ptr, int m_rows, int n, int chunks, int groups, int group_shift,
    int has_zeros) { LOWBIT_GEMV_MMA_BODY(__nv_bfloat16, 8); }
#endif
#if defined(LOWBIT_GEMV_MMA_ALL) || defined(LOWBIT_GEMV_MMA_lowbit_gemv_mma_w4_bf16_m16_kernel)
extern "C" __global__ void __launch_bounds__(gemv_mma::kWarps * gemv_mma::kWarp)
lowbit_gemv_mma_w4_bf16_m16_kernel(const __nv_bfloat16* x_ptr, const int4* w_ptr, const __nv_bfloat16* s_ptr,
    const unsigned char* z_ptr, __nv_bfloat16* y_ptr, int m_rows, int n, int chunks, int groups, int group_shift,
    int has_zeros) { LOWBIT_GEMV_MMA_BODY(__nv_bfloat16, 16); }
#endif
#if defined(LOWBIT_GEMV_MMA_ALL) || defined(LOWBIT_GEMV_MMA_lowbit_gemv_mma_w4_f16_m8_kernel)
extern "C" __global__ void __launch_bounds__(gemv_mma::kWarps * gemv_mma::kWarp)
lowbit_gemv_mma_w4_f16_m8_kernel(const __half* x_ptr, const int4* w_ptr, const __half* s_ptr,
    const unsigned char* z_ptr, __half* y_ptr, int m_rows, int n, int chunks, int groups, int group_shift,
    int has_zeros) { LOWBIT_GEMV_MMA_BODY(__half, 8); }
#endif
#if defined(LOWBIT_GEMV_MMA_ALL) || defined(LOWBIT_GEMV_MMA_lowbit_gemv_mma_w4_f16_m16_kernel)
extern "C" __global__ void __launch_bounds__(gemv_mma::kWarps * gemv_mma::kWarp)
lowbit_gemv_mma_w4_f16_m16_kernel(const __half* x_ptr, const int4* w_ptr, const __half* s_ptr,
    const unsigned char* z_ptr, __half* y_ptr, int m_rows, int n, int chunks, int groups, int group_shift,
    int has_zeros) { LOWBIT_GEMV_MMA_BODY(__half, 16); }
#endif

#endif  // __CUDA_ARCH__
