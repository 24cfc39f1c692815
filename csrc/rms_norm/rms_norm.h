// Host-side declarations and argument checks shared by the RMSNorm kernels of
// every backend (CPU here, CUDA in rms_norm_cuda.cu).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <tuple>

#include "../common/launch_settings.h"
#include "../common/messages.h"

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


at::Tensor rms_norm_cpu(const at::Tensor& x, const at::Tensor& weight, double eps);

// [backward-contract]
// rms_norm_forward and rms_norm_backward (the training pair) share this
// contract on every backend:
//   inv_rms: 1 / sqrt(mean(x**2, -1) + eps), shape x.shape[:-1], dtype
//            float32 for float32/float16/bfloat16 x and float64 for float64 x;
//   grad_x:  shape and dtype of x, contiguous;
//   grad_weight: shape (N,), dtype of weight (= dtype of x), accumulated in
//            the inv_rms dtype and rounded once.
inline at::ScalarType rms_norm_acc_type(at::ScalarType t) {
  return t == at::kDouble ? at::kDouble : at::kFloat;
}

// Defined in rms_norm_checks.cpp, next to check_rms_norm_args.
void check_rms_norm_backward_args(const at::Tensor& grad_y, const at::Tensor& x,
                                  const at::Tensor& weight, const at::Tensor& inv_rms);

std::tuple<at::Tensor, at::Tensor> rms_norm_forward_cpu(const at::Tensor& x,
                                                    const at::Tensor& weight,
                                                    double eps);
std::tuple<at::Tensor, at::Tensor> rms_norm_backward_cpu(const at::Tensor& grad_y,
                                                         const at::Tensor& x,
                                                         const at::Tensor& weight,
                                                         const at::Tensor& inv_rms);

}  // namespace opguide
