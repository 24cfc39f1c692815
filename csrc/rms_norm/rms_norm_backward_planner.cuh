// The one place that chooses the RMSNorm backward's kernels and their
// launch shape: plan_rms_norm_backward turns (problem, device) into an
// RmsNormBackwardPlan, once per call, asking the device (cluster support,
// shared memory, occupancy) rather than trying a launch. The backward's plan
// is a struct of its own: its kernels loop over rows on a grid sized to the
// GPU, each block writing a partial grad_weight row that a second kernel
// sums, where the forward's row plan (rms_norm_forward_planner.cuh) has a
// block per row. The kernel table maps each family to its kernel, for the
// planner's occupancy queries and for the launch (rms_norm_launch.cuh) alike.
// Host code; torch-free.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../common/launch.cuh"
#include "rms_norm_backward.cuh"
#include "rms_norm_backward_long_rows.cuh"
#include "rms_norm_config.h"

namespace opguide {

// The backward kernel families (the words of common/launch.cuh).
enum class BackwardKernel {
  kRegisters,    // registers: rms_norm_backward_kernel, kBackwardRegVecs vectors
  kPipelined2,   // pipelined: rms_norm_backward_pipelined_kernel, 2 vectors a thread
  kPipelined4,   // pipelined: rms_norm_backward_pipelined_kernel, 4 vectors a thread
  kNarrow8,      // narrow: rms_norm_backward_kernel with 8-byte accesses
  kNarrow4,      // narrow: rms_norm_backward_kernel with 4-byte accesses
  kNarrow2,      // narrow: rms_norm_backward_kernel with 2-byte accesses
  kCluster,      // cluster: rms_norm_backward_cluster_kernel, kClusterBackwardRegVecs
  kClusterLong,  // cluster: the same, kClusterBackwardRegVecsLong
  kChunked,      // chunked: rms_norm_backward_chunked_kernel, then column sums
};

// The backward's plan: the family, the launch shape of its first kernel, and
// the partial grad_weight rows that the grad_weight sum adds.
struct RmsNormBackwardPlan {
  BackwardKernel kernel = BackwardKernel::kRegisters;
  dim3 block;          // (threads per row, row slots per block)
  int64_t blocks = 0;  // also the number of partial grad_weight rows; 0: does not fit
  size_t shared_bytes = 0;  // dynamic shared memory per block
  int cluster = 1;          // blocks per cluster (cluster kernels), else 1
  int64_t grid = 0;         // blocks of the first kernel (cluster and chunked kernels)
};

// The backward's kernel table: the first kernel of each family (the grad_weight
// sum follows every one of them); null for the chunked family, whose two
// kernels take other arguments, and for a narrow width wider than T allows.
template <typename T>
using BackwardKernelFn = void (*)(const T*, const T*, const T*,
                                  const typename AccType<T>::type*, T*,
                                  typename AccType<T>::type*, int64_t, int64_t);

template <typename T, int kBytes>
BackwardKernelFn<T> narrow_backward_kernel() {
  if constexpr (kBytes >= static_cast<int>(sizeof(T))) {
    return rms_norm_backward_kernel<T, kBytes / sizeof(T),
                                    narrow_backward_regs<kBytes>()>;
  } else {
    return nullptr;  // never planned: no access narrower than one element
  }
}

template <typename T>
BackwardKernelFn<T> rms_norm_backward_kernel_for(BackwardKernel kernel) {
  constexpr int kVec = 16 / sizeof(T);
  switch (kernel) {
    case BackwardKernel::kRegisters:
      return rms_norm_backward_kernel<T, kVec, kBackwardRegVecs>;
    case BackwardKernel::kPipelined2:
      return rms_norm_backward_pipelined_kernel<T, kVec, 2>;
    case BackwardKernel::kPipelined4:
      return rms_norm_backward_pipelined_kernel<T, kVec, 4>;
    case BackwardKernel::kNarrow8:
      return narrow_backward_kernel<T, 8>();
    case BackwardKernel::kNarrow4:
      return narrow_backward_kernel<T, 4>();
    case BackwardKernel::kNarrow2:
      return narrow_backward_kernel<T, 2>();
    case BackwardKernel::kCluster:
      return rms_norm_backward_cluster_kernel<T, kVec, kClusterBackwardRegVecs>;
    case BackwardKernel::kClusterLong:
      return rms_norm_backward_cluster_kernel<T, kVec, kClusterBackwardRegVecsLong>;
    case BackwardKernel::kChunked:
      break;
  }
  return nullptr;
}

// The block of both backward kernels for rows of `nvec` vectors: enough
// threads per row (a whole number of warps) for kRegs vectors each, and as
// many row slots (a power of two) as give at least `min_threads` threads,
// within kBackwardMaxThreads.
inline dim3 backward_block(int64_t nvec, int regs, int warp_size, int min_threads) {
  int64_t per_row = (nvec + regs - 1) / regs;
  per_row = ((per_row + warp_size - 1) / warp_size) * warp_size;
  int64_t slots = 1;
  while (per_row * slots * 2 <= min_threads &&
         per_row * slots * 2 <= kBackwardMaxThreads)
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

// The knobs of a one-block backward kernel (registers, pipelined, narrow):
// what the launch shape of rms_norm_backward_shape depends on besides the
// kernel. tools/sweep_rms_norm_backward.cu plans its other instances with it.
struct BackwardShapeKnobs {
  int vec;         // elements per access
  int reg_vecs;    // accesses of its row a thread keeps
  int stages = 0;  // rows in flight in shared memory (pipelined), or 0
  int min_threads = kBackwardMinThreads;  // threads a block has at least
  int max_blocks_per_sm = 0;  // at most this many blocks per SM (0: as many as fit)
  bool sums_per_slot =
      false;  // each row slot keeps its grad_weight sums in shared memory
};

// The launch shape of a one-block backward kernel: threads enough for
// reg_vecs vectors each per row, row slots so that a block has at least
// min_threads threads, shared memory for the stages (and the slots' grad_weight
// sums), and as many blocks as fit on the GPU at once (asked of the device:
// cudaOccupancyMaxActiveBlocksPerMultiprocessor), each walking many rows.
// blocks == 0 when the shared memory is more than a block may have. Past 48
// KiB (static and dynamic together) the kernel is allowed more shared memory
// before the occupancy query, as its launch needs.
template <typename T>
RmsNormBackwardPlan rms_norm_backward_shape(BackwardKernelFn<T> kernel, int64_t rows,
                                            int64_t cols,
                                            const BackwardShapeKnobs& knobs,
                                            const DeviceInfo& device) {
  using Acc = typename AccType<T>::type;
  RmsNormBackwardPlan plan;
  plan.block = backward_block(cols / knobs.vec, knobs.reg_vecs, device.warp_size,
                              knobs.min_threads);
  const int64_t slots = plan.block.y;
  const int64_t threads = static_cast<int64_t>(plan.block.x) * plan.block.y;
  const size_t sums = knobs.sums_per_slot
                          ? static_cast<size_t>(slots * cols) * sizeof(Acc)
                      : slots > 1 ? static_cast<size_t>(cols) * sizeof(Acc)
                                  : 0;
  const size_t stages =
      static_cast<size_t>(knobs.stages * 2 * knobs.reg_vecs * threads) * 16;
  plan.shared_bytes = stages > sums ? stages : sums;
  if (knobs.stages > 0) {
    // The default (kDefaultSharedBytes) covers static and dynamic together.
    const size_t static_bytes = sizeof(Acc) * 2 * kMaxWarpsPerBlock;
    if (plan.shared_bytes + static_bytes > device.max_shared_bytes) {
      plan.blocks = 0;  // more than one block may have on this GPU
      return plan;
    }
    if (plan.shared_bytes + static_bytes > kDefaultSharedBytes)
      allow_shared_bytes(kernel, plan.shared_bytes);
  }
  int per_sm = blocks_per_sm(kernel, static_cast<int>(threads), plan.shared_bytes);
  if (knobs.max_blocks_per_sm > 0 && per_sm > knobs.max_blocks_per_sm)
    per_sm = knobs.max_blocks_per_sm;
  plan.blocks = backward_grid(rows, slots, per_sm, device.sm_count);
  return plan;
}

// The plan of one library family of one-block kernels, from the table.
template <typename T>
RmsNormBackwardPlan rms_norm_backward_family_plan(BackwardKernel kernel, int64_t rows,
                                                  int64_t cols,
                                                  const BackwardShapeKnobs& knobs,
                                                  const DeviceInfo& device) {
  RmsNormBackwardPlan plan = rms_norm_backward_shape<T>(
      rms_norm_backward_kernel_for<T>(kernel), rows, cols, knobs, device);
  plan.kernel = kernel;
  return plan;
}

// The pipelined kernel when its stages fit in the shared memory a block may
// have (2 vectors a thread, or 4 for rows of more than kBackwardWideRow vectors),
// the register-prefetch kernel otherwise.
template <typename T>
RmsNormBackwardPlan rms_norm_backward_one_block_plan(int64_t rows, int64_t cols,
                                                     const DeviceInfo& device) {
  constexpr int kVec = 16 / sizeof(T);
  const bool wide_row = cols / kVec > kBackwardWideRow;
  const RmsNormBackwardPlan plan = rms_norm_backward_family_plan<T>(
      wide_row ? BackwardKernel::kPipelined4 : BackwardKernel::kPipelined2, rows, cols,
      {kVec, wide_row ? 4 : 2, kBackwardStages, kBackwardPipelineMinThreads}, device);
  if (plan.blocks > 0) return plan;
  return rms_norm_backward_family_plan<T>(BackwardKernel::kRegisters, rows, cols,
                                          {kVec, kBackwardRegVecs}, device);
}

// The plan for the narrow kernel of kBytes accesses, or one with blocks == 0
// when the rows do not allow it.
template <typename T, int kBytes>
RmsNormBackwardPlan narrow_backward_plan(int64_t rows, int64_t cols, int aligned_bytes,
                                         const DeviceInfo& device) {
  RmsNormBackwardPlan plan;
  if constexpr (kBytes >= static_cast<int>(sizeof(T))) {
    constexpr int kVec = kBytes / static_cast<int>(sizeof(T));
    constexpr int kRegs = narrow_backward_regs<kBytes>();
    if (cols % kVec != 0 || aligned_bytes % kBytes != 0 ||
        cols / kVec > static_cast<int64_t>(kBackwardMaxThreads) * kRegs)
      return plan;
    plan = rms_norm_backward_family_plan<T>(kBytes == 8   ? BackwardKernel::kNarrow8
                                            : kBytes == 4 ? BackwardKernel::kNarrow4
                                                          : BackwardKernel::kNarrow2,
                                            rows, cols, {kVec, kRegs}, device);
  }
  return plan;
}

// The launch shape of a cluster backward kernel of `threads` threads a
// block, each keeping `reg_vecs` vectors, with `stages` rows in flight in
// shared memory: clusters enough for a row of nvec vectors, as many of them
// as fit on this GPU at once (asked of the device:
// cudaOccupancyMaxActiveClusters), one partial grad_weight row each; blocks == 0
// when no such cluster fits. tools/sweep_rms_norm_backward_cluster.cu plans
// its other instances with it.
template <typename T>
RmsNormBackwardPlan rms_norm_backward_cluster_shape(BackwardKernelFn<T> kernel,
                                                    int threads, int reg_vecs,
                                                    int stages, int64_t rows,
                                                    int64_t nvec, int max_cluster) {
  RmsNormBackwardPlan plan;
  const int cluster = cluster_size_for(nvec, max_cluster, threads, reg_vecs);
  if (cluster == 0) return plan;
  const size_t shared = static_cast<size_t>(stages) * 2 * reg_vecs * threads * 16;
  allow_shared_bytes(kernel, shared);
  allow_cluster_size(kernel, cluster);
  const int fit = active_clusters(kernel, cluster, threads, shared);
  if (fit == 0) return plan;
  plan.cluster = cluster;
  plan.block = dim3(static_cast<unsigned>(threads));
  plan.shared_bytes = shared;
  plan.blocks = rows < fit ? rows : fit;  // clusters, one partial row each
  plan.grid = plan.blocks * cluster;
  return plan;
}

// The library's cluster kernel of `reg_vecs` vectors a thread when its
// shared memory and its clusters fit on this GPU, or blocks == 0.
template <typename T>
RmsNormBackwardPlan cluster_backward_plan(BackwardKernel kernel, int reg_vecs,
                                          int64_t rows, int64_t nvec,
                                          const DeviceInfo& device, int max_cluster) {
  using Acc = typename AccType<T>::type;
  const int stages = cluster_backward_stages(reg_vecs);
  const size_t shared =
      static_cast<size_t>(stages) * 2 * reg_vecs * kClusterThreads * 16;
  const size_t static_bytes = sizeof(PushSlots<Acc, kClusterThreads / kWarpSize, 4>);
  if (shared + static_bytes > device.max_shared_bytes) return RmsNormBackwardPlan{};
  RmsNormBackwardPlan plan = rms_norm_backward_cluster_shape<T>(
      rms_norm_backward_kernel_for<T>(kernel), kClusterThreads, reg_vecs, stages, rows,
      nvec, max_cluster);
  plan.kernel = kernel;
  return plan;
}

// What the backward planner needs to know of a call.
struct RmsNormBackwardProblem {
  int64_t rows = 0;
  int64_t cols = 0;
  int aligned_bytes = 16;  // aligned_bytes_of(grad_y, x, weight)
};

// The backward's plan for any row: the one-block kernels when the row fits
// them, clusters for longer rows, narrower vectors for rows that are not
// whole 16-byte vectors, and the chunked kernels when none of these can run
// (rows longer than the largest cluster, or longer than the narrow kernel
// holds). `plan.blocks` is the number of partial grad_weight rows to allocate.
// max_cluster: the most blocks per cluster (0: no clusters).
template <typename T>
RmsNormBackwardPlan plan_rms_norm_backward(const RmsNormBackwardProblem& problem,
                                           const DeviceInfo& device, int max_cluster) {
  constexpr int kVec = 16 / sizeof(T);
  const int64_t rows = problem.rows, cols = problem.cols;
  const int64_t nvec = cols / kVec;
  const bool wide = problem.aligned_bytes % 16 == 0 && cols % kVec == 0 && rows > 0;
  if (wide && nvec <= static_cast<int64_t>(kBackwardMaxThreads) * 4) {
    const RmsNormBackwardPlan plan =
        rms_norm_backward_one_block_plan<T>(rows, cols, device);
    if (plan.kernel != BackwardKernel::kRegisters ||
        nvec <= static_cast<int64_t>(kBackwardMaxThreads) * kBackwardRegVecs)
      return plan;
  }
  if (!wide && rows > 0) {
    const int aligned = problem.aligned_bytes;
    RmsNormBackwardPlan plan = narrow_backward_plan<T, 8>(rows, cols, aligned, device);
    if (plan.blocks == 0)
      plan = narrow_backward_plan<T, 4>(rows, cols, aligned, device);
    if (plan.blocks == 0)
      plan = narrow_backward_plan<T, 2>(rows, cols, aligned, device);
    if (plan.blocks > 0) return plan;
  }
  // Clusters of blocks with two vectors per thread, or with four when a row
  // is too long for that.
  if (wide && device.cluster_launch) {
    RmsNormBackwardPlan plan =
        cluster_backward_plan<T>(BackwardKernel::kCluster, kClusterBackwardRegVecs,
                                 rows, nvec, device, max_cluster);
    if (plan.blocks == 0)
      plan = cluster_backward_plan<T>(BackwardKernel::kClusterLong,
                                      kClusterBackwardRegVecsLong, rows, nvec, device,
                                      max_cluster);
    if (plan.blocks > 0) return plan;
  }
  // Two passes: a block per row, a few blocks per SM; grad_weight over strips of
  // columns, with enough row groups to fill the GPU.
  RmsNormBackwardPlan plan;
  plan.kernel = BackwardKernel::kChunked;
  plan.block = dim3(kChunkedThreads);
  const int64_t fit = static_cast<int64_t>(device.sm_count) * kChunkedBlocksPerSm;
  plan.grid = rows < fit ? (rows > 0 ? rows : 1) : fit;
  const int64_t strips = (cols + kChunkedStripCols - 1) / kChunkedStripCols;
  int64_t parts = (fit + strips - 1) / strips;
  if (parts > rows) parts = rows;
  plan.blocks = parts > 0 ? parts : 1;
  return plan;
}

}  // namespace opguide
