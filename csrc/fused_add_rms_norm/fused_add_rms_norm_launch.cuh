// The launchers of the fused residual-add + RMSNorm CUDA kernels: each
// launches what fused_add_rms_norm_planner.cuh chose. Torch-free.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "../common/launch.cuh"
#include "fused_add_rms_norm.cuh"
#include "fused_add_rms_norm_cluster.cuh"
#include "fused_add_rms_norm_config.h"
#include "fused_add_rms_norm_planner.cuh"

namespace opguide {

template <typename X, typename R, typename O, typename Acc, int kVec, int kRegVecs>
cudaError_t launch_fused_vec(const X* x, R* residual, const X* weight, O* out,
                             Acc* inv_rms, int64_t rows, int64_t cols, Acc eps,
                             int warp_size, cudaStream_t stream, bool pdl) {
  const FusedConfig cfg =
      fused_config(rows, cols, kVec, kRegVecs, warp_size, kFusedBlockThreads);
  auto kernel = cfg.long_rows ? fused_add_rms_norm_kernel<X, R, O, Acc, kVec, 0>
                              : fused_add_rms_norm_kernel<X, R, O, Acc, kVec, kRegVecs>;
  return launch_kernel(kernel, cfg.grid, cfg.block, 0, stream, pdl, x, residual, weight,
                       out, inv_rms, rows, cols, eps);
}

// Launches on `stream` and returns the launch's error; with programmatic
// dependent launch when `pdl` (common/launch.cuh). The caller passes vectorize =
// true only when cols is a multiple of the vector width and every pointer is
// aligned to a whole vector (16 bytes of the widest type). Otherwise, when
// x, the residual and the output share one dtype, the rows take the widest
// narrower access they allow (8 or 4 bytes; docs/recorded/sweep_odd_rows_h100.json),
// two vectors per thread, and other rows four single elements per thread
// (more spill under the register cap above). warp_size is the device's (32,
// or 64 on AMD CDNA GPUs).
template <typename X, typename R, typename O, typename Acc>
cudaError_t launch_fused_add_rms_norm(const X* x, R* residual, const X* weight, O* out,
                                      Acc* inv_rms, int64_t rows, int64_t cols, Acc eps,
                                      bool vectorize, int warp_size,
                                      cudaStream_t stream, bool pdl = false) {
  constexpr int kVec = fused_vector_width<X, R, O>();
  if (vectorize) {
    return launch_fused_vec<X, R, O, Acc, kVec, kFusedRegVecs>(
        x, residual, weight, out, inv_rms, rows, cols, eps, warp_size, stream, pdl);
  }
  if constexpr (std::is_same_v<X, R> && std::is_same_v<X, O> && kVec >= 4) {
    if (rows_aligned_to(8, cols, x, residual, weight, out)) {
      return launch_fused_vec<X, R, O, Acc, kVec / 2, 2 * kFusedRegVecs>(
          x, residual, weight, out, inv_rms, rows, cols, eps, warp_size, stream, pdl);
    }
    if constexpr (kVec >= 8) {
      if (rows_aligned_to(4, cols, x, residual, weight, out)) {
        return launch_fused_vec<X, R, O, Acc, kVec / 4, 2 * kFusedRegVecs>(
            x, residual, weight, out, inv_rms, rows, cols, eps, warp_size, stream, pdl);
      }
    }
  }
  constexpr int kSingles =
      kVec >= 4 ? 4 * kFusedRegVecs : kFusedRegVecs;  // double: one
  return launch_fused_vec<X, R, O, Acc, 1, kSingles>(
      x, residual, weight, out, inv_rms, rows, cols, eps, warp_size, stream, pdl);
}

// Launches the cluster kernel for the rows fused_cluster_plan gives to
// clusters. Returns false, having launched nothing, for rows it does not
// take, or when no cluster fits on this GPU: the caller then launches the
// one-block kernel. vectorized: every row is whole, aligned vectors of kVec
// elements, 16 bytes of the widest type (fused_vector_width).
template <typename X, typename R, typename O, int kVec>
bool launch_fused_add_rms_norm_cluster(const X* x, R* residual, const X* weight, O* out,
                                       float* inv_rms, int64_t rows, int64_t cols,
                                       float eps, bool vectorized, int max_cluster,
                                       cudaStream_t stream, bool pdl,
                                       cudaError_t* error) {
  const RowClusters rc = fused_cluster_plan(rows, cols / kVec, vectorized, max_cluster);
  if (rc.cluster == 0) return false;
  constexpr int kSmall = kFusedClusterThreads, kLarge = 2 * kFusedClusterThreads;
  auto kernel =
      rc.threads == kSmall
          ? fused_add_rms_norm_cluster_kernel<X, R, O, kVec, kSmall, kFusedClusterVecs>
          : fused_add_rms_norm_cluster_kernel<X, R, O, kVec, kLarge, kFusedClusterVecs>;
  // Dynamic shared memory: each thread's vectors of h and of x.
  const size_t shared = static_cast<size_t>(rc.threads) * kFusedClusterVecs *
                        (sizeof(Vec<X, kVec>) + sizeof(Vec<R, kVec>));
  const cudaError_t err =
      launch_rows_in_clusters(kernel, rc, rows, shared, stream, pdl, x, residual,
                              weight, out, inv_rms, rows, cols, eps);
  if (err == cudaErrorNotSupported) return false;  // the caller's kernel runs instead
  *error = err;
  return true;
}

}  // namespace opguide
