// gelu and its gradient, elementwise: the tanh approximation and the exact (erf) form.
//
//   gelu(x)     = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)     (tanh approximation)
//   gelu_erf(x) = 0.5 x (1 + erf(x / sqrt 2)) = x Phi(x)                        (exact)
//   backward: dx = dy * gelu'(x)

#include <cuda_fp16.h>
#include <cuda_bf16.h>

// ---- cuda_double: the learner's first version ------------------------------------------------------------
// One thread per element, the formula typed in as written, in double precision. Correct, but every operation
// runs on the FP64 units (1/2 of the FP32 rate on an H100, 1/64 on consumer GPUs) and tanh in double is a long
// polynomial: the lesson is that fp32 inputs want fp32 math.
extern "C" __global__ void gelu_double_kernel(const float* x, float* y, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        double v = x[i];
        y[i] = (float)(0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))));
    }
}

// ---- the math, in fp32 for every storage dtype ----------------------------------------------------------
// 16-bit inputs are widened to fp32, computed, and rounded once to the output dtype, as PyTorch does.

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;  // 1 / sqrt(2 pi): the normal pdf at 0

// 0.5 (1 + tanh(u)) = sigmoid(2u) and 0.5 (1 - tanh(u)) = sigmoid(-2u), from one exp of -2|u| <= 0. The exp never
// overflows (no inf / inf), and the smaller of the two is e * p, not 1 - p, so it keeps its relative precision
// deep in the tails. __expf (ex2.approx) errs by 2 + 1.2 |2u| ulp; |2u| is large only where e is negligible
// next to 1 or multiplies a tiny result, so fp32 outputs stay within a few ulp. 1 + e lies in [1, 2], inside the
// range where the fast reciprocal of __fdividef is accurate to 2 ulp.
struct SigmoidPair {
    float plus;   // sigmoid(2u)
    float minus;  // sigmoid(-2u)
};

__device__ __forceinline__ SigmoidPair tanh_halves(float u) {
    const float e = __expf(-2.0f * fabsf(u));
    const float p = __fdividef(1.0f, 1.0f + e);
    const float q = e * p;
    return u >= 0.0f ? SigmoidPair{p, q} : SigmoidPair{q, p};  // NaN u: both NaN
}

// u = sqrt(2/pi) x (1 + 0.044715 x^2); for |x| past ~1e19, x^2 is inf and so is u, which the exp above takes.
__device__ __forceinline__ float tanh_arg(float x) { return kSqrt2OverPi * x * fmaf(kCubic, x * x, 1.0f); }

struct GeluTanh {  // x sigmoid(2u): ~11 flops, one exp
    __device__ __forceinline__ float operator()(float x) const { return x * tanh_halves(tanh_arg(x)).plus; }
};

// gelu'(x) = s + 2 x s (1 - s) du/dx with s = sigmoid(2u), du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2).
// Written as k0 (w + 3 k1 (w x) x) with w = 2 s (1 - s) x, so that where s (1 - s) underflows to 0 (|x| > ~10)
// the term is 0 * x * x = 0, never 0 * inf when x^2 overflows.
struct GeluTanhGrad {  // ~18 flops, one exp
    __device__ __forceinline__ float operator()(float x) const {
        const SigmoidPair s = tanh_halves(tanh_arg(x));
        const float w = 2.0f * s.plus * s.minus * x;
        return s.plus + kSqrt2OverPi * fmaf(3.0f * kCubic, w * x * x, w);
    }
};

// erff is accurate to 2 ulp. 1 + erf(x / sqrt 2) cancels for x < -3 (as in PyTorch's kernel): the absolute
// error stays ~1e-7 |x|, far inside the fp32 tolerance floor.
struct GeluErf {  // x * 0.5 (1 + erf(x / sqrt 2)): ~5 flops, one erf
    __device__ __forceinline__ float operator()(float x) const { return 0.5f * x * (1.0f + erff(x * kInvSqrt2)); }
};

// gelu_erf'(x) = Phi(x) + x phi(x). For |x| past ~14 the pdf underflows to 0 (or x^2 overflows, exp(-inf) = 0),
// and x * 0 = 0. __expf's error (2 + 1.2 x^2 / 2 ulp) matters only where the pdf is already negligible.
struct GeluErfGrad {  // ~10 flops, one erf, one exp
    __device__ __forceinline__ float operator()(float x) const {
        const float cdf = 0.5f * (1.0f + erff(x * kInvSqrt2));
        const float pdf = kInvSqrt2Pi * __expf(-0.5f * x * x);
        return fmaf(x, pdf, cdf);
    }
};

// ---- storage dtypes: to and from fp32 -------------------------------------------------------------------
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

// ---- cuda_vec: 16-byte vectors, grid-stride --------------------------------------------------------------
// Each thread loads and stores 16 bytes per access (ld/st.global.v4: 4 floats, or 8 halves / bfloat16s as a
// uint4), so a warp moves 512 contiguous bytes per instruction. Memory traffic: forward reads N elements and
// writes N; backward reads 2N (x, dy) and writes N. The host launches one full wave of 256-thread blocks
// (8 per SM: __launch_bounds__ holds each kernel to the 32 registers that takes) and every thread strides.
// kUnroll vectors per input are loaded before any is used, so a thread keeps 16 * kUnroll bytes per input in
// flight: an H100 needs ~20 KB in flight per SM to cover DRAM latency at 3 TB/s, and 2048 threads x 32 B
// gives 64 KB. Offsets are 64-bit: tensors past 2^31 elements are indexed correctly.
// torch allocations are 256-byte aligned, but a view (x[1:]) may start anywhere, and a vector load from a
// misaligned address faults: such data takes the scalar loop, one element per step (same test in every
// thread: no divergence). That loop also does the tail, numel % elements per vector.

constexpr int kBlock = 256;        // threads per block; gelu.py launches this many
constexpr int kMinBlocksPerSm = 8;  // 8 x 256 = 2048 threads, the H100's limit per SM
constexpr int kUnrollUnary = 2;     // forward: 2 x 16 B of x in flight per thread
constexpr int kUnrollBinary = 1;    // backward: 16 B of x and 16 B of dy in flight per thread

__device__ __forceinline__ bool aligned16(const void* a, const void* b, const void* c) {
    return (((unsigned long long)a | (unsigned long long)b | (unsigned long long)c) & 15) == 0;
}

// y = f(x) elementwise.
template <typename T, int kUnroll, typename F>
__device__ __forceinline__ void map_unary(const T* __restrict__ x, T* __restrict__ y, long long n, F f) {
    constexpr int kPerVector = 16 / sizeof(T);
    const long long start = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long n_vectors = aligned16(x, y, y) ? n / kPerVector : 0;
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    uint4* yv = reinterpret_cast<uint4*>(y);
    for (long long base = start; base < n_vectors; base += kUnroll * stride) {
        uint4 v[kUnroll];
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) {
            if (base + k * stride < n_vectors) v[k] = xv[base + k * stride];
        }
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) {
            if (base + k * stride >= n_vectors) continue;
            T* e = reinterpret_cast<T*>(&v[k]);  // stays in registers
#pragma unroll
            for (int j = 0; j < kPerVector; ++j) e[j] = from_float<T>(f(to_float(e[j])));
            yv[base + k * stride] = v[k];
        }
    }
    for (long long i = n_vectors * kPerVector + start; i < n; i += stride) y[i] = from_float<T>(f(to_float(x[i])));
}

// dx = dy * g(x) elementwise: the fused backward, one pass over x and dy.
template <typename T, int kUnroll, typename G>
__device__ __forceinline__ void map_grad(const T* __restrict__ x, const T* __restrict__ dy, T* __restrict__ dx,
                                         long long n, G g) {
    constexpr int kPerVector = 16 / sizeof(T);
    const long long start = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long n_vectors = aligned16(x, dy, dx) ? n / kPerVector : 0;
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    const uint4* dyv = reinterpret_cast<const uint4*>(dy);
    uint4* dxv = reinterpret_cast<uint4*>(dx);
    for (long long base = start; base < n_vectors; base += kUnroll * stride) {
        uint4 a[kUnroll], b[kUnroll];
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) {
            if (base + k * stride < n_vectors) {
                a[k] = xv[base + k * stride];
                b[k] = dyv[base + k * stride];
            }
        }
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) {
            if (base + k * stride >= n_vectors) continue;
            const T* xe = reinterpret_cast<const T*>(&a[k]);
            T* de = reinterpret_cast<T*>(&b[k]);  // dy in, dx out, in the same registers
#pragma unroll
            for (int j = 0; j < kPerVector; ++j) de[j] = from_float<T>(to_float(de[j]) * g(to_float(xe[j])));
            dxv[base + k * stride] = b[k];
        }
    }
    for (long long i = n_vectors * kPerVector + start; i < n; i += stride) {
        dx[i] = from_float<T>(to_float(dy[i]) * g(to_float(x[i])));
    }
}

// One extern "C" kernel per op and dtype (gelu.py picks by x.dtype). __launch_bounds__: at most 256 threads per
// block, and 8 blocks resident per SM, which caps each kernel at 32 registers so the host's one-wave grid is right.

extern "C" __global__ void __launch_bounds__(kBlock, kMinBlocksPerSm)
gelu_vec_f32_kernel(const float* __restrict__ x, float* __restrict__ y, long long n) {
    map_unary<float, kUnrollUnary>(x, y, n, GeluTanh{});
}

extern "C" __global__ void __launch_bounds__(kBlock, kMinBlocksPerSm)
gelu_vec_f16_kernel(const __half* __restrict__ x, __half* __restrict__ y, long long n) {
    map_unary<__half, kUnrollUnary>(x, y, n, GeluTanh{});
}

extern "C" __global__ void __launch_bounds__(kBlock, kMinBlocksPerSm)
gelu_vec_bf16_kernel(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ y, long long n) {
    map_unary<__nv_bfloat16, kUnrollUnary>(x, y, n, GeluTanh{});
}

extern "C" __global__ void __launch_bounds__(kBlock, kMinBlocksPerSm)
gelu_erf_vec_f32_kernel(const float* __restrict__ x, float* __restrict__ y, long long n) {
    map_unary<float, kUnrollUnary>(x, y, n, GeluErf{});
}

extern "C" __global__ void __launch_bounds__(kBlock, kMinBlocksPerSm)
gelu_erf_vec_f16_kernel(const __half* __restrict__ x, __half* __restrict__ y, long long n) {
    map_unary<__half, kUnrollUnary>(x, y, n, GeluErf{});
}

extern "C" __global__ void __launch_bounds__(kBlock, kMinBlocksPerSm)
gelu_erf_vec_bf16_kernel(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ y, long long n) {
    map_unary<__nv_bfloat16, kUnrollUnary>(x, y, n, GeluErf{});
}

extern "C" __global__ void __launch_bounds__(kBlock, kMinBlocksPerSm)
gelu_backward_vec_f32_kernel(const float* __restrict__ x, const float* __restrict__ dy,
                             float* __restrict__ dx, long long n) {
    map_grad<float, kUnrollBinary>(x, dy, dx, n, GeluTanhGrad{});
}

extern "C" __global__ void __launch_bounds__(kBlock, kMinBlocksPerSm)
gelu_backward_vec_f16_kernel(const __half* __restrict__ x, const __half* __restrict__ dy,
                             __half* __restrict__ dx, long long n) {
    map_grad<__half, kUnrollBinary>(x, dy, dx, n, GeluTanhGrad{});
}

extern "C" __global__ void __launch_bounds__(kBlock, kMinBlocksPerSm)
gelu_backward_vec_bf16_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ dy,
                              __nv_bfloat16* __restrict__ dx, long long n) {
    map_grad<__nv_bfloat16, kUnrollBinary>(x, dy, dx, n, GeluTanhGrad{});
}

extern "C" __global__ void __launch_bounds__(kBlock, kMinBlocksPerSm)
gelu_erf_backward_vec_f32_kernel(const float* __restrict__ x, const float* __restrict__ dy,
                                 float* __restrict__ dx, long long n) {
    map_grad<float, kUnrollBinary>(x, dy, dx, n, GeluErfGrad{});
}

extern "C" __global__ void __launch_bounds__(kBlock, kMinBlocksPerSm)
gelu_erf_backward_vec_f16_kernel(const __half* __restrict__ x, const __half* __restrict__ dy,
                                 __half* __restrict__ dx, long long n) {
    map_grad<__half, kUnrollBinary>(x, dy, dx, n, GeluErfGrad{});
}

extern "C" __global__ void __launch_bounds__(kBlock, kMinBlocksPerSm)
gelu_erf_backward_vec_bf16_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ dy,
                                  __nv_bfloat16* __restrict__ dx, long long n) {
    map_grad<__nv_bfloat16, kUnrollBinary>(x, dy, dx, n, GeluErfGrad{});
}
