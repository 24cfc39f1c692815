// RMSNorm backward, device code, for rows longer than one block holds in
// registers: each row split over a thread-block cluster (sm_90 and later),
// or, for rows no other kernel takes, two passes over each row with
// grad_weight by column strips. Torch-free, as rms_norm_backward.cuh, whose
// row arithmetic the cluster kernel shares; rms_norm_backward_plan.cuh plans
// and launches them.
#pragma once

#include <cstdint>

#include "../common/cluster.cuh"
#include "../common/device.cuh"
#include "../common/launch.cuh"
#include "rms_norm_backward.cuh"
#include "rms_norm_config.h"

namespace opguide {

// Cluster: cluster c takes rows c, c + C, c + 2C, ... (C clusters, as many
// as fit on the GPU at once), each block the same slice of every row. A
// thread keeps its slice of the weight and of grad_weight in registers across all
// its rows, and copies the next kStages - 1 rows' g and x into shared memory
// while it computes this one (cp.async, as the pipelined kernel in
// rms_norm_backward.cuh). At the end, cluster c writes row c of
// grad_weight_partial, and rms_norm_backward_grad_weight_kernel sums the C rows in a
// fixed order.
//
// With kAhead, a block pushes its partial sum of the next row before it
// waits for this row's total, so that a block can run one row ahead of the
// slowest block of its cluster: it reads this row's g and x again from
// shared memory for grad_x, and a row's stage is reused one row later. (kAhead,
// kThreads, kStages and kMinBlocks, blocks per multiprocessor, are
// parameters for tools/sweep_rms_norm_backward_cluster.cu, which times other
// choices; the library launches the defaults.)
template <typename T, int kVec, int kRegVecs, int kThreads = kClusterThreads,
          int kStages = cluster_backward_stages(kRegVecs), int kMinBlocks = 1,
          bool kAhead = true>
__global__ void
__launch_bounds__(kThreads, kMinBlocks) rms_norm_backward_cluster_kernel(
    const T* __restrict__ grad_y,                                 // [rows, cols], dense
    const T* __restrict__ x,                                      // [rows, cols], dense
    const T* __restrict__ weight,                                 // [cols]
    const typename AccType<T>::type* __restrict__ inv_rms,        // [rows]
    T* __restrict__ grad_x,                                       // [rows, cols], dense
    typename AccType<T>::type* __restrict__ grad_weight_partial,  // [clusters, cols]
    int64_t rows, int64_t cols) {
  static_assert(kStages >= (kAhead ? 3 : 2), "too few stages for the pipeline");
  using Acc = typename AccType<T>::type;
  using V = Vec<T, kVec>;
  __shared__ PushSlots<Acc, kThreads / kWarpSize, kAhead ? 4 : 2> push;
  extern __shared__ __align__(16) unsigned char dynamic_shared[];
  wait_for_previous_grid();
  allow_next_grid();
  push_slots_init(push);
  const Slice s = cluster_slice(cols / kVec);
  const int64_t clusters = gridDim.x / cluster_blocks();
  const int64_t first_row = blockIdx.x / cluster_blocks();
  const V* wv = reinterpret_cast<const V*>(weight) + s.begin;
  V* const mine = reinterpret_cast<V*>(dynamic_shared) + threadIdx.x;
  const int per_stage = 2 * kRegVecs * static_cast<int>(blockDim.x);

  V w[kRegVecs];
  Acc grad_weight_acc[kRegVecs][kVec];
  start_slice(wv, s.count, w, grad_weight_acc);
  auto fetch = [&](int64_t r, int stage) {
    if (r < rows) {
      const V* gr = reinterpret_cast<const V*>(grad_y + r * cols) + s.begin;
      const V* xr = reinterpret_cast<const V*>(x + r * cols) + s.begin;
      copy_slice_async<T, kVec, kRegVecs>(gr, xr, mine + stage * per_stage, s.count);
    }
    copy_async_commit();
  };
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) fetch(first_row + st * clusters, st);

  if constexpr (kAhead) {
    // Row first_row + i * clusters lives in stage i % kStages from its fetch
    // until its grad_x is written.
    if (first_row < rows) {
      copy_async_wait<kStages - 2>();
      V g[kRegVecs], xv[kRegVecs];
      read_stage(mine, g, xv);
      push_partial(row_dot(g, w, xv, s.count), push, 0);
    }
    int64_t iteration = 0;
    for (int64_t row = first_row; row < rows; row += clusters, ++iteration) {
      const Acc r = inv_rms[row];
      const int stage = static_cast<int>(iteration % kStages);
      fetch(row + (kStages - 1) * clusters, stage == 0 ? kStages - 1 : stage - 1);
      if (row + clusters < rows) {
        copy_async_wait<kStages - 2>();
        V g[kRegVecs], xv[kRegVecs];
        read_stage(mine + (stage + 1 == kStages ? 0 : stage + 1) * per_stage, g, xv);
        push_partial(row_dot(g, w, xv, s.count), push, iteration + 1);
      }
      const Acc dot = wait_total(push, iteration);
      V g[kRegVecs], xv[kRegVecs];
      read_stage(mine + stage * per_stage, g, xv);
      const Acc c = dot * r * r * r / static_cast<Acc>(cols);
      store_grad_x(g, w, xv, r, c, s.count,
                   reinterpret_cast<V*>(grad_x + row * cols) + s.begin,
                   grad_weight_acc);
    }
  } else {
    Acc r_next = first_row < rows ? inv_rms[first_row] : Acc(0);
    int stage = 0;
    int64_t iteration = 0;
    for (int64_t row = first_row; row < rows; row += clusters, ++iteration) {
      const Acc r = r_next;
      r_next = row + clusters < rows ? inv_rms[row + clusters] : Acc(0);
      fetch(row + (kStages - 1) * clusters, stage == 0 ? kStages - 1 : stage - 1);
      copy_async_wait<kStages - 1>();
      V g[kRegVecs], xv[kRegVecs];
      read_stage(mine + stage * per_stage, g, xv);
      stage = stage + 1 == kStages ? 0 : stage + 1;
      Acc dot = row_dot(g, w, xv, s.count);
      dot = push_sum(dot, push, iteration);
      const Acc c = dot * r * r * r / static_cast<Acc>(cols);
      store_grad_x(g, w, xv, r, c, s.count,
                   reinterpret_cast<V*>(grad_x + row * cols) + s.begin,
                   grad_weight_acc);
    }
  }
  copy_async_wait<0>();
  Acc* partial = grad_weight_partial + (first_row < clusters ? first_row : 0) * cols +
                 s.begin * kVec;
#pragma unroll
  for (int k = 0; k < kRegVecs; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    if (i < s.count) {
      Vec<Acc, kVec> out;
#pragma unroll
      for (int e = 0; e < kVec; ++e) out.val[e] = grad_weight_acc[k][e];
      reinterpret_cast<Vec<Acc, kVec>*>(partial)[i] = out;
    }
  }
}

// Chunked: the backward with no condition, one block per row (grid-stride),
// one element per access. Pass 1 sums g * w * x over the row, pass 2 writes
// grad_x. grad_weight is left to rms_norm_backward_grad_weight_columns_kernel.
template <typename T>
__global__ void __launch_bounds__(1024) rms_norm_backward_chunked_kernel(
    const T* __restrict__ grad_y,                           // [rows, cols], dense
    const T* __restrict__ x,                                // [rows, cols], dense
    const T* __restrict__ weight,                           // [cols]
    const typename AccType<T>::type* __restrict__ inv_rms,  // [rows]
    T* __restrict__ grad_x,                                 // [rows, cols], dense
    int64_t rows, int64_t cols) {
  using Acc = typename AccType<T>::type;
  __shared__ Acc shared[2][kMaxWarpsPerBlock];
  wait_for_previous_grid();
  allow_next_grid();
  int parity = 0;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x, parity ^= 1) {
    const T* gr = grad_y + row * cols;
    const T* xr = x + row * cols;
    Acc dot = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
      dot += to_acc(gr[j]) * to_acc(weight[j]) * to_acc(xr[j]);
    dot = row_sum(dot, shared[parity]);
    const Acc r = inv_rms[row];
    const Acc c = dot * r * r * r / static_cast<Acc>(cols);
    T* dxr = grad_x + row * cols;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
      dxr[j] = from_acc<T>(r * to_acc(gr[j]) * to_acc(weight[j]) - c * to_acc(xr[j]));
  }
}

// grad_weight partial sums over column strips: block (bx, p) sums the rows
// p, p + P, ... (P = gridDim.y) of columns bx * blockDim.x + threadIdx.x into
// row p of `partial`. Neighbouring threads read neighbouring columns.
template <typename T>
__global__ void __launch_bounds__(kChunkedStripCols)
    rms_norm_backward_grad_weight_columns_kernel(
        const T* __restrict__ grad_y,                           // [rows, cols], dense
        const T* __restrict__ x,                                // [rows, cols], dense
        const typename AccType<T>::type* __restrict__ inv_rms,  // [rows]
        typename AccType<T>::type* __restrict__ partial,        // [gridDim.y, cols]
        int64_t rows, int64_t cols) {
  using Acc = typename AccType<T>::type;
  wait_for_previous_grid();
  allow_next_grid();
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= cols) return;
  Acc sum = 0;
  for (int64_t row = blockIdx.y; row < rows; row += gridDim.y)
    sum += to_acc(grad_y[row * cols + j]) * to_acc(x[row * cols + j]) * inv_rms[row];
  partial[static_cast<int64_t>(blockIdx.y) * cols + j] = sum;
}

}  // namespace opguide
