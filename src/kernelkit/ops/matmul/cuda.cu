// fp32 C (M x N) = A (M x K) @ B (K x N), all row-major and contiguous: the SGEMM ladder, one rung per kernel.
//
// Each rung keeps the one before it and changes one thing (the Python impls' docstrings say what each should
// move). Every kernel is correct for any M, N, K >= 0: a load past an edge reads 0 (adding 0 * x changes no sum),
// a store past an edge is skipped. Offsets are 64-bit where a row index is multiplied by a row length, so a
// matrix may have more than 2^31 elements.
//
// Cost of one call: 2MNK flops; the ideal traffic is read A and B once, write C once (4(MK + KN + MN) bytes).
// The tiled rungs read A N/BN times and B M/BM times from L2; the block tile sets that reuse.

#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

// ---- 1. naive: one thread per C element, threadIdx.x walks rows (the learner's first mapping) ------------------
// The 32 threads of a warp hold 32 rows and one column: each A load of the warp touches 32 rows (32 sectors for
// 128 useful bytes) and the C store is strided by N. Launch: block (32, 32), grid (cdiv(M, 32), cdiv(N, 32)).
extern "C" __global__ void matmul_naive_kernel(const float* __restrict__ a_ptr, const float* __restrict__ b_ptr,
                                               float* __restrict__ c_ptr, int M, int N, int K) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    const int col = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    const float* a_row = a_ptr + (size_t)row * K;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += a_row[k] * b_ptr[(size_t)k * N + col];
    c_ptr[(size_t)row * N + col] = acc;
}

// ---- 2. coalesced: the same work, threadIdx.x walks columns ----------------------------------------------------
// A warp now reads 32 consecutive floats of a B row (one 128-byte line), one A element (a broadcast), and writes
// 128 contiguous bytes of C. Launch: block (32, 32), grid (cdiv(N, 32), cdiv(M, 32)).
extern "C" __global__ void matmul_coalesced_kernel(const float* __restrict__ a_ptr, const float* __restrict__ b_ptr,
                                                   float* __restrict__ c_ptr, int M, int N, int K) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    const float* a_row = a_ptr + (size_t)row * K;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += a_row[k] * b_ptr[(size_t)k * N + col];
    c_ptr[(size_t)row * N + col] = acc;
}

// ---- 3. smem: the lecture's shared-memory tiles --------------------------------------------------------------
// A block stages a 32 x 32 tile of A and of B in shared memory, then each thread reads its row and column there:
// every element loaded from global memory is used 32 times. Launch: block (32, 32), grid (cdiv(N, 32), cdiv(M, 32)).
#define SMEM_TILE 32

extern "C" __global__ void matmul_smem_kernel(const float* __restrict__ a_ptr, const float* __restrict__ b_ptr,
                                              float* __restrict__ c_ptr, int M, int N, int K) {
    __shared__ float a_tile[SMEM_TILE][SMEM_TILE];
    __shared__ float b_tile[SMEM_TILE][SMEM_TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * SMEM_TILE + ty;
    const int col = blockIdx.x * SMEM_TILE + tx;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += SMEM_TILE) {
        a_tile[ty][tx] = (row < M && k0 + tx < K) ? a_ptr[(size_t)row * K + k0 + tx] : 0.0f;
        b_tile[ty][tx] = (k0 + ty < K && col < N) ? b_ptr[(size_t)(k0 + ty) * N + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < SMEM_TILE; ++k) acc += a_tile[ty][k] * b_tile[k][tx];
        __syncthreads();  // the next tile must not overwrite what a slower thread is still reading
    }
    if (row < M && col < N) c_ptr[(size_t)row * N + col] = acc;
}

// ---- 4. tile1d: each thread computes a column of T1_TM results ---------------------------------------------------
// A 64 x 64 block tile, BK = 8. One B element from shared memory serves T1_TM = 8 multiply-adds (the A values
// are re-read per result): shared-memory loads per FMA fall from 2 to about 1.1. Launch: 512 threads,
// grid (cdiv(N, 64), cdiv(M, 64)).
#define T1_BM 64
#define T1_BN 64
#define T1_BK 8
#define T1_TM 8

extern "C" __global__ void __launch_bounds__(512) matmul_tile1d_kernel(
        const float* __restrict__ a_ptr, const float* __restrict__ b_ptr, float* __restrict__ c_ptr,
        int M, int N, int K) {
    __shared__ float a_tile[T1_BM * T1_BK];  // [m][k]
    __shared__ float b_tile[T1_BK * T1_BN];  // [k][n]
    const int tid = threadIdx.x;
    const int row0 = blockIdx.y * T1_BM, col0 = blockIdx.x * T1_BN;
    const int thread_col = tid % T1_BN, thread_row = tid / T1_BN;  // 64 columns x 8 runs of T1_TM rows
    const int a_row = tid / T1_BK, a_col = tid % T1_BK;            // this thread's element of the 64 x 8 A tile
    const int b_row = tid / T1_BN, b_col = tid % T1_BN;            // and of the 8 x 64 B tile

    float acc[T1_TM] = {0.0f};
    for (int k0 = 0; k0 < K; k0 += T1_BK) {
        const int ar = row0 + a_row, ak = k0 + a_col;
        a_tile[a_row * T1_BK + a_col] = (ar < M && ak < K) ? a_ptr[(size_t)ar * K + ak] : 0.0f;
        const int bk = k0 + b_row, bn = col0 + b_col;
        b_tile[b_row * T1_BN + b_col] = (bk < K && bn < N) ? b_ptr[(size_t)bk * N + bn] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < T1_BK; ++k) {
            const float b = b_tile[k * T1_BN + thread_col];
#pragma unroll
            for (int i = 0; i < T1_TM; ++i) acc[i] += a_tile[(thread_row * T1_TM + i) * T1_BK + k] * b;
        }
        __syncthreads();
    }
    const int col = col0 + thread_col;
#pragma unroll
    for (int i = 0; i < T1_TM; ++i) {
        const int row = row0 + thread_row * T1_TM + i;
        if (row < M && col < N) c_ptr[(size_t)row * N + col] = acc[i];
    }
}

// ---- 5. tile2d: each thread computes an 8 x 8 block of results -------------------------------------------------
// A 128 x 128 block tile, BK = 8, 256 threads. Per k a thread loads 8 A and 8 B values into registers and does
// their 64 products (an outer product): 16 shared loads per 64 FMAs, and each global element is reused 128 times.
// Launch: 256 threads, grid (cdiv(N, 128), cdiv(M, 128)).
#define T2_BM 128
#define T2_BN 128
#define T2_BK 8
#define T2_TM 8
#define T2_TN 8
#define T2_THREADS 256

extern "C" __global__ void __launch_bounds__(T2_THREADS) matmul_tile2d_kernel(
        const float* __restrict__ a_ptr, const float* __restrict__ b_ptr, float* __restrict__ c_ptr,
        int M, int N, int K) {
    __shared__ float a_tile[T2_BM * T2_BK];  // [m][k]
    __shared__ float b_tile[T2_BK * T2_BN];  // [k][n]
    const int tid = threadIdx.x;
    const int row0 = blockIdx.y * T2_BM, col0 = blockIdx.x * T2_BN;
    const int thread_row = tid / (T2_BN / T2_TN), thread_col = tid % (T2_BN / T2_TN);  // a 16 x 16 grid
    const int a_row = tid / T2_BK, a_col = tid % T2_BK;  // rows a_row + 32 i of the A tile
    const int b_row = tid / T2_BN, b_col = tid % T2_BN;  // rows b_row + 2 i of the B tile

    float acc[T2_TM][T2_TN] = {{0.0f}};
    float reg_m[T2_TM], reg_n[T2_TN];
    for (int k0 = 0; k0 < K; k0 += T2_BK) {
#pragma unroll
        for (int r = 0; r < T2_BM; r += T2_THREADS / T2_BK) {
            const int ar = row0 + a_row + r, ak = k0 + a_col;
            a_tile[(a_row + r) * T2_BK + a_col] = (ar < M && ak < K) ? a_ptr[(size_t)ar * K + ak] : 0.0f;
        }
#pragma unroll
        for (int r = 0; r < T2_BK; r += T2_THREADS / T2_BN) {
            const int bk = k0 + b_row + r, bn = col0 + b_col;
            b_tile[(b_row + r) * T2_BN + b_col] = (bk < K && bn < N) ? b_ptr[(size_t)bk * N + bn] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < T2_BK; ++k) {
#pragma unroll
            for (int i = 0; i < T2_TM; ++i) reg_m[i] = a_tile[(thread_row * T2_TM + i) * T2_BK + k];
#pragma unroll
            for (int j = 0; j < T2_TN; ++j) reg_n[j] = b_tile[k * T2_BN + thread_col * T2_TN + j];
#pragma unroll
            for (int i = 0; i < T2_TM; ++i)
#pragma unroll
                for (int j = 0; j < T2_TN; ++j) acc[i][j] += reg_m[i] * reg_n[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < T2_TM; ++i) {
        const int row = row0 + thread_row * T2_TM + i;
#pragma unroll
        for (int j = 0; j < T2_TN; ++j) {
            const int col = col0 + thread_col * T2_TN + j;
            if (row < M && col < N) c_ptr[(size_t)row * N + col] = acc[i][j];
        }
    }
}

// ---- four consecutive floats of a row, for the vectorized rungs: load_row4, store_row4 ------------------------
#include "row4.cuh"

// ---- 6. vec4: tile2d with 16-byte global loads and A transposed in shared memory ---------------------------------
// Each thread loads one float4 of A and one of B per tile (4 scalar loads each before). A goes to shared memory
// transposed, a_tile[k][m], so a thread's 8 A values for one k are contiguous: two 16-byte shared loads, like
// B's. C is stored 16 bytes at a time. Launch: 256 threads, grid (cdiv(N, 128), cdiv(M, 128)).
template <bool VEC>
__device__ __forceinline__ void vec4_body(const float* __restrict__ a_ptr, const float* __restrict__ b_ptr,
                                          float* __restrict__ c_ptr, int M, int N, int K) {
    __shared__ __align__(16) float a_tile[T2_BK * T2_BM];  // [k][m]: transposed
    __shared__ __align__(16) float b_tile[T2_BK * T2_BN];  // [k][n]
    const int tid = threadIdx.x;
    const int row0 = blockIdx.y * T2_BM, col0 = blockIdx.x * T2_BN;
    const int thread_row = tid / (T2_BN / T2_TN), thread_col = tid % (T2_BN / T2_TN);
    const int a_row = tid / (T2_BK / 4), a_col = (tid % (T2_BK / 4)) * 4;  // 128 rows x 2 float4
    const int b_row = tid / (T2_BN / 4), b_col = (tid % (T2_BN / 4)) * 4;  // 8 rows x 32 float4

    float acc[T2_TM][T2_TN] = {{0.0f}};
    for (int k0 = 0; k0 < K; k0 += T2_BK) {
        const float4 a = load_row4<VEC>(a_ptr, M, K, row0 + a_row, k0 + a_col);
        a_tile[(a_col + 0) * T2_BM + a_row] = a.x;
        a_tile[(a_col + 1) * T2_BM + a_row] = a.y;
        a_tile[(a_col + 2) * T2_BM + a_row] = a.z;
        a_tile[(a_col + 3) * T2_BM + a_row] = a.w;
        *reinterpret_cast<float4*>(&b_tile[b_row * T2_BN + b_col]) =
            load_row4<VEC>(b_ptr, K, N, k0 + b_row, col0 + b_col);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < T2_BK; ++k) {
            const float4 m_lo = *reinterpret_cast<const float4*>(&a_tile[k * T2_BM + thread_row * T2_TM]);
            const float4 m_hi = *reinterpret_cast<const float4*>(&a_tile[k * T2_BM + thread_row * T2_TM + 4]);
            const float4 n_lo = *reinterpret_cast<const float4*>(&b_tile[k * T2_BN + thread_col * T2_TN]);
            const float4 n_hi = *reinterpret_cast<const float4*>(&b_tile[k * T2_BN + thread_col * T2_TN + 4]);
            const float reg_m[T2_TM] = {m_lo.x, m_lo.y, m_lo.z, m_lo.w, m_hi.x, m_hi.y, m_hi.z, m_hi.w};
            const float reg_n[T2_TN] = {n_lo.x, n_lo.y, n_lo.z, n_lo.w, n_hi.x, n_hi.y, n_hi.z, n_hi.w};
#pragma unroll
            for (int i = 0; i < T2_TM; ++i)
#pragma unroll
                for (int j = 0; j < T2_TN; ++j) acc[i][j] += reg_m[i] * reg_n[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < T2_TM; ++i)
#pragma unroll
        for (int j = 0; j < T2_TN; j += 4)
            store_row4<VEC>(c_ptr, M, N, row0 + thread_row * T2_TM + i, col0 + thread_col * T2_TN + j,
                            make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]));
}

extern "C" __global__ void __launch_bounds__(T2_THREADS) matmul_vec4_kernel(
        const float* __restrict__ a_ptr, const float* __restrict__ b_ptr, float* __restrict__ c_ptr,
        int M, int N, int K) {
    vec4_body<true>(a_ptr, b_ptr, c_ptr, M, N, K);
}

// The same tiling with scalar global accesses: K or N not a multiple of 4, or a pointer off a 16-byte boundary.
extern "C" __global__ void __launch_bounds__(T2_THREADS) matmul_vec4_unaligned_kernel(
        const float* __restrict__ a_ptr, const float* __restrict__ b_ptr, float* __restrict__ c_ptr,
        int M, int N, int K) {
    vec4_body<false>(a_ptr, b_ptr, c_ptr, M, N, K);
}

// ---- 7. warptile: warp tiles, conflict-free shared loads, double-buffered tiles ---------------------------------
// The 128 x 128 block tile is split among 8 warps of 32 x 64; inside a warp the lanes form a 4 x 8 grid and each
// lane computes 8 x 8 results as four 4 x 4 pieces, 16 rows and 32 columns apart. For one k the warp then reads 4
// distinct float4 of A (broadcast) and 8 consecutive float4 of B, 128 bytes: no bank conflicts (vec4's lanes read
// float4s 32 bytes apart, two lanes to a bank). The A tile's rows are padded by 4 floats so its transposed
// stores do not conflict either. Two shared buffers: the next tile's global loads are issued before the current
// tile's FMAs and land in registers, then go to the other buffer, so one barrier per tile suffices and the load
// latency hides behind 512 FMAs a thread. Launch: 256 threads, grid (cdiv(N, 128), cdiv(M, 128)).
#define WT_BM 128
#define WT_BN 128
#define WT_BK 8
#define WT_THREADS 256
#define WT_WARP_M 32                // a warp's tile: 32 rows x 64 columns; 4 x 2 warps cover the block
#define WT_WARP_N 64
#define WT_LANES_N 8                // lanes in a warp: 4 rows x 8 columns of lanes
#define WT_A_LD (WT_BM + 4)         // padded row of the transposed A tile (528 bytes: float4 loads stay aligned)

template <bool VEC>
__device__ __forceinline__ void warptile_body(const float* __restrict__ a_ptr, const float* __restrict__ b_ptr,
                                              float* __restrict__ c_ptr, int M, int N, int K) {
    __shared__ __align__(16) float a_tile[2][WT_BK * WT_A_LD];  // [buffer][k][m]: transposed, padded
    __shared__ __align__(16) float b_tile[2][WT_BK * WT_BN];    // [buffer][k][n]
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int row0 = blockIdx.y * WT_BM, col0 = blockIdx.x * WT_BN;
    // This lane's results: rows m0 + {0..3, 16..19}, columns n0 + {0..3, 32..35} of the block tile.
    const int m0 = (warp % (WT_BM / WT_WARP_M)) * WT_WARP_M + (lane / WT_LANES_N) * 4;
    const int n0 = (warp / (WT_BM / WT_WARP_M)) * WT_WARP_N + (lane % WT_LANES_N) * 4;
    const int a_row = tid / (WT_BK / 4), a_col = (tid % (WT_BK / 4)) * 4;  // one float4 of the 128 x 8 A tile
    const int b_row = tid / (WT_BN / 4), b_col = (tid % (WT_BN / 4)) * 4;  // one float4 of the 8 x 128 B tile

    float acc[8][8] = {{0.0f}};
    float4 a_next = load_row4<VEC>(a_ptr, M, K, row0 + a_row, a_col);
    float4 b_next = load_row4<VEC>(b_ptr, K, N, b_row, col0 + b_col);
    const int tiles = CEIL_DIV(K, WT_BK);
    int buf = 0;
    if (tiles > 0) {
        a_tile[0][(a_col + 0) * WT_A_LD + a_row] = a_next.x;
        a_tile[0][(a_col + 1) * WT_A_LD + a_row] = a_next.y;
        a_tile[0][(a_col + 2) * WT_A_LD + a_row] = a_next.z;
        a_tile[0][(a_col + 3) * WT_A_LD + a_row] = a_next.w;
        *reinterpret_cast<float4*>(&b_tile[0][b_row * WT_BN + b_col]) = b_next;
    }
    __syncthreads();
    for (int t = 0; t < tiles; ++t) {
        const bool more = t + 1 < tiles;
        if (more) {  // issued now, used after this tile's FMAs
            const int k0 = (t + 1) * WT_BK;
            a_next = load_row4<VEC>(a_ptr, M, K, row0 + a_row, k0 + a_col);
            b_next = load_row4<VEC>(b_ptr, K, N, k0 + b_row, col0 + b_col);
        }
        const float* as = a_tile[buf];
        const float* bs = b_tile[buf];
#pragma unroll
        for (int k = 0; k < WT_BK; ++k) {
            const float4 m_lo = *reinterpret_cast<const float4*>(&as[k * WT_A_LD + m0]);
            const float4 m_hi = *reinterpret_cast<const float4*>(&as[k * WT_A_LD + m0 + 16]);
            const float4 n_lo = *reinterpret_cast<const float4*>(&bs[k * WT_BN + n0]);
            const float4 n_hi = *reinterpret_cast<const float4*>(&bs[k * WT_BN + n0 + 32]);
            const float reg_m[8] = {m_lo.x, m_lo.y, m_lo.z, m_lo.w, m_hi.x, m_hi.y, m_hi.z, m_hi.w};
            const float reg_n[8] = {n_lo.x, n_lo.y, n_lo.z, n_lo.w, n_hi.x, n_hi.y, n_hi.z, n_hi.w};
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] += reg_m[i] * reg_n[j];
        }
        if (more) {  // the other buffer was last read before the previous barrier: free to overwrite
            a_tile[buf ^ 1][(a_col + 0) * WT_A_LD + a_row] = a_next.x;
            a_tile[buf ^ 1][(a_col + 1) * WT_A_LD + a_row] = a_next.y;
            a_tile[buf ^ 1][(a_col + 2) * WT_A_LD + a_row] = a_next.z;
            a_tile[buf ^ 1][(a_col + 3) * WT_A_LD + a_row] = a_next.w;
            *reinterpret_cast<float4*>(&b_tile[buf ^ 1][b_row * WT_BN + b_col]) = b_next;
        }
        __syncthreads();
        buf ^= 1;
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int row = row0 + m0 + (i < 4 ? i : 16 + i - 4);
#pragma unroll
        for (int j = 0; j < 8; j += 4) {
            const int col = col0 + n0 + (j < 4 ? j : 32 + j - 4);
            store_row4<VEC>(c_ptr, M, N, row, col,
                            make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]));
        }
    }
}

// Two blocks of 256 threads per SM: at most 128 registers a thread (64 accumulators, 16 fragment values, the
// prefetched 8, addresses).
extern "C" __global__ void __launch_bounds__(WT_THREADS, 2) matmul_warptile_kernel(
        const float* __restrict__ a_ptr, const float* __restrict__ b_ptr, float* __restrict__ c_ptr,
        int M, int N, int K) {
    warptile_body<true>(a_ptr, b_ptr, c_ptr, M, N, K);
}

extern "C" __global__ void __launch_bounds__(WT_THREADS, 2) matmul_warptile_unaligned_kernel(
        const float* __restrict__ a_ptr, const float* __restrict__ b_ptr, float* __restrict__ c_ptr,
        int M, int N, int K) {
    warptile_body<false>(a_ptr, b_ptr, c_ptr, M, N, K);
}
