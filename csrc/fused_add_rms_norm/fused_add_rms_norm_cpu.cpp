// Fused residual-add + RMSNorm on the CPU: residual += x in place, then the
// normalised (and optionally scaled) updated residual, in one pass per row.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/TensorIterator.h>  // at::internal::GRAIN_SIZE
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <cmath>

#include "fused_add_rms_norm.h"

namespace opguide {
namespace {

// [cpu-fused-kernel]
// x and weight are scalar_t, the residual res_t, the output out_t; all
// arithmetic is in acc_t (float, or double for a float64 residual).
template <typename scalar_t, typename res_t, typename out_t, typename acc_t>
void fused_add_rms_norm_rows(const scalar_t* x, res_t* residual, const scalar_t* weight,
                             out_t* out, acc_t* inv_rms, int64_t row_begin,
                             int64_t row_end, int64_t n, double eps) {
  constexpr int64_t kLanes = 8;
  for (int64_t row = row_begin; row < row_end; ++row) {
    const scalar_t* xr = x + row * n;
    res_t* rr = residual + row * n;
    out_t* yr = out + row * n;
    acc_t partial[kLanes] = {};
    for (int64_t j = 0; j < n; ++j) {
      // Round the sum to the residual's dtype once, store it, and normalise
      // exactly the value that was stored: the caller's residual and the
      // output agree.
      const res_t h =
          static_cast<res_t>(static_cast<acc_t>(xr[j]) + static_cast<acc_t>(rr[j]));
      rr[j] = h;
      const acc_t v = static_cast<acc_t>(h);
      partial[j % kLanes] += v * v;
    }
    acc_t sum_sq = 0;
    for (int64_t l = 0; l < kLanes; ++l) sum_sq += partial[l];
    const acc_t inv =
        acc_t(1) / std::sqrt(sum_sq / static_cast<acc_t>(n) + static_cast<acc_t>(eps));
    inv_rms[row] = inv;
    for (int64_t j = 0; j < n; ++j) {
      acc_t y = static_cast<acc_t>(rr[j]) * inv;
      if (weight != nullptr) y *= static_cast<acc_t>(weight[j]);  // optional weight
      yr[j] = static_cast<out_t>(y);
    }
  }
}
// [cpu-fused-kernel-end]

}  // namespace

// [cpu-fused-host]
std::tuple<at::Tensor, at::Tensor> fused_add_rms_norm_cpu(
    const at::Tensor& x, at::Tensor& residual, const std::optional<at::Tensor>& weight,
    double eps, std::optional<at::ScalarType> out_dtype) {
  check_fused_add_rms_norm_args(x, residual, weight, eps, out_dtype);
  const at::Tensor xc = x.contiguous();
  // The kernel writes rows of a dense buffer. A strided residual is updated
  // through a dense copy that is written back at the end.
  at::Tensor rc = residual.contiguous();
  const at::Tensor wc = weight.has_value() ? weight->contiguous() : at::Tensor();
  const at::ScalarType acc_dtype = fused_acc_dtype(residual);
  at::Tensor out, inv_rms;
  std::tie(out, inv_rms) = fused_add_rms_norm_outputs(x, residual, out_dtype);
  const int64_t n = x.size(-1);
  const int64_t m = inv_rms.numel();
  if (m == 0) return {out, inv_rms};
  const int64_t grain_rows =
      std::max<int64_t>(1, at::internal::GRAIN_SIZE / std::max<int64_t>(n, 1));

  const auto x_type = x.scalar_type();
  const auto out_type = out.scalar_type();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, x_type, "fused_add_rms_norm", [&] {
        using x_t = scalar_t;
        AT_DISPATCH_FLOATING_TYPES_AND2(
            at::kHalf, at::kBFloat16, out_type, "fused_add_rms_norm", [&] {
              using out_t = scalar_t;
              auto run = [&](auto res_tag, auto acc_tag) {
                using res_t = decltype(res_tag);
                using acc_t = decltype(acc_tag);
                const x_t* x_ptr = xc.const_data_ptr<x_t>();
                res_t* r_ptr = rc.mutable_data_ptr<res_t>();
                const x_t* w_ptr = wc.defined() ? wc.const_data_ptr<x_t>() : nullptr;
                out_t* y_ptr = out.mutable_data_ptr<out_t>();
                acc_t* inv_ptr = inv_rms.mutable_data_ptr<acc_t>();
                at::parallel_for(0, m, grain_rows, [&](int64_t begin, int64_t end) {
                  fused_add_rms_norm_rows<x_t, res_t, out_t, acc_t>(
                      x_ptr, r_ptr, w_ptr, y_ptr, inv_ptr, begin, end, n, eps);
                });
              };
              // The residual is either the dtype of x or float32 (checked above).
              if (acc_dtype == at::kDouble) {
                run(double{}, double{});
              } else if (residual.scalar_type() == at::kFloat) {
                run(float{}, float{});
              } else {
                run(x_t{}, float{});
              }
            });
      });
  if (!rc.is_same(residual)) residual.copy_(rc);
  return {out, inv_rms};
}
// [cpu-fused-host-end]

}  // namespace opguide

TORCH_LIBRARY_IMPL(opguide, CPU, m) {
  m.impl("fused_add_rms_norm_", &opguide::fused_add_rms_norm_cpu);
}
