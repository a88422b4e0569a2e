// square through torch.utils.cpp_extension.load_inline: y = x * x, float32, any shape.
//
// The matching cpp_sources declaration (load_inline binds the functions it declares to Python):
//     torch::Tensor square_vec4(torch::Tensor x);
//
// Memory traffic: read 4N bytes, write 4N bytes; N multiplications. Nothing to reuse, so the kernel is bound by
// DRAM bandwidth; float4 accesses move 16 bytes per instruction, a quarter of the load/store instructions of the
// scalar loop. They need x and y on 16-byte boundaries: y is fresh from torch's allocator (aligned), but x may be
// a view that starts anywhere (x[1:]), and then no index is aligned in both, so such an x takes the scalar loop.

#include <torch/types.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <cstdint>

constexpr int BLOCK_SIZE = 256;
// One thread per float4 (the loop below still covers any grid): on an H100 this reached 100.6% of the copy
// ceiling at 2^28 floats, where one resident wave of blocks that loops reached 93-95%.
constexpr int64_t MAX_BLOCKS = 2147483647;  // the grid's x limit

// Grid-stride: the first n_vec4 groups of 4 elements as float4, then elements [4 * n_vec4, n) one at a time.
__global__ void square_vec4_kernel(const float* __restrict__ x_ptr, float* __restrict__ y_ptr, int64_t n,
                                   int64_t n_vec4) {
    const int64_t start = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t stride = int64_t(gridDim.x) * blockDim.x;
    const float4* x4 = reinterpret_cast<const float4*>(x_ptr);
    float4* y4 = reinterpret_cast<float4*>(y_ptr);
    for (int64_t i = start; i < n_vec4; i += stride) {
        float4 v = x4[i];
        y4[i] = make_float4(v.x * v.x, v.y * v.y, v.z * v.z, v.w * v.w);
    }
    for (int64_t i = 4 * n_vec4 + start; i < n; i += stride) {  // the tail: n % 4 elements, or all if misaligned
        y_ptr[i] = x_ptr[i] * x_ptr[i];
    }
}

static bool aligned_16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// Check x, allocate y, launch on torch's current stream. x: contiguous float32 CUDA tensor, any shape.
torch::Tensor square_vec4(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "square_vec4: x must be a CUDA tensor, got one on ", x.device());
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "square_vec4: x must be float32, got ", x.scalar_type());
    TORCH_CHECK(x.is_contiguous(), "square_vec4: x must be contiguous (call .contiguous() first)");
    const c10::cuda::CUDAGuard guard(x.device());  // launch on x's GPU, whichever is current
    torch::Tensor y = torch::empty_like(x);
    const int64_t n = x.numel();
    if (n == 0) {
        return y;  // a launch with zero blocks is an error
    }
    const float* x_ptr = x.data_ptr<float>();
    float* y_ptr = y.data_ptr<float>();
    const int64_t n_vec4 = aligned_16(x_ptr) && aligned_16(y_ptr) ? n / 4 : 0;
    const int64_t work = n_vec4 > 0 ? n_vec4 : n;  // threads wanted for the longer of the two loops
    const int64_t blocks = std::min<int64_t>((work + BLOCK_SIZE - 1) / BLOCK_SIZE, MAX_BLOCKS);
    const dim3 grid(static_cast<unsigned int>(blocks));
    square_vec4_kernel<<<grid, BLOCK_SIZE, 0, at::cuda::getCurrentCUDAStream()>>>(x_ptr, y_ptr, n, n_vec4);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
