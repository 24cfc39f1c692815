// Device code of the fused residual-add + RMSNorm: residual += x in place,
// out = rms_norm(residual) * weight. One or more rows per block, each row's
// part of h and of the weight held in registers between the two passes; and,
// for long rows, one row per thread-block cluster, its slice of the row
// staged in shared memory. Float (or double) accumulation, 16-byte vector
// accesses when the host says they are aligned.
//
// This header includes no torch header: it builds with nvcc and with hipcc
// alone, and fused_add_rms_norm_cuda.cu wraps it for the dispatcher; the
// planner (fused_add_rms_norm_planner.cuh) chooses among these kernels.
#pragma once

#include <cstdint>
#include <type_traits>

#include "../common/cluster.cuh"
#include "../common/device.cuh"
#include "../common/launch.cuh"
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

// out = h * r (* weight), r the row's 1/rms.
template <typename O, typename Acc, typename X, typename R, int kVec>
__device__ __forceinline__ Vec<O, kVec> normalise(const Vec<R, kVec>& hv,
                                                  const Vec<X, kVec>& wv,
                                                  bool has_weight, Acc r) {
  Vec<O, kVec> yv;
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    Acc y = static_cast<Acc>(to_acc(hv.val[k])) * r;
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
// without the cap (nvcc makes the same machine code of it with and without);
// the cap keeps a later change from crossing that line unseen, and
// tests/test_compile_checks.py checks that two blocks fit.
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
  const Acc r = Acc(1) / sqrt(total / static_cast<Acc>(cols) + eps);
  if (threadIdx.x == 0) inv_rms[row] = r;

  // Pass 2: the output.
  if constexpr (kRegVecs == 0) {
    for (int64_t i = threadIdx.x; i < nvec; i += blockDim.x) {
      Vec<X, kVec> w;
      if (has_weight) w = w_vec[i];
      out_row[i] = normalise<O>(res_row[i], w, has_weight, r);
    }
  } else {
#pragma unroll
    for (int j = 0; j < kRegVecs; ++j) {
      const int64_t i = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
      if (i < nvec) {
        // keep_packed: convert h and the weight again rather than hold
        // their float copies across the reduction (common/device.cuh).
        out_row[i] =
            normalise<O>(keep_packed(hv[j]), keep_packed(wv[j]), has_weight, r);
      }
    }
  }
}
// [kernel-end]

// Long rows (more than kFusedClusterMinVecs vectors), as the RMSNorm
// forward's cluster kernel (rms_norm_forward.cuh): one row per
// cluster, each block's slice of x and of the residual staged in shared
// memory with cp.async. The new residual h is stored before the wait for
// the row's sum and kept, rounded to the residual's type as stored, in
// shared memory for the output. X is the type of x and the weight (which may
// be null), R the residual's, O the output's; kVec elements of the widest
// move at a time (so x's vectors may be 8 bytes).
template <typename V>
__device__ __forceinline__ void stage_async(V* shared_dst, const V* global_src) {
  if constexpr (sizeof(V) == 16) {
    copy_async(shared_dst, global_src);
  } else {
#if OPGUIDE_HAVE_CP_ASYNC
    static_assert(sizeof(V) == 4 || sizeof(V) == 8, "cp.async moves 4, 8 or 16 bytes");
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(shared_dst));
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(dst),
                 "l"(global_src), "n"(static_cast<int>(sizeof(V)))
                 : "memory");
#else
    *shared_dst = *global_src;
#endif
  }
}

template <typename X, typename R, typename O, int kVec, int kThreads, int kVecs>
__global__ void __launch_bounds__(kThreads) fused_add_rms_norm_cluster_kernel(
    const X* __restrict__ x,       // [rows, cols], dense
    R* __restrict__ residual,      // [rows, cols], dense, in place
    const X* __restrict__ weight,  // [cols], or null
    O* __restrict__ out,           // [rows, cols], dense
    float* __restrict__ inv_rms,   // [rows]
    int64_t rows, int64_t cols, float eps) {
  using XV = Vec<X, kVec>;
  using RV = Vec<R, kVec>;
  using OV = Vec<O, kVec>;
  constexpr int kWarps = kThreads / kWarpSize;
  // Dynamic shared memory: RV vectors for h, then XV vectors for x (64 KiB
  // for 256 threads of 16-bit types, past the 48 KiB of a static array).
  extern __shared__ __align__(16) unsigned char fused_stage[];
  RV* hs = reinterpret_cast<RV*>(fused_stage);
  XV* xs = reinterpret_cast<XV*>(hs + kThreads * kVecs);
  __shared__ PushSlots<float, kWarps, 1> push;
  wait_for_previous_grid();
  allow_next_grid();
  const int64_t row = blockIdx.x / cluster_blocks();
  const Slice s = cluster_slice(cols / kVec);
  const XV* xr = reinterpret_cast<const XV*>(x + row * cols) + s.begin;
  RV* hr = reinterpret_cast<RV*>(residual + row * cols) + s.begin;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int i = threadIdx.x + k * kThreads;
    if (i < s.count) {
      stage_async(&xs[i], &xr[i]);
      stage_async(&hs[i], &hr[i]);
    }
  }
  copy_async_commit();
  const XV* wv =
      weight == nullptr ? nullptr : reinterpret_cast<const XV*>(weight) + s.begin;
  XV w[kVecs];
  if (wv != nullptr) {
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      const int i = threadIdx.x + k * kThreads;
      if (i < s.count) w[k] = wv[i];
    }
  }
  push_slots_init(push);  // overlaps the copies
  copy_async_wait<0>();   // a thread reads back only what it copied itself
  float sum_sq = 0;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int i = threadIdx.x + k * kThreads;
    if (i < s.count) {
      const XV xk = xs[i];
      RV h = hs[i];
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        h.val[e] = from_acc<R>(to_acc(xk.val[e]) + to_acc(h.val[e]));
        const float v = to_acc(h.val[e]);
        sum_sq += v * v;
      }
      hs[i] = h;
      hr[i] = h;
    }
  }
  sum_sq = push_sum(sum_sq, push, 0);
  const float r = 1.0f / sqrtf(sum_sq / static_cast<float>(cols) + eps);
  if (cluster_rank() == 0 && threadIdx.x == 0) inv_rms[row] = r;
  OV* yr = reinterpret_cast<OV*>(out + row * cols) + s.begin;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int i = threadIdx.x + k * kThreads;
    if (i < s.count) {
      const RV h = hs[i];
      OV o;
      if (wv != nullptr) {
        const XV wk = keep_packed(w[k]);
#pragma unroll
        for (int e = 0; e < kVec; ++e)
          o.val[e] = from_acc<O>(to_acc(h.val[e]) * r * to_acc(wk.val[e]));
      } else {
#pragma unroll
        for (int e = 0; e < kVec; ++e) o.val[e] = from_acc<O>(to_acc(h.val[e]) * r);
      }
      yr[i] = o;
    }
  }
}

}  // namespace opguide
