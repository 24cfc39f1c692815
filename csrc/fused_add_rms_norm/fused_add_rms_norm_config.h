// Every tuned constant of the fused residual-add + RMSNorm CUDA kernels,
// with the reason and the tool that measured it. Torch-free.
#pragma once

#include <cstdint>

namespace opguide {

// Threads per row at most: one block per row at the longest.
constexpr int kFusedMaxThreads = 1024;

// Vectors of its row that each thread holds in registers, and the threads
// of a block (short rows are grouped several to a block), chosen with
// tools/sweep_fused_add_rms_norm.cu (docs/recorded/sweep_fused_add_rms_norm_*.txt):
// - One vector per thread: two need more registers than the kernel's cap
//   (two blocks of 1024 threads per multiprocessor) allows, and spill under it.
// - 384 threads: for short rows the best number of rows per block differs
//   between GPUs, and three rows of 128 threads are close to the best on
//   each GPU swept.
constexpr int kFusedRegVecs = 1;
constexpr int kFusedBlockThreads = 384;

// Rows of more than kFusedClusterMinVecs vectors go to clusters: below that,
// the one-block kernel's second read of a row comes from L2 (95% of a copy
// at bfloat16 cols = 32768, tools/sweep_fused_add_rms_norm.cu); above
// it, from memory. A cluster's blocks have kFusedClusterThreads threads (twice
// that for rows too long for 16 such blocks), each holding kFusedClusterVecs
// vectors, as the RMSNorm forward's cluster kernel (rms_norm_config.h).
constexpr int64_t kFusedClusterMinVecs = 4096;
constexpr int kFusedClusterThreads = 128;
constexpr int kFusedClusterVecs = 8;

}  // namespace opguide
