// Host-side declarations and argument checks shared by the RMSNorm kernels of
// every backend (CPU here, CUDA in rms_norm_cuda.cu).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <string>
#include <tuple>

namespace opguide {

// "torch.float32", as Python prints a dtype, so that both sides' errors match.
inline std::string dtype_name(at::ScalarType t) {
  return "torch." + std::string(c10::getDtypeNames(t).first);
}

// "(4, 8)" or "(5,)", as Python prints a shape.
inline std::string shape_str(at::IntArrayRef sizes) {
  std::string out = "(";
  for (size_t i = 0; i < sizes.size(); ++i) {
    out += std::to_string(sizes[i]);
    if (i + 1 < sizes.size() || sizes.size() == 1) out += i + 1 < sizes.size() ? ", " : ",";
  }
  return out + ")";
}

// Checks what every backend needs before it touches memory. The messages name
// the argument and what was expected; the Python wrapper raises the same ones.
inline void check_rms_norm_args(const at::Tensor& x, const at::Tensor& weight,
                                double eps) {
  TORCH_CHECK_TYPE(at::isFloatingType(x.scalar_type()),
                   "rms_norm: x must be a floating-point tensor (float32, "
                   "float16, bfloat16 or float64), got ", dtype_name(x.scalar_type()));
  TORCH_CHECK_TYPE(weight.scalar_type() == x.scalar_type(),
                   "rms_norm: weight must have the dtype of x (",
                   dtype_name(x.scalar_type()), "), got ",
                   dtype_name(weight.scalar_type()));
  TORCH_CHECK_VALUE(x.dim() >= 1, "rms_norm: x must have at least one dimension");
  TORCH_CHECK_VALUE(weight.dim() == 1 && weight.size(0) == x.size(-1),
                    "rms_norm: weight must have shape (", x.size(-1),
                    ",) to match the last dimension of x, got ", shape_str(weight.sizes()));
  TORCH_CHECK(weight.device() == x.device(),
              "rms_norm: weight must be on the device of x (", x.device(),
              "), got ", weight.device());
  TORCH_CHECK_VALUE(eps >= 0.0, "rms_norm: eps must be non-negative, got ", eps);
}

at::Tensor rms_norm_cpu(const at::Tensor& x, const at::Tensor& weight, double eps);

// [backward-contract]
// rms_norm_fwd and rms_norm_backward (the training pair, step 8) share this
// contract on every backend:
//   inv_rms: 1 / sqrt(mean(x**2, -1) + eps), shape x.shape[:-1], dtype
//            float32 for float32/float16/bfloat16 x and float64 for float64 x;
//   grad_x:  shape and dtype of x, contiguous;
//   grad_weight: shape (N,), dtype of weight (= dtype of x), accumulated in
//            the inv_rms dtype and rounded once.
inline at::ScalarType rms_norm_acc_type(at::ScalarType t) {
  return t == at::kDouble ? at::kDouble : at::kFloat;
}

inline void check_rms_norm_backward_args(const at::Tensor& grad_y, const at::Tensor& x,
                                         const at::Tensor& weight,
                                         const at::Tensor& inv_rms) {
  check_rms_norm_args(x, weight, 0.0);
  TORCH_CHECK_VALUE(grad_y.sizes() == x.sizes(), "rms_norm_backward: grad_y must have the shape "
                    "of x ", shape_str(x.sizes()), ", got ", shape_str(grad_y.sizes()));
  TORCH_CHECK_TYPE(grad_y.scalar_type() == x.scalar_type(),
                   "rms_norm_backward: grad_y must have the dtype of x (",
                   dtype_name(x.scalar_type()), "), got ", dtype_name(grad_y.scalar_type()));
  const at::ScalarType acc = rms_norm_acc_type(x.scalar_type());
  TORCH_CHECK_TYPE(inv_rms.scalar_type() == acc, "rms_norm_backward: inv_rms must have dtype ",
                   dtype_name(acc), ", got ", dtype_name(inv_rms.scalar_type()));
  TORCH_CHECK_VALUE(inv_rms.sizes() == x.sizes().slice(0, x.dim() - 1),
                    "rms_norm_backward: inv_rms must have shape ",
                    shape_str(x.sizes().slice(0, x.dim() - 1)), " (x.shape[:-1]), got ",
                    shape_str(inv_rms.sizes()));
  TORCH_CHECK(grad_y.device() == x.device() && inv_rms.device() == x.device(),
              "rms_norm_backward: grad_y and inv_rms must be on the device of x (", x.device(),
              "), got ", grad_y.device(), " and ", inv_rms.device());
}
// [backward-contract-end]

std::tuple<at::Tensor, at::Tensor> rms_norm_fwd_cpu(const at::Tensor& x,
                                                    const at::Tensor& weight, double eps);
std::tuple<at::Tensor, at::Tensor> rms_norm_backward_cpu(const at::Tensor& grad_y,
                                                         const at::Tensor& x,
                                                         const at::Tensor& weight,
                                                         const at::Tensor& inv_rms);

}  // namespace opguide
