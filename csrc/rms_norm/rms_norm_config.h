// Every tuned constant of the RMSNorm CUDA kernels, with its reason and the
// tool and recorded file that measured it. The planners
// (rms_norm_forward_plan.cuh, rms_norm_backward_plan.cuh) and the kernels
// read them. Torch-free.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace opguide {

// Forward, one block per row: 16-byte vectors of its row that each thread
// keeps in registers, 4 for every dtype (tools/sweep_rms_norm_forward_vectors.cu).
// With the weight held next to x that still fits several blocks per SM; 2
// vectors (twice the threads per row) are slower for 16-bit types, and 8 do
// not fit in registers. Past 1024 threads per row the kChunked instance
// re-reads the rest of the row from L2.
constexpr int kForwardRegVecs = 4;
constexpr int kMaxThreadsPerRow = 1024;

// Vectors each thread keeps in registers when it moves `vec` elements of
// `elem_bytes` bytes at a time: as many bytes as kForwardRegVecs 16-byte
// vectors, and no more than 8 vectors (narrow accesses need a register per
// vector; more spill).
constexpr int forward_reg_vecs(int elem_bytes, int vec) {
  return kForwardRegVecs * (16 / elem_bytes) / vec < 8
             ? kForwardRegVecs * (16 / elem_bytes) / vec
             : 8;
}

// The forward's blocks, measured over every row length (python -m
// guidekit.benchmark, docs/recorded/sweep_<gpu>.json). A row that needs fewer
// threads than a warp gets a power of two of them, and a block of
// kForwardShortRowsThreads holds as many such rows as fit (rows of 256
// bfloat16 elements: 8 threads each, 32 rows a block). Longer rows go two to
// a block when they take kForwardPairedRowThreads threads or fewer: one row
// per block of 32 or 64 threads means so many blocks (65536 for 65536 x
// 1024) that the GPU cannot start them fast enough.
constexpr int kForwardShortRowsThreads = 256;
constexpr int kForwardPairedRowThreads = 64;

// Forward over clusters for rows of more than kClusterForwardMinVecs vectors
// (32 KiB): 128 threads x 8 vectors a block, or 256 x 8 for rows too long for
// 16 such blocks. At 2048 vectors and fewer the one-block kernel is as fast
// (tools/sweep_rms_norm_forward_cluster.cu,
// docs/recorded/sweep_rms_norm_forward_cluster_<gpu>.txt). double rows take
// the one-block kernel: there the division's slow path, a call, costs the
// cluster kernel a spill.
constexpr int64_t kClusterForwardMinVecs = 2048;
constexpr int kClusterForwardThreads = 128;
constexpr int kClusterForwardVecs = 8;

// Backward, rows held by one block (tools/sweep_rms_norm_backward.cu,
// docs/recorded/sweep_rms_norm_backward_pipelined_<gpu>.txt).
constexpr int kBackwardMaxThreads = 512;  // threads per block, at most
// The pipelined kernel (cp.async): rows in flight per row slot, blocks of at
// least this many threads (two rows at a time for rows of 4096 bf16
// elements: twice the data per barrier), and the row length (in 16-byte
// vectors) past which a thread takes 4 vectors instead of 2, which keeps two
// rows per block there too.
constexpr int kBackwardStages = 3;
constexpr int kBackwardPipelineMinThreads = 512;
constexpr int64_t kBackwardWideRow = 512;
// The pipelined kernel's compile-time knobs as a type, so that
// tools/sweep_rms_norm_backward.cu instantiates the same kernel with others:
// stages in flight, and the least blocks per multiprocessor that
// __launch_bounds__ asks the compiler to fit (1: registers are not capped).
struct PipelinedKnobs {
  static constexpr int kStages = kBackwardStages;
  static constexpr int kMinBlocks = 1;
};
// The register kernel, where the pipeline's shared memory does not fit:
// vectors per thread and the least threads per block.
constexpr int kBackwardRegVecs = 2;
constexpr int kBackwardMinThreads = 256;

// The grad_weight sum: a block takes 32 columns and has 32 rows of threads, each
// summing every 32nd partial row.
constexpr int kGradWeightCols = 32;
constexpr int kGradWeightLanes = 32;

// Backward over clusters: blocks of 512 threads, each keeping its slice of
// the weight and of grad_weight in registers and each row's g and x in shared
// memory, one stage per row in flight: two vectors per thread and four
// stages (128 KiB), or four vectors and three stages (192 KiB) for rows too
// long for 16 blocks of two (tools/sweep_rms_norm_backward_cluster.cu,
// docs/recorded/sweep_rms_norm_backward_cluster_<gpu>.txt).
constexpr int kClusterThreads = 512;
constexpr int kClusterBackwardRegVecs = 2;
constexpr int kClusterBackwardRegVecsLong = 4;
constexpr int cluster_backward_stages(int reg_vecs) { return reg_vecs <= 2 ? 4 : 3; }

// Backward of rows that are not whole, aligned 16-byte vectors: the register
// kernel with the widest narrower vectors they allow, four 8-byte vectors
// per thread, eight of 4 bytes, or eight single 16-bit elements (more spill)
// (docs/recorded/sweep_odd_rows_<gpu>.json times them beside F.rms_norm and a copy).
template <int kBytes>
constexpr int narrow_backward_regs() {
  return kBytes == 8 ? 4 : 8;
}

// Backward in two passes, for rows no other kernel takes: blocks of 512
// threads, 4 blocks per multiprocessor, grad_weight over strips of 256 columns.
constexpr int kChunkedThreads = 512;
constexpr int kChunkedBlocksPerSm = 4;
constexpr int kChunkedStripCols = 256;

}  // namespace opguide
