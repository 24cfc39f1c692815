// Registration macros for the two matmul demo libraries of gallery step 13
// (matmul_naive.cpp, matmul_tiled.cpp). Both are compiled on their own, not
// into opguide._C; the step builds them several times with different flags:
//
//   -DMATMUL_NAMESPACE=<ns>  the operator namespace (default opguide_mm)
//   -DMATMUL_FRAGMENT        define the schema with TORCH_LIBRARY_FRAGMENT
//                            instead of TORCH_LIBRARY
#pragma once

#include <string>

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#ifndef MATMUL_NAMESPACE
#define MATMUL_NAMESPACE opguide_mm
#endif

// [define-macro]
#ifdef MATMUL_FRAGMENT
// Adds definitions to a namespace that other libraries may also add to.
#define MATMUL_DEFINE_(ns, m) TORCH_LIBRARY_FRAGMENT(ns, m)
#else
// Claims the namespace: one TORCH_LIBRARY per namespace per process.
#define MATMUL_DEFINE_(ns, m) TORCH_LIBRARY(ns, m)
#endif
// [define-macro-end]
// One level of indirection so that MATMUL_NAMESPACE is expanded before ## .
#define MATMUL_DEFINE(m) MATMUL_DEFINE_(MATMUL_NAMESPACE, m)
#define MATMUL_IMPL_(ns, key, m) TORCH_LIBRARY_IMPL(ns, key, m)
#define MATMUL_IMPL(key, m) MATMUL_IMPL_(MATMUL_NAMESPACE, key, m)

namespace opguide_mm {

inline void check_matmul_args(const at::Tensor& a, const at::Tensor& b, const char* op) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2, op, ": a and b must be 2-D, got ",
              std::to_string(a.dim()), "-D and ", std::to_string(b.dim()), "-D");
  TORCH_CHECK(a.size(1) == b.size(0), op, ": b must have ", std::to_string(a.size(1)),
              " rows to match the columns of a, got ", std::to_string(b.size(0)));
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), op, ": b must have the dtype of a");
  TORCH_CHECK(a.is_cpu() && b.is_cpu(), op, ": a and b must be CPU tensors");
}

}  // namespace opguide_mm
