// Softmax of long rows (16385 to 262144 elements) on Hopper (sm_90): one thread-block cluster per row (CLUSTER CTAs:
// 2, 4 or 8, a build each, chosen by cluster.py), each element read from HBM once. Traffic: read MN, write MN
// elements, against 2MN + MN for a block that walks the row twice.
//
// The row is cut into CLUSTER equal slices of whole 16-byte vectors, one per CTA of the cluster. Each CTA:
//   1. loads its slice once into registers (16-byte loads, up to kItems vectors a thread, all issued before the
//      first use: 128 bytes in flight a thread),
//   2. reduces its slice's max m_r and sum s_r = sum exp(x - m_r) (warp shuffles, then shared memory),
//   3. publishes (m_r, s_r) in its shared memory; after a cluster barrier every thread reads the CLUSTER partials
//      through distributed shared memory (mapa + ld.shared::cluster) and merges them: M = max m_r,
//      S = sum s_r * exp(m_r - M),
//   4. scales by exp(m_r - M) / S and stores (16-byte stores),
//   5. leaves only once every CTA of the cluster has read the partials (a split barrier: arrive after the reads,
//      wait at the end): a CTA's shared memory must outlive every other CTA's reads of it.
//
// fp32 keeps each exp(x - m_r) in the registers that held x (one exp an element). fp16/bf16 keep x as loaded, two
// values a register, and take exp(x - m_r) again in step 4 (two exps an element, on the special-function units,
// idle in a memory-bound kernel): a slice twice as long in the same registers, so a row of 16-bit values needs
// half the CTAs, or half the threads, of an fp32 one. A CTA's fixed cost (two block reductions, two
// cluster barriers, its launch) is paid over as many bytes whatever the dtype.
//
// What the host guarantees (ops/softmax/cluster.py): x and y contiguous, 16-byte aligned, n_cols a multiple of
// 16 / sizeof(T), blockDim.x a multiple of 32 with blockDim.x * kItems >= the slice's vectors,
// grid.x = rows * CLUSTER. The clusters tile grid.x in order, so the row of a CTA is blockIdx.x / CLUSTER.
//
// Numerics: fp32 math for every dtype. A slice of only -inf (masked) has m_r = -inf; its exponentials are taken
// against 0 instead (exp(-inf) = 0, where -inf - -inf would be NaN) and its scale exp(-inf - M) is 0. A row of only
// -inf gives NaN (M = -inf), as torch.softmax does.
//
// It includes common.cuh (conversions, vector loads and stores, reductions), as cuda.cu does; not cuda.cu itself,
// which defines its own kernels. SOFTMAX_CLUSTER_32 and SOFTMAX_CLUSTER_16 are set at compile time (-D, one build
// a size: cluster.py's CLUSTERS); SOFTMAX_ITEMS may be (scripts/gpu-softmax-tune tries other shapes).

#include "common.cuh"  // to_float, from_float, load_vec, store_vec, warp_reduce, block_reduce

#ifndef SOFTMAX_ITEMS
#define SOFTMAX_ITEMS 8  // 16-byte vectors a thread holds: 32 registers; 1024 threads get 64 each
#endif
#ifndef SOFTMAX_CLUSTER_32
#define SOFTMAX_CLUSTER_32 8  // CTAs a row for fp32: 8 x 1024 threads x 8 vectors x 4 values = 262144
#endif
#ifndef SOFTMAX_CLUSTER_16
#define SOFTMAX_CLUSTER_16 4  // CTAs a row for fp16/bf16: 4 x 1024 threads x 8 vectors x 8 values = 262144
#endif
constexpr int kItems = SOFTMAX_ITEMS;
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
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
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

// exp(d) as one multiply and the SFU's exp2: exp2(-inf) = 0 and exp2(NaN) = NaN, as the -inf rules above need.
__device__ __forceinline__ float exp_f(float d) { return exp2f(d * kLog2e); }


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

// One row, one CTA's slice of it. Item k of a thread is the vector begin + tid + k * threads of the row
// (consecutive threads, consecutive 16 bytes); the loops are unrolled, so raw[k] is four registers.
template <typename T, int CLUSTER>
__device__ __forceinline__ void softmax_cluster_row(const T* __restrict__ x_ptr, T* __restrict__ y_ptr, int n_cols) {
#if SOFTMAX_HAS_CLUSTERS
    constexpr int kVec = 16 / sizeof(T);
    constexpr bool kKeepExp = sizeof(T) == sizeof(float);  // fp32: exp(x - m_r) replaces x in its registers
    // A launch without the cluster attribute would make every CTA a cluster of one: its reads of other ranks'
    // shared memory would be invalid. Stop loudly instead.
    if (cluster_blocks() != CLUSTER) __trap();
    const int rank = (int)cluster_rank();
    const int tid = threadIdx.x, threads = blockDim.x;
    const long long row = blockIdx.x / CLUSTER;
    const int n_vecs = n_cols / kVec;
    const int per_cta = (n_vecs + CLUSTER - 1) / CLUSTER;
    const int begin = rank * per_cta;
    const int end = min(begin + per_cta, n_vecs);  // a CTA past the row's end has an empty slice: -inf, 0
    const uint4* x = reinterpret_cast<const uint4*>(x_ptr + row * n_cols);

    uint4 raw[kItems];  // the slice as loaded (fp32: then its exponentials, as float bits)
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
        const int item = begin + tid + k * threads;
        if (item < end) raw[k] = x[item];
    }
    float local_max = neg_inf();
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
        if (begin + tid + k * threads < end) {
#pragma unroll
            for (int j = 0; j < kVec; ++j) local_max = fmaxf(local_max, element<T>(raw[k], j));
        }
    }
    const float cta_max = block_reduce(local_max, MaxOp(), neg_inf());
    const float shift = cta_max == neg_inf() ? 0.f : cta_max;
    float local_sum = 0.f;
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
        if (begin + tid + k * threads < end) {
            float e[kVec];
#pragma unroll
            for (int j = 0; j < kVec; ++j) {
                e[j] = exp_f(element<T>(raw[k], j) - shift);
                local_sum += e[j];
            }
            if constexpr (kKeepExp)
                raw[k] = make_uint4(__float_as_uint(e[0]), __float_as_uint(e[1]), __float_as_uint(e[2]),
                                    __float_as_uint(e[3]));
        }
    }
    const float cta_sum = block_reduce(local_sum, SumOp(), 0.f);

    __shared__ float2 cta_partial;  // (m_r, s_r), read by every CTA of the cluster
    if (threadIdx.x == 0) cta_partial = make_float2(cta_max, cta_sum);
    cluster_arrive();
    cluster_wait();  // every CTA's partial is written and visible to the cluster
    float2 partial[CLUSTER];
#pragma unroll
    for (int r = 0; r < CLUSTER; ++r) partial[r] = load_cluster_partial(&cta_partial, r);
    float row_max = neg_inf();
#pragma unroll
    for (int r = 0; r < CLUSTER; ++r) row_max = fmaxf(row_max, partial[r].x);
    float row_sum = 0.f;
#pragma unroll
    for (int r = 0; r < CLUSTER; ++r) row_sum += partial[r].y * exp_f(partial[r].x - row_max);  // empty: 0 * 0
    // Done with the other CTAs' shared memory: say so now, wait only before leaving, so the stores below do not
    // wait for the slowest CTA of the cluster to read.
    cluster_arrive();
    const float scale = exp_f(cta_max - row_max) / row_sum;
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
        const int item = begin + tid + k * threads;
        if (item < end) {
            float out[kVec];
#pragma unroll
            for (int j = 0; j < kVec; ++j) {
                const float x_j = element<T>(raw[k], j);
                out[j] = (kKeepExp ? x_j : exp_f(x_j - shift)) * scale;
            }
            store_vec<T, kVec>(y_ptr + (row * n_cols + (long long)item * kVec), out);
        }
    }
    cluster_wait();  // no CTA leaves (freeing its shared memory) while another may still read its partial
#else
    __trap();
#endif
}

// grid: rows * CLUSTER blocks; block: 32..1024 threads, a multiple of 32. x_ptr, y_ptr: (rows, n_cols),
// contiguous. __cluster_dims__ takes a constant: SOFTMAX_CLUSTER_32 or SOFTMAX_CLUSTER_16.
extern "C" SOFTMAX_CLUSTER_DIMS(SOFTMAX_CLUSTER_32) __global__ void __launch_bounds__(kMaxThreads)
softmax_cluster_f32_kernel(const float* __restrict__ x_ptr, float* __restrict__ y_ptr, int n_cols) {
    softmax_cluster_row<float, SOFTMAX_CLUSTER_32>(x_ptr, y_ptr, n_cols);
}

extern "C" SOFTMAX_CLUSTER_DIMS(SOFTMAX_CLUSTER_16) __global__ void __launch_bounds__(kMaxThreads)
softmax_cluster_f16_kernel(const __half* __restrict__ x_ptr, __half* __restrict__ y_ptr, int n_cols) {
    softmax_cluster_row<__half, SOFTMAX_CLUSTER_16>(x_ptr, y_ptr, n_cols);
}

extern "C" SOFTMAX_CLUSTER_DIMS(SOFTMAX_CLUSTER_16) __global__ void __launch_bounds__(kMaxThreads)
softmax_cluster_bf16_kernel(const __nv_bfloat16* __restrict__ x_ptr, __nv_bfloat16* __restrict__ y_ptr,
                            int n_cols) {
    softmax_cluster_row<__nv_bfloat16, SOFTMAX_CLUSTER_16>(x_ptr, y_ptr, n_cols);
}
