// RMSNorm for CUDA tensors, the torch side of rms_norm_minimal.cuh: check the
// arguments, make x's GPU current, allocate, pick the dtype, launch on
// PyTorch's current stream, check the launch, and register for the CUDA key.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cstdint>
#include <limits>

#include "rms_norm_minimal.cuh"

namespace opguide_minimal {

at::Tensor rms_norm_cuda(const at::Tensor& x, const at::Tensor& weight, double eps) {
  TORCH_CHECK_TYPE(at::isFloatingType(x.scalar_type()) &&
                       weight.scalar_type() == x.scalar_type(),
                   "rms_norm: x and weight must be floating point, of one dtype");
  TORCH_CHECK_VALUE(x.dim() >= 1 && weight.dim() == 1 && weight.size(0) == x.size(-1),
                    "rms_norm: weight must have shape (N,) for x of shape (..., N)");
  TORCH_CHECK(x.is_cuda() && weight.device() == x.device(),
              "rms_norm: x and weight must be on one CUDA device");
  // Allocate and launch on x's GPU, whichever GPU is current.
  const c10::cuda::CUDAGuard guard(x.device());
  const at::Tensor xc = x.contiguous();
  const at::Tensor wc = weight.contiguous();
  at::Tensor y = at::empty_like(xc);
  const int64_t n = xc.size(-1);
  const int64_t m = n == 0 ? 0 : xc.numel() / n;
  TORCH_CHECK_VALUE(m <= std::numeric_limits<int32_t>::max(), "rms_norm: too many rows");
  // at::Half and at::BFloat16 convert to and from float on the device, so
  // the kernel takes them as they are.
  const auto dtype = xc.scalar_type();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "rms_norm_cuda", [&] {
    const cudaError_t err = launch_rms_norm<scalar_t, at::opmath_type<scalar_t>>(
        xc.const_data_ptr<scalar_t>(), wc.const_data_ptr<scalar_t>(),
        y.mutable_data_ptr<scalar_t>(), m, n, eps, c10::cuda::getCurrentCUDAStream());
    C10_CUDA_CHECK(err);
  });
  return y;
}

}  // namespace opguide_minimal

TORCH_LIBRARY_IMPL(opguide_minimal, CUDA, m) {
  m.impl("rms_norm", &opguide_minimal::rms_norm_cuda);
}
