// The one place that chooses an RMSNorm forward kernel and its launch
// shape: plan_rms_norm_forward turns (problem, device) into a RowPlan
// (common/row_plan.cuh, the plan the fused residual-add + RMSNorm shares),
// once per call, asking the device (cluster support, occupancy) rather than
// trying a launch. The kernel table at the top maps a plan to its kernel, for
// the planner's occupancy query and for the launch (rms_norm_launch.cuh)
// alike. The backward's: rms_norm_backward_planner.cuh. Host code; torch-free.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../common/launch.cuh"
#include "../common/row_plan.cuh"
#include "rms_norm_config.h"
#include "rms_norm_forward.cuh"

namespace opguide {

// The forward's kernel table: the kernel of each family (RowKernel), access
// width and knob, as instantiated; null for a plan no instance matches (a
// forced plan with other knobs).
template <typename T>
using ForwardKernelFn = void (*)(const T*, const T*, T*, typename AccType<T>::type*,
                                 int64_t, int64_t, int64_t, typename AccType<T>::type);

template <typename T, int kVec>
ForwardKernelFn<T> forward_block_kernel(const RowPlan& plan) {
  constexpr int kRegs = forward_reg_vecs(sizeof(T), kVec);
  if (plan.reg_vecs != kRegs) return nullptr;
  return plan.kernel == RowKernel::kChunked
             ? rms_norm_forward_kernel<T, kVec, kRegs, true>
             : rms_norm_forward_kernel<T, kVec, kRegs, false>;
}

template <typename T>
ForwardKernelFn<T> rms_norm_forward_kernel_for(const RowPlan& plan) {
  constexpr int kWide = 16 / sizeof(T);
  if (plan.kernel == RowKernel::kCluster) {
    if constexpr (sizeof(T) <= 4) {
      constexpr int kSmall = kClusterForwardThreads,
                    kLarge = 2 * kClusterForwardThreads;
      if (plan.vec != kWide || plan.reg_vecs != kClusterForwardVecs) return nullptr;
      if (plan.block.x == kSmall)
        return rms_norm_forward_cluster_kernel<T, kWide, kSmall, kClusterForwardVecs>;
      if (plan.block.x == kLarge)
        return rms_norm_forward_cluster_kernel<T, kWide, kLarge, kClusterForwardVecs>;
    }
    return nullptr;
  }
  if (plan.vec == kWide) return forward_block_kernel<T, kWide>(plan);
  if constexpr (kWide >= 4) {
    if (plan.vec == kWide / 2) return forward_block_kernel<T, kWide / 2>(plan);
  }
  if constexpr (kWide >= 8) {
    if (plan.vec == kWide / 4) return forward_block_kernel<T, kWide / 4>(plan);
  }
  if (plan.vec == 1) return forward_block_kernel<T, 1>(plan);
  return nullptr;
}

// The block shape of the one-block kernel (row_block_plan), with the
// forward's knobs (rms_norm_config.h): a row over as many threads as give
// each reg_vecs vectors, at most kMaxThreadsPerRow, and short rows grouped.
// tools/sweep_rms_norm_forward_vectors.cu plans other vector counts with it.
inline RowPlan rms_norm_forward_block_plan(int64_t rows, int64_t cols, int vec,
                                           int warp_size, int reg_vecs) {
  const RowBlockKnobs knobs{kMaxThreadsPerRow, kForwardShortRowsThreads,
                            2 * kForwardPairedRowThreads, 2};
  return row_block_plan(rows, cols, vec, reg_vecs, warp_size, knobs);
}

// The clusters of the forward for rows of nvec 16-byte vectors (`wide`: all
// whole and aligned): cluster == 0 leaves them to the one-block kernel,
// which re-reads the rest of a row too long for it from L2. Rows of 2048
// vectors and fewer, double rows, and rows that are not wide take it, as
// does every row when `max_cluster` (0 without clusters) rules clusters out.
template <typename T>
RowClusters rms_norm_forward_clusters(bool wide, int64_t rows, int64_t nvec,
                                      int max_cluster) {
  if (sizeof(T) > 4 || !wide || rows <= 0 || nvec <= kClusterForwardMinVecs)
    return {0, 0};
  return row_clusters(nvec, rows, max_cluster, kClusterForwardThreads,
                      kClusterForwardVecs);
}

// [vector-width]
// The widest access, in elements, that the row length, the row stride and
// every pointer allow (aligned_bytes: the largest power of two, at most 16,
// dividing the address of x, weight and y): 16 bytes, else 8, else 4, else
// one element. A row length that is not a multiple of 16 bytes still gets
// narrower vectors (docs/recorded/sweep_odd_rows_<gpu>.json).
template <typename T>
int forward_vector_width(int64_t cols, int64_t x_row_stride, int aligned_bytes) {
  for (int bytes = 16; bytes > static_cast<int>(sizeof(T)); bytes /= 2) {
    const int vec = bytes / static_cast<int>(sizeof(T));
    if (cols % vec == 0 && x_row_stride % vec == 0 && aligned_bytes % bytes == 0) {
      return vec;
    }
  }
  return 1;
}
// [vector-width-end]

// What the forward planner needs to know of a call.
struct RmsNormForwardProblem {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t x_row_stride = 0;  // elements between rows of x
  int aligned_bytes = 16;    // aligned_bytes_of(x, weight, y)
};

// The forward's plan: over clusters for the long rows that
// rms_norm_forward_clusters gives them when such clusters fit on this GPU
// (asked of the device: cluster launch, then cudaOccupancyMaxActiveClusters),
// else the one-block kernel with the widest access forward_vector_width
// allows. max_cluster: the most blocks per cluster (0: no clusters).
template <typename T>
RowPlan plan_rms_norm_forward(const RmsNormForwardProblem& problem,
                              const DeviceInfo& device, int max_cluster) {
  const int vec = forward_vector_width<T>(problem.cols, problem.x_row_stride,
                                          problem.aligned_bytes);
  constexpr int kWide = 16 / sizeof(T);
  const RowClusters rc =
      rms_norm_forward_clusters<T>(vec == kWide, problem.rows, problem.cols / kWide,
                                   device.cluster_launch ? max_cluster : 0);
  if (rc.cluster > 0) {
    const RowPlan plan =
        row_cluster_plan(problem.rows, rc, kWide, kClusterForwardVecs, 0);
    if (clusters_fit(rms_norm_forward_kernel_for<T>(plan), rc.cluster, rc.threads, 0))
      return plan;
  }
  return rms_norm_forward_block_plan(problem.rows, problem.cols, vec, device.warp_size,
                                     forward_reg_vecs(sizeof(T), vec));
}

}  // namespace opguide
