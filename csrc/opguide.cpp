// The schemas of every opguide operator, defined once.
//
// This is TORCH_LIBRARY(opguide, m); see registration.h for why the namespace
// is spelled through a macro. Kernels live in their own files and attach to
// these schemas with TORCH_LIBRARY_IMPL (OPGUIDE_LIBRARY_IMPL) per dispatch key.
#include "registration.h"

OPGUIDE_LIBRARY(m) {
  // [schema-rms-norm]
  // y = x / sqrt(mean(x**2, dim=-1) + eps) * weight, over the last dimension.
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
  // [schema-rms-norm-end]
}
