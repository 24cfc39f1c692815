// The fused residual-add + RMSNorm's schema in the opguide namespace
// (csrc/opguide.cpp claims it). The kernels attach to it with
// TORCH_LIBRARY_IMPL in their own files.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(opguide, m) {
  // [schema-fused-add-rms-norm]
  // residual += x in place (Tensor(a!)), then out = rms_norm(residual) * weight
  // (no scale when weight is None) in out_dtype (default: the dtype of x).
  // Returns out and the 1/rms of each row.
  m.def(
      "fused_add_rms_norm_(Tensor x, Tensor(a!) residual, Tensor? weight, float eps, "
      "ScalarType? out_dtype=None) -> (Tensor, Tensor)");
  // [schema-fused-add-rms-norm-end]
}
