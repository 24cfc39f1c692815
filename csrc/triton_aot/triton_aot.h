// The torch side of the Triton RMSNorm kernels compiled ahead of time: what
// the files of this folder share. The operators (triton_aot_schema.cpp) have
// the signatures of the JIT route's (opguide/triton/ops.py); the CUDA kernel
// (triton_aot_cuda.cu) launches the build's artifacts (artifacts.h) with the
// plans of plan.h, and every call that no artifact fits goes to the JIT
// route's operator through the functions below (triton_aot_fallback.cpp).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <tuple>

#include "route.h"  // Fallback

namespace opguide::triton_aot {

using Pair = std::tuple<at::Tensor, at::Tensor>;

// The JIT route's operators, called through the dispatcher after a warning
// (once per kind of reason, or every time under torch.set_warn_always(True))
// that names the reason; an error naming it when `import opguide.triton` has
// not registered them in this process.
at::Tensor jit_rms_norm(const Fallback& why, const at::Tensor& x,
                        const at::Tensor& weight, double eps);
Pair jit_rms_norm_forward(const Fallback& why, const at::Tensor& x,
                          const at::Tensor& weight, double eps);
Pair jit_rms_norm_backward(const Fallback& why, const at::Tensor& grad_y,
                           const at::Tensor& x, const at::Tensor& weight,
                           const at::Tensor& inv_rms);

// The JIT route's operator opguide::`jit_op`, for a call of opguide::`op`
// that `why` sends there, after the warning above; the error above when it
// is not registered. The calls above go through it, and so do other
// operators' (their own files of this folder).
c10::OperatorHandle jit_operator(const char* op, const char* jit_op,
                                 const Fallback& why);

// Whether `t`'s sizes or strides are symbols (torch.compile's dynamic shapes):
// the Meta kernels then compare them as symbols, which records a guard.
inline bool symbolic(const at::Tensor& t) {
  return t.unsafeGetTensorImpl()->has_symbolic_sizes_strides();
}

}  // namespace opguide::triton_aot
