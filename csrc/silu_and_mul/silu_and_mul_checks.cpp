// Argument checks of silu_and_mul on every backend (declared in
// silu_and_mul.h). The messages match opguide/_silu_and_mul/_checks.py, so an
// error reads the same from the Python wrapper, the fake kernels and
// torch.ops.opguide.silu_and_mul called directly.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <string>
#include <vector>

#include "../common/messages.h"
#include "silu_and_mul.h"

namespace opguide {

void check_silu_and_mul_args(const at::Tensor& x) {
  const at::ScalarType t = x.scalar_type();
  TORCH_CHECK_TYPE(
      t == at::kFloat || t == at::kHalf || t == at::kBFloat16 || t == at::kDouble,
      "silu_and_mul: x must be a floating-point tensor (float32, "
      "float16, bfloat16 or float64), got ",
      dtype_name(t));
  TORCH_CHECK_VALUE(x.dim() >= 1,
                    "silu_and_mul: x must have at least one dimension, (..., 2*d), "
                    "got a 0-d tensor");
  TORCH_CHECK_VALUE(x.size(-1) % 2 == 0,
                    "silu_and_mul: the last dimension of x must be even (x is "
                    "(..., 2*d), the gate then the up projection), got shape ",
                    shape_str(x.sizes()));
}

void check_silu_and_mul_backward_args(const at::Tensor& grad_y, const at::Tensor& x) {
  check_silu_and_mul_args(x);
  std::vector<int64_t> y_shape = x.sizes().vec();
  y_shape.back() /= 2;
  TORCH_CHECK_VALUE(grad_y.sizes() == at::IntArrayRef(y_shape),
                    "silu_and_mul_backward: grad_y must have the shape of y ",
                    shape_str(y_shape), " (x.shape[:-1] + (d,)), got ",
                    shape_str(grad_y.sizes()));
  TORCH_CHECK_TYPE(grad_y.scalar_type() == x.scalar_type(),
                   "silu_and_mul_backward: grad_y must have the dtype of x (",
                   dtype_name(x.scalar_type()), "), got ",
                   dtype_name(grad_y.scalar_type()));
  TORCH_CHECK(grad_y.device() == x.device(),
              "silu_and_mul_backward: grad_y must be on the device of x (",
              x.device().str(), "), got ", grad_y.device().str());
}

at::Tensor silu_and_mul_empty_output(const at::Tensor& x) {
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() /= 2;
  return at::empty(shape, x.options().memory_format(at::MemoryFormat::Contiguous));
}

}  // namespace opguide
