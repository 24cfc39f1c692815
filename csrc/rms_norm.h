// Host-side declarations and argument checks shared by the RMSNorm kernels of
// every backend (CPU here, CUDA in rms_norm_cuda.cu).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

namespace opguide {

// Checks what every backend needs before it touches memory. The messages name
// the argument and what was expected; the Python wrapper raises the same ones.
//
// Defined out of line in rms_norm_checks.cpp, on purpose: an inline function
// that formats messages would be compiled both by the C++ compiler (in .cpp
// files) and by nvcc's host pass (in .cu files), possibly with different
// language settings, and the linker keeps one copy for both. Compiling it
// once in a .cpp keeps one definition for every caller.
void check_rms_norm_args(const at::Tensor& x, const at::Tensor& weight, double eps);

// Pieces of error messages, spelled as Python prints them ("torch.float32",
// "(4, 8)", "1e-06"), built from strings only (see rms_norm_checks.cpp).
std::string dtype_name(at::ScalarType t);
std::string shape_str(at::IntArrayRef sizes);
std::string number_str(double v);

at::Tensor rms_norm_cpu(const at::Tensor& x, const at::Tensor& weight, double eps);

}  // namespace opguide
