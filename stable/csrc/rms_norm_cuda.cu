// RMSNorm for CUDA tensors on the LibTorch stable ABI: the same four duties as
// csrc/minimal/rms_norm_minimal_cuda.cu (device guard, current stream, dtype
// dispatch, launch check), each through the stable API. The device code is
// step 3's torch-free header, unchanged: the stable ABI is about the torch
// side of the kernel only.
#include <cuda_runtime.h>
#include <torch/csrc/inductor/aoti_torch/c/shim.h>  // aoti_torch_get_current_cuda_stream
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/macros.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/Dispatch_v2.h>

#include <cstdint>
#include <limits>

#include "rms_norm.h"
#include "rms_norm_minimal.cuh"  // csrc/minimal/, shown in step 3

namespace opguide_stable {

using torch::headeronly::ScalarType;
using torch::stable::Tensor;

Tensor rms_norm_cuda(const Tensor& x, const Tensor& weight, double eps) {
  check_arguments(x, weight);
  STD_TORCH_CHECK(x.is_cuda() && weight.is_cuda() &&
                      weight.get_device_index() == x.get_device_index(),
                  "rms_norm: x and weight must be on one CUDA device");
  // Allocate and launch on x's GPU, whichever GPU is current.
  const torch::stable::accelerator::DeviceGuard guard(x.get_device_index());
  const Tensor xc = torch::stable::contiguous(x);
  const Tensor wc = torch::stable::contiguous(weight);
  Tensor y = torch::stable::empty_like(xc);
  const int64_t n = xc.size(-1);
  const int64_t m = n == 0 ? 0 : xc.numel() / n;
  STD_TORCH_CHECK(m <= std::numeric_limits<int32_t>::max(), "rms_norm: too many rows");
  // PyTorch's current stream on x's GPU, as a cudaStream_t.
  void* stream = nullptr;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream(x.get_device_index(), &stream));
  // Half and BFloat16 (torch/headeronly) convert to and from float on the
  // device, so the kernel takes them as they are.
  THO_DISPATCH_V2(
      xc.scalar_type(), "rms_norm_cuda", [&] {
        STD_CUDA_CHECK((opguide_minimal::launch_rms_norm<scalar_t, acc_type<scalar_t>>(
            xc.const_data_ptr<scalar_t>(), wc.const_data_ptr<scalar_t>(),
            y.mutable_data_ptr<scalar_t>(), m, n, eps, static_cast<cudaStream_t>(stream))));
      },
      ScalarType::Float, ScalarType::Double, ScalarType::Half, ScalarType::BFloat16);
  return y;
}

}  // namespace opguide_stable

STABLE_TORCH_LIBRARY_IMPL(opguide_stable, CUDA, m) {
  m.impl("rms_norm", TORCH_BOX(&opguide_stable::rms_norm_cuda));
}
