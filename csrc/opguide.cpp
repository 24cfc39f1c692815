// The opguide namespace, claimed once for this library. Each operator's folder
// defines its own schemas with TORCH_LIBRARY_FRAGMENT (RMSNorm's:
// csrc/rms_norm/rms_norm_schema.cpp) and attaches its kernels with
// TORCH_LIBRARY_IMPL, one block per dispatch key (CPU, CUDA, Autograd), so an
// operator is added without editing this file.
#include <torch/library.h>

TORCH_LIBRARY(opguide, m) {}
