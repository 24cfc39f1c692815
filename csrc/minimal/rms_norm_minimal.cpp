// RMSNorm as a complete, minimal C++ operator for CPU tensors:
//   y = x / sqrt(mean(x**2, dim=-1) + eps) * weight, over the last dimension.
// One file: the kernel, the function the dispatcher calls, the schema and the
// kernel's registration for the CPU dispatch key.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/TensorIterator.h>  // at::internal::GRAIN_SIZE
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace opguide_minimal {

// Rows [begin, end) of a dense (m, n) input. acc_t is float for float, half
// and bfloat16 (double for double): sums are kept in it, outputs rounded once.
template <typename scalar_t>
void rms_norm_rows(const scalar_t* x, const scalar_t* weight, scalar_t* y, int64_t begin,
                   int64_t end, int64_t n, double eps) {
  using acc_t = at::opmath_type<scalar_t>;
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

at::Tensor rms_norm_cpu(const at::Tensor& x, const at::Tensor& weight, double eps) {
  TORCH_CHECK_TYPE(at::isFloatingType(x.scalar_type()) &&
                       weight.scalar_type() == x.scalar_type(),
                   "rms_norm: x and weight must be floating point, of one dtype");
  TORCH_CHECK_VALUE(x.dim() >= 1 && weight.dim() == 1 && weight.size(0) == x.size(-1),
                    "rms_norm: weight must have shape (N,) for x of shape (..., N)");
  TORCH_CHECK(x.is_cpu() && weight.is_cpu(), "rms_norm: x and weight must be CPU tensors");
  const at::Tensor xc = x.contiguous();  // the kernel walks dense rows
  const at::Tensor wc = weight.contiguous();
  at::Tensor y = at::empty_like(xc);
  const int64_t n = xc.size(-1);
  const int64_t m = n == 0 ? 0 : xc.numel() / n;
  if (m == 0) return y;
  // At least GRAIN_SIZE elements per task: small inputs stay on one thread.
  const int64_t grain_rows = std::max<int64_t>(1, at::internal::GRAIN_SIZE / n);
  const auto dtype = xc.scalar_type();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "rms_norm_cpu", [&] {
    at::parallel_for(0, m, grain_rows, [&](int64_t begin, int64_t end) {
      rms_norm_rows<scalar_t>(xc.const_data_ptr<scalar_t>(), wc.const_data_ptr<scalar_t>(),
                              y.mutable_data_ptr<scalar_t>(), begin, end, n, eps);
    });
  });
  return y;
}

}  // namespace opguide_minimal

// The schema, once per namespace; then the kernel for the CPU dispatch key.
TORCH_LIBRARY(opguide_minimal, m) {
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
}

TORCH_LIBRARY_IMPL(opguide_minimal, CPU, m) {
  m.impl("rms_norm", &opguide_minimal::rms_norm_cpu);
}
