// What the CPU and CUDA files share: the accumulation type and the argument
// checks. Stable-ABI headers only.
#pragma once

#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>

#include <type_traits>

namespace opguide_stable {

// float for float, half and bfloat16; double for double.
template <typename scalar_t>
using acc_type = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;

inline bool is_supported_dtype(torch::headeronly::ScalarType dtype) {
  using torch::headeronly::ScalarType;
  return dtype == ScalarType::Float || dtype == ScalarType::Double ||
         dtype == ScalarType::Half || dtype == ScalarType::BFloat16;
}

// Every failed check throws std::runtime_error, which reaches Python as a
// RuntimeError carrying the message.
inline void check_arguments(const torch::stable::Tensor& x, const torch::stable::Tensor& weight) {
  STD_TORCH_CHECK(is_supported_dtype(x.scalar_type()) && weight.scalar_type() == x.scalar_type(),
                  "rms_norm: x and weight must be float32, float64, float16 or bfloat16, "
                  "of one dtype");
  STD_TORCH_CHECK(x.dim() >= 1 && weight.dim() == 1 && weight.size(0) == x.size(-1),
                  "rms_norm: weight must have shape (N,) for x of shape (..., N)");
}

// The library's kernels (rms_norm.cpp, rms_norm_cuda.cu), which the Triton
// operator of a CUDA build (rms_norm_triton_aot.cu) runs where none of its
// kernels fits.
torch::stable::Tensor rms_norm_cpu(const torch::stable::Tensor& x,
                                   const torch::stable::Tensor& weight, double eps);
torch::stable::Tensor rms_norm_cuda(const torch::stable::Tensor& x,
                                    const torch::stable::Tensor& weight, double eps);

}  // namespace opguide_stable
