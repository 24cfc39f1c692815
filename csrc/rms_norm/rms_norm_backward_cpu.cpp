// RMSNorm backward on the CPU: grad_x and grad_weight from grad_y, the inputs
// and the per-row inv_rms that rms_norm_forward saved.
//
// With r = inv_rms of a row, y_j = x_j * r * w_j and N the row length:
//   grad_weight_j = sum over rows of grad_y_j * x_j * r
//   grad_x_j = r * grad_y_j * w_j - x_j * r**3 / N * sum_k(grad_y_k * w_k * x_k)
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/TensorIterator.h>  // at::internal::GRAIN_SIZE
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include <algorithm>
#include <tuple>

#include "rms_norm.h"

namespace opguide {
namespace {

// [cpu-backward-kernel]
// Rows [row_begin, row_end): writes their grad_x and adds their share of
// grad_weight into grad_weight_partial (n values owned by this chunk of rows).
template <typename scalar_t>
void rms_norm_backward_rows(const scalar_t* grad_y, const scalar_t* x,
                            const scalar_t* weight,
                            const at::opmath_type<scalar_t>* inv_rms, scalar_t* grad_x,
                            at::opmath_type<scalar_t>* grad_weight_partial,
                            int64_t row_begin, int64_t row_end, int64_t n) {
  using acc_t = at::opmath_type<scalar_t>;
  constexpr int64_t kLanes = 16;  // independent sums, as in the forward kernel
  for (int64_t row = row_begin; row < row_end; ++row) {
    const scalar_t* gr = grad_y + row * n;
    const scalar_t* xr = x + row * n;
    scalar_t* gxr = grad_x + row * n;
    const acc_t r = inv_rms[row];
    // Pass 1: dot = sum(grad_y * w * x), the row's only reduction.
    acc_t partial[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      for (int64_t l = 0; l < kLanes; ++l) {
        partial[l] += static_cast<acc_t>(gr[i + l]) *
                      static_cast<acc_t>(weight[i + l]) * static_cast<acc_t>(xr[i + l]);
      }
    }
    acc_t dot = 0;
    for (; i < n; ++i) {
      dot += static_cast<acc_t>(gr[i]) * static_cast<acc_t>(weight[i]) *
             static_cast<acc_t>(xr[i]);
    }
    for (int64_t l = 0; l < kLanes; ++l) dot += partial[l];
    const acc_t c = dot * r * r * r / static_cast<acc_t>(n);
    // Pass 2 finds the row in cache: grad_x, and this row's grad_weight terms.
    for (int64_t j = 0; j < n; ++j) {
      const acc_t g = static_cast<acc_t>(gr[j]);
      const acc_t xv = static_cast<acc_t>(xr[j]);
      gxr[j] = static_cast<scalar_t>(r * g * static_cast<acc_t>(weight[j]) - c * xv);
      grad_weight_partial[j] += g * xv * r;
    }
  }
}
// [cpu-backward-kernel-end]

}  // namespace

// [cpu-backward-host]
std::tuple<at::Tensor, at::Tensor> rms_norm_backward_cpu(const at::Tensor& grad_y,
                                                         const at::Tensor& x,
                                                         const at::Tensor& weight,
                                                         const at::Tensor& inv_rms) {
  check_rms_norm_backward_args(grad_y, x, weight, inv_rms);
  TORCH_CHECK(x.device().is_cpu(), "rms_norm_backward_cpu: x must be a CPU tensor");
  const at::Tensor gc = grad_y.contiguous();
  const at::Tensor xc = x.contiguous();
  const at::Tensor wc = weight.contiguous();
  const at::Tensor rc = inv_rms.contiguous();
  at::Tensor grad_x = at::empty_like(xc, at::MemoryFormat::Contiguous);
  const int64_t n = xc.size(-1);
  const int64_t m = n == 0 ? 0 : xc.numel() / n;
  if (m == 0) return {grad_x, at::zeros_like(wc, at::MemoryFormat::Contiguous)};

  // grad_weight sums over all rows. Each chunk of rows owns a row of
  // `partials`, and the chunks are summed in a fixed order at the end, so the
  // result does not depend on the number of threads or on their timing. The
  // chunk size depends only on the shape (at most kMaxChunks chunks).
  constexpr int64_t kMaxChunks = 64;
  const int64_t grain_rows = std::max<int64_t>(1, at::internal::GRAIN_SIZE / n);
  const int64_t rows_per_chunk =
      std::max(grain_rows, (m + kMaxChunks - 1) / kMaxChunks);
  const int64_t chunks = (m + rows_per_chunk - 1) / rows_per_chunk;
  const at::ScalarType acc = rms_norm_acc_type(xc.scalar_type());
  at::Tensor partials = at::zeros({chunks, n}, xc.options().dtype(acc));
  at::Tensor grad_weight = at::empty_like(wc, at::MemoryFormat::Contiguous);

  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, xc.scalar_type(), "rms_norm_backward_cpu", [&] {
        using acc_t = at::opmath_type<scalar_t>;
        const scalar_t* g_ptr = gc.const_data_ptr<scalar_t>();
        const scalar_t* x_ptr = xc.const_data_ptr<scalar_t>();
        const scalar_t* w_ptr = wc.const_data_ptr<scalar_t>();
        const acc_t* r_ptr = rc.const_data_ptr<acc_t>();
        scalar_t* gx_ptr = grad_x.mutable_data_ptr<scalar_t>();
        acc_t* p_ptr = partials.mutable_data_ptr<acc_t>();
        at::parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
          for (int64_t chunk = begin; chunk < end; ++chunk) {
            const int64_t row_end = std::min(m, (chunk + 1) * rows_per_chunk);
            rms_norm_backward_rows<scalar_t>(g_ptr, x_ptr, w_ptr, r_ptr, gx_ptr,
                                             p_ptr + chunk * n, chunk * rows_per_chunk,
                                             row_end, n);
          }
        });
        // Columns are independent: sum each one over the chunks, in order.
        scalar_t* gw_ptr = grad_weight.mutable_data_ptr<scalar_t>();
        at::parallel_for(0, n, at::internal::GRAIN_SIZE / chunks + 1,
                         [&](int64_t begin, int64_t end) {
                           for (int64_t j = begin; j < end; ++j) {
                             acc_t sum = 0;
                             for (int64_t c = 0; c < chunks; ++c)
                               sum += p_ptr[c * n + j];
                             gw_ptr[j] = static_cast<scalar_t>(sum);
                           }
                         });
      });
  return {grad_x, grad_weight};
}
// [cpu-backward-host-end]

}  // namespace opguide

// [cpu-backward-register]
TORCH_LIBRARY_IMPL(opguide, CPU, m) {
  m.impl("rms_norm_backward", &opguide::rms_norm_backward_cpu);
}
// [cpu-backward-register-end]
