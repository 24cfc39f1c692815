// Every tuned constant of the RMSNorm CUDA kernels, with its reason and the
// tool and recorded file that measured it, and the kernel families that the
// planner (rms_norm_planner.cuh) chooses among. Torch-free.
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

// Forward over clusters for rows of more than kClusterForwardMinVecs vectors
// (32 KiB): 128 threads x 8 vectors a block, or 256 x 8 for rows too long for
// 16 such blocks. At 2048 vectors and fewer the one-block kernel is as fast
// (tools/sweep_rms_norm_forward_cluster.cu,
// docs/recorded/sweep_rms_norm_forward_cluster_h100.txt). double rows take
// the one-block kernel: there the division's slow path, a call, costs the
// cluster kernel a spill.
constexpr int64_t kClusterForwardMinVecs = 2048;
constexpr int kClusterForwardThreads = 128;
constexpr int kClusterForwardVecs = 8;

// Backward, rows held by one block (tools/sweep_rms_norm_backward.cu,
// docs/recorded/sweep_rms_norm_backward_pipelined_h100.txt).
constexpr int kBwdMaxThreads = 512;  // threads per block, at most
// The pipelined kernel (cp.async): rows in flight per row slot, blocks of at
// least this many threads (two rows at a time for rows of 4096 bf16
// elements: twice the data per barrier), and the row length (in 16-byte
// vectors) past which a thread takes 4 vectors instead of 2, which keeps two
// rows per block there too.
constexpr int kBwdStages = 3;
constexpr int kBwdPipelineMinThreads = 512;
constexpr int64_t kBwdWideRow = 512;
// The pipelined kernel's compile-time knobs as a type, so that
// tools/sweep_rms_norm_backward.cu instantiates the same kernel with others:
// stages in flight, and the least blocks per multiprocessor that
// __launch_bounds__ asks the compiler to fit (1: registers are not capped).
struct PipelinedKnobs {
  static constexpr int kStages = kBwdStages;
  static constexpr int kMinBlocks = 1;
};
// The register kernel, where the pipeline's shared memory does not fit:
// vectors per thread and the least threads per block.
constexpr int kBwdRegVecs = 2;
constexpr int kBwdMinThreads = 256;

// The grad_weight sum: a block takes 32 columns and has 32 rows of threads, each
// summing every 32nd partial row.
constexpr int kGradWeightCols = 32;
constexpr int kGradWeightLanes = 32;

// Backward over clusters: blocks of 512 threads, each keeping its slice of
// the weight and of grad_weight in registers and each row's g and x in shared
// memory, one stage per row in flight: two vectors per thread and four
// stages (128 KiB), or four vectors and three stages (192 KiB) for rows too
// long for 16 blocks of two (tools/sweep_rms_norm_backward_cluster.cu,
// docs/recorded/sweep_rms_norm_backward_cluster_h100.txt).
constexpr int kClusterThreads = 512;
constexpr int kClusterBackwardRegVecs = 2;
constexpr int kClusterBackwardRegVecsLong = 4;
constexpr int cluster_backward_stages(int reg_vecs) { return reg_vecs <= 2 ? 4 : 3; }

// Backward of rows that are not whole, aligned 16-byte vectors: the register
// kernel with the widest narrower vectors they allow, four 8-byte vectors
// per thread, eight of 4 bytes, or eight single 16-bit elements (more spill)
// (tools/sweep_rms_norm_narrow.cu, docs/recorded/sweep_odd_rows_h100.json).
template <int kBytes>
constexpr int narrow_backward_regs() {
  return kBytes == 8 ? 4 : 8;
}

// Backward in two passes, for rows no other kernel takes: blocks of 512
// threads, 4 blocks per multiprocessor, grad_weight over strips of 256 columns.
constexpr int kChunkedThreads = 512;
constexpr int kChunkedBlocksPerSm = 4;
constexpr int kChunkedStripCols = 256;

// The backward kernel families (the words of common/launch.cuh).
enum class BackwardKernel {
  kRegisters,    // registers: rms_norm_backward_kernel, kBwdRegVecs 16-byte vectors
  kPipelined2,   // pipelined: rms_norm_backward_pipelined_kernel, 2 vectors a thread
  kPipelined4,   // pipelined: rms_norm_backward_pipelined_kernel, 4 vectors a thread
  kNarrow8,      // narrow: rms_norm_backward_kernel with 8-byte accesses
  kNarrow4,      // narrow: rms_norm_backward_kernel with 4-byte accesses
  kNarrow2,      // narrow: rms_norm_backward_kernel with 2-byte accesses
  kCluster,      // cluster: rms_norm_backward_cluster_kernel, kClusterBackwardRegVecs
  kClusterLong,  // cluster: rms_norm_backward_cluster_kernel,
                 // kClusterBackwardRegVecsLong
  kChunked,  // chunked: rms_norm_backward_chunked_kernel, then the grad_weight column
             // sums
};

// A backward plan (plan_rms_norm_backward): the kernel and its launch shape.
struct RmsNormBackwardPlan {
  BackwardKernel kernel = BackwardKernel::kRegisters;
  dim3 block;          // (threads per row, row slots per block)
  int64_t blocks = 0;  // also the number of partial grad_weight rows; 0: does not fit
  size_t shared_bytes = 0;  // dynamic shared memory per block
  int cluster = 1;          // blocks per cluster (cluster kernels), else 1
  int64_t grid = 0;         // blocks of the first kernel (cluster and chunked kernels)
};

}  // namespace opguide
