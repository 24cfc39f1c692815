// RMSNorm forward, device code: one block per row (rows longer than its
// registers hold are read again, from L2), and one thread-block cluster per
// row for long rows. The backward: rms_norm_backward.cuh. Torch-free on
// purpose: this header compiles alone with nvcc, and with hipcc after torch's
// hipify, so both toolchains can check it on a machine without a GPU. The
// host wrapper (rms_norm_cuda.cu) holds everything that needs torch; the
// planner (rms_norm_forward_plan.cuh) chooses among these kernels.
//
// Layout: x is rows x cols; row r starts at x + r * x_row_stride and its
// elements are contiguous. y is dense (rows, cols). weight is dense (cols,).
// inv_rms, when not null, receives 1/rms of each row for the backward
// (rms_norm_forward keeps it; rms_norm does not); eps is in the accumulation type.
#pragma once

#include <cstdint>

#include "../common/cluster.cuh"
#include "../common/device.cuh"
#include "../common/launch.cuh"
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
    typename AccType<T>::type* __restrict__ inv_rms,  // [rows], or null
    int64_t rows, int64_t cols, int64_t x_row_stride, typename AccType<T>::type eps) {
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
  // docs/recorded/cuda_forward_loads_first_<gpu>.json against
  // cuda_forward_loads_interleaved_<gpu>.json; tests/test_compile_checks.py
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
  const Acc r = Acc(1) / sqrt(sum_sq / static_cast<Acc>(cols) + eps);
  if (inv_rms != nullptr && threadIdx.x == 0) inv_rms[row] = r;

#pragma unroll
  for (int k = 0; k < kRegVecs; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    if (i < nvec) {
      const V v = keep_packed(cache[k]);
      const V w = keep_packed(wcache[k]);
      V out;
#pragma unroll
      for (int e = 0; e < kVec; ++e)
        out.val[e] = from_acc<T>(to_acc(v.val[e]) * r * to_acc(w.val[e]));
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
        out.val[e] = from_acc<T>(to_acc(v.val[e]) * r * to_acc(w.val[e]));
      yr[i] = out;
    }
  }
}

// Long rows: one row per cluster of C blocks, block k of the cluster taking
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
// docs/recorded/sweep_rms_norm_forward_cluster_<gpu>.txt).
template <typename T, int kVec, int kThreads, int kVecs>
__global__ void __launch_bounds__(kThreads) rms_norm_forward_cluster_kernel(
    const T* __restrict__ x,       // [rows, cols], row r at x + r * x_row_stride
    const T* __restrict__ weight,  // [cols]
    T* __restrict__ y,             // [rows, cols], dense
    typename AccType<T>::type* __restrict__ inv_rms,  // [rows], or null
    int64_t rows, int64_t cols, int64_t x_row_stride, typename AccType<T>::type eps) {
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
  const Acc r = Acc(1) / sqrt(sum_sq / static_cast<Acc>(cols) + eps);
  if (inv_rms != nullptr && cluster_rank() == 0 && threadIdx.x == 0) inv_rms[row] = r;
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
        out.val[e] = from_acc<T>(to_acc(v.val[e]) * r * to_acc(wk.val[e]));
      yr[i] = out;
    }
  }
}

}  // namespace opguide
