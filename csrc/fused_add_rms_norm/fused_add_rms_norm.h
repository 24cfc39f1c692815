// Host-side argument checks and declarations of the fused residual-add +
// RMSNorm operator, shared by its CPU (fused_add_rms_norm_cpu.cpp) and CUDA
// (fused_add_rms_norm_cuda.cu) kernels.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <optional>
#include <tuple>

#include "../rms_norm/rms_norm.h"

namespace opguide {

// Raises a clear error for arguments the kernels do not accept. Defined once,
// in fused_add_rms_norm_checks.cpp, for the CPU and CUDA kernels alike.
void check_fused_add_rms_norm_args(const at::Tensor& x, const at::Tensor& residual,
                                   const std::optional<at::Tensor>& weight, double eps,
                                   std::optional<at::ScalarType> out_dtype);

// The dtype of the 1/rms output and of the accumulation: float64 when the
// residual is float64, float32 otherwise.
inline at::ScalarType fused_acc_dtype(const at::Tensor& residual) {
  return residual.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// The operator's two new outputs, allocated on the device of x: out (the
// shape of x, in out_dtype or the dtype of x) and inv_rms (one value per
// row, in fused_acc_dtype).
inline std::tuple<at::Tensor, at::Tensor> fused_add_rms_norm_outputs(
    const at::Tensor& x, const at::Tensor& residual,
    std::optional<at::ScalarType> out_dtype) {
  at::Tensor out =
      at::empty(x.sizes(), x.options().dtype(out_dtype.value_or(x.scalar_type())));
  at::Tensor inv_rms = at::empty(x.sizes().slice(0, x.dim() - 1),
                                 x.options().dtype(fused_acc_dtype(residual)));
  return {out, inv_rms};
}

std::tuple<at::Tensor, at::Tensor> fused_add_rms_norm_cpu(
    const at::Tensor& x, at::Tensor& residual, const std::optional<at::Tensor>& weight,
    double eps, std::optional<at::ScalarType> out_dtype);

}  // namespace opguide
