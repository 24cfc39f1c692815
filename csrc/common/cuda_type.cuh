// The CUDA type of each ATen dtype, for the torch side of every operator's
// CUDA kernels (<op>_cuda.cu). c10::Half and c10::BFloat16 (at::Half and
// at::BFloat16) have the bit layout of CUDA's __half and __nv_bfloat16, and
// the torch-free kernels are written against the CUDA types: a wrapper
// dispatches on the tensor's dtype and reinterprets its pointers as
// CudaType<scalar_t>::type.
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace opguide {

template <typename scalar_t>
struct CudaType {
  using type = scalar_t;
};
template <>
struct CudaType<c10::Half> {
  using type = __half;
};
template <>
struct CudaType<c10::BFloat16> {
  using type = __nv_bfloat16;
};

}  // namespace opguide
