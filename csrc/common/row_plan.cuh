// The plan that the row kernels share (the RMSNorm forward and the fused
// residual-add + RMSNorm: one row per block, or per thread-block cluster),
// and the two launch shapes their planners choose between: the block of the
// one-block kernels and the clusters of the long-row kernels. Each operator's
// planner passes its own knobs (its configuration's constants); the
// arithmetic is here once. Host code; torch-free.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "launch.cuh"

namespace opguide {

// The kernel families of the row kernels (the words of launch.cuh):
// registers, chunked and cluster.
enum class RowKernel { kRegisters, kChunked, kCluster };

// The plan of a row kernel: which kernel, its launch shape and its knobs.
// Planned once per call (plan_rms_norm_forward, plan_fused_add_rms_norm), or
// handed in whole by a caller that forces one.
struct RowPlan {
  RowKernel kernel = RowKernel::kRegisters;
  int vec = 1;              // elements per access
  int reg_vecs = 1;         // accesses of its row a thread keeps in registers
  dim3 grid;                // blocks
  dim3 block;               // (threads per row, rows per block)
  int cluster = 1;          // blocks per cluster (kCluster: a cluster per row)
  size_t shared_bytes = 0;  // dynamic shared memory per block
};

// How an operator groups rows into the blocks of its one-block kernel.
struct RowBlockKnobs {
  int max_threads_per_row;  // a longer row takes the chunked kernel
  // Rows that need fewer threads than a warp: a power of two of threads
  // each, and as many rows as fill a block of this many threads (0: a whole
  // warp each, as longer rows).
  int short_rows_threads;
  // Rows of a warp or more: as many as fit in a block of this many
  // threads, at least one, and at most max_rows.
  int block_threads;
  int max_rows = 1 << 30;
};

// The one-block plan for rows rows of cols elements moved vec at a time
// (cols a multiple of vec: the planners choose vec so): enough threads per
// row (a whole number of warps, at most max_threads_per_row) for each to hold
// reg_vecs vectors, and rows grouped into blocks as `knobs` says. Rows longer
// than those threads hold take the chunked kernel, which reads the rest of
// the row again.
inline RowPlan row_block_plan(int64_t rows, int64_t cols, int vec, int reg_vecs,
                              int warp_size, const RowBlockKnobs& knobs) {
  const int64_t nvec = (cols + vec - 1) / vec;
  int64_t per_row = (nvec + reg_vecs - 1) / reg_vecs;
  int64_t rows_per_block;
  if (per_row < warp_size && knobs.short_rows_threads > 0) {
    int64_t p = 1;
    while (p < per_row) p *= 2;
    per_row = p;
    rows_per_block = knobs.short_rows_threads / per_row;
  } else {
    per_row = (per_row + warp_size - 1) / warp_size * warp_size;
    if (per_row < warp_size)
      per_row = warp_size;  // cols == 0: one warp per row, which writes inv_rms
    if (per_row > knobs.max_threads_per_row) per_row = knobs.max_threads_per_row;
    rows_per_block = knobs.block_threads / per_row;
    if (rows_per_block > knobs.max_rows) rows_per_block = knobs.max_rows;
    if (rows_per_block < 1) rows_per_block = 1;
  }
  RowPlan plan;
  plan.vec = vec;
  plan.reg_vecs = reg_vecs;
  plan.block =
      dim3(static_cast<unsigned>(per_row), static_cast<unsigned>(rows_per_block));
  plan.grid = dim3(static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block));
  plan.kernel = nvec > per_row * reg_vecs ? RowKernel::kChunked : RowKernel::kRegisters;
  return plan;
}

// The launch of a one-row-per-cluster kernel: blocks of `threads` threads,
// or twice that for rows too long for 16 such blocks, each thread taking
// `vecs` vectors. `cluster` is 0 when neither fits the row, or when the
// grid's x dimension cannot hold rows * cluster blocks.
struct RowClusters {
  int cluster;
  int threads;
};

inline RowClusters row_clusters(int64_t nvec, int64_t rows, int max_cluster,
                                int block_threads, int vecs) {
  for (const int threads : {block_threads, 2 * block_threads}) {
    const int cluster = cluster_size_for(nvec, max_cluster, threads, vecs);
    if (cluster > 0) return {rows <= 0x7fffffff / cluster ? cluster : 0, threads};
  }
  return {0, 0};
}

// The launch shape of a cluster plan: rows * cluster blocks of `threads`.
inline RowPlan row_cluster_plan(int64_t rows, RowClusters rc, int vec, int reg_vecs,
                                size_t shared_bytes) {
  RowPlan plan;
  plan.kernel = RowKernel::kCluster;
  plan.vec = vec;
  plan.reg_vecs = reg_vecs;
  plan.grid = dim3(static_cast<unsigned>(rows * rc.cluster));
  plan.block = dim3(static_cast<unsigned>(rc.threads));
  plan.cluster = rc.cluster;
  plan.shared_bytes = shared_bytes;
  return plan;
}

// Whether clusters of `cluster` blocks of `threads` threads, each with
// `shared_bytes` of dynamic shared memory, fit on the current GPU: asked of
// the device (cudaOccupancyMaxActiveClusters, cached) when planning, so no
// launch is ever tried to find out. Allows the kernel the shared memory and
// the cluster size first, as its launch needs.
template <typename Kernel>
bool clusters_fit(Kernel kernel, int cluster, int threads, size_t shared_bytes) {
  allow_shared_bytes(kernel, shared_bytes);
  allow_cluster_size(kernel, cluster);
  return active_clusters(kernel, cluster, threads, shared_bytes) > 0;
}

}  // namespace opguide
