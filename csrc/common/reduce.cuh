// Sums over a warp and over the rows of a block. Torch-free.
#pragma once

#include "platform.cuh"

namespace opguide {

template <typename Acc>
__device__ __forceinline__ Acc warp_sum(Acc v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += shfl_xor(v, offset);
  return v;
}

// Sums v over the threads of one row: blockDim.x threads, a multiple of the
// warp size (warps never straddle two rows), or a power of two below it (a
// warp then holds several whole rows, summed apart by shuffles within each
// group of blockDim.x lanes). Every thread gets its row's total.
//
// The warps' partials go through shared memory and are added in a fixed
// order, by a loop (kShuffleTotal false) or by each warp with shuffles (one
// load per thread instead of a chain of loads). Shuffles make smaller code;
// in the cluster backward they cost spills and long-row speed, so the RMSNorm
// kernels loop and the fused kernels shuffle (python -m guidekit.benchmark
// --sweep compares them).
template <typename Acc, bool kShuffleTotal = false>
__device__ __forceinline__ Acc row_sum(Acc v, Acc* shared) {
  if (blockDim.x < kWarpSize) {
    for (int offset = blockDim.x / 2; offset > 0; offset /= 2) v += shfl_xor(v, offset);
    return v;
  }
  v = warp_sum(v);
  const int warps_per_row = blockDim.x / kWarpSize;
  if (warps_per_row == 1) return v;
  const int lane = threadIdx.x % kWarpSize;
  const int first_warp = threadIdx.y * warps_per_row;
  if (lane == 0) shared[first_warp + threadIdx.x / kWarpSize] = v;
  __syncthreads();
  if constexpr (kShuffleTotal) {
    return warp_sum(lane < warps_per_row ? shared[first_warp + lane] : Acc(0));
  }
  Acc total = 0;
  for (int w = 0; w < warps_per_row; ++w) total += shared[first_warp + w];
  return total;
}

}  // namespace opguide
