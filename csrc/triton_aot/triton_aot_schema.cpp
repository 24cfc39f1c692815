// The schemas of the Triton RMSNorm kernels compiled ahead of time, and their
// Meta kernels. The signatures are those of the JIT route's operators
// (opguide/triton/ops.py): rms_norm_triton_aot is rms_norm_triton,
// launched from C++ (triton_aot_cuda.cu) with C++ autograd
// (triton_aot_autograd.cpp). The Meta kernels describe the outputs without
// running anything, for torch.compile, torch.export and opcheck; they work on
// symbolic shapes too, which the checks of rms_norm_checks.cpp (concrete
// sizes) do not, so those run where the shapes are concrete.
#include <ATen/ATen.h>
#include <c10/core/SymBool.h>
#include <torch/library.h>

#include <limits>
#include <tuple>

#include "../rms_norm/rms_norm.h"
#include "triton_aot.h"

TORCH_LIBRARY_FRAGMENT(opguide, m) {
  // y = x / sqrt(mean(x**2, dim=-1) + eps) * weight, over the last dimension;
  // differentiable (its backward is rms_norm_backward_triton_aot's).
  m.def("rms_norm_triton_aot(Tensor x, Tensor weight, float eps) -> Tensor");
  // The training pair: (y, inv_rms) with inv_rms float32 of shape x.shape[:-1],
  // and (grad_x, grad_weight) from grad_y and the forward's inv_rms.
  m.def(
      "rms_norm_forward_triton_aot(Tensor x, Tensor weight, float eps) -> (Tensor, "
      "Tensor)");
  m.def(
      "rms_norm_backward_triton_aot(Tensor grad_y, Tensor x, Tensor weight, Tensor "
      "inv_rms)"
      " -> (Tensor, Tensor)");
}

namespace opguide::triton_aot {
namespace {

// check_rms_norm_args where the sizes are numbers; where they are symbols
// (torch.compile's dynamic shapes) the same checks, the sizes compared as
// symbols (which records a guard).
void check_args(const at::Tensor& x, const at::Tensor& weight, double eps) {
  if (!symbolic(x) && !symbolic(weight)) {
    check_rms_norm_args(x, weight, eps);
    return;
  }
  TORCH_CHECK_TYPE(
      at::isFloatingType(x.scalar_type()),
      "rms_norm: x must be a floating-point tensor (float32, float16, bfloat16 or "
      "float64), got ",
      dtype_name(x.scalar_type()));
  TORCH_CHECK_TYPE(weight.scalar_type() == x.scalar_type(),
                   "rms_norm: weight must have the dtype of x (",
                   dtype_name(x.scalar_type()), "), got ",
                   dtype_name(weight.scalar_type()));
  TORCH_CHECK_VALUE(x.dim() >= 1, "rms_norm: x must have at least one dimension");
  TORCH_CHECK_VALUE(weight.dim() == 1, "rms_norm: weight must have shape (",
                    x.sym_size(-1), ",) to match the last dimension of x, got ",
                    weight.dim(), " dimensions");
  TORCH_SYM_CHECK(weight.sym_size(0).sym_eq(x.sym_size(-1)),
                  "rms_norm: weight must have shape (", x.sym_size(-1),
                  ",) to match the last dimension of x, got (", weight.sym_size(0),
                  ",)");
  TORCH_CHECK(weight.device() == x.device(),
              "rms_norm: weight must be on the device of x (", x.device().str(),
              "), got ", weight.device().str());
  TORCH_CHECK_VALUE(eps >= 0.0, "rms_norm: eps must be non-negative, got ",
                    number_str(eps));
}

void check_backward_args(const at::Tensor& grad_y, const at::Tensor& x,
                         const at::Tensor& weight, const at::Tensor& inv_rms) {
  if (!symbolic(grad_y) && !symbolic(x) && !symbolic(weight) && !symbolic(inv_rms)) {
    check_rms_norm_backward_args(grad_y, x, weight, inv_rms);
    return;
  }
  check_args(x, weight, 0.0);
  TORCH_CHECK_TYPE(grad_y.scalar_type() == x.scalar_type(),
                   "rms_norm_backward: grad_y must have the dtype of x (",
                   dtype_name(x.scalar_type()), "), got ",
                   dtype_name(grad_y.scalar_type()));
  TORCH_CHECK_TYPE(inv_rms.scalar_type() == at::kFloat,
                   "rms_norm_backward: inv_rms must have dtype torch.float32, got ",
                   dtype_name(inv_rms.scalar_type()));
  TORCH_CHECK_VALUE(
      grad_y.dim() == x.dim() && inv_rms.dim() == x.dim() - 1,
      "rms_norm_backward: grad_y must have the shape of x and inv_rms the shape "
      "x.shape[:-1]; got ",
      grad_y.dim(), " and ", inv_rms.dim(), " dimensions for x's ", x.dim());
  for (int64_t d = 0; d < x.dim(); ++d) {
    TORCH_SYM_CHECK(grad_y.sym_size(d).sym_eq(x.sym_size(d)),
                    "rms_norm_backward: grad_y must have the shape of x ",
                    x.sym_sizes(), ", got ", grad_y.sym_sizes());
    if (d < x.dim() - 1) {
      TORCH_SYM_CHECK(inv_rms.sym_size(d).sym_eq(x.sym_size(d)),
                      "rms_norm_backward: inv_rms must have shape x.shape[:-1], got ",
                      inv_rms.sym_sizes(), " for x's ", x.sym_sizes());
    }
  }
  TORCH_CHECK(grad_y.device() == x.device() && inv_rms.device() == x.device(),
              "rms_norm_backward: grad_y and inv_rms must be on the device of x (",
              x.device().str(), "), got ", grad_y.device().str(), " and ",
              inv_rms.device().str());
}

// y as the kernels write it: x's shape and dtype, contiguous.
at::Tensor like_x(const at::Tensor& x) {
  return at::empty_symint(x.sym_sizes(),
                          x.options().memory_format(at::MemoryFormat::Contiguous));
}

at::Tensor rms_norm_meta(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_args(x, weight, eps);
  return like_x(x);
}

// inv_rms is float32 whatever x's dtype, as the JIT route's fake kernel says
// (the Triton kernels take float32, float16 and bfloat16 x).
Pair rms_norm_forward_meta(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_args(x, weight, eps);
  const c10::SymIntArrayRef sizes = x.sym_sizes();
  return {like_x(x), at::empty_symint(sizes.slice(0, sizes.size() - 1),
                                      x.options().dtype(at::kFloat))};
}

Pair rms_norm_backward_meta(const at::Tensor& grad_y, const at::Tensor& x,
                            const at::Tensor& weight, const at::Tensor& inv_rms) {
  check_backward_args(grad_y, x, weight, inv_rms);
  return {like_x(x), at::empty_symint({weight.sym_size(0)}, weight.options())};
}

}  // namespace
}  // namespace opguide::triton_aot

TORCH_LIBRARY_IMPL(opguide, Meta, m) {
  m.impl("rms_norm_triton_aot", &opguide::triton_aot::rms_norm_meta);
  m.impl("rms_norm_forward_triton_aot", &opguide::triton_aot::rms_norm_forward_meta);
  m.impl("rms_norm_backward_triton_aot", &opguide::triton_aot::rms_norm_backward_meta);
}
