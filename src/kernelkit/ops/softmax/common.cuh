// What the softmax kernels share (cuda.cu, cluster.cu): float conversions, 16-byte vector loads and stores in
// any of fp32/fp16/bf16, and the reductions (warp shuffles, then one partial per warp through shared memory).

#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

constexpr int kMaxThreads = 1024;
constexpr int kWarpSize = 32;

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// VEC elements at p as floats: one 16-byte load when VEC > 1 (p must then be 16-byte aligned), else one element.
template <typename T, int VEC>
__device__ __forceinline__ void load_vec(const T* __restrict__ p, float (&out)[VEC]) {
    if constexpr (VEC == 1) {
        out[0] = to_float(*p);
    } else {
        static_assert(VEC * sizeof(T) == 16, "a vector is 16 bytes");
        const uint4 raw = *reinterpret_cast<const uint4*>(p);
        const T* v = reinterpret_cast<const T*>(&raw);  // stays in registers
#pragma unroll
        for (int j = 0; j < VEC; ++j) out[j] = to_float(v[j]);
    }
}

// VEC floats rounded once to T and stored at p (one 16-byte store when VEC > 1).
template <typename T, int VEC>
__device__ __forceinline__ void store_vec(T* __restrict__ p, const float (&in)[VEC]) {
    if constexpr (VEC == 1) {
        *p = from_float<T>(in[0]);
    } else {
        uint4 raw;
        T* v = reinterpret_cast<T*>(&raw);
#pragma unroll
        for (int j = 0; j < VEC; ++j) v[j] = from_float<T>(in[j]);
        *reinterpret_cast<uint4*>(p) = raw;
    }
}

// ---- reductions: warp shuffles, then one partial per warp through shared memory ------------------------------

struct MaxOp { __device__ float operator()(float a, float b) const { return fmaxf(a, b); } };
struct SumOp { __device__ float operator()(float a, float b) const { return a + b; } };

template <typename Op>
__device__ __forceinline__ float warp_reduce(float v, Op op) {
#pragma unroll
    for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// The block's reduction of v, in every thread. blockDim.x must be a multiple of 32 (the host launches 32..1024).
template <typename Op>
__device__ float block_reduce(float v, Op op, float identity) {
    __shared__ float partials[kMaxThreads / kWarpSize];
    const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
    v = warp_reduce(v, op);
    if (lane == 0) partials[warp] = v;
    __syncthreads();
    v = lane < blockDim.x / kWarpSize ? partials[lane] : identity;
    v = warp_reduce(v, op);
    __syncthreads();  // the next reduction writes partials again
    return v;
}
