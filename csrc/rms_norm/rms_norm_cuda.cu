// RMSNorm on CUDA (and on ROCm after hipify), forward and backward: the
// torch side. The kernels, their planners and launchers are torch-free
// headers of this folder; rms_norm_launch.cuh is the one this file includes.
// Each direction plans a call, then launches the plan.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cstdint>
#include <limits>
#include <tuple>

#include "../common/cuda_type.cuh"
#include "rms_norm.h"
#include "rms_norm_launch.cuh"

namespace opguide {

// Writes y (and inv_rms when it is defined) for x and weight on x's GPU.
void rms_norm_cuda_into(const at::Tensor& x, const at::Tensor& weight, double eps,
                        at::Tensor& y, const at::Tensor& inv_rms) {
  // Rows may be strided (a slice x[:, :n] of a wider matrix): the kernel takes
  // a row stride. Anything else that is not dense is copied once.
  const int64_t cols = x.size(-1);
  at::Tensor xk = x;
  int64_t row_stride = cols;
  if (x.dim() == 2 && x.stride(1) == 1 && x.size(0) > 1) {
    row_stride = x.stride(0);
  } else if (!x.is_contiguous()) {
    xk = x.contiguous();
  }
  const at::Tensor wk = weight.contiguous();
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  if (rows == 0) return;

  // The kernel is queued on the stream PyTorch is using on this thread (it
  // may be a side stream, or a stream being captured into a CUDA graph).
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  const LaunchSettings settings{stream, cuda_use_pdl(), cuda_max_cluster()};
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, x.scalar_type(), "rms_norm_cuda", [&] {
        using T = typename CudaType<scalar_t>::type;
        using Acc = typename AccType<T>::type;
        Acc* inv_rms_ptr =
            inv_rms.defined() ? inv_rms.mutable_data_ptr<Acc>() : nullptr;
        const T* x_ptr = reinterpret_cast<const T*>(xk.const_data_ptr<scalar_t>());
        const T* w_ptr = reinterpret_cast<const T*>(wk.const_data_ptr<scalar_t>());
        T* y_ptr = reinterpret_cast<T*>(y.mutable_data_ptr<scalar_t>());
        // Which kernel runs depends on the row: see plan_rms_norm_forward.
        const RowPlan plan = rms_norm_forward_plan_for<T>(x_ptr, w_ptr, y_ptr, rows,
                                                          cols, row_stride, settings);
        const cudaError_t err = launch_rms_norm_forward<T>(
            plan, x_ptr, w_ptr, y_ptr, inv_rms_ptr, rows, cols, row_stride,
            static_cast<Acc>(eps), settings);
        C10_CUDA_CHECK(err);
      });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

at::Tensor rms_norm_cuda(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_rms_norm_args(x, weight, eps);
  TORCH_CHECK(x.is_cuda(), "rms_norm_cuda: x must be a CUDA tensor, got ",
              x.device().str());
  // Run on x's GPU (and allocate there) whatever the current device is.
  const c10::cuda::CUDAGuard device_guard(x.device());
  at::Tensor y =
      at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
  rms_norm_cuda_into(x, weight, eps, y, at::Tensor());
  return y;
}

std::tuple<at::Tensor, at::Tensor> rms_norm_forward_cuda(const at::Tensor& x,
                                                     const at::Tensor& weight,
                                                     double eps) {
  check_rms_norm_args(x, weight, eps);
  TORCH_CHECK(x.is_cuda(), "rms_norm_forward_cuda: x must be a CUDA tensor, got ",
              x.device().str());
  const c10::cuda::CUDAGuard device_guard(x.device());
  at::Tensor y =
      at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
  at::Tensor inv_rms = at::empty(x.sizes().slice(0, x.dim() - 1),
                                 x.options().dtype(rms_norm_acc_type(x.scalar_type())));
  if (x.size(-1) == 0) {
    inv_rms.fill_(
        std::numeric_limits<double>::quiet_NaN());  // mean of nothing, as on the CPU
    return {y, inv_rms};
  }
  rms_norm_cuda_into(x, weight, eps, y, inv_rms);
  return {y, inv_rms};
}

std::tuple<at::Tensor, at::Tensor> rms_norm_backward_cuda(const at::Tensor& grad_y,
                                                          const at::Tensor& x,
                                                          const at::Tensor& weight,
                                                          const at::Tensor& inv_rms) {
  check_rms_norm_backward_args(grad_y, x, weight, inv_rms);
  TORCH_CHECK(x.is_cuda(), "rms_norm_backward_cuda: x must be a CUDA tensor, got ",
              x.device().str());
  const c10::cuda::CUDAGuard device_guard(x.device());
  const at::Tensor g = grad_y.contiguous();
  const at::Tensor xc = x.contiguous();
  const at::Tensor wc = weight.contiguous();
  const at::Tensor rc = inv_rms.contiguous();
  const int64_t cols = x.size(-1);
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  if (cols == 0) {
    // Nothing to normalise: grad_x is empty and grad_weight a sum over no element.
    return {
        at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous)),
        at::zeros({0}, weight.options())};
  }
  at::Tensor grad_x =
      at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
  at::Tensor grad_weight = at::empty({cols}, weight.options());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  const LaunchSettings settings{stream, cuda_use_pdl(), cuda_max_cluster()};
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, x.scalar_type(), "rms_norm_backward_cuda", [&] {
        using T = typename CudaType<scalar_t>::type;
        using Acc = typename AccType<T>::type;
        const T* grad_y_ptr = reinterpret_cast<const T*>(g.const_data_ptr<scalar_t>());
        const T* x_ptr = reinterpret_cast<const T*>(xc.const_data_ptr<scalar_t>());
        const T* w_ptr = reinterpret_cast<const T*>(wc.const_data_ptr<scalar_t>());
        // Which kernels run depends on the row: see plan_rms_norm_backward.
        const RmsNormBackwardPlan plan = rms_norm_backward_plan_for<T>(
            grad_y_ptr, x_ptr, w_ptr, rows, cols, settings);
        // One partial grad_weight row per block, summed by the second kernel.
        at::Tensor partial = at::empty(
            {plan.blocks, cols}, x.options().dtype(rms_norm_acc_type(x.scalar_type())));
        const cudaError_t err = launch_rms_norm_backward<T>(
            plan, grad_y_ptr, x_ptr, w_ptr, rc.const_data_ptr<Acc>(),
            reinterpret_cast<T*>(grad_x.mutable_data_ptr<scalar_t>()),
            partial.mutable_data_ptr<Acc>(),
            reinterpret_cast<T*>(grad_weight.mutable_data_ptr<scalar_t>()), rows, cols,
            settings);
        C10_CUDA_CHECK(err);
      });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {grad_x, grad_weight};
}

}  // namespace opguide

TORCH_LIBRARY_IMPL(opguide, CUDA, m) {
  m.impl("rms_norm", &opguide::rms_norm_cuda);
  m.impl("rms_norm_forward", &opguide::rms_norm_forward_cuda);
  m.impl("rms_norm_backward", &opguide::rms_norm_backward_cuda);
}
