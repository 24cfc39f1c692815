// first_op::rms_norm: its schema, and its kernel for CPU tensors.
//   y = x / sqrt(mean(x**2, dim=-1) + eps) * weight, over the last dimension.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace first_op {

// Rows [begin, end) of a dense input of `cols` columns. acc_t is float for
// float, half and bfloat16 (double for double): sums are kept in it, and each
// output is rounded once.
template <typename scalar_t>
void rms_norm_rows(const scalar_t* x,       // [rows, cols]
                   const scalar_t* weight,  // [cols]
                   scalar_t* y,             // [rows, cols]
                   int64_t begin, int64_t end, int64_t cols, double eps) {
  using acc_t = at::opmath_type<scalar_t>;
  for (int64_t row = begin; row < end; ++row) {
    const scalar_t* x_row = x + row * cols;
    scalar_t* y_row = y + row * cols;
    acc_t sum_sq = 0;
    for (int64_t j = 0; j < cols; ++j) {
      const acc_t v = static_cast<acc_t>(x_row[j]);
      sum_sq += v * v;
    }
    const acc_t inv_rms = acc_t(1) / std::sqrt(sum_sq / acc_t(cols) + acc_t(eps));
    for (int64_t j = 0; j < cols; ++j) {
      y_row[j] = static_cast<scalar_t>(static_cast<acc_t>(x_row[j]) * inv_rms *
                                       static_cast<acc_t>(weight[j]));
    }
  }
}

at::Tensor rms_norm_cpu(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const at::ScalarType t = x.scalar_type();  // the dtypes the kernel is built for
  const bool floating =
      t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16;
  TORCH_CHECK_TYPE(floating && weight.scalar_type() == t,
                   "rms_norm: x and weight must be floating point (float32, float64, "
                   "float16 or bfloat16), of one dtype");
  TORCH_CHECK_VALUE(x.dim() >= 1 && weight.dim() == 1 && weight.size(0) == x.size(-1),
                    "rms_norm: weight must have shape (N,) for x of shape (..., N)");
  TORCH_CHECK(x.is_cpu() && weight.is_cpu(),
              "rms_norm: x and weight must be CPU tensors");
  const at::Tensor xc = x.contiguous();  // the kernel walks dense rows
  const at::Tensor wc = weight.contiguous();
  at::Tensor y = at::empty_like(xc);
  const int64_t cols = xc.size(-1);
  const int64_t rows = cols == 0 ? 0 : xc.numel() / cols;
  if (rows == 0) return y;
  // Tasks of at least 32768 elements (ATen's own grain size): a small input
  // stays on one thread.
  const int64_t grain_rows = std::max<int64_t>(1, 32768 / cols);
  const auto dtype = xc.scalar_type();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "rms_norm", [&] {
    const scalar_t* x_data = xc.const_data_ptr<scalar_t>();
    const scalar_t* weight_data = wc.const_data_ptr<scalar_t>();
    scalar_t* y_data = y.mutable_data_ptr<scalar_t>();
    at::parallel_for(0, rows, grain_rows, [&](int64_t begin, int64_t end) {
      rms_norm_rows(x_data, weight_data, y_data, begin, end, cols, eps);
    });
  });
  return y;
}

}  // namespace first_op

// The schema, once for the namespace. The fake kernel and the autograd formula
// are Python, in first_op/ops.py: set_python_module names that module, so
// that a process that loads this library without it is told to import it.
TORCH_LIBRARY(first_op, m) {
  m.set_python_module("first_op.ops");
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
}

// The kernel for CPU tensors.
TORCH_LIBRARY_IMPL(first_op, CPU, m) {
  m.impl("rms_norm", &first_op::rms_norm_cpu);
}
