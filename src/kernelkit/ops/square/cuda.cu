// square: y = x * x, elementwise.

#include <cuda_fp16.h>
#include <cuda_bf16.h>

// The learner's first CUDA kernel: one thread per element on a 2D grid that mirrors the matrix.
// Each thread reads 4 bytes and writes 4 bytes; accesses along a row are coalesced across the warp.
extern "C" __global__ void square_2d_kernel(const float* x, float* y, int rows, int cols) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < rows && col < cols) {
        int i = row * cols + col;
        y[i] = x[i] * x[i];
    }
}

// ---- cuda_vec4: 16-byte vectors, grid-stride -------------------------------------------------------------
// Each thread moves 16 bytes per load and per store (one ld/st.global.v4: 4 floats, or 8 halves / bfloat16s),
// so a warp reads 512 contiguous bytes per instruction and a quarter as many memory instructions are issued as
// with one element per thread. Memory traffic is unchanged: read N elements, write N elements.
// The grid is sized by the host to fill the GPU once (a multiple of the SM count); each thread then strides.
// 16-bit values are squared in fp32 and rounded once, as PyTorch does: the result is the correctly rounded
// square.

// The elements one 32-bit word holds, squared: one float, or a pair of 16-bit floats.
__device__ __forceinline__ float square_word(float v) { return v * v; }
__device__ __forceinline__ __half2 square_word(__half2 v) {
    float2 f = __half22float2(v);
    return __floats2half2_rn(f.x * f.x, f.y * f.y);
}
__device__ __forceinline__ __nv_bfloat162 square_word(__nv_bfloat162 v) {
    float2 f = __bfloat1622float2(v);
    return __floats2bfloat162_rn(f.x * f.x, f.y * f.y);
}

// One element at a time: the tail (numel % elements per vector) and misaligned data.
__device__ __forceinline__ float square_one(float v) { return v * v; }
__device__ __forceinline__ __half square_one(__half v) { float f = __half2float(v); return __float2half_rn(f * f); }
__device__ __forceinline__ __nv_bfloat16 square_one(__nv_bfloat16 v) {
    float f = __bfloat162float(v);
    return __float2bfloat16_rn(f * f);
}

// T: the element type; Word: what one 32-bit word of a 16-byte vector holds (float, __half2, __nv_bfloat162).
template <typename T, typename Word>
__device__ __forceinline__ void square_vec4(const T* __restrict__ x, T* __restrict__ y, long long n) {
    constexpr int kPerVector = 16 / sizeof(T);
    const long long start = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
    // torch allocations are 256-byte aligned, but a view (x[1:]) may start anywhere: a vector load from a
    // misaligned address faults, so such data takes the scalar loop below. The test is the same for every
    // thread: no divergence.
    const bool aligned = (((unsigned long long)x | (unsigned long long)y) & 15) == 0;
    const long long n_vectors = aligned ? n / kPerVector : 0;
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    uint4* yv = reinterpret_cast<uint4*>(y);
    for (long long i = start; i < n_vectors; i += stride) {
        uint4 v = xv[i];
        Word* words = reinterpret_cast<Word*>(&v);  // stays in registers
#pragma unroll
        for (int k = 0; k < 4; ++k) words[k] = square_word(words[k]);
        yv[i] = v;
    }
    for (long long i = n_vectors * kPerVector + start; i < n; i += stride) y[i] = square_one(x[i]);
}

extern "C" __global__ void square_vec4_f32_kernel(const float* __restrict__ x, float* __restrict__ y, long long n) {
    square_vec4<float, float>(x, y, n);
}

extern "C" __global__ void square_vec4_f16_kernel(const __half* __restrict__ x, __half* __restrict__ y, long long n) {
    square_vec4<__half, __half2>(x, y, n);
}

extern "C" __global__ void square_vec4_bf16_kernel(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ y,
                                                   long long n) {
    square_vec4<__nv_bfloat16, __nv_bfloat162>(x, y, n);
}
