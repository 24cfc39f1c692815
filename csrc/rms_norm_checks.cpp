// Argument checks shared by the RMSNorm kernels of every backend (declared in
// rms_norm.h). The messages match the Python wrapper's in opguide/ops.py.
#include <c10/util/Exception.h>

#include <cstdio>
#include <string>

#include "rms_norm.h"

namespace opguide {

// "torch.float32", as Python prints a dtype, so that both sides' errors match.
std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "torch.float32";
    case at::kDouble: return "torch.float64";
    case at::kHalf: return "torch.float16";
    case at::kBFloat16: return "torch.bfloat16";
    case at::kInt: return "torch.int32";
    case at::kLong: return "torch.int64";
    case at::kShort: return "torch.int16";
    case at::kChar: return "torch.int8";
    case at::kByte: return "torch.uint8";
    case at::kBool: return "torch.bool";
    default: return std::string("torch.") + c10::toString(t);
  }
}

// Messages are assembled from strings only (std::to_string, snprintf): on one
// GPU machine with torch 2.11, streaming an integer into the message from
// this library crashed inside libstdc++ (see the closing note of the CUDA
// issue); strings take a path that does not involve locale facets.
std::string number_str(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

// "(4, 8)" or "(5,)", as Python prints a shape.
std::string shape_str(at::IntArrayRef sizes) {
  std::string out = "(";
  for (size_t i = 0; i < sizes.size(); ++i) {
    out += std::to_string(sizes[i]);
    if (i + 1 < sizes.size() || sizes.size() == 1) out += i + 1 < sizes.size() ? ", " : ",";
  }
  return out + ")";
}

void check_rms_norm_args(const at::Tensor& x, const at::Tensor& weight,
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
                    "rms_norm: weight must have shape (", std::to_string(x.size(-1)),
                    ",) to match the last dimension of x, got ", shape_str(weight.sizes()));
  TORCH_CHECK(weight.device() == x.device(),
              "rms_norm: weight must be on the device of x (", x.device().str(),
              "), got ", weight.device().str());
  TORCH_CHECK_VALUE(eps >= 0.0, "rms_norm: eps must be non-negative, got ", number_str(eps));
}

}  // namespace opguide
