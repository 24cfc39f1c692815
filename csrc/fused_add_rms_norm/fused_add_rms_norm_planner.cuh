// The one place that chooses a fused residual-add + RMSNorm CUDA kernel and
// its launch shape: plan_fused_add_rms_norm turns (problem, device) into a
// RowPlan (common/row_plan.cuh), asking the device whether clusters fit rather
// than trying a launch. The kernel table maps each plan to its kernel, for
// the planner's occupancy query and for the launch
// (fused_add_rms_norm_launch.cuh) alike. Host code; torch-free.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "../common/launch.cuh"
#include "../common/row_plan.cuh"
#include "fused_add_rms_norm.cuh"
#include "fused_add_rms_norm_config.h"

namespace opguide {

// Elements per 16-byte access of the widest of the three types.
template <typename X, typename R, typename O>
constexpr int fused_vector_width() {
  return 16 / (sizeof(X) > sizeof(R) ? (sizeof(X) > sizeof(O) ? sizeof(X) : sizeof(O))
                                     : (sizeof(R) > sizeof(O) ? sizeof(R) : sizeof(O)));
}

// The accesses of `vec` elements a thread of the block kernel keeps: one
// 16-byte vector (kFusedRegVecs); two of the narrower accesses that rows of
// one dtype take when they are not whole 16-byte vectors
// (docs/recorded/sweep_odd_rows_<gpu>.json); four single elements (more spill
// under the kernel's register cap), or one for double.
template <typename X, typename R, typename O>
constexpr int fused_reg_vecs(int vec) {
  constexpr int kVec = fused_vector_width<X, R, O>();
  return vec == kVec ? kFusedRegVecs
         : vec > 1   ? 2 * kFusedRegVecs
         : kVec >= 4 ? 4 * kFusedRegVecs
                     : kFusedRegVecs;
}

// The fused kernel's table: the kernel of each family (RowKernel), access
// width and knob, as instantiated; null for a plan no instance matches.
template <typename X, typename R, typename O, typename Acc>
using FusedKernelFn = void (*)(const X*, R*, const X*, O*, Acc*, int64_t, int64_t, Acc);

template <typename X, typename R, typename O, typename Acc, int kVec>
FusedKernelFn<X, R, O, Acc> fused_block_kernel(const RowPlan& plan) {
  constexpr int kRegs = fused_reg_vecs<X, R, O>(kVec);
  if (plan.kernel == RowKernel::kChunked)  // re-reads the row: no vector kept
    return fused_add_rms_norm_kernel<X, R, O, Acc, kVec, 0>;
  if (plan.reg_vecs != kRegs) return nullptr;
  return fused_add_rms_norm_kernel<X, R, O, Acc, kVec, kRegs>;
}

template <typename X, typename R, typename O, typename Acc>
FusedKernelFn<X, R, O, Acc> fused_add_rms_norm_kernel_for(const RowPlan& plan) {
  constexpr int kVec = fused_vector_width<X, R, O>();
  constexpr bool kOneDtype = std::is_same_v<X, R> && std::is_same_v<X, O>;
  if (plan.kernel == RowKernel::kCluster) {
    if constexpr (std::is_same_v<Acc, float>) {
      constexpr int kSmall = kFusedClusterThreads, kLarge = 2 * kFusedClusterThreads;
      if (plan.vec != kVec || plan.reg_vecs != kFusedClusterVecs) return nullptr;
      if (plan.block.x == kSmall)
        return fused_add_rms_norm_cluster_kernel<X, R, O, kVec, kSmall,
                                                 kFusedClusterVecs>;
      if (plan.block.x == kLarge)
        return fused_add_rms_norm_cluster_kernel<X, R, O, kVec, kLarge,
                                                 kFusedClusterVecs>;
    }
    return nullptr;
  }
  if (plan.vec == kVec) return fused_block_kernel<X, R, O, Acc, kVec>(plan);
  if constexpr (kOneDtype && kVec >= 4) {
    if (plan.vec == kVec / 2) return fused_block_kernel<X, R, O, Acc, kVec / 2>(plan);
  }
  if constexpr (kOneDtype && kVec >= 8) {
    if (plan.vec == kVec / 4) return fused_block_kernel<X, R, O, Acc, kVec / 4>(plan);
  }
  if (plan.vec == 1) return fused_block_kernel<X, R, O, Acc, 1>(plan);
  return nullptr;
}

// The block shape of the one-block kernel (row_block_plan), with the fused
// kernel's knobs (fused_add_rms_norm_config.h): enough threads per row (a
// multiple of the warp, at most kFusedMaxThreads) for each to hold reg_vecs
// vectors, and as many rows per block as fit in block_threads threads.
// tools/sweep_fused_add_rms_norm.cu plans its forced shapes with it.
inline RowPlan fused_block_plan(int64_t rows, int64_t cols, int vec, int reg_vecs,
                                int warp_size, int block_threads) {
  const RowBlockKnobs knobs{kFusedMaxThreads, 0, block_threads};
  return row_block_plan(rows, cols, vec, reg_vecs, warp_size, knobs);
}

// The clusters for rows of nvec vectors (all whole, aligned vectors when
// `vectorized`): cluster == 0 leaves them to the one-block kernel, for rows
// too short (kFusedClusterMinVecs), too long for the largest cluster, or not
// whole vectors.
inline RowClusters fused_cluster_plan(int64_t rows, int64_t nvec, bool vectorized,
                                      int max_cluster) {
  if (!vectorized || rows == 0 || nvec <= kFusedClusterMinVecs) return {0, 0};
  return row_clusters(nvec, rows, max_cluster, kFusedClusterThreads, kFusedClusterVecs);
}

// What the fused planner needs to know of a call.
struct FusedAddRmsNormProblem {
  int64_t rows = 0;
  int64_t cols = 0;
  bool vectorized = false;  // fused_vectorized: whole, aligned 16-byte vectors
  int aligned_bytes = 16;   // aligned_bytes_of(x, residual, weight, out)
};

// Whether every row of the four arrays is whole, aligned vectors of the
// widest type's 16 bytes: cols a multiple of the width, and each base pointer
// aligned to a vector of its own type (a sliced tensor may start anywhere;
// weight may be null).
template <typename X, typename R, typename O>
bool fused_vectorized(int64_t cols, const X* x, const R* residual, const X* weight,
                      const O* out) {
  constexpr int kVec = fused_vector_width<X, R, O>();
  const auto on = [](const void* p, size_t bytes) {
    return p == nullptr || reinterpret_cast<uintptr_t>(p) % bytes == 0;
  };
  return cols % kVec == 0 && on(x, kVec * sizeof(X)) &&
         on(residual, kVec * sizeof(R)) && on(out, kVec * sizeof(O)) &&
         on(weight, kVec * sizeof(X));
}

// The fused kernel's plan: over clusters for the long rows that
// fused_cluster_plan gives them when such clusters fit on this GPU (asked of
// the device), else the one-block kernel with whole 16-byte vectors; rows
// that are not, when x, the residual and the output share one dtype, take
// the widest narrower access they allow (8 or 4 bytes), other rows single
// elements. max_cluster: the most blocks per cluster (0: no clusters).
template <typename X, typename R, typename O, typename Acc>
RowPlan plan_fused_add_rms_norm(const FusedAddRmsNormProblem& problem,
                                const DeviceInfo& device, int max_cluster) {
  constexpr int kVec = fused_vector_width<X, R, O>();
  const int64_t rows = problem.rows, cols = problem.cols;
  if constexpr (std::is_same_v<Acc, float>) {
    const RowClusters rc = fused_cluster_plan(rows, cols / kVec, problem.vectorized,
                                              device.cluster_launch ? max_cluster : 0);
    if (rc.cluster > 0) {
      // Dynamic shared memory: each thread's vectors of h and of x.
      const size_t shared = static_cast<size_t>(rc.threads) * kFusedClusterVecs *
                            (sizeof(Vec<X, kVec>) + sizeof(Vec<R, kVec>));
      const RowPlan plan = row_cluster_plan(rows, rc, kVec, kFusedClusterVecs, shared);
      if (clusters_fit(fused_add_rms_norm_kernel_for<X, R, O, Acc>(plan), rc.cluster,
                       rc.threads, shared))
        return plan;
    }
  }
  int vec = 1;
  constexpr bool kOneDtype = std::is_same_v<X, R> && std::is_same_v<X, O>;
  const auto rows_allow = [&](int bytes) {
    return problem.aligned_bytes % bytes == 0 &&
           (cols * static_cast<int64_t>(sizeof(X))) % bytes == 0;
  };
  if (problem.vectorized) {
    vec = kVec;
  } else if (kOneDtype && kVec >= 4 && rows_allow(8)) {
    vec = kVec / 2;
  } else if (kOneDtype && kVec >= 8 && rows_allow(4)) {
    vec = kVec / 4;
  }
  return fused_block_plan(rows, cols, vec, fused_reg_vecs<X, R, O>(vec),
                          device.warp_size, kFusedBlockThreads);
}

}  // namespace opguide
