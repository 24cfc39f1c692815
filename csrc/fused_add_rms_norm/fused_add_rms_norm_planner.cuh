// The one place that chooses a fused residual-add + RMSNorm CUDA kernel and
// its launch shape for (rows, cols, alignment, dtypes, device). Host code;
// torch-free.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../common/launch.cuh"
#include "fused_add_rms_norm_config.h"

namespace opguide {

struct FusedConfig {
  dim3 grid;
  dim3 block;
  bool long_rows;  // more vectors than the block's threads can hold: kRegVecs == 0
};

// The block shape for rows rows of cols elements moved vec at a time: enough
// threads per row (a multiple of the warp, at most kFusedMaxThreads) for each to
// hold reg_vecs vectors, and as many rows per block as fit in
// block_threads threads.
inline FusedConfig fused_config(int64_t rows, int64_t cols, int vec, int reg_vecs,
                                int warp_size, int block_threads) {
  const int64_t nvec = cols / vec;
  int64_t per_row = (nvec + reg_vecs - 1) / reg_vecs;
  per_row = (per_row + warp_size - 1) / warp_size * warp_size;
  if (per_row < warp_size)
    per_row = warp_size;  // cols == 0: one warp per row, which writes inv_rms
  if (per_row > kFusedMaxThreads) per_row = kFusedMaxThreads;
  const int64_t rows_per_block = per_row < block_threads ? block_threads / per_row : 1;
  FusedConfig cfg;
  cfg.block =
      dim3(static_cast<unsigned>(per_row), static_cast<unsigned>(rows_per_block));
  cfg.grid = dim3(static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block));
  cfg.long_rows = nvec > per_row * reg_vecs;
  return cfg;
}

// Elements per 16-byte access of the widest of the three types.
template <typename X, typename R, typename O>
constexpr int fused_vector_width() {
  return 16 / (sizeof(X) > sizeof(R) ? (sizeof(X) > sizeof(O) ? sizeof(X) : sizeof(O))
                                     : (sizeof(R) > sizeof(O) ? sizeof(R) : sizeof(O)));
}

// Whether every row of the four arrays starts on a whole `bytes` access: cols
// elements of T a multiple of it, and each pointer aligned (weight may be null).
template <typename T>
bool rows_aligned_to(int bytes, int64_t cols, const T* x, const T* residual,
                     const T* weight, const T* out) {
  const auto on = [bytes](const void* p) {
    return p == nullptr || reinterpret_cast<uintptr_t>(p) % bytes == 0;
  };
  return (cols * static_cast<int64_t>(sizeof(T))) % bytes == 0 && on(x) &&
         on(residual) && on(weight) && on(out);
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

}  // namespace opguide
