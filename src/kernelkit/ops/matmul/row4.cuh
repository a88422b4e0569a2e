// Four consecutive floats of a row of a row-major fp32 matrix, for the vectorized rungs of the SGEMM ladder
// (cuda.cu and cuda_pipelined.cu include it).
// VEC (the aligned path): one 16-byte access. The host takes it only when the row length is a multiple of 4 and
// the base pointers are 16-byte aligned, so a group of four starting at a multiple of 4 is wholly inside the
// matrix or wholly past its edge. Otherwise (781 columns): four scalar accesses, each checked.

#pragma once

// Row r, columns c..c+3 of a rows x cols row-major matrix; zeros past the edges.
template <bool VEC>
__device__ __forceinline__ float4 load_row4(const float* __restrict__ p, int rows, int cols, int r, int c) {
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r >= rows) return v;
    const float* q = p + (size_t)r * cols + c;
    if (VEC) {
        if (c < cols) v = *reinterpret_cast<const float4*>(q);
    } else {
        if (c < cols) v.x = q[0];
        if (c + 1 < cols) v.y = q[1];
        if (c + 2 < cols) v.z = q[2];
        if (c + 3 < cols) v.w = q[3];
    }
    return v;
}

template <bool VEC>
__device__ __forceinline__ void store_row4(float* __restrict__ p, int rows, int cols, int r, int c, float4 v) {
    if (r >= rows) return;
    float* q = p + (size_t)r * cols + c;
    if (VEC) {
        if (c < cols) *reinterpret_cast<float4*>(q) = v;
    } else {
        if (c < cols) q[0] = v.x;
        if (c + 1 < cols) q[1] = v.y;
        if (c + 2 < cols) q[2] = v.z;
        if (c + 3 < cols) q[3] = v.w;
    }
}
