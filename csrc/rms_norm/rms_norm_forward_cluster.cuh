// RMSNorm forward for long rows: one row per thread-block cluster. Torch-free.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>
// OPGUIDE_NO_BF16 leaves bfloat16 out, for toolchains that predate its header
// (ROCm before 5.7 has no hip_bf16.h). Normal builds never set it.
#if !defined(OPGUIDE_NO_BF16)
#include <cuda_bf16.h>
#endif

#include <cstdint>

#include "../common/async_copy.cuh"
#include "../common/cluster.cuh"
#include "../common/launch.cuh"
#include "../common/vec.cuh"
#include "rms_norm_config.h"

namespace opguide {

// Forward: one row per cluster of C blocks, block k of the cluster taking
// slice k of the row. Each thread copies its kVecs vectors of the slice into
// shared memory with cp.async and loads its vectors of the weight into
// registers meanwhile; the row's sum goes through push_sum; then each thread
// scales its own vectors, read back from shared memory. A block is small
// (kThreads threads, a 16 KiB slice for 128 x 8 vectors), so many blocks
// share a multiprocessor and keep many loads in flight, and a block that
// waits for its cluster's sum leaves the multiprocessor to the others.
// Persistent clusters that loop over rows, one block of 512 threads per
// multiprocessor holding its slice in registers, were 3 to 5 points of a
// copy slower from 32768 elements on (tools/sweep_rms_norm_forward_cluster.cu,
// docs/recorded/sweep_rms_norm_forward_cluster_h100.txt).
template <typename T, int kVec, int kThreads, int kVecs>
__global__ void __launch_bounds__(kThreads) rms_norm_forward_cluster_kernel(
    const T* __restrict__ x,       // [rows, cols], row r at x + r * x_row_stride
    const T* __restrict__ weight,  // [cols]
    T* __restrict__ y,             // [rows, cols], dense
    typename AccType<T>::type* __restrict__ inv_rms_out,  // [rows], or null
    int64_t rows, int64_t cols, int64_t x_row_stride, float eps) {
  using Acc = typename AccType<T>::type;
  using V = Vec<T, kVec>;
  constexpr int kWarps = kThreads / kWarpSize;
  __shared__ V xs[kThreads * kVecs];
  __shared__ PushSlots<Acc, kWarps, 1> push;
  wait_for_previous_grid();
  allow_next_grid();
  const int64_t row = blockIdx.x / cluster_blocks();
  const Slice s = cluster_slice(cols / kVec);
  const V* xr = reinterpret_cast<const V*>(x + row * x_row_stride) + s.begin;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int i = threadIdx.x + k * kThreads;
    if (i < s.count) copy_async(&xs[i], &xr[i]);
  }
  copy_async_commit();
  const V* wv = reinterpret_cast<const V*>(weight) + s.begin;
  V w[kVecs];
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int i = threadIdx.x + k * kThreads;
    if (i < s.count) w[k] = wv[i];
  }
  push_slots_init(push);  // overlaps the copies
  copy_async_wait<0>();   // a thread reads back only what it copied itself
  Acc sum_sq = 0;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int i = threadIdx.x + k * kThreads;
    if (i < s.count) {
      const V v = xs[i];
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        const Acc a = to_acc(v.val[e]);
        sum_sq += a * a;
      }
    }
  }
  sum_sq = push_sum(sum_sq, push, 0);
  const Acc inv_rms =
      Acc(1) / sqrt(sum_sq / static_cast<Acc>(cols) + static_cast<Acc>(eps));
  if (inv_rms_out != nullptr && cluster_rank() == 0 && threadIdx.x == 0)
    inv_rms_out[row] = inv_rms;
  V* yr = reinterpret_cast<V*>(y + row * cols) + s.begin;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int i = threadIdx.x + k * kThreads;
    if (i < s.count) {
      const V v = xs[i];
      const V wk = keep_packed(w[k]);  // else bfloat16 holds its weight as floats
      V out;
#pragma unroll
      for (int e = 0; e < kVec; ++e)
        out.val[e] = from_acc<T>(to_acc(v.val[e]) * inv_rms * to_acc(wk.val[e]));
      yr[i] = out;
    }
  }
}

}  // namespace opguide
