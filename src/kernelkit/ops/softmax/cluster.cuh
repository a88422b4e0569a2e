// The cluster softmax's (cluster.cu's) device helpers: the cluster's registers, barrier and distributed shared
// memory in PTX, and the math of one CTA's slice of a row held in registers (its max and sum, the merge of the
// cluster's partials, the scaled stores). Include it after defining kItems (16-byte vectors a thread holds).

#pragma once

#include "common.cuh"  // to_float, from_float, store_vec, block_reduce

constexpr float kLog2e = 1.4426950408889634f;

// Cluster launches exist from sm_90. Below it the kernels still compile (the backend builds every declared kernel
// for the device it runs on) but trap: the host never launches them there (cluster.py checks the capability).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define SOFTMAX_CLUSTER_DIMS(n)
#define SOFTMAX_HAS_CLUSTERS 0
#else
#define SOFTMAX_CLUSTER_DIMS(n) __cluster_dims__(n, 1, 1)
#define SOFTMAX_HAS_CLUSTERS 1
#endif

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// The cluster's special registers, barrier and distributed shared memory in PTX (what cooperative_groups'
// cluster_group wraps): cooperative_groups includes libcu++ headers (cuda/std/...) that a runtime compile does not
// always find (NVRTC on the CUDA 13 image, seen on an H200: "cannot open source file cuda/std/type_traits").
#if SOFTMAX_HAS_CLUSTERS
__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ unsigned cluster_blocks() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
    return r;
}
// Every thread of every CTA calls both (.aligned): arrive publishes this CTA's shared-memory writes (release),
// wait returns once all CTAs arrived and makes theirs visible (acquire).
__device__ __forceinline__ void cluster_arrive() {
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }
// (m, s) from CTA ``rank``'s shared memory at the address ``local`` has in this CTA's.
__device__ __forceinline__ float2 load_cluster_partial(const float2* local, unsigned rank) {
    const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(local));
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(rank));
    float2 p;
    asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];" : "=f"(p.x), "=f"(p.y) : "r"(remote) : "memory");
    return p;
}
#endif

// exp(d) as one multiply and the SFU's exp2: exp2(-inf) = 0 and exp2(NaN) = NaN, as cluster.cu's -inf rules need.
__device__ __forceinline__ float exp_f(float d) { return exp2f(d * kLog2e); }

// The exponentials' shift of a slice whose max is m: m, or 0 when m = -inf (exp(-inf) = 0, where -inf - -inf
// would be NaN).
__device__ __forceinline__ float slice_shift(float m) { return m == neg_inf() ? 0.f : m; }


// Element j of a 16-byte vector of T, as float: for bf16 a shift of its 32-bit word (no conversion instruction),
// so the 16-bit path's two passes over the held vectors stay within 64 registers.
__device__ __forceinline__ unsigned word_of(const uint4& v, int i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;  // i is a constant in unrolled loops
}
template <typename T> __device__ __forceinline__ float element(const uint4& v, int j);
template <> __device__ __forceinline__ float element<float>(const uint4& v, int j) {
    return __uint_as_float(word_of(v, j));
}
template <> __device__ __forceinline__ float element<__nv_bfloat16>(const uint4& v, int j) {
    const unsigned word = word_of(v, j / 2);
    return __uint_as_float(j % 2 ? word & 0xffff0000u : word << 16);
}
template <> __device__ __forceinline__ float element<__half>(const uint4& v, int j) {
    const unsigned word = word_of(v, j / 2);
    return __half2float(__ushort_as_half(static_cast<unsigned short>(j % 2 ? word >> 16 : word & 0xffffu)));
}

// What raw[] holds after slice_max_sum: fp32 and bf16 slices their exponentials exp(x - shift) (one exp an
// element: the special-function units would otherwise take twice the time of the row's bytes in a bf16 softmax),
// bf16's as fp16 pairs in the registers that held x: 11 significant bits against the output's 8, so the store's
// rounding to bf16 stays within one bf16 ulp of the exact value (values under fp16's normal range, 6e-5, keep
// an absolute error under 3e-8). fp16 slices keep x (fp16 output has no bits to spare) and take the exp again.
template <typename T> struct Held { using type = __half; static constexpr bool kExp = true; };
template <> struct Held<float> { using type = float; static constexpr bool kExp = true; };
template <> struct Held<__half> { using type = __half; static constexpr bool kExp = false; };

__device__ __forceinline__ unsigned half_pair(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);  // lo in the low 16 bits, as element<__half> reads it
    return *reinterpret_cast<const unsigned*>(&h);
}

// This CTA's slice, held as raw[k] = vector tid + k * threads of it (count vectors in all), reduced over the block:
// returns (m_r, s_r) with s_r = sum exp(x - shift), shift = m_r (0 when the slice is empty or only -inf); raw then
// holds what Held<T> says.
template <typename T>
__device__ __forceinline__ float2 slice_max_sum(uint4 (&raw)[kItems], int tid, int threads, int count) {
    constexpr int kVec = 16 / sizeof(T);
    float local_max = neg_inf();
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
        if (tid + k * threads < count) {
#pragma unroll
            for (int j = 0; j < kVec; ++j) local_max = fmaxf(local_max, element<T>(raw[k], j));
        }
    }
    const float cta_max = block_reduce(local_max, MaxOp(), neg_inf());
    const float shift = slice_shift(cta_max);
    float local_sum = 0.f;
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
        if (tid + k * threads < count) {
            float e[kVec];
#pragma unroll
            for (int j = 0; j < kVec; ++j) {
                e[j] = exp_f(element<T>(raw[k], j) - shift);
                local_sum += e[j];
            }
            if constexpr (sizeof(T) == sizeof(float)) {
                raw[k] = make_uint4(__float_as_uint(e[0]), __float_as_uint(e[1]), __float_as_uint(e[2]),
                                    __float_as_uint(e[3]));
            } else if constexpr (Held<T>::kExp) {
                raw[k] = make_uint4(half_pair(e[0], e[1]), half_pair(e[2], e[3]), half_pair(e[4], e[5]),
                                    half_pair(e[6], e[7]));
            }
        }
    }
    return make_float2(cta_max, block_reduce(local_sum, SumOp(), 0.f));
}

// The row's (M, S) from the CLUSTER partials (m_r, s_r): M = max m_r, S = sum s_r exp(m_r - M) (an empty or -inf
// slice adds 0 x 0).
template <int CLUSTER>
__device__ __forceinline__ float2 merge_partials(const float2 (&partial)[CLUSTER]) {
    float row_max = neg_inf();
#pragma unroll
    for (int r = 0; r < CLUSTER; ++r) row_max = fmaxf(row_max, partial[r].x);
    float row_sum = 0.f;
#pragma unroll
    for (int r = 0; r < CLUSTER; ++r) row_sum += partial[r].y * exp_f(partial[r].x - row_max);
    return make_float2(row_max, row_sum);
}

// y's slice (vector i at y_slice + i * kVec) from the held raw (Held<T>): exp(x - shift) * scale, with shift the
// slice's (slice_shift of m_r) and scale = exp(m_r - M) / S.
template <typename T>
__device__ __forceinline__ void store_slice(T* __restrict__ y_slice, const uint4 (&raw)[kItems], int tid,
                                            int threads, int count, float shift, float scale) {
    constexpr int kVec = 16 / sizeof(T);
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
        const int item = tid + k * threads;
        if (item < count) {
            float out[kVec];
#pragma unroll
            for (int j = 0; j < kVec; ++j) {
                const float held = element<typename Held<T>::type>(raw[k], j);
                out[j] = (Held<T>::kExp ? held : exp_f(held - shift)) * scale;
            }
            store_vec<T, kVec>(y_slice + (long long)item * kVec, out);
        }
    }
}
