// RMSNorm's CPU kernel and schema on the LibTorch stable ABI:
//   y = x / sqrt(mean(x**2, dim=-1) + eps) * weight, over the last dimension.
// The same operator as csrc/minimal/rms_norm_minimal.cpp, written so that one
// build loads into every torch from TORCH_TARGET_VERSION on: only headers
// under torch/csrc/stable/ and torch/headeronly/ are included, and every call
// into torch goes through the C shim (extern "C" functions whose signatures
// torch keeps). setup.py defines TORCH_TARGET_VERSION (torch 2.11 here);
// using an API newer than that is a compile error, not a load-time surprise.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/Dispatch_v2.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "rms_norm.h"

namespace opguide_stable {

using torch::headeronly::ScalarType;
using torch::stable::Tensor;

// Rows [begin, end) of a dense (m, n) input; sums kept in acc_t (float for
// float, half and bfloat16; double for double), outputs rounded once.
template <typename scalar_t>
void rms_norm_rows(const scalar_t* x, const scalar_t* weight, scalar_t* y, int64_t begin,
                   int64_t end, int64_t n, double eps) {
  using acc_t = acc_type<scalar_t>;
  for (int64_t row = begin; row < end; ++row) {
    const scalar_t* xr = x + row * n;
    scalar_t* yr = y + row * n;
    acc_t sum_sq = 0;
    for (int64_t j = 0; j < n; ++j) {
      const acc_t v = static_cast<acc_t>(xr[j]);
      sum_sq += v * v;
    }
    const acc_t inv_rms = acc_t(1) / std::sqrt(sum_sq / acc_t(n) + acc_t(eps));
    for (int64_t j = 0; j < n; ++j) {
      yr[j] = static_cast<scalar_t>(static_cast<acc_t>(xr[j]) * inv_rms *
                                    static_cast<acc_t>(weight[j]));
    }
  }
}

Tensor rms_norm_cpu(const Tensor& x, const Tensor& weight, double eps) {
  check_arguments(x, weight);
  STD_TORCH_CHECK(x.is_cpu() && weight.is_cpu(), "rms_norm: x and weight must be CPU tensors");
  const Tensor xc = torch::stable::contiguous(x);  // the kernel walks dense rows
  const Tensor wc = torch::stable::contiguous(weight);
  Tensor y = torch::stable::empty_like(xc);
  const int64_t n = xc.size(-1);
  const int64_t m = n == 0 ? 0 : xc.numel() / n;
  if (m == 0) return y;
  // At least 32768 elements per task (ATen's GRAIN_SIZE), so small inputs
  // stay on one thread.
  const int64_t grain_rows = std::max<int64_t>(1, 32768 / n);
  THO_DISPATCH_V2(
      xc.scalar_type(), "rms_norm_cpu", [&] {
        torch::stable::parallel_for(0, m, grain_rows, [&](int64_t begin, int64_t end) {
          rms_norm_rows<scalar_t>(xc.const_data_ptr<scalar_t>(), wc.const_data_ptr<scalar_t>(),
                                  y.mutable_data_ptr<scalar_t>(), begin, end, n, eps);
        });
      },
      ScalarType::Float, ScalarType::Double, ScalarType::Half, ScalarType::BFloat16);
  return y;
}

}  // namespace opguide_stable

// The schema, then the kernel for the CPU key. TORCH_BOX wraps the typed
// function in the boxed calling convention the C shim passes across.
STABLE_TORCH_LIBRARY(opguide_stable, m) {
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
}

STABLE_TORCH_LIBRARY_IMPL(opguide_stable, CPU, m) {
  m.impl("rms_norm", TORCH_BOX(&opguide_stable::rms_norm_cpu));
}
