// The schemas of every opguide operator, defined once. Kernels live in their
// own files and attach to these schemas with TORCH_LIBRARY_IMPL, one block per
// dispatch key (CPU, CUDA).
#include <torch/library.h>

TORCH_LIBRARY(opguide, m) {
  // y = x / sqrt(mean(x**2, dim=-1) + eps) * weight, over the last dimension.
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
  // [schema-rms-norm-training]
  // The training pair. rms_norm_fwd also returns the per-row
  // statistic inv_rms = 1 / sqrt(mean(x**2, dim=-1) + eps), shape x.shape[:-1],
  // float32 (float64 for float64 x), which is all that backward needs besides
  // the inputs. rms_norm_backward returns (grad_x, grad_weight).
  m.def("rms_norm_fwd(Tensor x, Tensor weight, float eps) -> (Tensor, Tensor)");
  m.def(
      "rms_norm_backward(Tensor grad_y, Tensor x, Tensor weight, Tensor inv_rms)"
      " -> (Tensor, Tensor)");
  // [schema-rms-norm-training-end]
  // [schema-fused-add-rms-norm]
  // residual += x in place (Tensor(a!)), then out = rms_norm(residual) * weight
  // (no scale when weight is None) in out_dtype (default: the dtype of x).
  // Returns out and the 1/rms of each row.
  m.def(
      "fused_add_rms_norm_(Tensor x, Tensor(a!) residual, Tensor? weight, float eps, "
      "ScalarType? out_dtype=None) -> (Tensor, Tensor)");
  // [schema-fused-add-rms-norm-end]
}
