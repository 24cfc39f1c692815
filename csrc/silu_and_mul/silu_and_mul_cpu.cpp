// silu_and_mul on the CPU: the torch side of the row loops of
// silu_and_mul_cpu.h, rows spread over PyTorch's intra-op threads.
#include "silu_and_mul_cpu.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/TensorIterator.h>  // at::internal::GRAIN_SIZE
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>

#include "silu_and_mul.h"

namespace opguide {
namespace {

// Rows per task: at least GRAIN_SIZE elements of y, so that a small input
// stays on one thread instead of paying for a fork and join.
int64_t grain_rows(int64_t cols) {
  return std::max<int64_t>(1, at::internal::GRAIN_SIZE / std::max<int64_t>(cols, 1));
}

}  // namespace

at::Tensor silu_and_mul_cpu(const at::Tensor& x) {
  check_silu_and_mul_args(x);
  // The loops walk dense rows; a strided view is copied once here.
  const at::Tensor xc = x.contiguous();
  at::Tensor y = silu_and_mul_empty_output(xc);
  const int64_t cols = xc.size(-1) / 2;
  const int64_t rows = cols == 0 ? 0 : y.numel() / cols;
  if (rows == 0) return y;
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, xc.scalar_type(), "silu_and_mul_cpu", [&] {
        using acc_t = at::opmath_type<scalar_t>;
        const scalar_t* x_ptr = xc.const_data_ptr<scalar_t>();
        scalar_t* y_ptr = y.mutable_data_ptr<scalar_t>();
        at::parallel_for(0, rows, grain_rows(cols), [&](int64_t begin, int64_t end) {
          silu_and_mul_rows<scalar_t, acc_t>(x_ptr, y_ptr, begin, end, cols);
        });
      });
  return y;
}

at::Tensor silu_and_mul_backward_cpu(const at::Tensor& grad_y, const at::Tensor& x) {
  check_silu_and_mul_backward_args(grad_y, x);
  const at::Tensor g = grad_y.contiguous();
  const at::Tensor xc = x.contiguous();
  at::Tensor grad_x =
      at::empty(xc.sizes(), xc.options().memory_format(at::MemoryFormat::Contiguous));
  const int64_t cols = xc.size(-1) / 2;
  const int64_t rows = cols == 0 ? 0 : g.numel() / cols;
  if (rows == 0) return grad_x;
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, xc.scalar_type(), "silu_and_mul_backward_cpu", [&] {
        using acc_t = at::opmath_type<scalar_t>;
        const scalar_t* g_ptr = g.const_data_ptr<scalar_t>();
        const scalar_t* x_ptr = xc.const_data_ptr<scalar_t>();
        scalar_t* grad_x_ptr = grad_x.mutable_data_ptr<scalar_t>();
        // Each row of grad_x is 2 * cols elements: half the grain in rows.
        at::parallel_for(0, rows, std::max<int64_t>(1, grain_rows(cols) / 2),
                         [&](int64_t begin, int64_t end) {
                           silu_and_mul_backward_rows<scalar_t, acc_t>(
                               g_ptr, x_ptr, grad_x_ptr, begin, end, cols);
                         });
      });
  return grad_x;
}

}  // namespace opguide

TORCH_LIBRARY_IMPL(opguide, CPU, m) {
  m.impl("silu_and_mul", &opguide::silu_and_mul_cpu);
  m.impl("silu_and_mul_backward", &opguide::silu_and_mul_backward_cpu);
}
