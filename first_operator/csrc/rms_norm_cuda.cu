// first_op::rms_norm's kernel for CUDA tensors: one block of threads per row.
// The schema is in rms_norm.cpp; this file adds a kernel for the CUDA key.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cstdint>
#include <limits>

namespace first_op {

constexpr int kThreads = 256;  // threads per block, a power of two

// The block's threads stride over its row and sum their squares in acc_t
// (float, or double for double), combine the sums, then scale the row.
template <typename scalar_t, typename acc_t>
__global__ void rms_norm_kernel(const scalar_t* __restrict__ x,       // [rows, cols]
                                const scalar_t* __restrict__ weight,  // [cols]
                                scalar_t* __restrict__ y,             // [rows, cols]
                                int64_t cols, double eps) {
  __shared__ acc_t partial[kThreads];
  const int64_t offset = int64_t(blockIdx.x) * cols;
  acc_t sum_sq = 0;
  for (int64_t j = threadIdx.x; j < cols; j += kThreads) {
    const acc_t v = static_cast<acc_t>(x[offset + j]);
    sum_sq += v * v;
  }
  // Combine the block's sums: a tree in shared memory, halving at each step.
  partial[threadIdx.x] = sum_sq;
  __syncthreads();
  for (int active = kThreads / 2; active > 0; active /= 2) {
    if (threadIdx.x < active) partial[threadIdx.x] += partial[threadIdx.x + active];
    __syncthreads();
  }
  const acc_t mean_sq = partial[0] / static_cast<acc_t>(cols);
  const acc_t inv_rms = acc_t(1) / sqrt(mean_sq + static_cast<acc_t>(eps));
  for (int64_t j = threadIdx.x; j < cols; j += kThreads) {
    y[offset + j] = static_cast<scalar_t>(static_cast<acc_t>(x[offset + j]) * inv_rms *
                                          static_cast<acc_t>(weight[j]));
  }
}

at::Tensor rms_norm_cuda(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const at::ScalarType t = x.scalar_type();  // the dtypes the kernel is built for
  const bool floating =
      t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16;
  TORCH_CHECK_TYPE(floating && weight.scalar_type() == t,
                   "rms_norm: x and weight must be floating point (float32, float64, "
                   "float16 or bfloat16), of one dtype");
  TORCH_CHECK_VALUE(x.dim() >= 1 && weight.dim() == 1 && weight.size(0) == x.size(-1),
                    "rms_norm: weight must have shape (N,) for x of shape (..., N)");
  TORCH_CHECK(x.is_cuda() && weight.device() == x.device(),
              "rms_norm: x and weight must be on one CUDA device");
  // Allocate and launch on x's GPU, whichever GPU is current.
  const c10::cuda::CUDAGuard guard(x.device());
  const at::Tensor xc = x.contiguous();
  const at::Tensor wc = weight.contiguous();
  at::Tensor y = at::empty_like(xc);
  const int64_t cols = xc.size(-1);
  const int64_t rows = cols == 0 ? 0 : xc.numel() / cols;
  TORCH_CHECK_VALUE(rows <= std::numeric_limits<int32_t>::max(),
                    "rms_norm: x has more rows than a grid has blocks");
  if (rows == 0) return y;
  // On PyTorch's current stream, so that the kernel runs in order with the
  // caller's other work (and inside a CUDA graph capture).
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const auto blocks = static_cast<unsigned int>(rows);  // one per row
  const auto dtype = xc.scalar_type();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "rms_norm", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    rms_norm_kernel<scalar_t, acc_t><<<blocks, kThreads, 0, stream>>>(
        xc.const_data_ptr<scalar_t>(), wc.const_data_ptr<scalar_t>(),
        y.mutable_data_ptr<scalar_t>(), cols, eps);
    // A bad launch (too many threads, no kernel image for this GPU) raises
    // here, as a Python RuntimeError, instead of leaving y unwritten.
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return y;
}

}  // namespace first_op

// The kernel for CUDA tensors.
TORCH_LIBRARY_IMPL(first_op, CUDA, m) {
  m.impl("rms_norm", &first_op::rms_norm_cuda);
}
