// The knobs of the silu_and_mul CUDA kernels, each constant with its reason,
// and plan_silu_and_mul, the one function that chooses them for a problem and
// a device. Host code; torch-free (cuda_runtime.h for dim3 only).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace opguide {

// Threads per block: a multiple of every warp width (32 on NVIDIA, 64 on AMD
// CDNA), few enough that several blocks share an SM (a block that waits on
// memory leaves the others running), and enough that one block holds a row
// of 512 16-byte vectors (4096 bfloat16 outputs) at the forward's unroll.
constexpr int kSiluThreads = 256;
// Resident blocks per SM that the kernels are built for and the grid asks
// for: 1024 threads, which caps a thread at 64 registers (__launch_bounds__).
// The widest instances fit it without spilling: 60 registers for the
// bfloat16 forward, 54 for the backward (nvcc 13.0 -Xptxas -v, sm_90). More
// blocks than fit only wait for a slot; the kernels loop over rows instead.
constexpr int kSiluBlocksPerSm = 4;
// 16-byte vectors of each input a thread loads before it waits for any of
// them. Little's law for HBM: ~4.8 TB/s (H200) times ~1 us of latency is
// ~5 MB in flight, ~36 KiB per SM of 132. 1024 threads an SM reading two
// inputs with 2 vectors each (forward: a and b) have 64 KiB in flight;
// three inputs with 1 vector each (backward: grad_y, a and b) 48 KiB, and 2
// vectors would spill (42 bytes, bfloat16, nvcc 13.0 at 64 registers).
// Arithmetic, not a measurement: guidekit/benchmark/silu_and_mul.py measures
// the kernels against a copy of the same bytes.
constexpr int kSiluForwardUnroll = 2;
constexpr int kSiluBackwardUnroll = 1;
// The widest access a thread can issue.
constexpr int kSiluAccessBytes = 16;

// What plan_silu_and_mul chose; the launch (silu_and_mul.cuh) reads it and
// decides nothing.
struct SiluAndMulPlan {
  int vec = 1;       // elements per access: 16 bytes' worth, or 1 (scalar fallback)
  dim3 block;        // (threads along a row, rows per block), x * y == kSiluThreads
  int64_t grid = 0;  // blocks; each loops over rows with a stride of grid * block.y
};

// The plan for rows rows of cols output elements of elem_bytes bytes each,
// forward or backward. aligned16: every pointer the kernel touches starts on
// a 16-byte boundary. Vectors need that and cols a multiple of the vector (so
// that each half of each row starts on one); otherwise scalar accesses. A
// row's vectors are spread over the fewest threads that give each the
// direction's unroll of them (a power of two, at most the block), and the
// block holds as many rows as it has threads for. The grid covers every row
// once, or fills the device and loops.
inline SiluAndMulPlan plan_silu_and_mul(int64_t rows, int64_t cols, int elem_bytes,
                                        bool aligned16, int sm_count, bool backward) {
  SiluAndMulPlan plan;
  const int wide = kSiluAccessBytes / elem_bytes;
  plan.vec = aligned16 && wide > 1 && cols % wide == 0 ? wide : 1;
  const int64_t vecs = cols / plan.vec;
  const int unroll = backward ? kSiluBackwardUnroll : kSiluForwardUnroll;
  const int64_t per_thread = (vecs + unroll - 1) / unroll;
  int threads_x = 1;
  while (threads_x < per_thread && threads_x < kSiluThreads) threads_x *= 2;
  plan.block = dim3(threads_x, kSiluThreads / threads_x);
  const int64_t row_blocks = (rows + plan.block.y - 1) / plan.block.y;
  const int64_t device_blocks = static_cast<int64_t>(sm_count) * kSiluBlocksPerSm;
  plan.grid = row_blocks < device_blocks ? row_blocks : device_blocks;
  return plan;
}

}  // namespace opguide
