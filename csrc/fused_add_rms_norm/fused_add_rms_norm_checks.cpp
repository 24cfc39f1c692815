// Argument checks of the fused residual-add + RMSNorm operator, compiled once
// for its CPU and CUDA kernels (declared in fused_add_rms_norm.h). Messages are
// built from strings, like those of rms_norm_checks.cpp.
#include <ATen/MemoryOverlap.h>
#include <c10/util/Exception.h>

#include <string>

#include "fused_add_rms_norm.h"

namespace opguide {

// [fused-checks]
// The messages match the Python wrapper in opguide/fused_add_rms_norm.py.
void check_fused_add_rms_norm_args(const at::Tensor& x, const at::Tensor& residual,
                                   const std::optional<at::Tensor>& weight, double eps,
                                   std::optional<at::ScalarType> out_dtype) {
  const char* op = "fused_add_rms_norm_: ";
  TORCH_CHECK_TYPE(at::isFloatingType(x.scalar_type()), op,
                   "x must be a floating-point tensor (float32, float16, bfloat16 or "
                   "float64), got ",
                   dtype_name(x.scalar_type()));
  TORCH_CHECK_VALUE(x.dim() >= 1, op, "x must have at least one dimension");
  TORCH_CHECK_VALUE(residual.sizes() == x.sizes(), op,
                    "residual must have the shape of x ", shape_str(x.sizes()),
                    ", got ", shape_str(residual.sizes()));
  // A float32 residual stream under float16/bfloat16 activations is common.
  TORCH_CHECK_TYPE(
      residual.scalar_type() == x.scalar_type() || residual.scalar_type() == at::kFloat,
      op, "residual must have the dtype of x (", dtype_name(x.scalar_type()),
      ") or torch.float32, got ", dtype_name(residual.scalar_type()));
  TORCH_CHECK(residual.device() == x.device(), op,
              "residual must be on the device of x (", x.device().str(), "), got ",
              residual.device().str());
  if (weight.has_value()) {
    const at::Tensor& w = *weight;
    TORCH_CHECK_TYPE(w.scalar_type() == x.scalar_type(), op,
                     "weight must have the dtype of x (", dtype_name(x.scalar_type()),
                     "), got ", dtype_name(w.scalar_type()));
    TORCH_CHECK_VALUE(w.dim() == 1 && w.size(0) == x.size(-1), op,
                      "weight must have shape (", std::to_string(x.size(-1)),
                      ",) to match the last dimension of x, got ",
                      shape_str(w.sizes()));
    TORCH_CHECK(w.device() == x.device(), op, "weight must be on the device of x (",
                x.device().str(), "), got ", w.device().str());
  }
  if (out_dtype.has_value()) {
    TORCH_CHECK_TYPE(
        at::isFloatingType(*out_dtype), op,
        "out_dtype must be a floating-point dtype (float32, float16, bfloat16 "
        "or float64), got ",
        dtype_name(*out_dtype));
  }
  TORCH_CHECK_VALUE(eps >= 0.0, op, "eps must be non-negative, got ", number_str(eps));
  // Writing through a tensor whose elements share memory (an expand()ed
  // view) would make the result depend on the order of the writes.
  TORCH_CHECK(at::has_internal_overlap(residual) != at::MemOverlap::Yes, op,
              "residual must not have elements that share memory (e.g. an expand()ed "
              "tensor); pass residual.clone()");
}
// [fused-checks-end]

}  // namespace opguide
