// Host side of the CUDA fused residual-add + RMSNorm: checks, dtype dispatch,
// launch configuration, and registration for the CUDA dispatch key. The
// device code is in fused_add_rms_norm.cuh.
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
#include <type_traits>

#include "../rms_norm/rms_norm.h"
#include "fused_add_rms_norm.h"
#include "fused_add_rms_norm_launch.cuh"

namespace opguide {
namespace {

// at::Half and at::BFloat16 have the bit layout of __half and __nv_bfloat16.
template <typename T>
struct CudaType {
  using type = T;
};
template <>
struct CudaType<at::Half> {
  using type = __half;
};
template <>
struct CudaType<at::BFloat16> {
  using type = __nv_bfloat16;
};

bool aligned_to(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// [cuda-launch]
template <typename x_t, typename res_t, typename out_t, typename acc_t>
void launch(const at::Tensor& x, at::Tensor& residual, const at::Tensor& weight,
            at::Tensor& out, at::Tensor& inv_rms, int64_t m, int64_t n, double eps) {
  using cx_t = typename CudaType<x_t>::type;
  using cres_t = typename CudaType<res_t>::type;
  using cout_t = typename CudaType<out_t>::type;
  const auto* x_ptr = reinterpret_cast<const cx_t*>(x.const_data_ptr<x_t>());
  auto* r_ptr = reinterpret_cast<cres_t*>(residual.mutable_data_ptr<res_t>());
  const auto* w_ptr = weight.defined()
                          ? reinterpret_cast<const cx_t*>(weight.const_data_ptr<x_t>())
                          : nullptr;
  auto* y_ptr = reinterpret_cast<cout_t*>(out.mutable_data_ptr<out_t>());
  acc_t* inv_ptr = inv_rms.mutable_data_ptr<acc_t>();

  // 16-byte accesses need every row of every array to start on a whole
  // vector: n a multiple of the width, and each base pointer aligned (a
  // sliced tensor may start anywhere).
  constexpr int kVec = fused_vector_width<cx_t, cres_t, cout_t>();
  const bool vectorize = n % kVec == 0 && aligned_to(x_ptr, kVec * sizeof(x_t)) &&
                         aligned_to(r_ptr, kVec * sizeof(res_t)) &&
                         aligned_to(y_ptr, kVec * sizeof(out_t)) &&
                         (w_ptr == nullptr || aligned_to(w_ptr, kVec * sizeof(x_t)));
  TORCH_CHECK(m <= INT_MAX, "fused_add_rms_norm_: at most ", std::to_string(INT_MAX),
              " rows, got ", std::to_string(m));
  if constexpr (std::is_same_v<acc_t, float>) {
    // Long rows: split over a thread-block cluster (csrc/rms_norm_long.cuh).
    cudaError_t err = cudaSuccess;
    if (launch_fused_add_rms_norm_cluster<cx_t, cres_t, cout_t, kVec>(
            x_ptr, r_ptr, w_ptr, y_ptr, inv_ptr, m, n, static_cast<float>(eps),
            vectorize, cuda_max_cluster(), c10::cuda::getCurrentCUDAStream(),
            cuda_use_pdl(), &err)) {
      C10_CUDA_CHECK(err);
      return;
    }
  }
  const cudaError_t err = launch_fused_add_rms_norm<cx_t, cres_t, cout_t, acc_t>(
      x_ptr, r_ptr, w_ptr, y_ptr, inv_ptr, m, n, static_cast<acc_t>(eps), vectorize,
      cuda_warp_size(), c10::cuda::getCurrentCUDAStream(), cuda_use_pdl());
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
  const int64_t n = x.size(-1);
  const int64_t m = inv_rms.numel();
  if (m == 0) return {out, inv_rms};

  const auto x_type = x.scalar_type();
  const auto out_type = out.scalar_type();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, x_type, "fused_add_rms_norm", [&] {
        using x_t = scalar_t;
        AT_DISPATCH_FLOATING_TYPES_AND2(
            at::kHalf, at::kBFloat16, out_type, "fused_add_rms_norm", [&] {
              using out_t = scalar_t;
              // The residual is the dtype of x or float32 (checked above).
              if (acc_dtype == at::kDouble) {
                launch<double, double, out_t, double>(xc, rc, wc, out, inv_rms, m, n,
                                                      eps);
              } else if (residual.scalar_type() == at::kFloat) {
                launch<x_t, float, out_t, float>(xc, rc, wc, out, inv_rms, m, n, eps);
              } else {
                launch<x_t, x_t, out_t, float>(xc, rc, wc, out, inv_rms, m, n, eps);
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
