// RMSNorm forward, one block per row, device code (the backward:
// rms_norm_backward.cuh). Torch-free on purpose: this header compiles alone
// with nvcc, and with hipcc after torch's hipify, so both toolchains can
// check it on a machine without a GPU. The host wrapper (rms_norm_cuda.cu)
// holds everything that needs torch.
//
// Layout: x is rows x cols; row r starts at x + r * x_row_stride and its
// elements are contiguous. y is dense (rows, cols). weight is dense (cols,).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>
// OPGUIDE_NO_BF16 leaves bfloat16 out, for toolchains that predate its header
// (ROCm before 5.7 has no hip_bf16.h). Normal builds never set it.
#if !defined(OPGUIDE_NO_BF16)
#include <cuda_bf16.h>
#endif

#include <cstdint>

#include "../common/keep_packed.cuh"
#include "../common/launch.cuh"
#include "../common/reduce.cuh"
#include "../common/vec.cuh"
#include "rms_norm_config.h"

namespace opguide {

// One row per threadIdx.y, blockDim.x threads per row. Each thread keeps up to
// kRegVecs vectors of its row in registers, so x is read from memory once:
// pass 1 loads and sums squares, pass 2 scales what is already in registers.
// The matching weight vectors are loaded in pass 1 too, so that their loads
// overlap the reduction instead of following it.
// With kChunked, rows longer than blockDim.x * kRegVecs vectors re-read the
// rest in pass 2 (from L2, which still holds it); without it that code is
// compiled out, which leaves the common case with fewer registers.
template <typename T, int kVec, int kRegVecs, bool kChunked>
__global__ void __launch_bounds__(1024) rms_norm_forward_kernel(
    const T* __restrict__ x,       // [rows, cols], row r at x + r * x_row_stride
    const T* __restrict__ weight,  // [cols]
    T* __restrict__ y,             // [rows, cols], dense
    typename AccType<T>::type* __restrict__ inv_rms_out,  // [rows], or null
    int64_t rows, int64_t cols, int64_t x_row_stride, float eps) {
  using Acc = typename AccType<T>::type;
  using V = Vec<T, kVec>;
  __shared__ Acc shared[kMaxWarpsPerBlock];
  wait_for_previous_grid();  // see common/launch.cuh: x may be the previous kernel's
                             // output
  allow_next_grid();

  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool active = row < rows;  // inactive threads still join __syncthreads
  const int64_t nvec = cols / kVec;
  const V* xr = reinterpret_cast<const V*>(x + (active ? row : 0) * x_row_stride);
  const V* wv = reinterpret_cast<const V*>(weight);
  V* yr = reinterpret_cast<V*>(y + (active ? row : 0) * cols);

  // All loads first, then the arithmetic: written this way the compiler
  // issues every load before it waits for the first one (interleaved with
  // the sums, it waits for each x before loading the next:
  // docs/recorded/cuda_forward_loads_first_h100.json against
  // cuda_forward_loads_interleaved_h100.json; tests/test_compile_checks.py
  // checks the order in the machine code).
  V cache[kRegVecs];
  V wcache[kRegVecs];
#pragma unroll
  for (int k = 0; k < kRegVecs; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    if (active && i < nvec) {
      cache[k] = xr[i];
      wcache[k] = wv[i];
    }
  }
  Acc sum_sq = 0;
#pragma unroll
  for (int k = 0; k < kRegVecs; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    if (active && i < nvec) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        const Acc v = to_acc(cache[k].val[e]);
        sum_sq += v * v;
      }
    }
  }
  if constexpr (kChunked) {
    for (int64_t i = threadIdx.x + static_cast<int64_t>(kRegVecs) * blockDim.x;
         active && i < nvec; i += blockDim.x) {
      const V v = xr[i];
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        const Acc a = to_acc(v.val[e]);
        sum_sq += a * a;
      }
    }
  }

  sum_sq = row_sum(sum_sq, shared);
  if (!active) return;
  const Acc inv_rms =
      Acc(1) / sqrt(sum_sq / static_cast<Acc>(cols) + static_cast<Acc>(eps));
  // rms_norm_fwd keeps the statistic for the backward pass; rms_norm does not.
  if (inv_rms_out != nullptr && threadIdx.x == 0) inv_rms_out[row] = inv_rms;

#pragma unroll
  for (int k = 0; k < kRegVecs; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    if (i < nvec) {
      const V v = keep_packed(cache[k]);
      const V w = keep_packed(wcache[k]);
      V out;
#pragma unroll
      for (int e = 0; e < kVec; ++e)
        out.val[e] = from_acc<T>(to_acc(v.val[e]) * inv_rms * to_acc(w.val[e]));
      yr[i] = out;
    }
  }
  if constexpr (kChunked) {
    for (int64_t i = threadIdx.x + static_cast<int64_t>(kRegVecs) * blockDim.x;
         i < nvec; i += blockDim.x) {
      const V v = xr[i];
      const V w = wv[i];
      V out;
#pragma unroll
      for (int e = 0; e < kVec; ++e)
        out.val[e] = from_acc<T>(to_acc(v.val[e]) * inv_rms * to_acc(w.val[e]));
      yr[i] = out;
    }
  }
}

}  // namespace opguide
