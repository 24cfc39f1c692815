// The platform under every kernel: the CUDA headers (or their HIP
// equivalents after torch's hipify), the warp width and the warp shuffles
// with their HIP shim. Torch-free: it compiles alone with nvcc, and with
// hipcc after hipify.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>
// OPGUIDE_NO_BF16 leaves bfloat16 out, for toolchains that predate its header
// (ROCm before 5.7 has no hip_bf16.h). Normal builds never set it.
#if !defined(OPGUIDE_NO_BF16)
#include <cuda_bf16.h>
#endif

#include <cstdint>

namespace opguide {

// [portability]
// A warp is 32 threads on NVIDIA GPUs; on AMD GPUs a wavefront is 64 threads
// on CDNA (MI200/MI300, gfx90a/gfx94x) and 32 on RDNA. kWarpSize is the
// compiler's __AMDGCN_WAVEFRONT_SIZE where it defines it, else 64 (CDNA). LLVM
// removed the macro
// (llvm/llvm-project#157463), so a wave32 (RDNA) build with a compiler that
// lacks it needs kWarpSize set to 32.
#if defined(__HIP_PLATFORM_AMD__) || defined(__HIP__)
#if defined(__AMDGCN_WAVEFRONT_SIZE)
constexpr int kWarpSize = __AMDGCN_WAVEFRONT_SIZE;
#else
constexpr int kWarpSize = 64;
#endif
// HIP's shuffles take no mask: a wavefront always runs in lock step here.
template <typename T>
__device__ __forceinline__ T shfl_xor(T v, int lane_mask) {
  return __shfl_xor(v, lane_mask);
}
#else
constexpr int kWarpSize = 32;
template <typename T>
__device__ __forceinline__ T shfl_xor(T v, int lane_mask) {
  return __shfl_xor_sync(0xffffffffu, v, lane_mask);
}
#endif
// The most warps a block of 1024 threads can hold.
constexpr int kMaxWarpsPerBlock = 1024 / kWarpSize;
// [portability-end]

}  // namespace opguide
