// The activations x of a GEMV (M x K, 8 KB to a few hundred KB) into L2 at the kernel's start, once for the whole
// grid (gemv.cu and gemv_mma.cu include it).
//
// Why: every block reads all of x, but a warp reads its slice of a K step only after the weights of the step before
// have arrived and been multiplied (the load sits behind a branch and the MMAs in the SASS). Every block reaches
// the same slice at about the same time, so in cold mode (L2 flushed before each sample) each step of the K loop
// waited a whole HBM round trip for x, one after another: 4 steps an iteration in gemv_mma, 4 iterations at
// K = 14336. Asked for at the start, x arrives while the first weights do; the later reads hit L2. Hot, x is in
// L2 already and this is one instruction a thread.

#pragma once

// Thread t of the grid asks L2 for the 128-byte lines t, t + (threads in the grid), ... of [p, p + bytes): each
// line once, nothing held in a register, nothing waits for it. Block 0 alone covers x up to 32 KB, so the lines are
// asked for by blocks of the first wave.
__device__ __forceinline__ void prefetch_l2_once(const void* p, long long bytes) {
    const char* base = static_cast<const char*>(p);
    const long long threads = (long long)gridDim.x * blockDim.x;
    for (long long at = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * 128; at < bytes; at += threads * 128) {
        asm volatile("prefetch.global.L2 [%0];" ::"l"(base + at));
    }
}
