// fp32 C (M x N) = A (M x K) @ B (K x N), all row-major and contiguous: the SGEMM ladder's rung past cp_async
// (cuda_pipelined.cu), its tiling set by the TUNED_* macros below so that scripts/gpu-matmul-tune can build
// variants with -D options. The defaults are what the cuda_warp64 impl launches.
//
// What changes from cp_async (defaults): each lane computes 8 x 16 results instead of 8 x 8, so a warp's tile is
// 64 x 64 and a 128 x 128 block tile takes 4 warps (128 threads) instead of 8. A lane's k-step is then 6 float4
// shared loads for 128 FMAs (cp_async: 4 for 64), and a barrier waits for 4 warps. BK = 16: half the barriers
// and copy batches of BK = 8 for the same FMAs; two shared stages (the copies of tile t + 1 run during tile t,
// one barrier a tile). The copies of a tile wholly inside A and B skip the edge masks. Blocks take their tiles
// in groups of GROUP_M tile rows, column after column, so the blocks running at once share A and B panels in L2.
//
// The tiling: WARPS_M x WARPS_N warps of WM x WN; a warp's lanes a LANES_M x LANES_N grid, each lane TM x TN
// results as (TM / 4) x (TN / 4) pieces of 4 x 4, LANES_M * 4 rows and LANES_N * 4 columns apart. A lane's
// shared loads for one k are TM / 4 float4 of A (the same for the lanes of a grid row) and TN / 4 of B
// (consecutive float4 across a grid row): no bank conflicts. A sits in shared memory transposed, a_tile[k][m],
// its rows padded by 4 floats: a warp's 4-byte copies fill 16 consecutive m of two k-groups, rows 4 (BM + 4)
// floats apart, which is 16 banks over, so those transposing writes do not conflict either. B: 16-byte copies.
//
// Every kernel is correct for any M, N, K >= 0: a copy past an edge fills zeros (adding 0 * x changes no sum), a
// store past an edge is skipped. Offsets are 64-bit where a row index is multiplied by a row length.
// Launch: TUNED_THREADS threads, grid (cdiv(N, BN), cdiv(M, BM)). Cost of one call: 2MNK flops.
//
// Resources at the defaults (nvcc 13.0, sm_90; 2 blocks of 128 threads an SM leave up to 255 registers a
// thread; smem is the static tiles, sm_90 reserves 1 KB more a block):
//   matmul_warp64_kernel            233 registers, 33280 bytes smem, no spills
//   matmul_warp64_unaligned_kernel  233 registers, 33280 bytes smem, no spills
// Two blocks an SM: 2 x 128 x 240 (allocated in 8s) of the 64K registers; 2 x 33.5 KB of the 228 KB of smem.
// tests/test_ops_matmul_tuned.py builds the defaults and every variant of gpu-matmul-tune so, and checks.

#ifndef TUNED_BM
#define TUNED_BM 128  // block tile: BM x BN results, BK of K a shared stage
#endif
#ifndef TUNED_BN
#define TUNED_BN 128
#endif
#ifndef TUNED_BK
#define TUNED_BK 16
#endif
#ifndef TUNED_WM
#define TUNED_WM 64  // warp tile
#endif
#ifndef TUNED_WN
#define TUNED_WN 64
#endif
#ifndef TUNED_LANES_N
#define TUNED_LANES_N 4  // a warp's lanes: 32 / LANES_N rows x LANES_N columns of lanes
#endif
#ifndef TUNED_STAGES
#define TUNED_STAGES 2  // shared stages: STAGES - 1 tiles copying while one is read
#endif
#ifndef TUNED_MIN_BLOCKS
#define TUNED_MIN_BLOCKS 2  // __launch_bounds__: blocks an SM the register allocation must allow
#endif
#ifndef TUNED_GROUP_M
#define TUNED_GROUP_M 8  // tile rows a group of blocks walks down before the next column (1: no swizzle)
#endif

#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))
#define TUNED_LANES_M (32 / TUNED_LANES_N)
#define TUNED_TM (TUNED_WM / TUNED_LANES_M)  // a lane's results: TM rows x TN columns
#define TUNED_TN (TUNED_WN / TUNED_LANES_N)
#define TUNED_WARPS_M (TUNED_BM / TUNED_WM)
#define TUNED_THREADS (TUNED_WARPS_M * (TUNED_BN / TUNED_WN) * 32)
#define TUNED_A_LD (TUNED_BM + 4)  // padded row of the transposed A tile (float4 loads stay aligned)
#define TUNED_A_COPIES (TUNED_BM * TUNED_BK / 4 / TUNED_THREADS)  // a thread's 4-float groups of an A tile
#define TUNED_B_COPIES (TUNED_BK * TUNED_BN / 4 / TUNED_THREADS)  // ... and of a B tile

static_assert(TUNED_TM % 4 == 0 && TUNED_TN % 4 == 0, "a lane's results are 4 x 4 pieces");
static_assert(TUNED_BM % TUNED_WM == 0 && TUNED_BN % TUNED_WN == 0, "warps cover the block tile");
static_assert(32 % TUNED_LANES_N == 0, "the lanes of a warp form a grid");
static_assert(TUNED_BK % 8 == 0 && TUNED_BM % 16 == 0, "A copies: 16 rows x 2 k-groups a warp");
static_assert(TUNED_A_COPIES * TUNED_THREADS * 4 == TUNED_BM * TUNED_BK, "threads share A tiles evenly");
static_assert(TUNED_B_COPIES * TUNED_THREADS * 4 == TUNED_BK * TUNED_BN, "threads share B tiles evenly");
static_assert(TUNED_STAGES >= 2, "one stage copying while one is read");
static_assert(TUNED_STAGES * TUNED_BK * (TUNED_A_LD + TUNED_BN) * 4 <= 48 * 1024, "static shared memory");

#include "row4.cuh"  // store_row4: four floats of a row, none past the edges

// ---- cp.async (sm_80+): global -> shared copies that skip the registers ------------------------------------------
#include "cp_async.cuh"  // copy4_async, copy16_async, commit_copies, wait_copies

// The oldest pending tile has landed: at most TUNED_STAGES - 2 committed groups still copying.
__device__ __forceinline__ void wait_oldest_tile() { wait_copies<TUNED_STAGES - 2>(); }

// ---- the block's tile and a lane's place in it ----------------------------------------------------------------

// The C tile of this block: block (x, y) is number y * tiles_n + x in launch order; consecutive numbers walk down
// GROUP_M tile rows, then move a column right, so the blocks resident at once read few distinct A and B panels.
// A bijection of the grid (the last group may have fewer rows). 64-bit: the grid may hold more than 2^32 blocks.
__device__ __forceinline__ void block_tile(int M, int N, int& tile_m, int& tile_n) {
    if (TUNED_GROUP_M <= 1) {
        tile_m = blockIdx.y, tile_n = blockIdx.x;
        return;
    }
    const long long tiles_m = CEIL_DIV(M, TUNED_BM), tiles_n = CEIL_DIV(N, TUNED_BN);
    const long long block = (long long)blockIdx.y * tiles_n + blockIdx.x;
    const long long group = block / (TUNED_GROUP_M * tiles_n), first_m = group * TUNED_GROUP_M;
    const long long rows = tiles_m - first_m < TUNED_GROUP_M ? tiles_m - first_m : TUNED_GROUP_M;
    const long long in_group = block - group * TUNED_GROUP_M * tiles_n;
    tile_m = (int)(first_m + in_group % rows), tile_n = (int)(in_group / rows);
}

// A lane's results: rows m0 + p * LANES_M * 4 + {0..3}, columns n0 + q * LANES_N * 4 + {0..3} of the block tile.
struct LaneTile {
    int m0, n0;
};

__device__ __forceinline__ LaneTile lane_tile(int tid) {
    const int warp = tid / 32, lane = tid % 32;
    return {(warp % TUNED_WARPS_M) * TUNED_WM + (lane / TUNED_LANES_N) * 4,
            (warp / TUNED_WARPS_M) * TUNED_WN + (lane % TUNED_LANES_N) * 4};
}

// The lane's TM A values and TN B values of step k: (TM + TN) / 4 float4 shared loads.
__device__ __forceinline__ void load_fragments(const float* as, const float* bs, int k, LaneTile lt,
                                               float (&frag_a)[TUNED_TM], float (&frag_b)[TUNED_TN]) {
#pragma unroll
    for (int p = 0; p < TUNED_TM / 4; ++p) {
        const float4 v = *reinterpret_cast<const float4*>(&as[k * TUNED_A_LD + lt.m0 + p * TUNED_LANES_M * 4]);
        frag_a[4 * p] = v.x, frag_a[4 * p + 1] = v.y, frag_a[4 * p + 2] = v.z, frag_a[4 * p + 3] = v.w;
    }
#pragma unroll
    for (int q = 0; q < TUNED_TN / 4; ++q) {
        const float4 v = *reinterpret_cast<const float4*>(&bs[k * TUNED_BN + lt.n0 + q * TUNED_LANES_N * 4]);
        frag_b[4 * q] = v.x, frag_b[4 * q + 1] = v.y, frag_b[4 * q + 2] = v.z, frag_b[4 * q + 3] = v.w;
    }
}

__device__ __forceinline__ void outer_product(float (&acc)[TUNED_TM][TUNED_TN], const float (&frag_a)[TUNED_TM],
                                              const float (&frag_b)[TUNED_TN]) {
#pragma unroll
    for (int i = 0; i < TUNED_TM; ++i)
#pragma unroll
        for (int j = 0; j < TUNED_TN; ++j) acc[i][j] += frag_a[i] * frag_b[j];
}

// ---- copies of one tile -----------------------------------------------------------------------------------------
// A thread's 4-float group c of the A tile: slot s = c * THREADS + tid holds k-group (s % 2) + 2 (s / 2BM) of row
// (s / 2) % BM, so a warp's 32 slots are 16 rows x 2 neighbouring k-groups (one 32-byte sector a row). With BM a
// multiple of THREADS / 2 that is row tid / 2 + A_ROW(c), k tid % 2 * 4 + A_K(c): one base pointer a thread, the
// rest constants. Of B: row tid / (BN / 4) + c * B_ROWS, column tid % (BN / 4) * 4.
#define TUNED_A_ROW(c) (((c) * (TUNED_THREADS / 2)) % TUNED_BM)
#define TUNED_A_K(c) (8 * (((c) * (TUNED_THREADS / 2)) / TUNED_BM))
#define TUNED_B_ROWS (TUNED_THREADS / (TUNED_BN / 4))  // B rows a batch of THREADS copies covers
static_assert(TUNED_BM % (TUNED_THREADS / 2) == 0 && TUNED_THREADS % (TUNED_BN / 4) == 0, "copy slots");

// Where a thread's copies start: A (row0 + tid / 2, tid % 2 * 4), B (tid / (BN / 4), col0 + tid % (BN / 4) * 4),
// and their places in a stage.
struct TileCopy {
    int a_row, a_k, b_row, b_col;  // in the block's tile, at k0 = 0
    int a_dst, b_dst;              // offsets in a stage's A and B tiles
};

__device__ __forceinline__ TileCopy tile_copy(int tid) {
    const int a_row = tid / 2, a_k = tid % 2 * 4;
    const int b_row = tid / (TUNED_BN / 4), b_col = tid % (TUNED_BN / 4) * 4;
    return {a_row, a_k, b_row, b_col, a_k * TUNED_A_LD + a_row, b_row * TUNED_BN + b_col};
}

// Start copying the tile at k0 into as (A, transposed) and bs (B), every copy checked against the edges: the
// tiles of a block on the edge of C, and the last tile along K when K is not a multiple of BK.
template <bool VEC>
__device__ __forceinline__ void copy_edge_tile(float* as, float* bs, const float* __restrict__ a_ptr,
                                               const float* __restrict__ b_ptr, int M, int N, int K, int row0,
                                               int col0, int k0, const TileCopy& tc) {
#pragma unroll
    for (int c = 0; c < TUNED_A_COPIES; ++c) {
        const int row = row0 + tc.a_row + TUNED_A_ROW(c), k = k0 + tc.a_k + TUNED_A_K(c);
        const float* src = a_ptr + (size_t)(row < M ? row : 0) * K + k;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const bool inside = row < M && k + j < K;
            copy4_async(&as[tc.a_dst + (TUNED_A_K(c) + j) * TUNED_A_LD + TUNED_A_ROW(c)], inside ? src + j : a_ptr,
                        inside);
        }
    }
#pragma unroll
    for (int c = 0; c < TUNED_B_COPIES; ++c) {
        const int row = k0 + tc.b_row + c * TUNED_B_ROWS, col = col0 + tc.b_col;
        const float* src = b_ptr + (size_t)(row < K ? row : 0) * N + col;
        float* dst = &bs[tc.b_dst + c * TUNED_B_ROWS * TUNED_BN];
        if (VEC) {  // N % 4 == 0: the four floats are all inside or all past the edge
            const bool inside = row < K && col < N;
            copy16_async(dst, inside ? src : b_ptr, inside);
        } else {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const bool inside = row < K && col + j < N;
                copy4_async(dst + j, inside ? src + j : b_ptr, inside);
            }
        }
    }
}

// The same for a tile wholly inside A and B: no masks. a_src and b_src are the thread's first A and B floats of
// the tile, as and bs its first places in the stage; the other copies sit at constant offsets from those.
template <bool VEC>
__device__ __forceinline__ void copy_inner_tile(float* as, float* bs, const float* a_src, const float* b_src,
                                                int N, int K) {
#pragma unroll
    for (int c = 0; c < TUNED_A_COPIES; ++c) {
        const float* src = a_src + (size_t)TUNED_A_ROW(c) * K + TUNED_A_K(c);
#pragma unroll
        for (int j = 0; j < 4; ++j) copy4_async(&as[(TUNED_A_K(c) + j) * TUNED_A_LD + TUNED_A_ROW(c)], src + j, true);
    }
#pragma unroll
    for (int c = 0; c < TUNED_B_COPIES; ++c) {
        const float* src = b_src + (size_t)c * TUNED_B_ROWS * N;
        if (VEC) {
            copy16_async(&bs[c * TUNED_B_ROWS * TUNED_BN], src, true);
        } else {
#pragma unroll
            for (int j = 0; j < 4; ++j) copy4_async(&bs[c * TUNED_B_ROWS * TUNED_BN + j], src + j, true);
        }
    }
}

// ---- the kernel body --------------------------------------------------------------------------------------------
// Tile t lives in stage t % STAGES. Copy groups are committed one per tile (empty past the last tile), so "tile
// t + 1 has landed" is always "at most STAGES - 2 groups pending". At the top of tile t the copy of tile
// t + STAGES - 1 starts into the stage tile t - 1 used, whose last read (step BK - 2 of tile t - 1) came before
// tile t - 1's barrier. Fragments are double-buffered in registers: step k's FMAs run while step k + 1's shared
// loads are in flight; at a tile's last step the wait, the barrier and the next tile's first loads come first.
template <bool VEC>
__device__ __forceinline__ void copy_tile(float* as, float* bs, const float* __restrict__ a_ptr,
                                          const float* __restrict__ b_ptr, int M, int N, int K, int row0, int col0,
                                          int k0, const TileCopy& tc) {
    if (row0 + TUNED_BM <= M && col0 + TUNED_BN <= N && k0 + TUNED_BK <= K) {  // the same in every thread
        copy_inner_tile<VEC>(as + tc.a_dst, bs + tc.b_dst, a_ptr + (size_t)(row0 + tc.a_row) * K + k0 + tc.a_k,
                             b_ptr + (size_t)(k0 + tc.b_row) * N + col0 + tc.b_col, N, K);
    } else {
        copy_edge_tile<VEC>(as, bs, a_ptr, b_ptr, M, N, K, row0, col0, k0, tc);
    }
}

template <bool VEC>
__device__ __forceinline__ void warp64_body(const float* __restrict__ a_ptr, const float* __restrict__ b_ptr,
                                            float* __restrict__ c_ptr, int M, int N, int K) {
    __shared__ __align__(16) float a_tile[TUNED_STAGES][TUNED_BK * TUNED_A_LD];  // [stage][k][m]: transposed
    __shared__ __align__(16) float b_tile[TUNED_STAGES][TUNED_BK * TUNED_BN];    // [stage][k][n]
    int tile_m, tile_n;
    block_tile(M, N, tile_m, tile_n);
    const int row0 = tile_m * TUNED_BM, col0 = tile_n * TUNED_BN;
    const LaneTile lt = lane_tile(threadIdx.x);
    const TileCopy tc = tile_copy(threadIdx.x);
    const int tiles = CEIL_DIV(K, TUNED_BK);

#pragma unroll
    for (int s = 0; s < TUNED_STAGES - 1; ++s) {
        if (s < tiles) copy_tile<VEC>(a_tile[s], b_tile[s], a_ptr, b_ptr, M, N, K, row0, col0, s * TUNED_BK, tc);
        commit_copies();
    }
    float acc[TUNED_TM][TUNED_TN] = {{0.0f}};
    float frag_a[2][TUNED_TM], frag_b[2][TUNED_TN];
    if (tiles > 0) {
        wait_oldest_tile();
        __syncthreads();
        load_fragments(a_tile[0], b_tile[0], 0, lt, frag_a[0], frag_b[0]);
    }
    int stage = 0, ahead_stage = TUNED_STAGES - 1;  // t % STAGES and (t + STAGES - 1) % STAGES
    for (int t = 0; t < tiles; ++t) {
        const int ahead = t + TUNED_STAGES - 1;
        if (ahead < tiles) {
            copy_tile<VEC>(a_tile[ahead_stage], b_tile[ahead_stage], a_ptr, b_ptr, M, N, K, row0, col0,
                           ahead * TUNED_BK, tc);
        }
        commit_copies();
        const int next_stage = stage + 1 == TUNED_STAGES ? 0 : stage + 1;
#pragma unroll
        for (int k = 0; k < TUNED_BK; ++k) {
            if (k + 1 < TUNED_BK) {
                load_fragments(a_tile[stage], b_tile[stage], k + 1, lt, frag_a[(k + 1) & 1], frag_b[(k + 1) & 1]);
            } else if (t + 1 < tiles) {  // the same in every thread: all reach the barrier or none
                wait_oldest_tile();
                __syncthreads();
                load_fragments(a_tile[next_stage], b_tile[next_stage], 0, lt, frag_a[0], frag_b[0]);
            }
            outer_product(acc, frag_a[k & 1], frag_b[k & 1]);
        }
        stage = next_stage;
        ahead_stage = ahead_stage + 1 == TUNED_STAGES ? 0 : ahead_stage + 1;
    }
#pragma unroll
    for (int i = 0; i < TUNED_TM; ++i) {
        const int row = row0 + lt.m0 + (i / 4) * TUNED_LANES_M * 4 + i % 4;
#pragma unroll
        for (int q = 0; q < TUNED_TN / 4; ++q) {
            const int col = col0 + lt.n0 + q * TUNED_LANES_N * 4;
            store_row4<VEC>(c_ptr, M, N, row, col,
                            make_float4(acc[i][4 * q], acc[i][4 * q + 1], acc[i][4 * q + 2], acc[i][4 * q + 3]));
        }
    }
}

extern "C" __global__ void __launch_bounds__(TUNED_THREADS, TUNED_MIN_BLOCKS) matmul_warp64_kernel(
        const float* __restrict__ a_ptr, const float* __restrict__ b_ptr, float* __restrict__ c_ptr,
        int M, int N, int K) {
    warp64_body<true>(a_ptr, b_ptr, c_ptr, M, N, K);
}

// 4-byte copies of B too: N not a multiple of 4, or a pointer off a 16-byte boundary; C stored a float at a time.
extern "C" __global__ void __launch_bounds__(TUNED_THREADS, TUNED_MIN_BLOCKS) matmul_warp64_unaligned_kernel(
        const float* __restrict__ a_ptr, const float* __restrict__ b_ptr, float* __restrict__ c_ptr,
        int M, int N, int K) {
    warp64_body<false>(a_ptr, b_ptr, c_ptr, M, N, K);
}
