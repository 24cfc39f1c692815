// Host-side declarations of silu_and_mul, the gated activation of Llama-style
// MLPs: x is (..., 2*d), the gate a = x[..., :d] and the up projection
// b = x[..., d:]; y = silu(a) * b is (..., d). Shared by the CPU kernels
// (silu_and_mul_cpu.cpp) and the CUDA wrapper (silu_and_mul_cuda.cu).
#pragma once

#include <ATen/core/Tensor.h>

namespace opguide {

// The checks every backend runs before it touches memory; the messages name
// the argument and what was expected, worded as opguide/_silu_and_mul/_checks.py
// words them. Defined out of line in silu_and_mul_checks.cpp, so that nvcc's
// host pass and the C++ compiler share one definition (see rms_norm.h).
void check_silu_and_mul_args(const at::Tensor& x);
void check_silu_and_mul_backward_args(const at::Tensor& grad_y, const at::Tensor& x);

// An empty contiguous tensor shaped like x with its last dimension halved:
// the forward's output.
at::Tensor silu_and_mul_empty_output(const at::Tensor& x);

at::Tensor silu_and_mul_cpu(const at::Tensor& x);
at::Tensor silu_and_mul_backward_cpu(const at::Tensor& grad_y, const at::Tensor& x);

}  // namespace opguide
