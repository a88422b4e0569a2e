// softmax over the last dimension, forward and backward: one thread block per row, fp32 math for every dtype.
//
// Reductions: each warp reduces with __shfl_xor_sync (registers only, no barrier), then one partial per warp goes
// through shared memory and every warp reduces those partials, so each thread ends with the row's result.
//
// Paths, chosen per launch (the same in every block, so no divergence):
// - aligned rows (16-byte aligned pointers, n_cols a multiple of 4 floats or 8 halves) that fit in registers
//   (forward: blockDim.x * kForwardCache = 32768 elements at 1024 threads; backward: kBackwardCache, 16384) move
//   16 bytes per load and store and are read once: read MN, write MN elements (backward: read 2MN, write MN).
// - longer rows, and rows that are not aligned (n_cols = 781), take two passes, 16 bytes or one element at a time:
//   forward, an online max and rescaled sum then a pass that writes (read 2MN, write MN); backward, the dot
//   product then a pass that writes (read 4MN, write MN). A register cache of single elements spilled (ptxas put
//   it in local memory), so unaligned rows stream; short ones are still in L2 for their second pass.

#include "common.cuh"  // to_float, from_float, load_vec, store_vec, warp_reduce, block_reduce

constexpr int kForwardCache = 32;   // floats of x a thread holds: 32 registers, under the 64 that 1024 threads get
constexpr int kBackwardCache = 16;  // floats each of y and dy a thread holds: 32 registers again
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLowest = -3.402823466e+38f;  // the running max starts here, not at -inf: -inf - -inf is NaN

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// exp(d) as one multiply and the SFU's exp2 (2 ulp). d = x - max <= 0, so nothing overflows.
__device__ __forceinline__ float exp_f(float d) { return exp2f(d * kLog2e); }


// Online softmax state: (m, s) with s the sum of exp(x - m) over the elements seen. Merging rescales both sums to
// the larger max. From (kLowest, 0) nothing turns into NaN: exp(0) * 0 = 0.
__device__ __forceinline__ void online_merge(float& m, float& s, float m2, float s2) {
    const float m_new = fmaxf(m, m2);
    s = s * exp_f(m - m_new) + s2 * exp_f(m2 - m_new);
    m = m_new;
}

// One more element x: one exp, of -|x - m|, serves both cases (x is the new max, or it is not).
__device__ __forceinline__ void online_add(float& m, float& s, float x) {
    const float d = x - m;
    const float e = exp_f(-fabsf(d));
    if (d > 0.f) {
        s = s * e + 1.f;
        m = x;
    } else {
        s += e;
    }
}

__device__ void block_reduce_online(float& m, float& s) {
    __shared__ float partial_m[kMaxThreads / kWarpSize], partial_s[kMaxThreads / kWarpSize];
    const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
#pragma unroll
    for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
        online_merge(m, s, __shfl_xor_sync(0xffffffffu, m, offset), __shfl_xor_sync(0xffffffffu, s, offset));
    }
    if (lane == 0) {
        partial_m[warp] = m;
        partial_s[warp] = s;
    }
    __syncthreads();
    m = lane < blockDim.x / kWarpSize ? partial_m[lane] : kLowest;
    s = lane < blockDim.x / kWarpSize ? partial_s[lane] : 0.f;
#pragma unroll
    for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
        online_merge(m, s, __shfl_xor_sync(0xffffffffu, m, offset), __shfl_xor_sync(0xffffffffu, s, offset));
    }
}

// ---- forward --------------------------------------------------------------------------------------------------

// The row in registers: item k of this thread is VEC elements at (threadIdx.x + k * blockDim.x) * VEC. The loops
// are unrolled, so v[k] is a register; items past the row's end are skipped by a guard.
template <typename T, int VEC>
__device__ void softmax_row_cached(const T* __restrict__ x, T* __restrict__ y, int n_cols) {
    constexpr int kItems = kForwardCache / VEC;
    const int n_items = n_cols / VEC;  // VEC divides n_cols on this path
    float v[kItems][VEC];
    float local_max = neg_inf();
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
        const int item = threadIdx.x + k * blockDim.x;
        if (item < n_items) {
            load_vec<T, VEC>(x + item * VEC, v[k]);
#pragma unroll
            for (int j = 0; j < VEC; ++j) local_max = fmaxf(local_max, v[k][j]);
        }
    }
    const float row_max = block_reduce(local_max, MaxOp(), neg_inf());  // an all -inf row gives NaN, as torch
    float local_sum = 0.f;
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
        if (threadIdx.x + k * blockDim.x < n_items) {
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                v[k][j] = exp_f(v[k][j] - row_max);
                local_sum += v[k][j];
            }
        }
    }
    const float inv_sum = 1.f / block_reduce(local_sum, SumOp(), 0.f);
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
        const int item = threadIdx.x + k * blockDim.x;
        if (item < n_items) {
#pragma unroll
            for (int j = 0; j < VEC; ++j) v[k][j] *= inv_sum;
            store_vec<T, VEC>(y + item * VEC, v[k]);
        }
    }
}

// Rows too long for registers, or not aligned: online max and sum in pass 1, then pass 2 reads the row again and
// writes.
template <typename T, int VEC>
__device__ void softmax_row_online(const T* __restrict__ x, T* __restrict__ y, long long n_cols) {
    const long long n_items = n_cols / VEC;
    float m = kLowest, s = 0.f;
    for (long long item = threadIdx.x; item < n_items; item += blockDim.x) {
        float v[VEC];
        load_vec<T, VEC>(x + item * VEC, v);
#pragma unroll
        for (int j = 0; j < VEC; ++j) online_add(m, s, v[j]);
    }
    block_reduce_online(m, s);
    const float inv_sum = 1.f / s;
    for (long long item = threadIdx.x; item < n_items; item += blockDim.x) {
        float v[VEC];
        load_vec<T, VEC>(x + item * VEC, v);
#pragma unroll
        for (int j = 0; j < VEC; ++j) v[j] = exp_f(v[j] - m) * inv_sum;
        store_vec<T, VEC>(y + item * VEC, v);
    }
}

template <typename T>
__device__ __forceinline__ void softmax_row(const T* __restrict__ x_ptr, T* __restrict__ y_ptr, long long n_cols) {
    constexpr int kVec = 16 / sizeof(T);
    const long long row_start = (long long)blockIdx.x * n_cols;
    const T* x = x_ptr + row_start;
    T* y = y_ptr + row_start;
    // The same choice in every thread of the block: no divergence. n_cols % kVec == 0 keeps every row aligned.
    const bool aligned = n_cols % kVec == 0 && (((unsigned long long)x_ptr | (unsigned long long)y_ptr) & 15) == 0;
    if (aligned && n_cols <= (long long)blockDim.x * kForwardCache) {
        softmax_row_cached<T, kVec>(x, y, (int)n_cols);
    } else if (aligned) {
        softmax_row_online<T, kVec>(x, y, n_cols);
    } else {
        softmax_row_online<T, 1>(x, y, n_cols);
    }
}

// grid: one block per row; block: 32..1024 threads, a multiple of 32. x_ptr, y_ptr: (rows, n_cols), contiguous.
extern "C" __global__ void __launch_bounds__(kMaxThreads)
softmax_warp_f32_kernel(const float* __restrict__ x_ptr, float* __restrict__ y_ptr, long long n_cols) {
    softmax_row<float>(x_ptr, y_ptr, n_cols);
}

extern "C" __global__ void __launch_bounds__(kMaxThreads)
softmax_warp_f16_kernel(const __half* __restrict__ x_ptr, __half* __restrict__ y_ptr, long long n_cols) {
    softmax_row<__half>(x_ptr, y_ptr, n_cols);
}

extern "C" __global__ void __launch_bounds__(kMaxThreads)
softmax_warp_bf16_kernel(const __nv_bfloat16* __restrict__ x_ptr, __nv_bfloat16* __restrict__ y_ptr,
                         long long n_cols) {
    softmax_row<__nv_bfloat16>(x_ptr, y_ptr, n_cols);
}

// ---- backward: dx = y * (dy - sum(y * dy)) ---------------------------------------------------------------------

// y and dy in registers: read 2MN, write MN.
template <typename T, int VEC>
__device__ void softmax_backward_row_cached(const T* __restrict__ y, const T* __restrict__ dy, T* __restrict__ dx,
                                            int n_cols) {
    constexpr int kItems = kBackwardCache / VEC;
    const int n_items = n_cols / VEC;
    float yv[kItems][VEC], dyv[kItems][VEC];
    float local_dot = 0.f;
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
        const int item = threadIdx.x + k * blockDim.x;
        if (item < n_items) {
            load_vec<T, VEC>(y + item * VEC, yv[k]);
            load_vec<T, VEC>(dy + item * VEC, dyv[k]);
#pragma unroll
            for (int j = 0; j < VEC; ++j) local_dot = fmaf(yv[k][j], dyv[k][j], local_dot);
        }
    }
    const float dot = block_reduce(local_dot, SumOp(), 0.f);
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
        const int item = threadIdx.x + k * blockDim.x;
        if (item < n_items) {
#pragma unroll
            for (int j = 0; j < VEC; ++j) yv[k][j] *= dyv[k][j] - dot;
            store_vec<T, VEC>(dx + item * VEC, yv[k]);
        }
    }
}

// Longer or unaligned rows: pass 1 reads y and dy for the dot product, pass 2 reads them again and writes dx.
template <typename T, int VEC>
__device__ void softmax_backward_row_twopass(const T* __restrict__ y, const T* __restrict__ dy, T* __restrict__ dx,
                                             long long n_cols) {
    const long long n_items = n_cols / VEC;
    float local_dot = 0.f;
    for (long long item = threadIdx.x; item < n_items; item += blockDim.x) {
        float yv[VEC], dyv[VEC];
        load_vec<T, VEC>(y + item * VEC, yv);
        load_vec<T, VEC>(dy + item * VEC, dyv);
#pragma unroll
        for (int j = 0; j < VEC; ++j) local_dot = fmaf(yv[j], dyv[j], local_dot);
    }
    const float dot = block_reduce(local_dot, SumOp(), 0.f);
    for (long long item = threadIdx.x; item < n_items; item += blockDim.x) {
        float yv[VEC], dyv[VEC];
        load_vec<T, VEC>(y + item * VEC, yv);
        load_vec<T, VEC>(dy + item * VEC, dyv);
#pragma unroll
        for (int j = 0; j < VEC; ++j) yv[j] *= dyv[j] - dot;
        store_vec<T, VEC>(dx + item * VEC, yv);
    }
}

template <typename T>
__device__ __forceinline__ void softmax_backward_row(const T* __restrict__ y_ptr, const T* __restrict__ dy_ptr,
                                                     T* __restrict__ dx_ptr, long long n_cols) {
    constexpr int kVec = 16 / sizeof(T);
    const long long row_start = (long long)blockIdx.x * n_cols;
    const T* y = y_ptr + row_start;
    const T* dy = dy_ptr + row_start;
    T* dx = dx_ptr + row_start;
    const unsigned long long addresses = (unsigned long long)y_ptr | (unsigned long long)dy_ptr |
                                         (unsigned long long)dx_ptr;
    const bool aligned = n_cols % kVec == 0 && (addresses & 15) == 0;
    if (aligned && n_cols <= (long long)blockDim.x * kBackwardCache) {
        softmax_backward_row_cached<T, kVec>(y, dy, dx, (int)n_cols);
    } else if (aligned) {
        softmax_backward_row_twopass<T, kVec>(y, dy, dx, n_cols);
    } else {
        softmax_backward_row_twopass<T, 1>(y, dy, dx, n_cols);
    }
}

// grid: one block per row; block: 32..1024 threads, a multiple of 32. Every tensor: (rows, n_cols), contiguous.
extern "C" __global__ void __launch_bounds__(kMaxThreads)
softmax_backward_warp_f32_kernel(const float* __restrict__ y_ptr, const float* __restrict__ dy_ptr,
                                 float* __restrict__ dx_ptr, long long n_cols) {
    softmax_backward_row<float>(y_ptr, dy_ptr, dx_ptr, n_cols);
}

extern "C" __global__ void __launch_bounds__(kMaxThreads)
softmax_backward_warp_f16_kernel(const __half* __restrict__ y_ptr, const __half* __restrict__ dy_ptr,
                                 __half* __restrict__ dx_ptr, long long n_cols) {
    softmax_backward_row<__half>(y_ptr, dy_ptr, dx_ptr, n_cols);
}

extern "C" __global__ void __launch_bounds__(kMaxThreads)
softmax_backward_warp_bf16_kernel(const __nv_bfloat16* __restrict__ y_ptr, const __nv_bfloat16* __restrict__ dy_ptr,
                                  __nv_bfloat16* __restrict__ dx_ptr, long long n_cols) {
    softmax_backward_row<__nv_bfloat16>(y_ptr, dy_ptr, dx_ptr, n_cols);
}
