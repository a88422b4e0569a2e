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
// fp32 keeps each exp(x - m_r) in the registers that held x (one exp an element), bf16 keeps it as fp16 pairs in
// the registers that held x (cluster.cuh's Held: one exp an element, within one bf16 ulp), fp16 keeps x as
// loaded and takes exp(x - m_r) again in step 4 (two exps an element, on the special-function units). 16-bit
// values are two a register: a slice twice as long in the same registers, so a row of 16-bit values needs half
// the CTAs, or half the threads, of an fp32 one. A CTA's fixed cost (two block reductions, two cluster barriers,
// its launch) is paid over as many bytes whatever the dtype.
//
// What the host guarantees (ops/softmax/cluster.py): x and y contiguous, 16-byte aligned, n_cols a multiple of
// 16 / sizeof(T), blockDim.x a multiple of 32 with blockDim.x * kItems >= the slice's vectors,
// grid.x = rows * CLUSTER. The clusters tile grid.x in order, so the row of a CTA is blockIdx.x / CLUSTER.
//
// Numerics: fp32 math for every dtype. A slice of only -inf (masked) has m_r = -inf; its exponentials are taken
// against 0 instead (exp(-inf) = 0, where -inf - -inf would be NaN) and its scale exp(-inf - M) is 0. A row of only
// -inf gives NaN (M = -inf), as torch.softmax does.
//
// It includes cluster.cuh (the cluster's PTX and a slice's math; it includes common.cuh, as
// cuda.cu does); not cuda.cu itself, which defines its own kernels. SOFTMAX_CLUSTER_32 and SOFTMAX_CLUSTER_16 are
// set at compile time (-D, one build a size: cluster.py's CLUSTERS); SOFTMAX_ITEMS may be (scripts/gpu-softmax-tune
// tries other shapes).

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

#include "cluster.cuh"  // cluster PTX; slice_max_sum, merge_partials, store_slice

// One row, one CTA's slice of it. Item k of a thread is the vector begin + tid + k * threads of the row
// (consecutive threads, consecutive 16 bytes); the loops are unrolled, so raw[k] is four registers.
template <typename T, int CLUSTER>
__device__ __forceinline__ void softmax_cluster_row(const T* __restrict__ x_ptr, T* __restrict__ y_ptr, int n_cols) {
#if SOFTMAX_HAS_CLUSTERS
    constexpr int kVec = 16 / sizeof(T);
    // A launch without the cluster attribute would make every CTA a cluster of one: its reads of other ranks'
    // shared memory would be invalid. Stop loudly instead.
    if (cluster_blocks() != CLUSTER) __trap();
    const int rank = (int)cluster_rank();
    const int tid = threadIdx.x, threads = blockDim.x;
    const long long row_index = blockIdx.x / CLUSTER;
    const int n_vecs = n_cols / kVec;
    const int per_cta = (n_vecs + CLUSTER - 1) / CLUSTER;
    const int begin = rank * per_cta;
    const int end = min(begin + per_cta, n_vecs);  // a CTA past the row's end has an empty slice: -inf, 0
    const uint4* x = reinterpret_cast<const uint4*>(x_ptr + row_index * n_cols);

    uint4 raw[kItems];  // the slice as loaded (fp32: then its exponentials, as float bits)
    const int count = end - begin;  // <= 0: an empty slice
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
        const int item = tid + k * threads;
        if (item < count) raw[k] = x[begin + item];
    }
    const float2 cta = slice_max_sum<T>(raw, tid, threads, count);

    __shared__ float2 cta_partial;  // (m_r, s_r), read by every CTA of the cluster
    if (threadIdx.x == 0) cta_partial = cta;
    cluster_arrive();
    cluster_wait();  // every CTA's partial is written and visible to the cluster
    float2 partial[CLUSTER];
#pragma unroll
    for (int r = 0; r < CLUSTER; ++r) partial[r] = load_cluster_partial(&cta_partial, r);
    const float2 row = merge_partials<CLUSTER>(partial);
    // Done with the other CTAs' shared memory: say so now, wait only before leaving, so the stores below do not
    // wait for the slowest CTA of the cluster to read.
    cluster_arrive();
    store_slice<T>(y_ptr + (row_index * n_cols + (long long)begin * kVec), raw, tid, threads, count,
                   slice_shift(cta.x), exp_f(cta.x - row.x) / row.y);
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
