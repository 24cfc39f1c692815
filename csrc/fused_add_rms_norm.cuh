// Device code of the fused residual-add + RMSNorm: residual += x in place,
// out = rms_norm(residual) * weight. One block per row, float (or double)
// accumulation, 16-byte vector accesses when the host says they are aligned.
//
// This header includes no torch header: it builds with nvcc and with hipcc
// alone, and fused_add_rms_norm_cuda.cu wraps it for the dispatcher.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>
// OPGUIDE_NO_BF16 leaves bfloat16 out, for HIP toolchains without hip_bf16.h.
#if !defined(OPGUIDE_NO_BF16)
#include <cuda_bf16.h>
#endif

#include <cstdint>

#include "launch.cuh"

namespace opguide {
namespace fused {

// [shim]
// Written with CUDA's names; torch's hipify renames them for ROCm. What hipify
// cannot rename is spelled here: the warp width (a wavefront is 64 lanes on
// AMD CDNA GPUs, 32 on RDNA) and the shuffle (HIP's takes no lane mask).
#if defined(__HIP_PLATFORM_AMD__) || defined(__HIP__)
#if defined(__AMDGCN_WAVEFRONT_SIZE)
constexpr int kWarpSize = __AMDGCN_WAVEFRONT_SIZE;
#else
constexpr int kWarpSize = 64;
#endif
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
// [shim-end]

constexpr int kMaxThreads = 1024;
constexpr int kMaxWarps = kMaxThreads / kWarpSize;

// [conversions]
// Explicit conversions: PyTorch builds CUDA code with
// __CUDA_NO_HALF_CONVERSIONS__, so __half and bfloat16 have no implicit casts.
__device__ __forceinline__ float widen(float v) { return v; }
__device__ __forceinline__ double widen(double v) { return v; }
__device__ __forceinline__ float widen(__half v) { return __half2float(v); }
#if !defined(OPGUIDE_NO_BF16)
__device__ __forceinline__ float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
#endif

template <typename T>
struct Narrow {  // float and double
  template <typename A>
  __device__ static T from(A v) { return static_cast<T>(v); }
};
template <>
struct Narrow<__half> {
  template <typename A>
  __device__ static __half from(A v) { return __float2half_rn(static_cast<float>(v)); }
};
#if !defined(OPGUIDE_NO_BF16)
template <>
struct Narrow<__nv_bfloat16> {
  template <typename A>
  __device__ static __nv_bfloat16 from(A v) {
    return __float2bfloat16_rn(static_cast<float>(v));
  }
};
#endif
// [conversions-end]

// kVec elements moved as one access: 16 bytes for the widest type of a call.
template <typename T, int kVec>
struct alignas(sizeof(T) * kVec) Vec {
  T v[kVec];
};

// [block-sum]
template <typename acc_t>
__device__ __forceinline__ acc_t warp_sum(acc_t v) {
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) v += shfl_xor(v, offset);
  return v;
}

// Sum over the block; every thread gets the result. blockDim.x must be a
// multiple of kWarpSize.
template <typename acc_t>
__device__ acc_t block_sum(acc_t v, acc_t* shared) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int num_warps = blockDim.x / kWarpSize;
  v = warp_sum(v);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = warp_sum(lane < num_warps ? shared[lane] : acc_t(0));
    if (lane == 0) shared[0] = v;
  }
  __syncthreads();
  return shared[0];
}
// [block-sum-end]

// [kernel]
// x and weight are x_t, the residual res_t, the output out_t; acc_t is float
// or double. kVec > 1 only when every row of every array is aligned to
// kVec elements and n is a multiple of kVec (the host checks).
template <typename x_t, typename res_t, typename out_t, typename acc_t, int kVec>
__global__ void fused_add_rms_norm_kernel(const x_t* __restrict__ x, res_t* __restrict__ residual,
                                          const x_t* __restrict__ weight,  // may be null
                                          out_t* __restrict__ out, acc_t* __restrict__ inv_rms,
                                          int64_t n, acc_t eps) {
  __shared__ acc_t shared[kMaxWarps];
  cuda::wait_for_previous_grid();  // launch.cuh: may start before the previous kernel ends
  cuda::allow_next_grid();
  const int64_t row = blockIdx.x;
  const int64_t n_vec = n / kVec;
  const auto* x_row = reinterpret_cast<const Vec<x_t, kVec>*>(x + row * n);
  auto* res_row = reinterpret_cast<Vec<res_t, kVec>*>(residual + row * n);
  auto* out_row = reinterpret_cast<Vec<out_t, kVec>*>(out + row * n);
  const auto* w_vec = reinterpret_cast<const Vec<x_t, kVec>*>(weight);

  // Pass 1: h = x + residual, rounded once to res_t and stored; sum of h^2.
  acc_t sum_sq = 0;
  for (int64_t i = threadIdx.x; i < n_vec; i += blockDim.x) {
    const Vec<x_t, kVec> xv = x_row[i];
    Vec<res_t, kVec> hv = res_row[i];
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      hv.v[k] = Narrow<res_t>::from(static_cast<acc_t>(widen(xv.v[k])) +
                                    static_cast<acc_t>(widen(hv.v[k])));
      const acc_t h = static_cast<acc_t>(widen(hv.v[k]));
      sum_sq += h * h;
    }
    res_row[i] = hv;
  }
  const acc_t total = block_sum(sum_sq, shared);
  const acc_t inv = acc_t(1) / sqrt(total / static_cast<acc_t>(n) + eps);
  if (threadIdx.x == 0) inv_rms[row] = inv;

  // Pass 2: each thread reads back the residual elements it wrote itself
  // (same index mapping), from cache, and writes the output.
  for (int64_t i = threadIdx.x; i < n_vec; i += blockDim.x) {
    const Vec<res_t, kVec> hv = res_row[i];
    Vec<out_t, kVec> yv;
    Vec<x_t, kVec> wv;
    if (weight != nullptr) wv = w_vec[i];
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      acc_t y = static_cast<acc_t>(widen(hv.v[k])) * inv;
      if (weight != nullptr) y *= static_cast<acc_t>(widen(wv.v[k]));
      yv.v[k] = Narrow<out_t>::from(y);
    }
    out_row[i] = yv;
  }
}
// [kernel-end]

// [launcher]
// The block size for rows of n elements moved kVec at a time: about one
// vector per thread, a power of two from 64 (a whole wavefront on AMD too)
// to kMaxThreads.
inline int fused_block_size(int64_t n, int vec) {
  const int64_t items = n / vec;
  int threads = 64;
  while (threads < items && threads < kMaxThreads) threads *= 2;
  return threads;
}

// Elements per 16-byte access of the widest of the three types.
template <typename x_t, typename res_t, typename out_t>
constexpr int fused_vector_width() {
  return 16 / (sizeof(x_t) > sizeof(res_t)
                   ? (sizeof(x_t) > sizeof(out_t) ? sizeof(x_t) : sizeof(out_t))
                   : (sizeof(res_t) > sizeof(out_t) ? sizeof(res_t) : sizeof(out_t)));
}

// Launches one block per row on `stream` and returns the launch's error; with
// programmatic dependent launch when `pdl` (launch.cuh). The caller passes
// vectorize = true only when n is a multiple of the vector width and every
// pointer is aligned to a whole vector (16 bytes of the widest type).
template <typename x_t, typename res_t, typename out_t, typename acc_t>
cudaError_t launch_fused_add_rms_norm(const x_t* x, res_t* residual, const x_t* weight,
                                      out_t* out, acc_t* inv_rms, int64_t m, int64_t n,
                                      acc_t eps, bool vectorize, cudaStream_t stream,
                                      bool pdl = false) {
  constexpr int kVec = fused_vector_width<x_t, res_t, out_t>();
  const dim3 grid(static_cast<unsigned int>(m));
  if (vectorize && kVec > 1) {
    return cuda::launch_kernel(fused_add_rms_norm_kernel<x_t, res_t, out_t, acc_t, kVec>, grid,
                               dim3(fused_block_size(n, kVec)), 0, stream, pdl, x, residual,
                               weight, out, inv_rms, n, eps);
  }
  return cuda::launch_kernel(fused_add_rms_norm_kernel<x_t, res_t, out_t, acc_t, 1>, grid,
                             dim3(fused_block_size(n, 1)), 0, stream, pdl, x, residual, weight,
                             out, inv_rms, n, eps);
}
// [launcher-end]

}  // namespace fused
}  // namespace opguide
