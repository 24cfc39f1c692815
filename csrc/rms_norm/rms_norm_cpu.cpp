// RMSNorm forward on the CPU: one read of each row from memory (the second
// loop finds it in cache), fp32 accumulation,
// rows spread over threads with at::parallel_for.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/TensorIterator.h>  // at::internal::GRAIN_SIZE
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>

#include "rms_norm.h"
#include "rms_norm_cpu.h"

namespace opguide {
namespace {

// The output of x's shape and dtype, contiguous, for the kernel to fill. It
// comes from PyTorch's CPU allocator, as ATen's own outputs do, so PyTorch's
// settings reach it: THP_MEM_ALLOC_ENABLE=1 makes that allocator advise
// allocations of 2 MiB and more for transparent huge pages
// (c10/core/impl/alloc_cpu.cpp).
at::Tensor empty_output(const at::Tensor& x) {
  return at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
}

}  // namespace

// Writes y (and inv_rms when it is defined) for x and weight. y must be a
// contiguous tensor of the shape and dtype of x.
void rms_norm_cpu_kernel(const at::Tensor& x, const at::Tensor& weight, double eps,
                         const at::Tensor& y, const at::Tensor& inv_rms) {
  TORCH_CHECK(x.device().is_cpu(), "rms_norm_cpu: x must be a CPU tensor");
  // The kernel walks rows of a dense (M, N) buffer; a strided view is copied
  // once here instead of complicating the inner loop.
  const at::Tensor xc = x.contiguous();
  const at::Tensor wc = weight.contiguous();
  const int64_t n = xc.size(-1);
  const int64_t m = n == 0 ? 0 : xc.numel() / n;
  if (m == 0) return;
  // Give each task at least GRAIN_SIZE elements so that small inputs stay on
  // one thread instead of paying for a fork/join.
  const int64_t grain_rows = std::max<int64_t>(1, at::internal::GRAIN_SIZE / n);
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, xc.scalar_type(), "rms_norm_cpu", [&] {
        using acc_t = at::opmath_type<scalar_t>;
        const scalar_t* x_ptr = xc.const_data_ptr<scalar_t>();
        const scalar_t* w_ptr = wc.const_data_ptr<scalar_t>();
        scalar_t* y_ptr = y.mutable_data_ptr<scalar_t>();
        acc_t* r_ptr = inv_rms.defined() ? inv_rms.mutable_data_ptr<acc_t>() : nullptr;
        at::parallel_for(0, m, grain_rows, [&](int64_t begin, int64_t end) {
          rms_norm_rows<scalar_t, acc_t>(x_ptr, w_ptr, y_ptr, r_ptr, begin, end, n,
                                         eps);
        });
      });
}

at::Tensor rms_norm_cpu(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_rms_norm_args(x, weight, eps);
  at::Tensor y = empty_output(x);
  at::Tensor no_inv_rms;  // undefined: the inference op does not keep it
  rms_norm_cpu_kernel(x, weight, eps, y, no_inv_rms);
  return y;
}

std::tuple<at::Tensor, at::Tensor> rms_norm_forward_cpu(const at::Tensor& x,
                                                    const at::Tensor& weight,
                                                    double eps) {
  check_rms_norm_args(x, weight, eps);
  // One statistic per row, in the accumulation type: shape x.shape[:-1].
  at::Tensor inv_rms = at::empty(x.sizes().slice(0, x.dim() - 1),
                                 x.options().dtype(rms_norm_acc_type(x.scalar_type())));
  at::Tensor y = empty_output(x);
  rms_norm_cpu_kernel(x, weight, eps, y, inv_rms);
  // A row of length 0 has no mean square: NaN, as mean() of an empty row.
  if (x.size(-1) == 0) inv_rms.fill_(std::numeric_limits<double>::quiet_NaN());
  return {y, inv_rms};
}
// [cpu-host-end]

}  // namespace opguide

TORCH_LIBRARY_IMPL(opguide, CPU, m) {
  m.impl("rms_norm", &opguide::rms_norm_cpu);
  m.impl("rms_norm_forward", &opguide::rms_norm_forward_cpu);
}
