// RMSNorm forward, device code (the backward: rms_norm_backward.cuh). Torch-free on purpose: this header compiles
// alone with nvcc, and with hipcc after torch's hipify, so both toolchains can
// check it on a machine without a GPU. The host wrapper (rms_norm_cuda.cu)
// holds everything that needs torch.
//
// Layout: x is M rows of N elements; row r starts at x + r * x_row_stride and
// its elements are contiguous. y is dense (M, N). weight is dense (N,).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>
// OPGUIDE_NO_BF16 leaves bfloat16 out, for toolchains that predate its header
// (ROCm before 5.7 has no hip_bf16.h). Normal builds never set it.
#if !defined(OPGUIDE_NO_BF16)
#include <cuda_bf16.h>
#endif

#include <cstdint>
#include <type_traits>

#include "device_common.cuh"
#include "keep_packed.cuh"
#include "launch.cuh"

namespace opguide {
namespace cuda {

// [kernel]
// One row per threadIdx.y, blockDim.x threads per row. Each thread keeps up to
// kRegVecs vectors of its row in registers, so x is read from memory once:
// pass 1 loads and sums squares, pass 2 scales what is already in registers.
// The matching weight vectors are loaded in pass 1 too, so that their loads
// overlap the reduction instead of following it.
// With kLongRows, rows longer than blockDim.x * kRegVecs vectors re-read the
// rest in pass 2 (from L2, which still holds it); without it that code is
// compiled out, which leaves the common case with fewer registers.
template <typename T, int kVec, int kRegVecs, bool kLongRows>
__global__ void __launch_bounds__(1024) rms_norm_forward_kernel(
    const T* __restrict__ x, const T* __restrict__ weight, T* __restrict__ y,
    typename AccType<T>::type* __restrict__ inv_rms_out, int64_t rows, int64_t cols,
    int64_t x_row_stride, float eps) {
  using Acc = typename AccType<T>::type;
  using V = Vec<T, kVec>;
  __shared__ Acc shared[kMaxWarpsPerBlock];
  wait_for_previous_grid();  // see launch.cuh: x may be the previous kernel's output
  allow_next_grid();

  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool active = row < rows;  // inactive threads still join __syncthreads
  const int64_t nvec = cols / kVec;
  const V* xr = reinterpret_cast<const V*>(x + (active ? row : 0) * x_row_stride);
  const V* wv = reinterpret_cast<const V*>(weight);
  V* yr = reinterpret_cast<V*>(y + (active ? row : 0) * cols);

  // All loads first, then the arithmetic: written this way the compiler
  // issues every load before it waits for the first one (interleaved with
  // the sums, it waited for each x before loading the next; step 11,
  // "Lessons", measures both, and tests/test_compile_checks.py checks the
  // order in the machine code).
  V cache[kRegVecs];
  V wcache[kRegVecs];
#pragma unroll
  for (int k = 0; k < kRegVecs; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    if (active && i < nvec) {
      cache[k] = xr[i];
      wcache[k] = wv[i];
    }
  }
  Acc sum_sq = 0;
#pragma unroll
  for (int k = 0; k < kRegVecs; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    if (active && i < nvec) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        const Acc v = to_acc(cache[k].val[e]);
        sum_sq += v * v;
      }
    }
  }
  if constexpr (kLongRows) {
    for (int64_t i = threadIdx.x + static_cast<int64_t>(kRegVecs) * blockDim.x;
         active && i < nvec; i += blockDim.x) {
      const V v = xr[i];
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        const Acc a = to_acc(v.val[e]);
        sum_sq += a * a;
      }
    }
  }

  sum_sq = row_sum(sum_sq, shared);
  if (!active) return;
  const Acc inv_rms = Acc(1) / sqrt(sum_sq / static_cast<Acc>(cols) + static_cast<Acc>(eps));
  // rms_norm_fwd keeps the statistic for the backward pass; rms_norm does not.
  if (inv_rms_out != nullptr && threadIdx.x == 0) inv_rms_out[row] = inv_rms;

#pragma unroll
  for (int k = 0; k < kRegVecs; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    if (i < nvec) {
      const V v = keep_packed(cache[k]);
      const V w = keep_packed(wcache[k]);
      V out;
#pragma unroll
      for (int e = 0; e < kVec; ++e)
        out.val[e] = from_acc<T>(to_acc(v.val[e]) * inv_rms * to_acc(w.val[e]));
      yr[i] = out;
    }
  }
  if constexpr (kLongRows) {
    for (int64_t i = threadIdx.x + static_cast<int64_t>(kRegVecs) * blockDim.x; i < nvec;
         i += blockDim.x) {
      const V v = xr[i];
      const V w = wv[i];
      V out;
#pragma unroll
      for (int e = 0; e < kVec; ++e)
        out.val[e] = from_acc<T>(to_acc(v.val[e]) * inv_rms * to_acc(w.val[e]));
      yr[i] = out;
    }
  }
}
// [kernel-end]

// [launch]
// How many 16-byte vectors of its row each thread keeps in registers,
// chosen with tools/sweep_rms_norm_forward_vectors.cu (step 11 shows the
// sweeps): 4 for every dtype. With the weight held next to x that still fits
// several blocks per SM; 2 vectors (twice the threads per row) are slower
// for 16-bit types, and 8 would not fit in registers. Past 1024 threads per
// row the kLongRows instantiation re-reads the rest of the row from L2.
constexpr int kForwardRegVecs = 4;
constexpr int kMaxThreadsPerRow = 1024;

struct LaunchConfig {
  dim3 grid;
  dim3 block;
  bool long_rows;
};

// Chooses the block shape from the row length: as many threads per row as
// give each thread reg_vecs vectors, and two rows per block when a row takes
// 64 threads or fewer. One row per block of 32 or 64 threads means so many
// blocks (65536 for 65536 x 1024) that the GPU cannot start them fast
// enough (step 11, "Every row length"). Rows that
// need less than a warp get a power of two of threads each, and a block of
// 256 threads holds as many rows as fit (rows of 256 bfloat16 elements: 8
// threads each, 32 rows per block; step 11, "Every row length").
inline LaunchConfig rms_norm_forward_config(int64_t rows, int64_t cols, int vec, int warp_size,
                                            int reg_vecs) {
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
  cfg.block = dim3(static_cast<unsigned>(per_row), static_cast<unsigned>(rows_per_block));
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
  constexpr int same_bytes = kForwardRegVecs * (16 / static_cast<int>(sizeof(T))) / kVec;
  return same_bytes < 8 ? same_bytes : 8;
}

template <typename T, int kVec>
cudaError_t launch_rms_norm_forward_vec(const T* x, const T* weight, T* y,
                                        typename AccType<T>::type* inv_rms, int64_t rows,
                                        int64_t cols, int64_t x_row_stride, float eps,
                                        int warp_size, cudaStream_t stream, bool pdl) {
  constexpr int kRegs = forward_reg_vecs<T, kVec>();
  const LaunchConfig cfg = rms_norm_forward_config(rows, cols, kVec, warp_size, kRegs);
  auto kernel = cfg.long_rows ? rms_norm_forward_kernel<T, kVec, kRegs, true>
                              : rms_norm_forward_kernel<T, kVec, kRegs, false>;
  return launch_kernel(kernel, cfg.grid, cfg.block, 0, stream, pdl, x, weight, y, inv_rms, rows,
                       cols, x_row_stride, eps);
}

// [vector-width]
// The widest access, in elements, that the row length, the row stride and
// every pointer allow: 16 bytes, else 8, else 4, else one element. A row
// length that is not a multiple of 16 bytes still gets narrower vectors
// (step 11, "Odd row lengths").
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

// Launches the forward kernel on `stream`, with the widest accesses that
// forward_vector_width allows. inv_rms (one value per row, may be null)
// receives 1/rms for the backward. pdl: launch with programmatic dependent
// launch (launch.cuh). Returns the launch's error code (cudaSuccess when it
// was queued).
template <typename T>
cudaError_t launch_rms_norm_forward(const T* x, const T* weight, T* y,
                                    typename AccType<T>::type* inv_rms, int64_t rows,
                                    int64_t cols, int64_t x_row_stride, float eps, int warp_size,
                                    cudaStream_t stream, bool pdl = false) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  constexpr int kWide = 16 / sizeof(T);
  const auto launch = [&](auto width) {
    return launch_rms_norm_forward_vec<T, decltype(width)::value>(
        x, weight, y, inv_rms, rows, cols, x_row_stride, eps, warp_size, stream, pdl);
  };
  const int vec = forward_vector_width(x, weight, y, cols, x_row_stride);
  if (vec == kWide) return launch(std::integral_constant<int, kWide>{});
  if constexpr (kWide >= 4) {
    if (vec == kWide / 2) return launch(std::integral_constant<int, kWide / 2>{});
  }
  if constexpr (kWide >= 8) {
    if (vec == kWide / 4) return launch(std::integral_constant<int, kWide / 4>{});
  }
  return launch(std::integral_constant<int, 1>{});
}
// [launch-end]

}  // namespace cuda
}  // namespace opguide
