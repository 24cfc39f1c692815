// RMSNorm forward on CUDA (and on ROCm after hipify): the torch side.
// The kernels and their launcher are in the torch-free rms_norm.cuh.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "registration.h"
#include "rms_norm.cuh"
#include "rms_norm.h"

namespace opguide {
namespace {

// [cuda-types]
// at::Half and at::BFloat16 have the bit layout of CUDA's __half and
// __nv_bfloat16; the kernels are written against the CUDA types.
template <typename scalar_t> struct CudaType { using type = scalar_t; };
template <> struct CudaType<at::Half> { using type = __half; };
template <> struct CudaType<at::BFloat16> { using type = __nv_bfloat16; };
// [cuda-types-end]

// The warp size of the current device (64 on AMD CDNA GPUs), read once per device.
int current_warp_size() {
  static int cached[64] = {};
  const int device = c10::cuda::current_device();
  if (device < 64 && cached[device] != 0) return cached[device];
  int value = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&value, cudaDevAttrWarpSize, device));
  if (device < 64) cached[device] = value;
  return value;
}

}  // namespace

// [cuda-host]
at::Tensor rms_norm_cuda(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_rms_norm_args(x, weight, eps);
  TORCH_CHECK(x.is_cuda(), "rms_norm_cuda: x must be a CUDA tensor, got ", x.device().str());
  // Run on x's GPU (and allocate there) whatever the current device is.
  const c10::cuda::CUDAGuard device_guard(x.device());

  const int64_t cols = x.size(-1);
  // Rows may be strided (a slice x[:, :n] of a wider matrix): the kernel takes
  // a row stride. Anything else that is not dense is copied once.
  at::Tensor xk = x;
  int64_t row_stride = cols;
  if (x.dim() == 2 && x.stride(1) == 1 && x.size(0) > 1) {
    row_stride = x.stride(0);
  } else if (!x.is_contiguous()) {
    xk = x.contiguous();
  }
  const at::Tensor wk = weight.contiguous();
  at::Tensor y = at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  if (rows == 0) return y;

  // The kernel is queued on the stream PyTorch is using on this thread (it
  // may be a side stream, or a stream being captured into a CUDA graph).
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  const int warp_size = current_warp_size();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "rms_norm_cuda", [&] {
    using T = typename CudaType<scalar_t>::type;
    const cudaError_t err = cuda::launch_rms_norm_forward<T>(
        reinterpret_cast<const T*>(xk.const_data_ptr<scalar_t>()),
        reinterpret_cast<const T*>(wk.const_data_ptr<scalar_t>()),
        reinterpret_cast<T*>(y.mutable_data_ptr<scalar_t>()), rows, cols, row_stride,
        static_cast<float>(eps), warp_size, stream);
    C10_CUDA_CHECK(err);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
// [cuda-host-end]

}  // namespace opguide

// [cuda-register]
OPGUIDE_LIBRARY_IMPL(CUDA, m) { m.impl("rms_norm", &opguide::rms_norm_cuda); }
// [cuda-register-end]
