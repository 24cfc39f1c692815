// The schemas of every opguide operator, defined once. Kernels live in their
// own files and attach to these schemas with TORCH_LIBRARY_IMPL, one block per
// dispatch key (CPU, CUDA).
#include <torch/library.h>
#include <torch/version.h>

// torch 2.13 added the `out` tag; older releases get the same schema untagged.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 13)
#define OPGUIDE_OUT_TAGS {at::Tag::out}
#else
#define OPGUIDE_OUT_TAGS {}
#endif

TORCH_LIBRARY(opguide, m) {
  // [schema-rms-norm]
  // y = x / sqrt(mean(x**2, dim=-1) + eps) * weight, over the last dimension.
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
  // [schema-rms-norm-end]
  // [schema-rms-norm-out]
  // The out= overload: writes into `out` (keyword-only, Tensor(a!): written,
  // never read) and returns it. The `out` tag tells torch.compile that this
  // overload is rms_norm writing into a given buffer, so Inductor can call it
  // on a buffer of its own memory plan instead of letting the kernel allocate.
  m.def("rms_norm.out(Tensor x, Tensor weight, float eps, *, Tensor(a!) out) -> Tensor(a!)",
        OPGUIDE_OUT_TAGS);
  // [schema-rms-norm-out-end]
  // [schema-rms-norm-training]
  // The training pair (step 8). rms_norm_fwd also returns the per-row
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
  m.def("fused_add_rms_norm_(Tensor x, Tensor(a!) residual, Tensor? weight, float eps, ScalarType? out_dtype=None) -> (Tensor, Tensor)");
  // [schema-fused-add-rms-norm-end]
  // [schema-rms-norm-into]
  // Private (leading underscore), CPU only: the rms_norm kernel writing into
  // an existing y (Tensor(a!): mutated in place, nothing returned), so that
  // step 11 can time the loop apart from allocating the output.
  m.def("_rms_norm_into(Tensor x, Tensor weight, float eps, Tensor(a!) y) -> ()");
  // [schema-rms-norm-into-end]
}
