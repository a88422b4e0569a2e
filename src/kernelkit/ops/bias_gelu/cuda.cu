// bias_gelu: y = gelu_tanh(x + bias), x (M, N) row-major, bias (N,) broadcast along rows.

#include <cuda_fp16.h>
#include <cuda_bf16.h>

// ---- the math, in fp32 -------------------------------------------------------------------------------------
// gelu_tanh(h) = 0.5 h (1 + tanh(u)), u = sqrt(2/pi) (h + 0.044715 h^3). Since 0.5 (1 + tanh(u)) = sigmoid(2u),
// this is h * sigmoid(2u): one exp and one division instead of a tanh. The sigmoid is the overflow-free form,
// t = exp(-|2u|) in (0, 1], sigmoid = 1 / (1 + t) for u >= 0 and t / (1 + t) below: the denominator stays in
// [1, 2], where __fdividef is within 2 ulp, and far in the negative tail t underflows to 0, giving the
// reference's -0. NaN stays NaN; h = -inf gives NaN, as the reference's -inf * 0 does.
__device__ __forceinline__ float bias_gelu_f32(float x, float b) {
    const float h = x + b;  // fp32, never rounded to the storage type: the fused kernel's one rounding is the output's
    const float two_u = 1.5957691216057308f * h * fmaf(0.044715f * h, h, 1.0f);  // 2 sqrt(2/pi) (h + 0.044715 h^3)
    const float t = __expf(-fabsf(two_u));  // ex2.approx: a few ulp, well inside fp32's tolerance
    return h * __fdividef(two_u >= 0.0f ? 1.0f : t, 1.0f + t);
}

// One 32-bit word of a 16-byte vector: one float, or a pair of 16-bit floats computed in fp32 and rounded once.
__device__ __forceinline__ float bias_gelu_word(float x, float b) { return bias_gelu_f32(x, b); }
__device__ __forceinline__ __half2 bias_gelu_word(__half2 x, __half2 b) {
    const float2 xf = __half22float2(x), bf = __half22float2(b);
    return __floats2half2_rn(bias_gelu_f32(xf.x, bf.x), bias_gelu_f32(xf.y, bf.y));
}
__device__ __forceinline__ __nv_bfloat162 bias_gelu_word(__nv_bfloat162 x, __nv_bfloat162 b) {
    const float2 xf = __bfloat1622float2(x), bf = __bfloat1622float2(b);
    return __floats2bfloat162_rn(bias_gelu_f32(xf.x, bf.x), bias_gelu_f32(xf.y, bf.y));
}

// One element: the scalar path (N not a multiple of the vector width, or data off a 16-byte boundary).
__device__ __forceinline__ float bias_gelu_one(float x, float b) { return bias_gelu_f32(x, b); }
__device__ __forceinline__ __half bias_gelu_one(__half x, __half b) {
    return __float2half_rn(bias_gelu_f32(__half2float(x), __half2float(b)));
}
__device__ __forceinline__ __nv_bfloat16 bias_gelu_one(__nv_bfloat16 x, __nv_bfloat16 b) {
    return __float2bfloat16_rn(bias_gelu_f32(__bfloat162float(x), __bfloat162float(b)));
}

// ---- cuda_fused_vec: 16-byte vectors, bias by column, grid-stride --------------------------------------------
// Memory traffic: read MN + N elements, write MN: the fused ideal. Unfused (x + bias, then gelu) moves 4MN + N.
// Each thread loads 16 bytes of x (4 floats, 8 halves / bfloat16s) and the 16 bytes of bias for the same columns
// (an L1/L2 hit after the first rows: bias is N elements, read from DRAM about once), and stores 16 bytes of y.
// When N is a multiple of the vector width a vector never straddles two rows, so one bias vector fits it.
// The grid is sized by the host to one full wave (8 blocks of 256 threads per SM, which __launch_bounds__ keeps
// resident: <= 32 registers a thread); each thread then strides. The column of a thread's item advances by the
// same (stride mod columns) at every step, so it is tracked with one add and one compare, not a 64-bit modulo
// per item, which would cost more instructions than the math.
template <typename T, typename Word>
__device__ __forceinline__ void bias_gelu_vec(const T* __restrict__ x, const T* __restrict__ bias,
                                              T* __restrict__ y, long long n_rows, long long n_cols) {
    constexpr int kPerVector = 16 / sizeof(T);
    const long long start = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
    // A contiguous view (buf[1:]) may start anywhere: a vector load from a misaligned address faults. The test is the same
    // for every thread: no divergence.
    const bool aligned = (((unsigned long long)x | (unsigned long long)bias | (unsigned long long)y) & 15) == 0;
    if (aligned && n_cols % kPerVector == 0) {
        const long long n_vec_cols = n_cols / kPerVector;
        const long long n_vectors = n_rows * n_vec_cols;
        const long long step = stride % n_vec_cols;
        long long col = start % n_vec_cols;
        const uint4* xv = reinterpret_cast<const uint4*>(x);
        const uint4* bv = reinterpret_cast<const uint4*>(bias);
        uint4* yv = reinterpret_cast<uint4*>(y);
        for (long long i = start; i < n_vectors; i += stride) {
            uint4 v = xv[i];
            uint4 b = __ldg(bv + col);
            Word* words = reinterpret_cast<Word*>(&v);  // stays in registers
            const Word* bias_words = reinterpret_cast<const Word*>(&b);
#pragma unroll
            for (int k = 0; k < 4; ++k) words[k] = bias_gelu_word(words[k], bias_words[k]);
            yv[i] = v;
            col += step;
            if (col >= n_vec_cols) col -= n_vec_cols;
        }
        return;
    }
    const long long n = n_rows * n_cols;
    const long long step = stride % n_cols;
    long long col = start % n_cols;
    for (long long i = start; i < n; i += stride) {
        y[i] = bias_gelu_one(x[i], __ldg(bias + col));
        col += step;
        if (col >= n_cols) col -= n_cols;
    }
}

extern "C" __global__ void __launch_bounds__(256, 8)
bias_gelu_vec_f32_kernel(const float* __restrict__ x, const float* __restrict__ bias, float* __restrict__ y,
                         long long n_rows, long long n_cols) {
    bias_gelu_vec<float, float>(x, bias, y, n_rows, n_cols);
}

extern "C" __global__ void __launch_bounds__(256, 8)
bias_gelu_vec_f16_kernel(const __half* __restrict__ x, const __half* __restrict__ bias, __half* __restrict__ y,
                         long long n_rows, long long n_cols) {
    bias_gelu_vec<__half, __half2>(x, bias, y, n_rows, n_cols);
}

extern "C" __global__ void __launch_bounds__(256, 8)
bias_gelu_vec_bf16_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ bias,
                          __nv_bfloat16* __restrict__ y, long long n_rows, long long n_cols) {
    bias_gelu_vec<__nv_bfloat16, __nv_bfloat162>(x, bias, y, n_rows, n_cols);
}
