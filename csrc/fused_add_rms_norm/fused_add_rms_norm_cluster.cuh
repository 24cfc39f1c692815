// Fused residual-add + RMSNorm for long rows: one row per thread-block cluster.
// Torch-free.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>
// OPGUIDE_NO_BF16 leaves bfloat16 out, for toolchains that predate its header
// (ROCm before 5.7 has no hip_bf16.h). Normal builds never set it.
#if !defined(OPGUIDE_NO_BF16)
#include <cuda_bf16.h>
#endif

#include <cstdint>

#include "../common/async_copy.cuh"
#include "../common/cluster.cuh"
#include "../common/launch.cuh"
#include "../common/vec.cuh"
#include "fused_add_rms_norm_config.h"

namespace opguide {

// Fused residual add + RMSNorm (fused_add_rms_norm.cuh) for rows longer than
// kClusterFusedMinVecs vectors, as the forward cluster kernel: one row per
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
    const X* __restrict__ x,          // [rows, cols], dense
    R* __restrict__ residual,         // [rows, cols], dense, in place
    const X* __restrict__ weight,     // [cols], or null
    O* __restrict__ out,              // [rows, cols], dense
    float* __restrict__ inv_rms_out,  // [rows]
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
  const float inv_rms = 1.0f / sqrtf(sum_sq / static_cast<float>(cols) + eps);
  if (cluster_rank() == 0 && threadIdx.x == 0) inv_rms_out[row] = inv_rms;
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
          o.val[e] = from_acc<O>(to_acc(h.val[e]) * inv_rms * to_acc(wk.val[e]));
      } else {
#pragma unroll
        for (int e = 0; e < kVec; ++e)
          o.val[e] = from_acc<O>(to_acc(h.val[e]) * inv_rms);
      }
      yr[i] = o;
    }
  }
}

}  // namespace opguide
