// Host side of the CUDA fused residual-add + RMSNorm: checks, dtype dispatch,
// launch configuration, and registration for the CUDA dispatch key. The
// device code is in the torch-free headers of this folder
// (fused_add_rms_norm_launch.cuh launches it).
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>

#include "../common/cuda_type.cuh"
#include "../rms_norm/rms_norm.h"
#include "fused_add_rms_norm.h"
#include "fused_add_rms_norm_launch.cuh"

namespace opguide {
namespace {

// [cuda-launch]
template <typename X, typename R, typename O, typename Acc>
void launch(const at::Tensor& x, at::Tensor& residual, const at::Tensor& weight,
            at::Tensor& out, at::Tensor& inv_rms, int64_t rows, int64_t cols,
            double eps) {
  using CX = typename CudaType<X>::type;
  using CR = typename CudaType<R>::type;
  using CO = typename CudaType<O>::type;
  const auto* x_ptr = reinterpret_cast<const CX*>(x.const_data_ptr<X>());
  auto* r_ptr = reinterpret_cast<CR*>(residual.mutable_data_ptr<R>());
  const auto* w_ptr = weight.defined()
                          ? reinterpret_cast<const CX*>(weight.const_data_ptr<X>())
                          : nullptr;
  auto* y_ptr = reinterpret_cast<CO*>(out.mutable_data_ptr<O>());
  Acc* inv_ptr = inv_rms.mutable_data_ptr<Acc>();

  TORCH_CHECK(rows <= INT_MAX, "fused_add_rms_norm_: at most ", std::to_string(INT_MAX),
              " rows, got ", std::to_string(rows));
  // The planner (fused_add_rms_norm_planner.cuh) picks the kernel, the vector
  // width the rows' alignment allows, and the launch shape; the launch goes to
  // PyTorch's current stream.
  const LaunchSettings settings{c10::cuda::getCurrentCUDAStream(), cuda_use_pdl(),
                                cuda_max_cluster()};
  const RowPlan plan = fused_add_rms_norm_plan_for<CX, CR, CO, Acc>(
      x_ptr, r_ptr, w_ptr, y_ptr, rows, cols, settings);
  const cudaError_t err = launch_fused_add_rms_norm<CX, CR, CO, Acc>(
      plan, x_ptr, r_ptr, w_ptr, y_ptr, inv_ptr, rows, cols, static_cast<Acc>(eps),
      settings);
  C10_CUDA_CHECK(err);
}
// [cuda-launch-end]

}  // namespace

std::tuple<at::Tensor, at::Tensor> fused_add_rms_norm_cuda(
    const at::Tensor& x, at::Tensor& residual, const std::optional<at::Tensor>& weight,
    double eps, std::optional<at::ScalarType> out_dtype) {
  check_fused_add_rms_norm_args(x, residual, weight, eps, out_dtype);
  TORCH_CHECK(x.is_cuda(), "fused_add_rms_norm_: x must be a CUDA tensor, got ",
              x.device().str());
  // Allocate and launch on x's GPU, whichever is current.
  const c10::cuda::CUDAGuard guard(x.device());
  const at::Tensor xc = x.contiguous();
  at::Tensor rc = residual.contiguous();
  const at::Tensor wc = weight.has_value() ? weight->contiguous() : at::Tensor();
  const at::ScalarType acc_dtype = fused_acc_dtype(residual);
  at::Tensor out, inv_rms;
  std::tie(out, inv_rms) = fused_add_rms_norm_outputs(x, residual, out_dtype);
  const int64_t cols = x.size(-1);
  const int64_t rows = inv_rms.numel();
  if (rows == 0) return {out, inv_rms};

  const auto x_type = x.scalar_type();
  const auto out_type = out.scalar_type();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, x_type, "fused_add_rms_norm", [&] {
        using X = scalar_t;
        AT_DISPATCH_FLOATING_TYPES_AND2(
            at::kHalf, at::kBFloat16, out_type, "fused_add_rms_norm", [&] {
              using O = scalar_t;
              // The residual is the dtype of x or float32 (checked above).
              if (acc_dtype == at::kDouble) {
                launch<double, double, O, double>(xc, rc, wc, out, inv_rms, rows, cols,
                                                  eps);
              } else if (residual.scalar_type() == at::kFloat) {
                launch<X, float, O, float>(xc, rc, wc, out, inv_rms, rows, cols, eps);
              } else {
                launch<X, X, O, float>(xc, rc, wc, out, inv_rms, rows, cols, eps);
              }
            });
      });
  if (!rc.is_same(residual)) residual.copy_(rc);
  return {out, inv_rms};
}

}  // namespace opguide

TORCH_LIBRARY_IMPL(opguide, CUDA, m) {
  m.impl("fused_add_rms_norm_", &opguide::fused_add_rms_norm_cuda);
}
