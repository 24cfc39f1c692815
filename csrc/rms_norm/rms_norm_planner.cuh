// The one place that chooses an RMSNorm CUDA kernel and its launch shape
// for (rows, cols, alignment, dtype, device). Host code; torch-free.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "../common/launch.cuh"
#include "rms_norm_backward.cuh"
#include "rms_norm_backward_cluster.cuh"
#include "rms_norm_config.h"
#include "rms_norm_forward.cuh"

namespace opguide {

struct LaunchConfig {
  dim3 grid;
  dim3 block;
  bool long_rows;
};

// Chooses the block shape from the row length: as many threads per row as
// give each thread reg_vecs vectors, and two rows per block when a row takes
// 64 threads or fewer. One row per block of 32 or 64 threads means so many
// blocks (65536 for 65536 x 1024) that the GPU cannot start them fast
// enough. Rows that need less than a warp get a power of two of threads
// each, and a block of 256 threads holds as many rows as fit (rows of 256
// bfloat16 elements: 8 threads each, 32 rows per block). Both measured over
// every row length: guidekit/benchmark.py, docs/recorded/sweep_h100.json.
inline LaunchConfig rms_norm_forward_config(int64_t rows, int64_t cols, int vec,
                                            int warp_size, int reg_vecs) {
  const int64_t nvec = (cols + vec - 1) / vec;
  int64_t per_row = (nvec + reg_vecs - 1) / reg_vecs;
  int64_t rows_per_block;
  if (per_row < warp_size) {
    int64_t p = 1;
    while (p < per_row) p *= 2;
    per_row = p;
    rows_per_block = 256 / per_row;
  } else {
    per_row = ((per_row + warp_size - 1) / warp_size) * warp_size;
    if (per_row > kMaxThreadsPerRow) per_row = kMaxThreadsPerRow;
    rows_per_block = per_row <= 64 ? 2 : 1;
  }
  LaunchConfig cfg;
  cfg.block =
      dim3(static_cast<unsigned>(per_row), static_cast<unsigned>(rows_per_block));
  cfg.grid = dim3(static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block));
  cfg.long_rows = nvec > per_row * reg_vecs;
  return cfg;
}

// Vectors each thread keeps in registers when it moves kVec elements at a
// time: as many bytes as kForwardRegVecs 16-byte vectors, and no more than
// 8 vectors (narrow accesses need a register per vector; more spill).
// tools/sweep_rms_norm_narrow.cu times other counts.
template <typename T, int kVec>
constexpr int forward_reg_vecs() {
  constexpr int same_bytes =
      kForwardRegVecs * (16 / static_cast<int>(sizeof(T))) / kVec;
  return same_bytes < 8 ? same_bytes : 8;
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
// every pointer allow: 16 bytes, else 8, else 4, else one element. A row
// length that is not a multiple of 16 bytes still gets narrower vectors
// (docs/recorded/sweep_odd_rows_h100.json).
template <typename T>
int forward_vector_width(const T* x, const T* weight, const T* y, int64_t cols,
                         int64_t x_row_stride) {
  for (int bytes = 16; bytes > static_cast<int>(sizeof(T)); bytes /= 2) {
    const int vec = bytes / static_cast<int>(sizeof(T));
    if (cols % vec == 0 && x_row_stride % vec == 0 && is_aligned(x, bytes) &&
        is_aligned(weight, bytes) && is_aligned(y, bytes)) {
      return vec;
    }
  }
  return 1;
}
// [vector-width-end]

// The block of both backward kernels for rows of `nvec` vectors: enough
// threads per row (a whole number of warps) for kRegs vectors each, and as
// many row slots (a power of two) as give at least `min_threads` threads,
// within kBwdMaxThreads.
inline dim3 backward_block(int64_t nvec, int regs, int warp_size, int min_threads) {
  int64_t per_row = (nvec + regs - 1) / regs;
  per_row = ((per_row + warp_size - 1) / warp_size) * warp_size;
  int64_t slots = 1;
  while (per_row * slots * 2 <= min_threads && per_row * slots * 2 <= kBwdMaxThreads)
    slots *= 2;
  return dim3(static_cast<unsigned>(per_row), static_cast<unsigned>(slots));
}

// As many blocks as fit on the GPU at once (`per_sm` per multiprocessor, at
// least one), and no more than there are groups of `slots` rows.
inline int64_t backward_grid(int64_t rows, int64_t slots, int per_sm, int sm_count) {
  const int64_t fit = static_cast<int64_t>(per_sm < 1 ? 1 : per_sm) * sm_count;
  const int64_t needed = (rows + slots - 1) / slots;
  return needed < fit ? (needed > 0 ? needed : 1) : fit;
}

// The launch shape of a backward kernel instance: threads enough for
// kRegs vectors each per row, row slots so that a block has at least
// `min_threads` threads, and as many blocks as fit on the GPU at once (each
// walks many rows), at most one row slot per row. kVec: elements per access.
template <typename T, int kRegs, int kVec = 16 / sizeof(T)>
BackwardConfig rms_norm_backward_config_for(int64_t rows, int64_t cols, int warp_size,
                                            int sm_count, int min_threads) {
  using Acc = typename AccType<T>::type;
  BackwardConfig cfg;
  cfg.block = backward_block(cols / kVec, kRegs, warp_size, min_threads);
  const int64_t slots = cfg.block.y;
  cfg.shared_bytes = slots > 1 ? static_cast<size_t>(cols) * sizeof(Acc) : 0;
  const int per_sm =
      blocks_per_sm(rms_norm_backward_kernel<T, kVec, kRegs>,
                    static_cast<int>(cfg.block.x * cfg.block.y), cfg.shared_bytes);
  cfg.blocks = backward_grid(rows, slots, per_sm, sm_count);
  return cfg;
}

// The launch shape of a pipelined backward instance (cfg.kernel: kRegs): like
// rms_norm_backward_config_for, with the stage buffers in dynamic shared
// memory. Past 48 KiB (static and dynamic together) a kernel must be allowed
// more shared memory before it is launched, which this does.
template <typename T, int kRegs>
BackwardConfig rms_norm_backward_pipelined_config(int64_t rows, int64_t cols,
                                                  int warp_size, int sm_count,
                                                  size_t max_shared_bytes) {
  constexpr int kVec = 16 / sizeof(T);
  using Acc = typename AccType<T>::type;
  auto kernel = rms_norm_backward_pipelined_kernel<T, kVec, kRegs>;
  BackwardConfig cfg;
  cfg.kernel = kRegs == 4 ? BackwardKernel::kPipelined4 : BackwardKernel::kPipelined2;
  cfg.block = backward_block(cols / kVec, kRegs, warp_size, kBwdPipelineMinThreads);
  const int64_t slots = cfg.block.y;
  const int64_t threads = static_cast<int64_t>(cfg.block.x) * cfg.block.y;
  const size_t stages = static_cast<size_t>(kBwdStages * 2 * kRegs * threads) * 16;
  const size_t sums = slots > 1 ? static_cast<size_t>(cols) * sizeof(Acc) : 0;
  cfg.shared_bytes = stages > sums ? stages : sums;
  // The 48 KiB default covers static and dynamic shared memory together.
  const size_t static_bytes = sizeof(Acc) * 2 * kMaxWarpsPerBlock;
  if (cfg.shared_bytes + static_bytes > max_shared_bytes) {
    cfg.blocks = 0;  // more than one block may have on this GPU
    return cfg;
  }
  if (cfg.shared_bytes + static_bytes > 48 * 1024)
    allow_shared_bytes(kernel, cfg.shared_bytes);
  const int per_sm = blocks_per_sm(kernel, static_cast<int>(threads), cfg.shared_bytes);
  cfg.blocks = backward_grid(rows, slots, per_sm, sm_count);
  return cfg;
}

// The launch configuration of the backward for this GPU: the pipelined
// kernel when its stages fit in `max_shared_bytes` (the most shared memory a
// block may have), the register-prefetch kernel otherwise.
template <typename T>
BackwardConfig rms_norm_backward_config(int64_t rows, int64_t cols, int warp_size,
                                        int sm_count, size_t max_shared_bytes) {
  const int64_t nvec = cols / (16 / static_cast<int64_t>(sizeof(T)));
  const BackwardConfig cfg =
      nvec > kBwdWideRow ? rms_norm_backward_pipelined_config<T, 4>(
                               rows, cols, warp_size, sm_count, max_shared_bytes)
                         : rms_norm_backward_pipelined_config<T, 2>(
                               rows, cols, warp_size, sm_count, max_shared_bytes);
  if (cfg.blocks > 0) return cfg;
  BackwardConfig fallback = rms_norm_backward_config_for<T, kBwdRegVecs>(
      rows, cols, warp_size, sm_count, kBwdMinThreads);
  fallback.kernel = BackwardKernel::kRegisters;
  return fallback;
}

// The plan for the narrow kernel of kBytes accesses, or one with blocks == 0
// when the rows do not allow it.
template <typename T, int kBytes>
BackwardConfig narrow_backward_config(int64_t rows, int64_t cols, int aligned_bytes,
                                      int warp_size, int sm_count) {
  BackwardConfig cfg;
  cfg.blocks = 0;
  if constexpr (kBytes >= static_cast<int>(sizeof(T))) {
    constexpr int kVec = kBytes / static_cast<int>(sizeof(T));
    constexpr int kRegs = narrow_backward_regs<kBytes>();
    if (cols % kVec != 0 || aligned_bytes % kBytes != 0 ||
        cols / kVec > static_cast<int64_t>(kBwdMaxThreads) * kRegs) {
      return cfg;
    }
    cfg = rms_norm_backward_config_for<T, kRegs, kVec>(rows, cols, warp_size, sm_count,
                                                       kBwdMinThreads);
    cfg.kernel = kBytes == 8   ? BackwardKernel::kNarrow8
                 : kBytes == 4 ? BackwardKernel::kNarrow4
                               : BackwardKernel::kNarrow2;
  }
  return cfg;
}

// The backward's plan for any row: the kernels of rms_norm_backward_config
// when the row fits them, clusters for longer rows, narrower vectors for
// rows that are not whole 16-byte vectors, and the two-pass kernels when
// none of these can run (rows longer than the largest cluster, or longer
// than the narrow kernel holds). aligned_bytes: the largest power of two, at
// most 16, that divides every pointer's address. `cfg.blocks` is the number
// of partial grad_w rows to allocate.
template <typename T>
BackwardConfig rms_norm_backward_plan(int64_t rows, int64_t cols, int aligned_bytes,
                                      int warp_size, int sm_count,
                                      size_t max_shared_bytes, int max_cluster) {
  constexpr int kVec = 16 / sizeof(T);
  using Acc = typename AccType<T>::type;
  const int64_t nvec = cols / kVec;
  const bool wide = aligned_bytes % 16 == 0 && cols % kVec == 0 && rows > 0;
  if (wide && nvec <= static_cast<int64_t>(kBwdMaxThreads) * 4) {
    BackwardConfig cfg =
        rms_norm_backward_config<T>(rows, cols, warp_size, sm_count, max_shared_bytes);
    if (cfg.kernel != BackwardKernel::kRegisters ||
        nvec <= static_cast<int64_t>(kBwdMaxThreads) * kBwdRegVecs)
      return cfg;
  }
  if (!wide && rows > 0) {
    BackwardConfig narrow =
        narrow_backward_config<T, 8>(rows, cols, aligned_bytes, warp_size, sm_count);
    if (narrow.blocks == 0)
      narrow =
          narrow_backward_config<T, 4>(rows, cols, aligned_bytes, warp_size, sm_count);
    if (narrow.blocks == 0)
      narrow =
          narrow_backward_config<T, 2>(rows, cols, aligned_bytes, warp_size, sm_count);
    if (narrow.blocks > 0) return narrow;
  }
  BackwardConfig cfg;
  // Clusters of blocks with two vectors per thread, or with four when a row
  // is too long for that.
  const auto try_clusters = [&](auto kernel, int reg_vecs, BackwardKernel kernel_id) {
    const int cluster =
        wide ? cluster_size_for(nvec, max_cluster, kClusterThreads, reg_vecs) : 0;
    if (cluster == 0) return false;
    const size_t shared = static_cast<size_t>(cluster_backward_stages(reg_vecs)) * 2 *
                          reg_vecs * kClusterThreads * 16;
    const size_t static_bytes = sizeof(PushSlots<Acc, kClusterThreads / kWarpSize, 4>);
    if (shared + static_bytes > max_shared_bytes) return false;
    allow_shared_bytes(kernel, shared);
    allow_cluster_size(kernel, cluster);
    const int fit = active_clusters(kernel, cluster, kClusterThreads, shared);
    if (fit == 0) return false;
    cfg.kernel = kernel_id;
    cfg.cluster = cluster;
    cfg.block = dim3(kClusterThreads);
    cfg.shared_bytes = shared;
    cfg.blocks = rows < fit ? rows : fit;  // clusters, one partial row each
    cfg.grid = cfg.blocks * cluster;
    return true;
  };
  if (try_clusters(rms_norm_backward_cluster_kernel<T, kVec, kClusterBackwardRegVecs>,
                   kClusterBackwardRegVecs, BackwardKernel::kCluster) ||
      try_clusters(
          rms_norm_backward_cluster_kernel<T, kVec, kClusterBackwardRegVecsLong>,
          kClusterBackwardRegVecsLong, BackwardKernel::kClusterLong)) {
    return cfg;
  }
  // Two passes: a block per row, a few blocks per SM; grad_w over strips of
  // columns, with enough row groups to fill the GPU.
  cfg.kernel = BackwardKernel::kTwoPass;
  cfg.block = dim3(kTwoPassThreads);
  const int64_t fit = static_cast<int64_t>(sm_count) * kTwoPassBlocksPerSm;
  cfg.grid = rows < fit ? (rows > 0 ? rows : 1) : fit;
  const int64_t strips = (cols + kTwoPassStripCols - 1) / kTwoPassStripCols;
  int64_t parts = (fit + strips - 1) / strips;
  if (parts > rows) parts = rows;
  cfg.blocks = parts > 0 ? parts : 1;
  return cfg;
}

}  // namespace opguide
