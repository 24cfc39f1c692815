// silu_and_mul on CUDA (and on ROCm after hipify): the torch side. The
// kernels and their launch are the torch-free silu_and_mul.cuh; the plan
// comes from plan_silu_and_mul (silu_and_mul_config.h).
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cstdint>
#include <initializer_list>

#include "../common/cuda_type.cuh"
#include "silu_and_mul.cuh"
#include "silu_and_mul.h"

namespace opguide {
namespace {

// The multiprocessors of the current GPU, which sizes the grid. A driver
// attribute query (no device synchronisation), cheap enough to ask per call.
int current_sm_count() {
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  int count = 0;
  C10_CUDA_CHECK(
      cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  return count;
}

bool all_aligned16(std::initializer_list<const void*> pointers) {
  for (const void* p : pointers) {
    if (reinterpret_cast<uintptr_t>(p) % kSiluAccessBytes != 0) return false;
  }
  return true;
}

}  // namespace

at::Tensor silu_and_mul_cuda(const at::Tensor& x) {
  check_silu_and_mul_args(x);
  TORCH_CHECK(x.is_cuda(), "silu_and_mul_cuda: x must be a CUDA tensor, got ",
              x.device().str());
  // Run on x's GPU (and allocate there) whatever the current device is.
  const c10::cuda::CUDAGuard device_guard(x.device());
  // The kernels walk dense rows; a strided view is copied once here.
  const at::Tensor xc = x.contiguous();
  at::Tensor y = silu_and_mul_empty_output(xc);
  const int64_t cols = xc.size(-1) / 2;
  const int64_t rows = cols == 0 ? 0 : y.numel() / cols;
  if (rows == 0) return y;
  // Queued on the stream PyTorch uses on this thread (a side stream, or one
  // being captured into a CUDA graph).
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  const bool aligned = all_aligned16({xc.const_data_ptr(), y.const_data_ptr()});
  const SiluAndMulPlan plan =
      plan_silu_and_mul(rows, cols, static_cast<int>(xc.element_size()), aligned,
                        current_sm_count(), /*backward=*/false);
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, xc.scalar_type(), "silu_and_mul_cuda", [&] {
        using T = typename CudaType<scalar_t>::type;
        C10_CUDA_CHECK(launch_silu_and_mul_forward<T>(
            plan, reinterpret_cast<const T*>(xc.const_data_ptr<scalar_t>()),
            reinterpret_cast<T*>(y.mutable_data_ptr<scalar_t>()), rows, cols, stream));
      });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}

at::Tensor silu_and_mul_backward_cuda(const at::Tensor& grad_y, const at::Tensor& x) {
  check_silu_and_mul_backward_args(grad_y, x);
  TORCH_CHECK(x.is_cuda(), "silu_and_mul_backward_cuda: x must be a CUDA tensor, got ",
              x.device().str());
  const c10::cuda::CUDAGuard device_guard(x.device());
  const at::Tensor g = grad_y.contiguous();
  const at::Tensor xc = x.contiguous();
  at::Tensor grad_x =
      at::empty(xc.sizes(), xc.options().memory_format(at::MemoryFormat::Contiguous));
  const int64_t cols = xc.size(-1) / 2;
  const int64_t rows = cols == 0 ? 0 : g.numel() / cols;
  if (rows == 0) return grad_x;
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  const bool aligned =
      all_aligned16({g.const_data_ptr(), xc.const_data_ptr(), grad_x.const_data_ptr()});
  const SiluAndMulPlan plan =
      plan_silu_and_mul(rows, cols, static_cast<int>(xc.element_size()), aligned,
                        current_sm_count(), /*backward=*/true);
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, xc.scalar_type(), "silu_and_mul_backward_cuda", [&] {
        using T = typename CudaType<scalar_t>::type;
        C10_CUDA_CHECK(launch_silu_and_mul_backward<T>(
            plan, reinterpret_cast<const T*>(g.const_data_ptr<scalar_t>()),
            reinterpret_cast<const T*>(xc.const_data_ptr<scalar_t>()),
            reinterpret_cast<T*>(grad_x.mutable_data_ptr<scalar_t>()), rows, cols,
            stream));
      });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return grad_x;
}

}  // namespace opguide

TORCH_LIBRARY_IMPL(opguide, CUDA, m) {
  m.impl("silu_and_mul", &opguide::silu_and_mul_cuda);
  m.impl("silu_and_mul_backward", &opguide::silu_and_mul_backward_cuda);
}
