// fp32 C (M x N) = A (M x K) @ B (K x N), all row-major and contiguous: the SGEMM ladder's rungs past warptile
// (cuda.cu). Both keep warptile's tiling and change how the next data reaches the FMAs.
//
// The tiling (as warptile): a 128 x 128 block tile, BK = 8, 256 threads; 8 warps of 32 x 64, the lanes of a warp
// a 4 x 8 grid, each lane 8 x 8 results as four 4 x 4 pieces, 16 rows and 32 columns apart, so a warp's shared
// loads for one k are 4 broadcast float4 of A and 8 consecutive float4 of B: no bank conflicts. A sits in shared
// memory transposed, a_tile[k][m], its rows padded by 4 floats so the transposing stores do not conflict either.
//
// What warptile leaves exposed at every tile boundary: its last k-step's FMAs, then the stores of the next tile,
// the barrier, and only then the first shared loads of the next tile, whose ~30-cycle latency nothing covers but
// the SM's other block. Here the fragments (a lane's 8 A and 8 B values of one k) are double-buffered in
// registers: the loads for step k + 1 are issued before step k's 64 FMAs, and at a tile's last step the barrier
// and the next tile's first loads come before that step's FMAs, so the FMAs cover them.
//
// Every kernel is correct for any M, N, K >= 0: a load past an edge reads 0 (adding 0 * x changes no sum), a
// store past an edge is skipped. Offsets are 64-bit where a row index is multiplied by a row length.
// Launch: 256 threads, grid (cdiv(N, 128), cdiv(M, 128)). Cost of one call: 2MNK flops.
//
// Resources (nvcc 13.0 and NVRTC 13.5, sm_90; the launch bounds ask for 2 blocks of 256 threads an SM, so at most
// 128 registers a thread; smem is the static tiles, sm_90 reserves 1 KB more a block):
//   matmul_double_buffer_kernel            127 registers, 16640 bytes smem, no spills
//   matmul_double_buffer_unaligned_kernel  127 registers, 16640 bytes smem, no spills
//   matmul_cp_async_kernel                 126 registers, 24960 bytes smem, no spills
//   matmul_cp_async_unaligned_kernel       127 registers, 24960 bytes smem, no spills
// Two blocks an SM: 2 x 256 x 128 registers fill the 64K register file; 2 x 26 KB of the 228 KB of smem.

#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))
#define PL_BM 128
#define PL_BN 128
#define PL_BK 8
#define PL_THREADS 256
#define PL_WARP_M 32         // a warp's tile: 32 rows x 64 columns; 4 x 2 warps cover the block
#define PL_WARP_N 64
#define PL_LANES_N 8         // lanes in a warp: 4 rows x 8 columns of lanes
#define PL_A_LD (PL_BM + 4)  // padded row of the transposed A tile (528 bytes: float4 loads stay aligned)
#define PL_STAGES 3          // cp_async: shared tiles in flight (2 loading while 1 is read)

#include "row4.cuh"  // load_row4, store_row4: four floats of a row, zeros past the edges

// A lane's place in the block tile: its results are rows m0 + {0..3, 16..19} and columns n0 + {0..3, 32..35}.
struct LaneTile {
    int m0, n0;
};

__device__ __forceinline__ LaneTile lane_tile(int tid) {
    const int warp = tid / 32, lane = tid % 32;
    return {(warp % (PL_BM / PL_WARP_M)) * PL_WARP_M + (lane / PL_LANES_N) * 4,
            (warp / (PL_BM / PL_WARP_M)) * PL_WARP_N + (lane % PL_LANES_N) * 4};
}

// The lane's 8 A values and 8 B values of step k: four float4 shared loads.
__device__ __forceinline__ void load_fragments(const float* as, const float* bs, int k, LaneTile lt,
                                               float (&frag_a)[8], float (&frag_b)[8]) {
    const float4 m_lo = *reinterpret_cast<const float4*>(&as[k * PL_A_LD + lt.m0]);
    const float4 m_hi = *reinterpret_cast<const float4*>(&as[k * PL_A_LD + lt.m0 + 16]);
    const float4 n_lo = *reinterpret_cast<const float4*>(&bs[k * PL_BN + lt.n0]);
    const float4 n_hi = *reinterpret_cast<const float4*>(&bs[k * PL_BN + lt.n0 + 32]);
    frag_a[0] = m_lo.x, frag_a[1] = m_lo.y, frag_a[2] = m_lo.z, frag_a[3] = m_lo.w;
    frag_a[4] = m_hi.x, frag_a[5] = m_hi.y, frag_a[6] = m_hi.z, frag_a[7] = m_hi.w;
    frag_b[0] = n_lo.x, frag_b[1] = n_lo.y, frag_b[2] = n_lo.z, frag_b[3] = n_lo.w;
    frag_b[4] = n_hi.x, frag_b[5] = n_hi.y, frag_b[6] = n_hi.z, frag_b[7] = n_hi.w;
}

__device__ __forceinline__ void outer_product(float (&acc)[8][8], const float (&frag_a)[8], const float (&frag_b)[8]) {
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] += frag_a[i] * frag_b[j];
}

template <bool VEC>
__device__ __forceinline__ void store_c(float* __restrict__ c_ptr, int M, int N, int row0, int col0, LaneTile lt,
                                        const float (&acc)[8][8]) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int row = row0 + lt.m0 + (i < 4 ? i : 16 + i - 4);
#pragma unroll
        for (int j = 0; j < 8; j += 4) {
            const int col = col0 + lt.n0 + (j < 4 ? j : 32 + j - 4);
            store_row4<VEC>(c_ptr, M, N, row, col,
                               make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]));
        }
    }
}

// ---- 8. double_buffer: warptile with double-buffered register fragments ----------------------------------------
// Shared tiles are double-buffered as in warptile (the next tile's global loads are issued at the top of a tile,
// land in registers, and go to the other buffer at the last step: one barrier a tile); the fragments now are too.
// Step k of a tile: issue the shared loads of step k + 1 into the other fragment registers, then step k's FMAs.
// At step 7 the step after is the next tile's step 0: store the prefetched tile, barrier, load its first
// fragments, then step 7's FMAs. The buffer written at step 7 of tile t was last read at step 6 of tile t - 1,
// before that tile's barrier.
template <bool VEC>
__device__ __forceinline__ void double_buffer_body(const float* __restrict__ a_ptr, const float* __restrict__ b_ptr,
                                                   float* __restrict__ c_ptr, int M, int N, int K) {
    __shared__ __align__(16) float a_tile[2][PL_BK * PL_A_LD];  // [buffer][k][m]: transposed, padded
    __shared__ __align__(16) float b_tile[2][PL_BK * PL_BN];    // [buffer][k][n]
    const int tid = threadIdx.x;
    const int row0 = blockIdx.y * PL_BM, col0 = blockIdx.x * PL_BN;
    const LaneTile lt = lane_tile(tid);
    const int a_row = tid / (PL_BK / 4), a_col = (tid % (PL_BK / 4)) * 4;  // one float4 of the 128 x 8 A tile
    const int b_row = tid / (PL_BN / 4), b_col = (tid % (PL_BN / 4)) * 4;  // one float4 of the 8 x 128 B tile

    float acc[8][8] = {{0.0f}};
    float frag_a[2][8], frag_b[2][8];
    float4 a_next = load_row4<VEC>(a_ptr, M, K, row0 + a_row, a_col);
    float4 b_next = load_row4<VEC>(b_ptr, K, N, b_row, col0 + b_col);
    a_tile[0][(a_col + 0) * PL_A_LD + a_row] = a_next.x;
    a_tile[0][(a_col + 1) * PL_A_LD + a_row] = a_next.y;
    a_tile[0][(a_col + 2) * PL_A_LD + a_row] = a_next.z;
    a_tile[0][(a_col + 3) * PL_A_LD + a_row] = a_next.w;
    *reinterpret_cast<float4*>(&b_tile[0][b_row * PL_BN + b_col]) = b_next;
    __syncthreads();
    load_fragments(a_tile[0], b_tile[0], 0, lt, frag_a[0], frag_b[0]);

    const int tiles = CEIL_DIV(K, PL_BK);
    for (int t = 0; t < tiles; ++t) {
        const int buf = t & 1;
        const bool more = t + 1 < tiles;  // the same in every thread: the barrier below is reached by all or none
        if (more) {  // issued now, stored at step 7
            const int k0 = (t + 1) * PL_BK;
            a_next = load_row4<VEC>(a_ptr, M, K, row0 + a_row, k0 + a_col);
            b_next = load_row4<VEC>(b_ptr, K, N, k0 + b_row, col0 + b_col);
        }
#pragma unroll
        for (int k = 0; k < PL_BK; ++k) {
            if (k + 1 < PL_BK) {
                load_fragments(a_tile[buf], b_tile[buf], k + 1, lt, frag_a[(k + 1) & 1], frag_b[(k + 1) & 1]);
            } else if (more) {
                float* as = a_tile[buf ^ 1];
                as[(a_col + 0) * PL_A_LD + a_row] = a_next.x;
                as[(a_col + 1) * PL_A_LD + a_row] = a_next.y;
                as[(a_col + 2) * PL_A_LD + a_row] = a_next.z;
                as[(a_col + 3) * PL_A_LD + a_row] = a_next.w;
                *reinterpret_cast<float4*>(&b_tile[buf ^ 1][b_row * PL_BN + b_col]) = b_next;
                __syncthreads();
                load_fragments(a_tile[buf ^ 1], b_tile[buf ^ 1], 0, lt, frag_a[0], frag_b[0]);
            }
            outer_product(acc, frag_a[k & 1], frag_b[k & 1]);
        }
    }
    store_c<VEC>(c_ptr, M, N, row0, col0, lt, acc);
}

extern "C" __global__ void __launch_bounds__(PL_THREADS, 2) matmul_double_buffer_kernel(
        const float* __restrict__ a_ptr, const float* __restrict__ b_ptr, float* __restrict__ c_ptr,
        int M, int N, int K) {
    double_buffer_body<true>(a_ptr, b_ptr, c_ptr, M, N, K);
}

// The same with scalar global accesses: K or N not a multiple of 4, or a pointer off a 16-byte boundary.
extern "C" __global__ void __launch_bounds__(PL_THREADS, 2) matmul_double_buffer_unaligned_kernel(
        const float* __restrict__ a_ptr, const float* __restrict__ b_ptr, float* __restrict__ c_ptr,
        int M, int N, int K) {
    double_buffer_body<false>(a_ptr, b_ptr, c_ptr, M, N, K);
}

// ---- 9. cp_async: global -> shared copies that skip the registers, PL_STAGES tiles in flight ----------------------
// cp.async (sm_80+) copies global memory straight into shared memory: no registers hold the next tile and no
// thread waits on a global load before it can store, so PL_STAGES - 1 tiles load while one is computed. B moves in
// 16-byte copies, A in 4-byte copies, each to its transposed place; the edges' copies read nothing (cp_async.cuh).
#include "cp_async.cuh"  // copy4_async, copy16_async, commit_copies, wait_copies

// The oldest pending tile has landed: at most PL_STAGES - 2 committed groups still copying.
__device__ __forceinline__ void wait_oldest_tile() { wait_copies<PL_STAGES - 2>(); }

// One thread's share of a tile's copies: 4 floats of a row of the 128 x 8 A tile (to their transposed places) and
// 4 of a row of the 8 x 128 B tile. Sources are set once, at k = 0; a tile at k0 adds k0 columns of A, k0 rows
// of B. A source past an edge is replaced by the matrix's base pointer: never read (source size 0), but valid.
struct TileCopy {
    const float* a_src;  // A[row0 + a_row][a_col] (row 0 when that row is past M)
    const float* b_src;  // B[b_row][col0 + b_col]
    int a_dst, b_dst;    // offsets in a stage's A and B tiles
    int a_k, b_k;        // k of the first A float, and of the B row, in the tile at k = 0
    bool a_row_inside;   // row0 + a_row < M
    int b_n;             // column of the first B float
};

__device__ __forceinline__ TileCopy tile_copy(const float* __restrict__ a_ptr, const float* __restrict__ b_ptr,
                                              int M, int N, int K, int row0, int col0, int tid) {
    const int a_row = tid / (PL_BK / 4), a_col = (tid % (PL_BK / 4)) * 4;
    const int b_row = tid / (PL_BN / 4), b_col = (tid % (PL_BN / 4)) * 4;
    const bool a_row_inside = row0 + a_row < M;
    return {a_ptr + (size_t)(a_row_inside ? row0 + a_row : 0) * K + a_col,
            b_ptr + (size_t)b_row * N + col0 + b_col,
            a_col * PL_A_LD + a_row, b_row * PL_BN + b_col, a_col, b_row, a_row_inside, col0 + b_col};
}

// Start copying the tile at k0 into as (A, transposed) and bs (B).
template <bool VEC>
__device__ __forceinline__ void copy_tile_async(float* as, float* bs, const TileCopy& tc,
                                                const float* __restrict__ a_ptr, const float* __restrict__ b_ptr,
                                                int N, int K, int k0) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const bool inside = tc.a_row_inside && k0 + tc.a_k + j < K;
        copy4_async(&as[tc.a_dst + j * PL_A_LD], inside ? tc.a_src + k0 + j : a_ptr, inside);
    }
    const bool row_inside = k0 + tc.b_k < K;
    const float* b_row = tc.b_src + (size_t)k0 * N;
    if (VEC) {
        const bool inside = row_inside && tc.b_n < N;
        copy16_async(&bs[tc.b_dst], inside ? b_row : b_ptr, inside);
    } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const bool inside = row_inside && tc.b_n + j < N;
            copy4_async(&bs[tc.b_dst + j], inside ? b_row + j : b_ptr, inside);
        }
    }
}

// Tile t lives in stage t % PL_STAGES. Copy groups are committed one per tile (empty past the last tile), so
// "tile t + 1 has landed" is always "at most PL_STAGES - 2 groups pending". At the top of tile t the copy of tile
// t + PL_STAGES - 1 starts into the stage tile t - 1 used, whose last read (step 6 of tile t - 1) came before
// tile t - 1's barrier. Fragments are double-buffered in registers as in double_buffer.
template <bool VEC>
__device__ __forceinline__ void cp_async_body(const float* __restrict__ a_ptr, const float* __restrict__ b_ptr,
                                              float* __restrict__ c_ptr, int M, int N, int K) {
    __shared__ __align__(16) float a_tile[PL_STAGES][PL_BK * PL_A_LD];  // [stage][k][m]: transposed, padded
    __shared__ __align__(16) float b_tile[PL_STAGES][PL_BK * PL_BN];    // [stage][k][n]
    const int row0 = blockIdx.y * PL_BM, col0 = blockIdx.x * PL_BN;
    const LaneTile lt = lane_tile(threadIdx.x);
    const TileCopy tc = tile_copy(a_ptr, b_ptr, M, N, K, row0, col0, threadIdx.x);
    const int tiles = CEIL_DIV(K, PL_BK);

#pragma unroll
    for (int s = 0; s < PL_STAGES - 1; ++s) {
        if (s < tiles) copy_tile_async<VEC>(a_tile[s], b_tile[s], tc, a_ptr, b_ptr, N, K, s * PL_BK);
        commit_copies();
    }
    float acc[8][8] = {{0.0f}};
    float frag_a[2][8], frag_b[2][8];
    if (tiles > 0) {
        wait_oldest_tile();
        __syncthreads();
        load_fragments(a_tile[0], b_tile[0], 0, lt, frag_a[0], frag_b[0]);
    }
    int stage = 0, ahead_stage = PL_STAGES - 1;  // t % PL_STAGES and (t + PL_STAGES - 1) % PL_STAGES
    for (int t = 0; t < tiles; ++t) {
        const int ahead = t + PL_STAGES - 1;
        if (ahead < tiles) {
            copy_tile_async<VEC>(a_tile[ahead_stage], b_tile[ahead_stage], tc, a_ptr, b_ptr, N, K, ahead * PL_BK);
        }
        commit_copies();
        const int next_stage = stage + 1 == PL_STAGES ? 0 : stage + 1;
#pragma unroll
        for (int k = 0; k < PL_BK; ++k) {
            if (k + 1 < PL_BK) {
                load_fragments(a_tile[stage], b_tile[stage], k + 1, lt, frag_a[(k + 1) & 1], frag_b[(k + 1) & 1]);
            } else if (t + 1 < tiles) {  // the same in every thread: all reach the barrier or none
                wait_oldest_tile();
                __syncthreads();
                load_fragments(a_tile[next_stage], b_tile[next_stage], 0, lt, frag_a[0], frag_b[0]);
            }
            outer_product(acc, frag_a[k & 1], frag_b[k & 1]);
        }
        stage = next_stage;
        ahead_stage = ahead_stage + 1 == PL_STAGES ? 0 : ahead_stage + 1;
    }
    store_c<VEC>(c_ptr, M, N, row0, col0, lt, acc);
}

extern "C" __global__ void __launch_bounds__(PL_THREADS, 2) matmul_cp_async_kernel(
        const float* __restrict__ a_ptr, const float* __restrict__ b_ptr, float* __restrict__ c_ptr,
        int M, int N, int K) {
    cp_async_body<true>(a_ptr, b_ptr, c_ptr, M, N, K);
}

// 4-byte copies of B too: N not a multiple of 4, or a pointer off a 16-byte boundary; C stored a float at a time.
extern "C" __global__ void __launch_bounds__(PL_THREADS, 2) matmul_cp_async_unaligned_kernel(
        const float* __restrict__ a_ptr, const float* __restrict__ b_ptr, float* __restrict__ c_ptr,
        int M, int N, int K) {
    cp_async_body<false>(a_ptr, b_ptr, c_ptr, M, N, K);
}
