// RMSNorm's CUDA kernel in its simplest complete form. No torch header: nvcc
// (or hipcc, after hipify) compiles it alone. T is the stored type, Acc the
// type the sums are kept in (float, or double for double). One block per row:
// the block's threads stride over the row, sum their squares, combine the
// sums, then scale the row.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace opguide_minimal {

constexpr int kThreads = 256;  // threads per block, a power of two

template <typename T, typename Acc>
__global__ void rms_norm_kernel(const T* __restrict__ x, const T* __restrict__ weight,
                                T* __restrict__ y, int64_t n, double eps) {
  __shared__ Acc partial[kThreads];
  const int64_t offset = int64_t(blockIdx.x) * n;
  Acc sum_sq = 0;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) {
    const Acc v = static_cast<Acc>(x[offset + j]);
    sum_sq += v * v;
  }
  // Combine the block's sums: a tree in shared memory, halving at each step.
  partial[threadIdx.x] = sum_sq;
  __syncthreads();
  for (int active = kThreads / 2; active > 0; active /= 2) {
    if (threadIdx.x < active) partial[threadIdx.x] += partial[threadIdx.x + active];
    __syncthreads();
  }
  const Acc mean_sq = partial[0] / static_cast<Acc>(n);
  const Acc inv_rms = Acc(1) / sqrt(mean_sq + static_cast<Acc>(eps));
  for (int64_t j = threadIdx.x; j < n; j += kThreads) {
    y[offset + j] = static_cast<T>(static_cast<Acc>(x[offset + j]) * inv_rms *
                                   static_cast<Acc>(weight[j]));
  }
}

// m rows of n elements; returns the launch's error code.
template <typename T, typename Acc>
cudaError_t launch_rms_norm(const T* x, const T* weight, T* y, int64_t m, int64_t n,
                            double eps, cudaStream_t stream) {
  if (m == 0) return cudaSuccess;
  const unsigned int blocks = static_cast<unsigned int>(m);  // one per row
  rms_norm_kernel<T, Acc><<<blocks, kThreads, 0, stream>>>(x, weight, y, n, eps);
  return cudaGetLastError();
}

}  // namespace opguide_minimal
