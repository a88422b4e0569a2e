// Softmax of long rows on Hopper (sm_90) with the rows streamed: persistent clusters of CLUSTER CTAs (1, 2, 4 or 8,
// a build each, chosen by stream.py), each cluster taking rows c, c + G, c + 2G, ... (G clusters in the grid, as
// many as fit on the GPU at once), each CTA one slice of every row: n_cols / CLUSTER elements, read from HBM once.
//
// Why (cluster.cu's one-row CTAs reach 86% of the copy rate in fp32, 70% in bf16, at 1024x65536 on an H200): a CTA
// that holds a row's slice in registers loads it, reduces, exchanges partials, stores and leaves; with one such CTA
// an SM, HBM idles while it reduces and while the next CTA starts. Here a CTA copies its next slices into shared
// memory by the Tensor Memory Accelerator (cp.async.bulk: one instruction of thread 0, the bytes counted on an
// mbarrier) while it works on the current one, so reads overlap the reductions and the stores as in a copy.
//
// A CTA, for its i-th row (stage s = i % kStages of the shared buffer; kStages = 2):
//   1. waits for stage s's bytes (mbarrier phase (i / kStages) & 1), copies its slice to registers (16-byte
//      shared loads, vector tid + k * threads: no bank conflicts), and after a barrier thread 0 asks the TMA for
//      row i + kStages's slice into stage s (a proxy fence first: the threads' reads of it come before the copy's
//      writes). So two slices are in flight while a CTA works on a third.
//   2. reduces its slice's max and sum (cluster.cuh's slice_max_sum), publishes them in partial[i % 2] and, after
//      a cluster barrier, reads all CTAs' partials through distributed shared memory (as cluster.cu does);
//   3. scales and stores from registers (16-byte stores).
// partial[] has two slots: row i + 2 rewrites slot i % 2 only after the barrier of row i + 1, which every CTA
// reaches after reading row i's partials. A last cluster barrier keeps each CTA's shared memory alive until all
// reads of it are done.
//
// What the host guarantees (stream.py): x and y contiguous, 16-byte aligned; n_cols a multiple of CLUSTER
// 16-byte vectors; blockDim.x a multiple of 32, at most 512, with blockDim.x * kItems >= a slice's vectors; kStages slices of
// dynamic shared memory; grid.x = G * CLUSTER with G clusters able to run at once (cuOccupancyMaxActiveClusters):
// a cluster that waited for another to finish would still be right, only slower.
// Numerics as cluster.cu: fp32 math, -inf slices and rows as torch.softmax.

#ifndef SOFTMAX_ITEMS
#define SOFTMAX_ITEMS 8  // 16-byte vectors a thread holds: 32 registers
#endif
#ifndef SOFTMAX_STREAM_CLUSTER
#define SOFTMAX_STREAM_CLUSTER 4
#endif
#ifndef SOFTMAX_STREAM_STAGES
#define SOFTMAX_STREAM_STAGES 2  // slices of shared memory a CTA has in flight (registers hold a third)
#endif
#ifndef SOFTMAX_STREAM_MIN_BLOCKS
#define SOFTMAX_STREAM_MIN_BLOCKS 1  // CTAs an SM the registers are budgeted for (2: at most 64 a thread)
#endif
constexpr int kItems = SOFTMAX_ITEMS;
constexpr int kStreamThreads = 512;  // at most, so a thread may have 128 registers (1024 would spill at 64)
constexpr int kStages = SOFTMAX_STREAM_STAGES;
constexpr unsigned kCopyPiece = 32768;  // bytes a cp.async.bulk: a slice is asked for in pieces of this or less

#include "cluster.cuh"  // cluster PTX; slice_max_sum, merge_partials, store_slice

#if SOFTMAX_HAS_CLUSTERS
__device__ __forceinline__ unsigned smem_address(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void barrier_init(unsigned long long* bar) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_address(bar)) : "memory");
}

// Thread 0: stage ``dst`` <- ``bytes`` at ``src`` by the TMA, completion counted on ``bar`` (one arrival, then the
// bytes as they land). bytes: a multiple of 16; src and dst 16-byte aligned.
__device__ __forceinline__ void load_slice(void* dst, const void* src, unsigned bytes, unsigned long long* bar) {
    const unsigned b = smem_address(bar);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(bytes) : "memory");
    for (unsigned at = 0; at < bytes; at += kCopyPiece) {
        const unsigned piece = min(kCopyPiece, bytes - at);
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     ::"r"(smem_address(static_cast<char*>(dst) + at)), "l"(static_cast<const char*>(src) + at),
                     "r"(piece), "r"(b)
                     : "memory");
    }
}

__device__ __forceinline__ void wait_slice(unsigned long long* bar, unsigned parity) {
    const unsigned b = smem_address(bar);
    unsigned done = 0;
    while (!done) {
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     " selp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done)
                     : "r"(b), "r"(parity)
                     : "memory");
    }
}
#endif

template <typename T, int CLUSTER>
__device__ __forceinline__ void softmax_stream_rows(const T* __restrict__ x_ptr, T* __restrict__ y_ptr, int rows,
                                                    int n_cols) {
#if SOFTMAX_HAS_CLUSTERS
    constexpr int kVec = 16 / sizeof(T);
    extern __shared__ __align__(128) uint4 stage[];  // kStages slices
    __shared__ __align__(8) unsigned long long full[kStages];
    __shared__ float2 partial[2];  // (m_r, s_r) of rows i with i % 2, read by every CTA of the cluster
    if (cluster_blocks() != CLUSTER) __trap();  // launched without the cluster attribute: see cluster.cu
    const int rank = CLUSTER > 1 ? (int)cluster_rank() : 0;
    const int tid = threadIdx.x, threads = blockDim.x;
    const int cluster_id = blockIdx.x / CLUSTER, clusters = gridDim.x / CLUSTER;
    const int count = n_cols / kVec / CLUSTER;  // vectors a slice
    const unsigned bytes = count * 16u;
    const int my_rows = cluster_id < rows ? (rows - cluster_id - 1) / clusters + 1 : 0;  // the same in the cluster
    auto slice_at = [&](int i) {  // element offset of this CTA's slice of the cluster's i-th row
        return (cluster_id + (long long)i * clusters) * n_cols + (long long)rank * count * kVec;
    };

    if (tid == 0) {
#pragma unroll
        for (int s = 0; s < kStages; ++s) barrier_init(&full[s]);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        for (int s = 0; s < kStages && s < my_rows; ++s)
            load_slice(stage + s * count, x_ptr + slice_at(s), bytes, &full[s]);
    }
    __syncthreads();

    for (int i = 0; i < my_rows; ++i) {
        const int s = i % kStages;
        wait_slice(&full[s], (i / kStages) & 1);
        uint4 raw[kItems];
#pragma unroll
        for (int k = 0; k < kItems; ++k) {
            const int item = tid + k * threads;
            if (item < count) raw[k] = stage[s * count + item];
        }
        __syncthreads();  // stage s is read: it may take row i + kStages
        if (tid == 0 && i + kStages < my_rows) {
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            load_slice(stage + s * count, x_ptr + slice_at(i + kStages), bytes, &full[s]);
        }
        const float2 cta = slice_max_sum<T>(raw, tid, threads, count);
        float2 row = cta;
        if constexpr (CLUSTER > 1) {
            if (tid == 0) partial[i % 2] = cta;
            cluster_arrive();
            cluster_wait();  // every CTA's partial of row i is written and visible
            float2 parts[CLUSTER];
#pragma unroll
            for (int r = 0; r < CLUSTER; ++r) parts[r] = load_cluster_partial(&partial[i % 2], r);
            row = merge_partials<CLUSTER>(parts);
        }
        store_slice<T>(y_ptr + slice_at(i), raw, tid, threads, count, slice_shift(cta.x),
                       exp_f(cta.x - row.x) / row.y);
    }
    if constexpr (CLUSTER > 1) {
        cluster_arrive();
        cluster_wait();  // no CTA leaves (freeing its shared memory) while another may still read its partials
    }
#else
    __trap();
#endif
}

// grid: G * CLUSTER blocks; block: 32..512 threads, a multiple of 32; dynamic shared memory kStages slices.
// x_ptr, y_ptr: (rows, n_cols), contiguous.
extern "C" SOFTMAX_CLUSTER_DIMS(SOFTMAX_STREAM_CLUSTER) __global__ void __launch_bounds__(kStreamThreads, SOFTMAX_STREAM_MIN_BLOCKS)
softmax_stream_f32_kernel(const float* __restrict__ x_ptr, float* __restrict__ y_ptr, int rows, int n_cols) {
    softmax_stream_rows<float, SOFTMAX_STREAM_CLUSTER>(x_ptr, y_ptr, rows, n_cols);
}

extern "C" SOFTMAX_CLUSTER_DIMS(SOFTMAX_STREAM_CLUSTER) __global__ void __launch_bounds__(kStreamThreads, SOFTMAX_STREAM_MIN_BLOCKS)
softmax_stream_f16_kernel(const __half* __restrict__ x_ptr, __half* __restrict__ y_ptr, int rows, int n_cols) {
    softmax_stream_rows<__half, SOFTMAX_STREAM_CLUSTER>(x_ptr, y_ptr, rows, n_cols);
}

extern "C" SOFTMAX_CLUSTER_DIMS(SOFTMAX_STREAM_CLUSTER) __global__ void __launch_bounds__(kStreamThreads, SOFTMAX_STREAM_MIN_BLOCKS)
softmax_stream_bf16_kernel(const __nv_bfloat16* __restrict__ x_ptr, __nv_bfloat16* __restrict__ y_ptr, int rows,
                           int n_cols) {
    softmax_stream_rows<__nv_bfloat16, SOFTMAX_STREAM_CLUSTER>(x_ptr, y_ptr, rows, n_cols);
}
