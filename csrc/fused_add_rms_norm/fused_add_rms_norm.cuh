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
// OPGUIDE_NO_BF16 leaves bfloat16 out, for toolchains that predate its header
// (ROCm before 5.7 has no hip_bf16.h). Normal builds never set it.
#if !defined(OPGUIDE_NO_BF16)
#include <cuda_bf16.h>
#endif

#include <cstdint>
#include <type_traits>

#include "../common/keep_packed.cuh"
#include "../common/launch.cuh"
#include "../common/reduce.cuh"
#include "../common/vec.cuh"
#include "fused_add_rms_norm_config.h"

namespace opguide {

// h = x + residual, rounded once to R (the value that is stored), and
// its squares added to sum_sq.
template <typename Acc, typename X, typename R, int kVec>
__device__ __forceinline__ void add_residual(const Vec<X, kVec>& xv, Vec<R, kVec>& hv,
                                             Acc& sum_sq) {
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    hv.val[k] = from_acc<R>(static_cast<Acc>(to_acc(xv.val[k])) +
                            static_cast<Acc>(to_acc(hv.val[k])));
    const Acc h = static_cast<Acc>(to_acc(hv.val[k]));
    sum_sq += h * h;
  }
}

// out = h * inv_rms (* weight).
template <typename O, typename Acc, typename X, typename R, int kVec>
__device__ __forceinline__ Vec<O, kVec> normalise(const Vec<R, kVec>& hv,
                                                  const Vec<X, kVec>& wv,
                                                  bool has_weight, Acc inv_rms) {
  Vec<O, kVec> yv;
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    Acc y = static_cast<Acc>(to_acc(hv.val[k])) * inv_rms;
    if (has_weight) y *= static_cast<Acc>(to_acc(wv.val[k]));
    yv.val[k] = from_acc<O>(y);
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
// x and weight are X, the residual R, the output O; Acc is float
// or double. kVec > 1 only when every row of every array is aligned to
// kVec elements and cols is a multiple of kVec (the launcher checks).
// __launch_bounds__(1024, 2) holds the kernel to 32 registers per thread, so
// that two blocks of 1024 threads fit on an SM: with one block per SM the
// memory system idles between rows. The kernel as written needs no more
// without the cap (docs/recorded/sweep_fused_add_rms_norm_uncapped_h100.txt
// against sweep_fused_add_rms_norm_h100.txt, both from
// tools/sweep_fused_add_rms_norm.cu); the cap keeps a later change from
// crossing that line unseen, and tests/test_compile_checks.py checks that two
// blocks fit.
template <typename X, typename R, typename O, typename Acc, int kVec, int kRegVecs>
__global__ void __launch_bounds__(kFusedMaxThreads, 2) fused_add_rms_norm_kernel(
    const X* __restrict__ x,       // [rows, cols], dense
    R* __restrict__ residual,      // [rows, cols], dense, in place
    const X* __restrict__ weight,  // [cols], or null
    O* __restrict__ out,           // [rows, cols], dense
    Acc* __restrict__ inv_rms,     // [rows]
    int64_t rows, int64_t cols, Acc eps) {
  __shared__ Acc shared[kMaxWarpsPerBlock];
  wait_for_previous_grid();  // common/launch.cuh: may start before the previous kernel
                             // ends
  allow_next_grid();
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool active =
      row < rows;  // a block's last rows may lie past rows; they still sum
  const int64_t nvec = cols / kVec;
  const int64_t offset = (active ? row : 0) * cols;
  const auto* x_row = reinterpret_cast<const Vec<X, kVec>*>(x + offset);
  auto* res_row = reinterpret_cast<Vec<R, kVec>*>(residual + offset);
  auto* out_row = reinterpret_cast<Vec<O, kVec>*>(out + offset);
  const auto* w_vec = reinterpret_cast<const Vec<X, kVec>*>(weight);
  const bool has_weight = weight != nullptr;
  Acc sum_sq = 0;
  // kRegVecs == 0 holds nothing; the arrays are then never used.
  constexpr int kHeld = kRegVecs > 0 ? kRegVecs : 1;
  Vec<X, kVec> xv[kHeld];
  Vec<R, kVec> hv[kHeld];
  Vec<X, kVec> wv[kHeld];

  // Pass 1: h = x + residual, stored, and the sum of h^2.
  if constexpr (kRegVecs == 0) {
    for (int64_t i = threadIdx.x; active && i < nvec; i += blockDim.x) {
      Vec<R, kVec> h = res_row[i];
      add_residual(x_row[i], h, sum_sq);
      res_row[i] = h;
    }
  } else {
    // All loads are issued before the first addition, as in the forward
    // kernel.
#pragma unroll
    for (int j = 0; j < kRegVecs; ++j) {
      const int64_t i = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
      if (active && i < nvec) {
        xv[j] = x_row[i];
        hv[j] = res_row[i];
        if (has_weight) wv[j] = w_vec[i];
      }
    }
#pragma unroll
    for (int j = 0; j < kRegVecs; ++j) {
      const int64_t i = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
      if (active && i < nvec) {
        add_residual(xv[j], hv[j], sum_sq);
        res_row[i] = hv[j];
      }
    }
  }

  const Acc total = row_sum<Acc, true>(sum_sq, shared);
  if (!active) return;
  const Acc inv = Acc(1) / sqrt(total / static_cast<Acc>(cols) + eps);
  if (threadIdx.x == 0) inv_rms[row] = inv;

  // Pass 2: the output.
  if constexpr (kRegVecs == 0) {
    for (int64_t i = threadIdx.x; i < nvec; i += blockDim.x) {
      Vec<X, kVec> w;
      if (has_weight) w = w_vec[i];
      out_row[i] = normalise<O>(res_row[i], w, has_weight, inv);
    }
  } else {
#pragma unroll
    for (int j = 0; j < kRegVecs; ++j) {
      const int64_t i = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
      if (i < nvec) {
        // keep_packed: convert h and the weight again rather than hold
        // their float copies across the reduction (keep_packed.cuh).
        out_row[i] =
            normalise<O>(keep_packed(hv[j]), keep_packed(wv[j]), has_weight, inv);
      }
    }
  }
}
// [kernel-end]

}  // namespace opguide
