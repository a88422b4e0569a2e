// Low-bit weight-only GEMV / small-M GEMM: y (M, N) = x (M, K) @ W.T, W as 4- or 8-bit codes packed along K into
// int32 words (packing.py: code k of row n in word k / P at bits (k % P) * BITS), w = (q - z) * s per group of
// columns (or per channel), M = 1..16 activation rows in bf16 or fp16, fp32 accumulation.
//
// Why this shape: at M = 1 the call is a stream of the packed weights (N K BITS / 8 bytes; 8 MiB for int4
// 4096x4096), and HBM reaches its rate only with ~32 KiB of loads in flight per SM. A loop with one load in
// flight per thread is latency-bound. Here each warp owns kRows output rows and each lane issues all its 16-byte
// weight loads for UNROLL chunks of every row (kRows x UNROLL x 16 bytes, 128 bytes at M <= 4), and their
// scales and zeros, before the first FMA; a chunk is one 16-byte vector, 4 words (32 int4 or 16 int8 codes).
// Lanes take consecutive chunks, so a warp's load is 512 contiguous bytes of one row. Every weight load serves
// all M rows of x.
//
// Dequantizing without int-to-float conversions (I2F runs at 1/4 of the FMA rate on Hopper): the code's bits are
// masked in place and OR-ed into the mantissa of 1.0, giving f = 1 + q 2^(j BITS - 23) for the code at bit j BITS
// (while its bits stay below the exponent, bit 23); then one FFMA, f * 2^(23 - j BITS) - (2^(23 - j BITS) + z),
// is q - z exactly (an FFMA rounds once, and q - z is a small integer). Codes above bit 23 are shifted down by one
// shift per word first. Up to M = 2, the chunk's sum of (q - z) x (fp32) is scaled by s once a chunk and row;
// from M = 4, (q - z) s is made once a code (exact) and serves the M rows, sparing M x kRows chunk sums.
//
// x is read through the read-only cache (it is at most 16 x 14336 x 2 bytes: L2-resident after the first warps);
// the weights bypass L1 (each byte is read once). Rows of x past M (the tile is a power of two) read row M - 1
// and are not stored; rows past N read row N - 1 and are not stored.
//
// Each extern "C" kernel below is one (bits, dtype, M tile) and is compiled alone: the launcher passes
// -DLOWBIT_GEMV_<name> (all kernels are compiled when LOWBIT_GEMV_ALL is defined), so a build holds one
// instantiation instead of twenty.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "x_prefetch.cuh"  // prefetch_l2_once: x into L2 at the start, once for the grid

constexpr int kWarp = 32;
constexpr int kWarps = 4;  // warps per block: 128 threads, 8 rows a block
constexpr int kRows = 2;   // output rows a warp owns: each x load serves two rows of weights
constexpr unsigned kOne = 0x3F800000u;  // float 1.0

// The arithmetic of a lane (``lane_sums`` and what it calls) is __host__ __device__, so a host build of this file
// can run every lane of every warp on the CPU (tests/test_ops_lowbit_gemv.py does, with nvcc); the loads below
// are plain reads there.
#define LOWBIT_HD __host__ __device__ __forceinline__

// Weights are read once: skip L1 (keep it for x), read-only path.
LOWBIT_HD uint4 load_weights(const int4* p) {
#ifdef __CUDA_ARCH__
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
#else
    return *reinterpret_cast<const uint4*>(p);
#endif
}

// x through the read-only cache.
template <typename V>
LOWBIT_HD V load_read_only(const V* p) {
#ifdef __CUDA_ARCH__
    return __ldg(p);
#else
    return *p;
#endif
}

LOWBIT_HD float bits_to_float(unsigned u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    __builtin_memcpy(&f, &u, sizeof f);
    return f;
#endif
}

LOWBIT_HD int smaller(int a, int b) { return a < b ? a : b; }

LOWBIT_HD float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
LOWBIT_HD float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void store(__half* p, float v) { *p = __float2half_rn(v); }

// Two packed 16-bit activations (the lower address in the low half) as floats.
LOWBIT_HD void pair_to_floats(unsigned u, float& lo, float& hi, __nv_bfloat16) {
    lo = bits_to_float(u << 16);  // bf16 is the top half of an fp32
    hi = bits_to_float(u & 0xFFFF0000u);
}
LOWBIT_HD void pair_to_floats(unsigned u, float& lo, float& hi, __half) {
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&u));
    lo = f.x;
    hi = f.y;
}

// P = 32 / BITS consecutive activations starting at p (16-byte aligned for int4, 8-byte for int8) as floats.
template <typename T, int P>
LOWBIT_HD void load_x(const T* p, float (&v)[P]) {
    if constexpr (P == 8) {
        const uint4 raw = load_read_only(reinterpret_cast<const uint4*>(p));
        pair_to_floats(raw.x, v[0], v[1], T());
        pair_to_floats(raw.y, v[2], v[3], T());
        pair_to_floats(raw.z, v[4], v[5], T());
        pair_to_floats(raw.w, v[6], v[7], T());
    } else {
        static_assert(P == 4, "int4 or int8 codes");
        const uint2 raw = load_read_only(reinterpret_cast<const uint2*>(p));
        pair_to_floats(raw.x, v[0], v[1], T());
        pair_to_floats(raw.y, v[2], v[3], T());
    }
}

// Codes of a word whose bits end at or below bit 23 as stored: 5 of int4 (bits 0-19), 2 of int8 (bits 0-15).
__host__ __device__ constexpr int low_codes(int bits) { return bits == 4 ? 5 : 2; }

// Codes of one word as q - z (exact fp32). LOW codes sit below bit 23 as stored; the rest are shifted down by
// LOW * BITS first. offset[j] = -(2^(23 - j BITS) + z), exact (< 2^24).

template <int BITS>
LOWBIT_HD void centred_codes(unsigned word, const float (&offset)[low_codes(BITS)],
                                              float (&q)[32 / BITS]) {
    constexpr int P = 32 / BITS;
    constexpr int LOW = low_codes(BITS);
    constexpr unsigned MASK = (1u << BITS) - 1u;
    const unsigned high = word >> (LOW * BITS);
#pragma unroll
    for (int j = 0; j < P; ++j) {
        const int at = j < LOW ? j : j - LOW;
        const unsigned bits = (j < LOW ? word : high) & (MASK << (at * BITS));
        const float f = bits_to_float(bits | kOne);
        q[j] = fmaf(f, float(1u << (23 - at * BITS)), offset[at]);
    }
}

// One lane's sums: acc[m][r] = this lane's part of y[m, row0 + r], over chunks lane, lane + 32, ... of the rows.
// w_ptr: (N, chunks) 16-byte chunks; scales, zeros: (N, groups); chunk c is in group c >> group_shift (30 when
// per channel: every chunk in group 0). zeros are read only when has_zeros (else z = 2^(BITS - 1)).
template <typename T, int BITS, int M_TILE, int UNROLL>
LOWBIT_HD void lane_sums(int lane, int row0, const T* __restrict__ x_ptr, const int4* __restrict__ w_ptr,
                         const T* __restrict__ s_ptr, const unsigned char* __restrict__ z_ptr, int m_rows, int n,
                         int chunks, int groups, int group_shift, int has_zeros, float (&acc)[M_TILE][kRows]) {
    constexpr int P = 32 / BITS;          // codes a word
    constexpr int CODES = 4 * P;          // codes a chunk (16 bytes)
    constexpr int LOW = low_codes(BITS);
    constexpr bool kScaleCodes = M_TILE >= 4;
    const long long k = (long long)chunks * CODES;
    long long row[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) row[r] = smaller(row0 + r, n - 1);
    // Rows of x as element offsets (32-bit when they fit: 16 x 64-bit pointers would take 32 registers).
    int x_row[M_TILE];
#pragma unroll
    for (int m = 0; m < M_TILE; ++m) x_row[m] = smaller(m, m_rows - 1);

    for (int base = lane; base < chunks; base += kWarp * UNROLL) {
        // Every load of this step is issued before any arithmetic: the words, and their scales and zeros (in a
        // cold L2 those come from HBM too; loaded in the loop they would add a second latency a step).
        uint4 words[UNROLL][kRows];
        T scale_raw[UNROLL][kRows];
        unsigned char zero_raw[UNROLL][kRows];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
                // Past K a lane reads the row's last chunk again (its step is skipped below): a load under a
                // condition is a branch the compiler may not hoist, and an asm load must never be speculated.
                const int c = smaller(base + u * kWarp, chunks - 1);
                const long long at = row[r] * groups + (c >> group_shift);
                words[u][r] = load_weights(w_ptr + row[r] * chunks + c);
                scale_raw[u][r] = s_ptr[at];
                zero_raw[u][r] = has_zeros ? z_ptr[at] : (unsigned char)(1 << (BITS - 1));
            }
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int c = base + u * kWarp;
            if (c >= chunks) break;
            float scale[kRows], offset[kRows][LOW];
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
                scale[r] = to_float(scale_raw[u][r]);
                const float z = float(zero_raw[u][r]);
#pragma unroll
                for (int j = 0; j < LOW; ++j) offset[r][j] = -(float(1u << (23 - j * BITS)) + z);
            }
            // kScaleCodes: (q - z) s per code (exact: at most 20 significant bits), one FMUL a code and row, paid
            // back over M rows and sparing M x kRows chunk sums; else the chunk's sum of (q - z) x times s.
            float part[kScaleCodes ? 1 : M_TILE][kRows] = {};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                float q[kRows][P];
#pragma unroll
                for (int r = 0; r < kRows; ++r) {
                    const uint4 v = words[u][r];
                    centred_codes<BITS>(i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w, offset[r], q[r]);
                    if (kScaleCodes) {
#pragma unroll
                        for (int j = 0; j < P; ++j) q[r][j] *= scale[r];
                    }
                }
#pragma unroll
                for (int m = 0; m < M_TILE; ++m) {
                    float xv[P];
                    load_x<T, P>(x_ptr + x_row[m] * k + (long long)c * CODES + i * P, xv);
#pragma unroll
                    for (int r = 0; r < kRows; ++r) {
                        float& sum = kScaleCodes ? acc[m][r] : part[kScaleCodes ? 0 : m][r];
#pragma unroll
                        for (int j = 0; j < P; ++j) sum = fmaf(q[r][j], xv[j], sum);
                    }
                }
            }
            if (!kScaleCodes) {
#pragma unroll
                for (int m = 0; m < M_TILE; ++m) {
#pragma unroll
                    for (int r = 0; r < kRows; ++r) acc[m][r] = fmaf(scale[r], part[kScaleCodes ? 0 : m][r], acc[m][r]);
                }
            }
        }
    }
}

// The kernel body: block b, warp w own rows (b kWarps + w) kRows + r; the lanes' sums meet by shuffles.
template <typename T, int BITS, int M_TILE, int UNROLL>
__device__ __forceinline__ void gemv_rows(const T* __restrict__ x_ptr, const int4* __restrict__ w_ptr,
                                          const T* __restrict__ s_ptr, const unsigned char* __restrict__ z_ptr,
                                          T* __restrict__ y_ptr, int m_rows, int n, int chunks, int groups,
                                          int group_shift, int has_zeros) {
    const int lane = threadIdx.x % kWarp;
    const int row0 = (blockIdx.x * kWarps + threadIdx.x / kWarp) * kRows;
    prefetch_l2_once(x_ptr, (long long)m_rows * chunks * (128 / BITS) * sizeof(T));  // x's reads then hit L2
    if (row0 >= n) return;  // the whole warp: nothing below synchronizes the block
    float acc[M_TILE][kRows] = {};
    lane_sums<T, BITS, M_TILE, UNROLL>(lane, row0, x_ptr, w_ptr, s_ptr, z_ptr, m_rows, n, chunks, groups,
                                       group_shift, has_zeros, acc);
#pragma unroll
    for (int m = 0; m < M_TILE; ++m) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            float v = acc[m][r];
#pragma unroll
            for (int offset = kWarp / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
            if (lane == 0 && m < m_rows && row0 + r < n) store(y_ptr + (long long)m * n + row0 + r, v);
        }
    }
}

// UNROLL: chunks a lane loads per row before computing. 4 (128 bytes a lane in flight over 2 rows) where the
// accumulators are few; 2 from M = 8, where 2 x M_TILE x kRows fp32 accumulators already take 32-64 registers.
template <int M_TILE>
struct Unroll {
    static constexpr int value = M_TILE <= 4 ? 4 : 2;
};

#define LOWBIT_GEMV_BODY(T, BITS, M_TILE)                                                                 \
    gemv_rows<T, BITS, M_TILE, Unroll<M_TILE>::value>(x_ptr, w_ptr, s_ptr, z_ptr, y_ptr, m_rows, n, chunks, \
                                                      groups, group_shift, has_zeros)

// Every kernel: grid ceil(N / (kWarps kRows)) blocks of kWarps * 32 threads. x_ptr (M, K) with M <= M_TILE and
// K = chunks * CODES; w_ptr (N, chunks) 16-byte chunks (the int32 words, 16-byte aligned); s_ptr (N, groups) in
// the activation dtype; z_ptr (N, groups) uint8 (read when has_zeros); y_ptr (M, N). All contiguous.

#if defined(LOWBIT_GEMV_ALL) || defined(LOWBIT_GEMV_lowbit_gemv_w4_bf16_m1_kernel)
extern "C" __global__ void __launch_bounds__(kWarps * kWarp)
lowbit_gemv_w4_bf16_m1_kernel(const __nv_bfloat16* x_ptr, const int4* w_ptr, const __nv_bfloat16* s_ptr,
    const unsigned char* z_ptr, __nv_bfloat16* y_ptr, int m_rows, int n, int chunks, int groups, int group_shift,
    int has_zeros) { LOWBIT_GEMV_BODY(__nv_bfloat16, 4, 1); }
#endif
#if defined(LOWBIT_GEMV_ALL) || defined(LOWBIT_GEMV_lowbit_gemv_w4_bf16_m2_kernel)
extern "C" __global__ void __launch_bounds__(kWarps * kWarp)
lowbit_gemv_w4_bf16_m2_kernel(const __nv_bfloat16* x_ptr, const int4* w_ptr, const __nv_bfloat16* s_ptr,
    const unsigned char* z_ptr, __nv_bfloat16* y_ptr, int m_rows, int n, int chunks, int groups, int group_shift,
    int has_zeros) { LOWBIT_GEMV_BODY(__nv_bfloat16, 4, 2); }
#endif
#if defined(LOWBIT_GEMV_ALL) || defined(LOWBIT_GEMV_lowbit_gemv_w4_bf16_m4_kernel)
extern "C" __global__ void __launch_bounds__(kWarps * kWarp)
lowbit_gemv_w4_bf16_m4_kernel(const __nv_bfloat16* x_ptr, const int4* w_ptr, const __nv_bfloat16* s_ptr,
    const unsigned char* z_ptr, __nv_bfloat16* y_ptr, int m_rows, int n, int chunks, int groups, int group_shift,
    int has_zeros) { LOWBIT_GEMV_BODY(__nv_bfloat16, 4, 4); }
#endif
#if defined(LOWBIT_GEMV_ALL) || defined(LOWBIT_GEMV_lowbit_gemv_w4_bf16_m8_kernel)
extern "C" __global__ void __launch_bounds__(kWarps * kWarp)
lowbit_gemv_w4_bf16_m8_kernel(const __nv_bfloat16* x_ptr, const int4* w_ptr, const __nv_bfloat16* s_ptr,
    const unsigned char* z_ptr, __nv_bfloat16* y_ptr, int m_rows, int n, int chunks, int groups, int group_shift,
    int has_zeros) { LOWBIT_GEMV_BODY(__nv_bfloat16, 4, 8); }
#endif
#if defined(LOWBIT_GEMV_ALL) || defined(LOWBIT_GEMV_lowbit_gemv_w4_bf16_m16_kernel)
extern "C" __global__ void __launch_bounds__(kWarps * kWarp)
lowbit_gemv_w4_bf16_m16_kernel(const __nv_bfloat16* x_ptr, const int4* w_ptr, const __nv_bfloat16* s_ptr,
    const unsigned char* z_ptr, __nv_bfloat16* y_ptr, int m_rows, int n, int chunks, int groups, int group_shift,
    int has_zeros) { LOWBIT_GEMV_BODY(__nv_bfloat16, 4, 16); }
#endif
#if defined(LOWBIT_GEMV_ALL) || defined(LOWBIT_GEMV_lowbit_gemv_w4_f16_m1_kernel)
extern "C" __global__ void __launch_bounds__(kWarps * kWarp)
lowbit_gemv_w4_f16_m1_kernel(const __half* x_ptr, const int4* w_ptr, const __half* s_ptr,
    const unsigned char* z_ptr, __half* y_ptr, int m_rows, int n, int chunks, int groups, int group_shift,
    int has_zeros) { LOWBIT_GEMV_BODY(__half, 4, 1); }
#endif
#if defined(LOWBIT_GEMV_ALL) || defined(LOWBIT_GEMV_lowbit_gemv_w4_f16_m2_kernel)
extern "C" __global__ void __launch_bounds__(kWarps * kWarp)
lowbit_gemv_w4_f16_m2_kernel(const __half* x_ptr, const int4* w_ptr, const __half* s_ptr,
    const unsigned char* z_ptr, __half* y_ptr, int m_rows, int n, int chunks, int groups, int group_shift,
    int has_zeros) { LOWBIT_GEMV_BODY(__half, 4, 2); }
#endif
#if defined(LOWBIT_GEMV_ALL) || defined(LOWBIT_GEMV_lowbit_gemv_w4_f16_m4_kernel)
extern "C" __global__ void __launch_bounds__(kWarps * kWarp)
lowbit_gemv_w4_f16_m4_kernel(const __half* x_ptr, const int4* w_ptr, const __half* s_ptr,
    const unsigned char* z_ptr, __half* y_ptr, int m_rows, int n, int chunks, int groups, int group_shift,
    int has_zeros) { LOWBIT_GEMV_BODY(__half, 4, 4); }
#endif
#if defined(LOWBIT_GEMV_ALL) || defined(LOWBIT_GEMV_lowbit_gemv_w4_f16_m8_kernel)
extern "C" __global__ void __launch_bounds__(kWarps * kWarp)
lowbit_gemv_w4_f16_m8_kernel(const __half* x_ptr, const int4* w_ptr, const __half* s_ptr,
    const unsigned char* z_ptr, __half* y_ptr, int m_rows, int n, int chunks, int groups, int group_shift,
    int has_zeros) { LOWBIT_GEMV_BODY(__half, 4, 8); }
#endif
#if defined(LOWBIT_GEMV_ALL) || defined(LOWBIT_GEMV_lowbit_gemv_w4_f16_m16_kernel)
extern "C" __global__ void __launch_bounds__(kWarps * kWarp)
lowbit_gemv_w4_f16_m16_kernel(const __half* x_ptr, const int4* w_ptr, const __half* s_ptr,
    const unsigned char* z_ptr, __half* y_ptr, int m_rows, int n, int chunks, int groups, int group_shift,
    int has_zeros) { LOWBIT_GEMV_BODY(__half, 4, 16); }
#endif
#if defined(LOWBIT_GEMV_ALL) || defined(LOWBIT_GEMV_lowbit_gemv_w8_bf16_m1_kernel)
extern "C" __global__ void __launch_bounds__(kWarps * kWarp)
lowbit_gemv_w8_bf16_m1_kernel(const __nv_bfloat16* x_ptr, const int4* w_ptr, const __nv_bfloat16* s_ptr,
    const unsigned char* z_ptr, __nv_bfloat16* y_ptr, int m_rows, int n, int chunks, int groups, int group_shift,
    int has_zeros) { LOWBIT_GEMV_BODY(__nv_bfloat16, 8, 1); }
#endif
#if defined(LOWBIT_GEMV_ALL) || defined(LOWBIT_GEMV_lowbit_gemv_w8_bf16_m2_kernel)
extern "C" __global__ void __launch_bounds__(kWarps * kWarp)
lowbit_gemv_w8_bf16_m2_kernel(const __nv_bfloat16* x_ptr, const int4* w_ptr, const __nv_bfloat16* s_ptr,
    const unsigned char* z_ptr, __nv_bfloat16* y_ptr, int m_rows, int n, int chunks, int groups, int group_shift,
    int has_zeros) { LOWBIT_GEMV_BODY(__nv_bfloat16, 8, 2); }
#endif
#if defined(LOWBIT_GEMV_ALL) || defined(LOWBIT_GEMV_lowbit_gemv_w8_bf16_m4_kernel)
extern "C" __global__ void __launch_bounds__(kWarps * kWarp)
lowbit_gemv_w8_bf16_m4_kernel(const __nv_bfloat16* x_ptr, const int4* w_ptr, const __nv_bfloat16* s_ptr,
    const unsigned char* z_ptr, __nv_bfloat16* y_ptr, int m_rows, int n, int chunks, int groups, int group_shift,
    int has_zeros) { LOWBIT_GEMV_BODY(__nv_bfloat16, 8, 4); }
#endif
#if defined(LOWBIT_GEMV_ALL) || defined(LOWBIT_GEMV_lowbit_gemv_w8_bf16_m8_kernel)
extern "C" __global__ void __launch_bounds__(kWarps * kWarp)
lowbit_gemv_w8_bf16_m8_kernel(const __nv_bfloat16* x_ptr, const int4* w_ptr, const __nv_bfloat16* s_ptr,
    const unsigned char* z_ptr, __nv_bfloat16* y_ptr, int m_rows, int n, int chunks, int groups, int group_shift,
    int has_zeros) { LOWBIT_GEMV_BODY(__nv_bfloat16, 8, 8); }
#endif
#if defined(LOWBIT_GEMV_ALL) || defined(LOWBIT_GEMV_lowbit_gemv_w8_bf16_m16_kernel)
extern "C" __global__ void __launch_bounds__(kWarps * kWarp)
lowbit_gemv_w8_bf16_m16_kernel(const __nv_bfloat16* x_ptr, const int4* w_ptr, const __nv_bfloat16* s_ptr,
    const unsigned char* z_ptr, __nv_bfloat16* y_ptr, int m_rows, int n, int chunks, int groups, int group_shift,
    int has_zeros) { LOWBIT_GEMV_BODY(__nv_bfloat16, 8, 16); }
#endif
#if defined(LOWBIT_GEMV_ALL) || defined(LOWBIT_GEMV_lowbit_gemv_w8_f16_m1_kernel)
extern "C" __global__ void __launch_bounds__(kWarps * kWarp)
lowbit_gemv_w8_f16_m1_kernel(const __half* x_ptr, const int4* w_ptr, const __half* s_ptr,
    const unsigned char* z_ptr, __half* y_ptr, int m_rows, int n, int chunks, int groups, int group_shift,
    int has_zeros) { LOWBIT_GEMV_BODY(__half, 8, 1); }
#endif
#if defined(LOWBIT_GEMV_ALL) || defined(LOWBIT_GEMV_lowbit_gemv_w8_f16_m2_kernel)
extern "C" __global__ void __launch_bounds__(kWarps * kWarp)
lowbit_gemv_w8_f16_m2_kernel(const __half* x_ptr, const int4* w_ptr, const __half* s_ptr,
    const unsigned char* z_ptr, __half* y_ptr, int m_rows, int n, int chunks, int groups, int group_shift,
    int has_zeros) { LOWBIT_GEMV_BODY(__half, 8, 2); }
#endif
#if defined(LOWBIT_GEMV_ALL) || defined(LOWBIT_GEMV_lowbit_gemv_w8_f16_m4_kernel)
extern "C" __global__ void __launch_bounds__(kWarps * kWarp)
lowbit_gemv_w8_f16_m4_kernel(const __half* x_ptr, const int4* w_ptr, const __half* s_ptr,
    const unsigned char* z_ptr, __half* y_ptr, int m_rows, int n, int chunks, int groups, int group_shift,
    int has_zeros) { LOWBIT_GEMV_BODY(__half, 8, 4); }
#endif
#if defined(LOWBIT_GEMV_ALL) || defined(LOWBIT_GEMV_lowbit_gemv_w8_f16_m8_kernel)
extern "C" __global__ void __launch_bounds__(kWarps * kWarp)
lowbit_gemv_w8_f16_m8_kernel(const __half* x_ptr, const int4* w_ptr, const __half* s_ptr,
    const unsigned char* z_ptr, __half* y_ptr, int m_rows, int n, int chunks, int groups, int group_shift,
    int has_zeros) { LOWBIT_GEMV_BODY(__half, 8, 8); }
#endif
#if defined(LOWBIT_GEMV_ALL) || defined(LOWBIT_GEMV_lowbit_gemv_w8_f16_m16_kernel)
extern "C" __global__ void __launch_bounds__(kWarps * kWarp)
lowbit_gemv_w8_f16_m16_kernel(const __half* x_ptr, const int4* w_ptr, const __half* s_ptr,
    const unsigned char* z_ptr, __half* y_ptr, int m_rows, int n, int chunks, int groups, int group_shift,
    int has_zeros) { LOWBIT_GEMV_BODY(__half, 8, 16); }
#endif
