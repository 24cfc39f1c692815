// Device code of the fused residual-add + RMSNorm: residual += x in place,
// out = rms_norm(residual) * weight. One or more rows per block, each row's
// part of h and of the weight held in registers between the two passes,
// float (or double) accumulation, 16-byte vector accesses when the host says
// they are aligned.
//
// This header includes no torch header: it builds with nvcc and with hipcc
// alone, and fused_add_rms_norm_cuda.cu wraps it for the dispatcher.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>
// OPGUIDE_NO_BF16 leaves bfloat16 out, for HIP toolchains without hip_bf16.h.
#if !defined(OPGUIDE_NO_BF16)
#include <cuda_bf16.h>
#endif

#include <cstdint>
#include <type_traits>

#include "device_common.cuh"
#include "keep_packed.cuh"
#include "launch.cuh"

namespace opguide {
namespace fused {

// The warp width and shuffles (with their HIP shim), conversions, vectors
// and the row reduction are the library's shared ones (device_common.cuh).
using cuda::from_acc;
using cuda::kMaxWarpsPerBlock;
using cuda::row_sum;
using cuda::to_acc;
using cuda::Vec;

constexpr int kMaxThreads = 1024;

// h = x + residual, rounded once to res_t (the value that is stored), and
// its squares added to sum_sq.
template <typename acc_t, typename x_t, typename res_t, int kVec>
__device__ __forceinline__ void add_residual(const Vec<x_t, kVec>& xv, Vec<res_t, kVec>& hv,
                                             acc_t& sum_sq) {
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    hv.val[k] = from_acc<res_t>(static_cast<acc_t>(to_acc(xv.val[k])) +
                                  static_cast<acc_t>(to_acc(hv.val[k])));
    const acc_t h = static_cast<acc_t>(to_acc(hv.val[k]));
    sum_sq += h * h;
  }
}

// out = h * inv_rms (* weight).
template <typename out_t, typename acc_t, typename x_t, typename res_t, int kVec>
__device__ __forceinline__ Vec<out_t, kVec> normalise(const Vec<res_t, kVec>& hv,
                                                      const Vec<x_t, kVec>& wv, bool has_weight,
                                                      acc_t inv_rms) {
  Vec<out_t, kVec> yv;
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    acc_t y = static_cast<acc_t>(to_acc(hv.val[k])) * inv_rms;
    if (has_weight) y *= static_cast<acc_t>(to_acc(wv.val[k]));
    yv.val[k] = from_acc<out_t>(y);
  }
  return yv;
}

// [kernel]
// Row threadIdx.y of block b is row b * blockDim.y + threadIdx.y; its
// blockDim.x threads each take the vectors threadIdx.x, threadIdx.x +
// blockDim.x, ... of it.
// With kRegVecs > 0 (rows of at most kRegVecs * blockDim.x vectors) a
// thread holds its vectors of h and of the weight in registers: pass 1
// loads x, the residual and the weight, stores h = x + residual and sums
// h^2; pass 2 writes the output without reading memory.
// With kRegVecs == 0 (longer rows) both passes loop over the row: pass 2
// reads back the residual elements that the thread itself wrote in pass 1
// (same index mapping), from L2, and the weight.
// x and weight are x_t, the residual res_t, the output out_t; acc_t is float
// or double. kVec > 1 only when every row of every array is aligned to
// kVec elements and n is a multiple of kVec (the launcher checks).
// __launch_bounds__(1024, 2) caps the kernel at 32 registers per thread, so
// that two blocks of 1024 threads fit on an SM: a few registers more and
// only one block fits, which leaves the memory system idle between rows
// (step 11, "Lessons", measures it).
template <typename x_t, typename res_t, typename out_t, typename acc_t, int kVec, int kRegVecs>
__global__ void __launch_bounds__(kMaxThreads, 2)
    fused_add_rms_norm_kernel(const x_t* __restrict__ x, res_t* __restrict__ residual,
                              const x_t* __restrict__ weight,  // may be null
                              out_t* __restrict__ out, acc_t* __restrict__ inv_rms, int64_t m,
                              int64_t n, acc_t eps) {
  __shared__ acc_t shared[kMaxWarpsPerBlock];
  cuda::wait_for_previous_grid();  // launch.cuh: may start before the previous kernel ends
  cuda::allow_next_grid();
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool active = row < m;  // a block's last rows may lie past m; they still sum
  const int64_t n_vec = n / kVec;
  const int64_t offset = (active ? row : 0) * n;
  const auto* x_row = reinterpret_cast<const Vec<x_t, kVec>*>(x + offset);
  auto* res_row = reinterpret_cast<Vec<res_t, kVec>*>(residual + offset);
  auto* out_row = reinterpret_cast<Vec<out_t, kVec>*>(out + offset);
  const auto* w_vec = reinterpret_cast<const Vec<x_t, kVec>*>(weight);
  const bool has_weight = weight != nullptr;
  acc_t sum_sq = 0;
  // kRegVecs == 0 holds nothing; the arrays are then never used.
  constexpr int kHeld = kRegVecs > 0 ? kRegVecs : 1;
  Vec<x_t, kVec> xv[kHeld];
  Vec<res_t, kVec> hv[kHeld];
  Vec<x_t, kVec> wv[kHeld];

  // Pass 1: h = x + residual, stored, and the sum of h^2.
  if constexpr (kRegVecs == 0) {
    for (int64_t i = threadIdx.x; active && i < n_vec; i += blockDim.x) {
      Vec<res_t, kVec> h = res_row[i];
      add_residual(x_row[i], h, sum_sq);
      res_row[i] = h;
    }
  } else {
    // All loads are issued before the first addition, as in the forward
    // kernel (step 11, "Lessons").
#pragma unroll
    for (int j = 0; j < kRegVecs; ++j) {
      const int64_t i = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
      if (active && i < n_vec) {
        xv[j] = x_row[i];
        hv[j] = res_row[i];
        if (has_weight) wv[j] = w_vec[i];
      }
    }
#pragma unroll
    for (int j = 0; j < kRegVecs; ++j) {
      const int64_t i = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
      if (active && i < n_vec) {
        add_residual(xv[j], hv[j], sum_sq);
        res_row[i] = hv[j];
      }
    }
  }

  const acc_t total = row_sum<acc_t, true>(sum_sq, shared);
  if (!active) return;
  const acc_t inv = acc_t(1) / sqrt(total / static_cast<acc_t>(n) + eps);
  if (threadIdx.x == 0) inv_rms[row] = inv;

  // Pass 2: the output.
  if constexpr (kRegVecs == 0) {
    for (int64_t i = threadIdx.x; i < n_vec; i += blockDim.x) {
      Vec<x_t, kVec> w;
      if (has_weight) w = w_vec[i];
      out_row[i] = normalise<out_t>(res_row[i], w, has_weight, inv);
    }
  } else {
#pragma unroll
    for (int j = 0; j < kRegVecs; ++j) {
      const int64_t i = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
      if (i < n_vec) {
        // keep_packed: convert h and the weight again rather than hold
        // their float copies across the reduction (keep_packed.cuh).
        out_row[i] = normalise<out_t>(cuda::keep_packed(hv[j]), cuda::keep_packed(wv[j]),
                                      has_weight, inv);
      }
    }
  }
}
// [kernel-end]

// [launcher]
// Vectors of its row that each thread holds in registers, and the threads
// of a block (short rows are grouped several to a block), chosen with
// tools/sweep_fused_add_rms_norm.cu (step 11 shows the sweeps):
// - One vector per thread: two need more registers than the cap above
//   allows, and spill under it.
// - 384 threads: for short rows the best number of rows per block differs
//   between GPUs, and three rows of 128 threads are close to the best on
//   each GPU swept.
constexpr int kFusedRegVecs = 1;
constexpr int kFusedBlockThreads = 384;

struct FusedConfig {
  dim3 grid;
  dim3 block;
  bool long_rows;  // more vectors than the block's threads can hold: kRegVecs == 0
};

// The block shape for m rows of n elements moved vec at a time: enough
// threads per row (a multiple of the warp, at most kMaxThreads) for each to
// hold reg_vecs vectors, and as many rows per block as fit in
// block_threads threads.
inline FusedConfig fused_config(int64_t m, int64_t n, int vec, int reg_vecs, int warp_size,
                                int block_threads) {
  const int64_t n_vec = n / vec;
  int64_t per_row = (n_vec + reg_vecs - 1) / reg_vecs;
  per_row = (per_row + warp_size - 1) / warp_size * warp_size;
  if (per_row < warp_size) per_row = warp_size;  // n == 0: one warp per row, which writes inv_rms
  if (per_row > kMaxThreads) per_row = kMaxThreads;
  const int64_t rows_per_block = per_row < block_threads ? block_threads / per_row : 1;
  FusedConfig cfg;
  cfg.block = dim3(static_cast<unsigned>(per_row), static_cast<unsigned>(rows_per_block));
  cfg.grid = dim3(static_cast<unsigned>((m + rows_per_block - 1) / rows_per_block));
  cfg.long_rows = n_vec > per_row * reg_vecs;
  return cfg;
}

// Elements per 16-byte access of the widest of the three types.
template <typename x_t, typename res_t, typename out_t>
constexpr int fused_vector_width() {
  return 16 / (sizeof(x_t) > sizeof(res_t)
                   ? (sizeof(x_t) > sizeof(out_t) ? sizeof(x_t) : sizeof(out_t))
                   : (sizeof(res_t) > sizeof(out_t) ? sizeof(res_t) : sizeof(out_t)));
}

template <typename x_t, typename res_t, typename out_t, typename acc_t, int kVec, int kRegVecs>
cudaError_t launch_fused_vec(const x_t* x, res_t* residual, const x_t* weight, out_t* out,
                             acc_t* inv_rms, int64_t m, int64_t n, acc_t eps, int warp_size,
                             cudaStream_t stream, bool pdl) {
  const FusedConfig cfg = fused_config(m, n, kVec, kRegVecs, warp_size, kFusedBlockThreads);
  auto kernel = cfg.long_rows
                    ? fused_add_rms_norm_kernel<x_t, res_t, out_t, acc_t, kVec, 0>
                    : fused_add_rms_norm_kernel<x_t, res_t, out_t, acc_t, kVec, kRegVecs>;
  return cuda::launch_kernel(kernel, cfg.grid, cfg.block, 0, stream, pdl, x, residual, weight, out,
                             inv_rms, m, n, eps);
}

// Whether every row of the four arrays starts on a whole `bytes` access: n
// elements of T a multiple of it, and each pointer aligned (weight may be null).
template <typename T>
bool rows_aligned_to(int bytes, int64_t n, const T* x, const T* residual, const T* weight,
                     const T* out) {
  const auto on = [bytes](const void* p) {
    return p == nullptr || reinterpret_cast<uintptr_t>(p) % bytes == 0;
  };
  return (n * static_cast<int64_t>(sizeof(T))) % bytes == 0 && on(x) && on(residual) &&
         on(weight) && on(out);
}

// Launches on `stream` and returns the launch's error; with programmatic
// dependent launch when `pdl` (launch.cuh). The caller passes vectorize =
// true only when n is a multiple of the vector width and every pointer is
// aligned to a whole vector (16 bytes of the widest type). Otherwise, when
// x, the residual and the output share one dtype, the rows take the widest
// narrower access they allow (8 or 4 bytes; step 11, "Odd row lengths"),
// two vectors per thread, and other rows four single elements per thread
// (more spill under the register cap above). warp_size is the device's (32,
// or 64 on AMD CDNA GPUs).
template <typename x_t, typename res_t, typename out_t, typename acc_t>
cudaError_t launch_fused_add_rms_norm(const x_t* x, res_t* residual, const x_t* weight,
                                      out_t* out, acc_t* inv_rms, int64_t m, int64_t n,
                                      acc_t eps, bool vectorize, int warp_size,
                                      cudaStream_t stream, bool pdl = false) {
  constexpr int kVec = fused_vector_width<x_t, res_t, out_t>();
  if (vectorize) {
    return launch_fused_vec<x_t, res_t, out_t, acc_t, kVec, kFusedRegVecs>(
        x, residual, weight, out, inv_rms, m, n, eps, warp_size, stream, pdl);
  }
  if constexpr (std::is_same_v<x_t, res_t> && std::is_same_v<x_t, out_t> && kVec >= 4) {
    if (rows_aligned_to(8, n, x, residual, weight, out)) {
      return launch_fused_vec<x_t, res_t, out_t, acc_t, kVec / 2, 2 * kFusedRegVecs>(
          x, residual, weight, out, inv_rms, m, n, eps, warp_size, stream, pdl);
    }
    if constexpr (kVec >= 8) {
      if (rows_aligned_to(4, n, x, residual, weight, out)) {
        return launch_fused_vec<x_t, res_t, out_t, acc_t, kVec / 4, 2 * kFusedRegVecs>(
            x, residual, weight, out, inv_rms, m, n, eps, warp_size, stream, pdl);
      }
    }
  }
  constexpr int kSingles = kVec >= 4 ? 4 * kFusedRegVecs : kFusedRegVecs;  // double: one
  return launch_fused_vec<x_t, res_t, out_t, acc_t, 1, kSingles>(
      x, residual, weight, out, inv_rms, m, n, eps, warp_size, stream, pdl);
}
// [launcher-end]

}  // namespace fused
}  // namespace opguide
