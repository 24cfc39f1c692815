// RMSNorm's schemas in the opguide namespace (csrc/opguide.cpp claims it).
// The kernels attach to them with TORCH_LIBRARY_IMPL in their own files.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(opguide, m) {
  // y = x / sqrt(mean(x**2, dim=-1) + eps) * weight, over the last dimension.
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
  // [schema-rms-norm-training]
  // The training pair. rms_norm_forward also returns the per-row
  // statistic inv_rms = 1 / sqrt(mean(x**2, dim=-1) + eps), shape x.shape[:-1],
  // float32 (float64 for float64 x), which is all that backward needs besides
  // the inputs. rms_norm_backward returns (grad_x, grad_weight).
  m.def("rms_norm_forward(Tensor x, Tensor weight, float eps) -> (Tensor, Tensor)");
  m.def(
      "rms_norm_backward(Tensor grad_y, Tensor x, Tensor weight, Tensor inv_rms)"
      " -> (Tensor, Tensor)");
  // [schema-rms-norm-training-end]
}
