// The CPU row "opguide into existing y" of guidekit.benchmark: the library's
// CPU row loop (csrc/rms_norm/rms_norm_cpu.h) run into a tensor that exists,
// so that its time is the loop's alone, without allocating an output.
// guidekit.benchmark.cpu builds it with torch.utils.cpp_extension.load; it is
// no part of the opguide library.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>

#include "rms_norm_cpu.h"

namespace {

void rms_norm_into(const at::Tensor& x, const at::Tensor& weight, double eps,
                   const at::Tensor& y) {
  TORCH_CHECK(x.dim() == 2 && weight.dim() == 1 && weight.size(0) == x.size(1) &&
                  y.sizes() == x.sizes(),
              "rms_norm_into: x and y of shape (M, N), weight of shape (N,)");
  TORCH_CHECK(x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat &&
                  y.scalar_type() == at::kFloat,
              "rms_norm_into: float32 tensors only");
  TORCH_CHECK(x.is_contiguous() && weight.is_contiguous() && y.is_contiguous(),
              "rms_norm_into: contiguous tensors only");
  // A write into y: refuse a tensor autograd tracks, and bump its version
  // counter, as every operator that writes an input must.
  TORCH_CHECK(!y.requires_grad(), "rms_norm_into: y must not require grad");
  const int64_t m = x.size(0), n = x.size(1);
  if (m > 0 && n > 0) {
    // The same split over threads as the library's CPU kernel.
    const int64_t grain_rows = std::max<int64_t>(1, at::internal::GRAIN_SIZE / n);
    const float* x_ptr = x.const_data_ptr<float>();
    const float* w_ptr = weight.const_data_ptr<float>();
    float* y_ptr = y.mutable_data_ptr<float>();
    at::parallel_for(0, m, grain_rows, [&](int64_t begin, int64_t end) {
      opguide::rms_norm_rows<float, float>(x_ptr, w_ptr, y_ptr, nullptr, begin, end, n,
                                           eps);
    });
  }
  y.unsafeGetTensorImpl()->bump_version();
}

}  // namespace

TORCH_LIBRARY(opguide_benchmark, m) {
  m.def("rms_norm_into(Tensor x, Tensor weight, float eps, Tensor(a!) y) -> ()");
  m.impl("rms_norm_into", c10::DispatchKey::CPU, TORCH_FN(rms_norm_into));
}
