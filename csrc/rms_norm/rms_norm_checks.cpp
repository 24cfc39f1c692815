// Argument checks shared by the RMSNorm kernels of every backend (declared in
// rms_norm.h). The messages match the Python wrapper's in opguide/ops.py.
#include <c10/util/Exception.h>

#include <string>

#include "rms_norm.h"

namespace opguide {

void check_rms_norm_args(const at::Tensor& x, const at::Tensor& weight, double eps) {
  TORCH_CHECK_TYPE(at::isFloatingType(x.scalar_type()),
                   "rms_norm: x must be a floating-point tensor (float32, "
                   "float16, bfloat16 or float64), got ",
                   dtype_name(x.scalar_type()));
  TORCH_CHECK_TYPE(weight.scalar_type() == x.scalar_type(),
                   "rms_norm: weight must have the dtype of x (",
                   dtype_name(x.scalar_type()), "), got ",
                   dtype_name(weight.scalar_type()));
  TORCH_CHECK_VALUE(x.dim() >= 1, "rms_norm: x must have at least one dimension");
  TORCH_CHECK_VALUE(weight.dim() == 1 && weight.size(0) == x.size(-1),
                    "rms_norm: weight must have shape (", std::to_string(x.size(-1)),
                    ",) to match the last dimension of x, got ",
                    shape_str(weight.sizes()));
  TORCH_CHECK(weight.device() == x.device(),
              "rms_norm: weight must be on the device of x (", x.device().str(),
              "), got ", weight.device().str());
  TORCH_CHECK_VALUE(eps >= 0.0, "rms_norm: eps must be non-negative, got ",
                    number_str(eps));
}

void check_rms_norm_backward_args(const at::Tensor& grad_y, const at::Tensor& x,
                                  const at::Tensor& weight, const at::Tensor& inv_rms) {
  check_rms_norm_args(x, weight, 0.0);
  TORCH_CHECK_VALUE(grad_y.sizes() == x.sizes(),
                    "rms_norm_backward: grad_y must have the shape "
                    "of x ",
                    shape_str(x.sizes()), ", got ", shape_str(grad_y.sizes()));
  TORCH_CHECK_TYPE(grad_y.scalar_type() == x.scalar_type(),
                   "rms_norm_backward: grad_y must have the dtype of x (",
                   dtype_name(x.scalar_type()), "), got ",
                   dtype_name(grad_y.scalar_type()));
  const at::ScalarType acc = rms_norm_acc_type(x.scalar_type());
  TORCH_CHECK_TYPE(inv_rms.scalar_type() == acc,
                   "rms_norm_backward: inv_rms must have dtype ", dtype_name(acc),
                   ", got ", dtype_name(inv_rms.scalar_type()));
  TORCH_CHECK_VALUE(inv_rms.sizes() == x.sizes().slice(0, x.dim() - 1),
                    "rms_norm_backward: inv_rms must have shape ",
                    shape_str(x.sizes().slice(0, x.dim() - 1)), " (x.shape[:-1]), got ",
                    shape_str(inv_rms.sizes()));
  TORCH_CHECK(grad_y.device() == x.device() && inv_rms.device() == x.device(),
              "rms_norm_backward: grad_y and inv_rms must be on the device of x (",
              x.device().str(), "), got ", grad_y.device().str(), " and ",
              inv_rms.device().str());
}
}  // namespace opguide
