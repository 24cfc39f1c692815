// Pieces of the operators' error messages, spelled as Python prints them
// ("torch.float32", "(4, 8)", "1e-06"), built from strings only (see
// messages.cpp), shared by every operator's argument checks.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

namespace opguide {

std::string dtype_name(at::ScalarType t);
std::string shape_str(at::IntArrayRef sizes);
std::string number_str(double v);

}  // namespace opguide
