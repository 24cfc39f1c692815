// Pieces of the operators' error messages, spelled as Python prints them, so
// that an error reads the same from a Python wrapper, a fake kernel and the
// compiled operator called directly (declared in messages.h).
#include "messages.h"

#include <c10/util/Exception.h>

#include <cstdio>
#include <string>

namespace opguide {

// "torch.float32", as Python prints a dtype, so that both sides' errors match.
std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return "torch.float32";
    case at::kDouble:
      return "torch.float64";
    case at::kHalf:
      return "torch.float16";
    case at::kBFloat16:
      return "torch.bfloat16";
    case at::kInt:
      return "torch.int32";
    case at::kLong:
      return "torch.int64";
    case at::kShort:
      return "torch.int16";
    case at::kChar:
      return "torch.int8";
    case at::kByte:
      return "torch.uint8";
    case at::kBool:
      return "torch.bool";
    default:
      return std::string("torch.") + c10::toString(t);
  }
}

// Messages are assembled from strings only (std::to_string, snprintf), not
// by streaming numbers: streaming goes through the locale facets of the
// libstdc++ the process loaded, which need not be the one this library was
// built against; strings do not.
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
    if (i + 1 < sizes.size() || sizes.size() == 1)
      out += i + 1 < sizes.size() ? ", " : ",";
  }
  return out + ")";
}

}  // namespace opguide
