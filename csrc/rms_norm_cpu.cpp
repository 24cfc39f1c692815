// RMSNorm forward on the CPU: one pass over each row, fp32 accumulation,
// rows spread over threads with at::parallel_for.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <limits>
#include <tuple>

#include "registration.h"
#include "rms_norm.h"

namespace opguide {
namespace {

// [cpu-kernel]
template <typename scalar_t>
void rms_norm_rows(const scalar_t* x, const scalar_t* weight, scalar_t* y,
                   at::opmath_type<scalar_t>* inv_rms_out, int64_t row_begin,
                   int64_t row_end, int64_t n, double eps) {
  // float for float/half/bfloat16, double for double.
  using acc_t = at::opmath_type<scalar_t>;
  // Independent partial sums let the compiler keep several SIMD lanes busy;
  // a single accumulator would serialise every add on the previous one.
  constexpr int64_t kLanes = 16;
  for (int64_t row = row_begin; row < row_end; ++row) {
    const scalar_t* xr = x + row * n;
    scalar_t* yr = y + row * n;
    acc_t partial[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      for (int64_t l = 0; l < kLanes; ++l) {
        const acc_t v = static_cast<acc_t>(xr[i + l]);
        partial[l] += v * v;
      }
    }
    acc_t sum_sq = 0;
    for (; i < n; ++i) {  // the tail when n is not a multiple of kLanes
      const acc_t v = static_cast<acc_t>(xr[i]);
      sum_sq += v * v;
    }
    for (int64_t l = 0; l < kLanes; ++l) sum_sq += partial[l];
    const acc_t inv_rms =
        acc_t(1) / std::sqrt(sum_sq / static_cast<acc_t>(n) + static_cast<acc_t>(eps));
    // rms_norm_fwd keeps the statistic for the backward pass (step 8).
    if (inv_rms_out != nullptr) inv_rms_out[row] = inv_rms;
    // The row was just read, so this second loop reads it from L1/L2, not DRAM.
    for (int64_t j = 0; j < n; ++j) {
      yr[j] = static_cast<scalar_t>(static_cast<acc_t>(xr[j]) * inv_rms *
                                    static_cast<acc_t>(weight[j]));
    }
  }
}
// [cpu-kernel-end]

}  // namespace

// [cpu-host]
// Writes y (and inv_rms when it is defined) for x and weight.
void rms_norm_cpu_into(const at::Tensor& x, const at::Tensor& weight, double eps,
                       at::Tensor& y, at::Tensor& inv_rms) {
  check_rms_norm_args(x, weight, eps);
  TORCH_CHECK(x.device().is_cpu(), "rms_norm_cpu: x must be a CPU tensor");
  // The kernel walks rows of a dense (M, N) buffer; a strided view is copied
  // once here instead of complicating the inner loop.
  const at::Tensor xc = x.contiguous();
  const at::Tensor wc = weight.contiguous();
  y = at::empty_like(xc, at::MemoryFormat::Contiguous);
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
          rms_norm_rows<scalar_t>(x_ptr, w_ptr, y_ptr, r_ptr, begin, end, n, eps);
        });
      });
}

at::Tensor rms_norm_cpu(const at::Tensor& x, const at::Tensor& weight, double eps) {
  at::Tensor y;
  at::Tensor no_inv_rms;  // undefined: the inference op does not keep it
  rms_norm_cpu_into(x, weight, eps, y, no_inv_rms);
  return y;
}

std::tuple<at::Tensor, at::Tensor> rms_norm_fwd_cpu(const at::Tensor& x,
                                                    const at::Tensor& weight, double eps) {
  check_rms_norm_args(x, weight, eps);
  // One statistic per row, in the accumulation type: shape x.shape[:-1].
  at::Tensor inv_rms = at::empty(x.sizes().slice(0, x.dim() - 1),
                                 x.options().dtype(rms_norm_acc_type(x.scalar_type())));
  at::Tensor y;
  rms_norm_cpu_into(x, weight, eps, y, inv_rms);
  // A row of length 0 has no mean square: NaN, as mean() of an empty row.
  if (x.size(-1) == 0) inv_rms.fill_(std::numeric_limits<double>::quiet_NaN());
  return {y, inv_rms};
}
// [cpu-host-end]

}  // namespace opguide

// [cpu-register]
OPGUIDE_LIBRARY_IMPL(CPU, m) {
  m.impl("rms_norm", &opguide::rms_norm_cpu);
  m.impl("rms_norm_fwd", &opguide::rms_norm_fwd_cpu);
}
// [cpu-register-end]
