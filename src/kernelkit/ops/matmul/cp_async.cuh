// cp.async (sm_80+) for the SGEMM ladder's pipelined rungs (cuda_pipelined.cu and cuda_tuned.cu include it):
// global -> shared copies that skip the registers. A copy's source size of 0 fills its destination with zeros,
// so the edges' loads read nothing. 4-byte copies go through L1 (cp.async.ca: A, each float to its transposed
// place); 16-byte copies through L2 only (cp.async.cg: B, read once a block). tests/blockkit.py swaps these
// functions for its CPU emulator's, by name.

#pragma once

__device__ __forceinline__ unsigned shared_address(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void copy4_async(float* dst, const float* src, bool inside) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n"
                 :: "r"(shared_address(dst)), "l"(src), "r"(inside ? 4 : 0) : "memory");
}

__device__ __forceinline__ void copy16_async(float* dst, const float* src, bool inside) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(shared_address(dst)), "l"(src), "r"(inside ? 16 : 0) : "memory");
}

__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Wait until at most PENDING committed groups are still copying.
template <int PENDING>
__device__ __forceinline__ void wait_copies() {
    asm volatile("cp.async.wait_group %0;\n" :: "n"(PENDING) : "memory");
}
