// RMSNorm backward, device code: grad_x and the per-block partial sums of
// grad_weight for rows held in registers (two kernels: one that prefetches
// the next row into registers, one that pipelines rows through shared memory
// with cp.async), and the deterministic sum of the partials. Longer rows:
// rms_norm_backward_long_rows.cuh. Torch-free like the forward
// (rms_norm_forward.cuh); rms_norm_backward_plan.cuh plans and launches them.
#pragma once

#include <cstdint>

#include "../common/device.cuh"
#include "../common/launch.cuh"
#include "rms_norm_config.h"

namespace opguide {

// Backward, per row with r = inv_rms[row]:
//   grad_x = r * g * w - x * (r^3 / N) * sum_k(g_k * w_k * x_k)
//   grad_weight = sum over rows of g * x * r
// A block has blockDim.y row slots of blockDim.x threads each. Slot y of
// block b takes rows b * blockDim.y + y, then that plus gridDim.x *
// blockDim.y, and so on: the grid is only as large as fits on the GPU at
// once, and each thread keeps its slice of the weight and of grad_weight in
// registers across all its rows. A thread loads the next row's g and x
// before it reduces and writes the current one, so that the memory system
// always has loads in flight.
// At the end each block writes one partial grad_weight row (its slots summed in
// slot order); a second kernel sums the partials in a fixed order, so the
// result does not depend on timing.

template <typename T, int kVec, int kRegs>
__device__ __forceinline__ void load_row_slice(const Vec<T, kVec>* row, int64_t nvec,
                                               Vec<T, kVec> (&out)[kRegs]) {
#pragma unroll
  for (int k = 0; k < kRegs; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    if (i < nvec) out[k] = load_streaming(row + i);
  }
}

// The arithmetic of one row that every backward kernel shares, over the
// `count` vectors of the row that this thread's slice holds (vector k of the
// slice is vector threadIdx.x + k * blockDim.x).
// start_slice: the weight slice into registers, the grad_weight sums to zero.
template <typename T, int kVec, int kRegVecs, typename Acc>
__device__ __forceinline__ void start_slice(const Vec<T, kVec>* wv, int64_t count,
                                            Vec<T, kVec> (&w)[kRegVecs],
                                            Acc (&grad_weight_acc)[kRegVecs][kVec]) {
#pragma unroll
  for (int k = 0; k < kRegVecs; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    if (i < count) w[k] = wv[i];
#pragma unroll
    for (int e = 0; e < kVec; ++e) grad_weight_acc[k][e] = 0;
  }
}

// The pipelined kernels' stage buffers: a row slot's stage holds its
// threads' vectors of g, then of x, thread-major (dst: this thread's first).
// copy_slice_async queues the copies of a row slice (gr, xr: its first
// vectors); read_stage reads a stage back into registers.
template <typename T, int kVec, int kRegVecs>
__device__ __forceinline__ void copy_slice_async(const Vec<T, kVec>* gr,
                                                 const Vec<T, kVec>* xr,
                                                 Vec<T, kVec>* dst, int64_t count) {
#pragma unroll
  for (int k = 0; k < kRegVecs; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    if (i < count) {
      copy_async(dst + k * blockDim.x, gr + i);
      copy_async(dst + (kRegVecs + k) * blockDim.x, xr + i);
    }
  }
}

template <typename T, int kVec, int kRegVecs>
__device__ __forceinline__ void read_stage(const Vec<T, kVec>* src,
                                           Vec<T, kVec> (&g)[kRegVecs],
                                           Vec<T, kVec> (&xv)[kRegVecs]) {
#pragma unroll
  for (int k = 0; k < kRegVecs; ++k) {
    g[k] = src[k * blockDim.x];
    xv[k] = src[(kRegVecs + k) * blockDim.x];
  }
}

// row_dot: this thread's part of sum_k(g_k * w_k * x_k).
template <typename T, int kVec, int kRegVecs>
__device__ __forceinline__ typename AccType<T>::type row_dot(
    const Vec<T, kVec> (&g)[kRegVecs], const Vec<T, kVec> (&w)[kRegVecs],
    const Vec<T, kVec> (&xv)[kRegVecs], int64_t count) {
  typename AccType<T>::type dot = 0;
#pragma unroll
  for (int k = 0; k < kRegVecs; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    if (i < count) {
#pragma unroll
      for (int e = 0; e < kVec; ++e)
        dot += to_acc(g[k].val[e]) * to_acc(w[k].val[e]) * to_acc(xv[k].val[e]);
    }
  }
  return dot;
}

// store_grad_x: grad_x = r * g * w - c * x into dxr (the slice's first
// vector), and g * x * r added to the thread's grad_weight sums.
template <typename T, int kVec, int kRegVecs, typename Acc>
__device__ __forceinline__ void store_grad_x(const Vec<T, kVec> (&g)[kRegVecs],
                                             const Vec<T, kVec> (&w)[kRegVecs],
                                             const Vec<T, kVec> (&xv)[kRegVecs], Acc r,
                                             Acc c, int64_t count, Vec<T, kVec>* dxr,
                                             Acc (&grad_weight_acc)[kRegVecs][kVec]) {
#pragma unroll
  for (int k = 0; k < kRegVecs; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    if (i < count) {
      Vec<T, kVec> out;
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        const Acc gv = to_acc(g[k].val[e]);
        const Acc xe = to_acc(xv[k].val[e]);
        out.val[e] = from_acc<T>(r * gv * to_acc(w[k].val[e]) - c * xe);
        grad_weight_acc[k][e] += gv * xe * r;
      }
      store_streaming(dxr + i, out);
    }
  }
}

// Writes the block's partial grad_weight row from each thread's register sums
// grad_weight_acc[k][e] (element e of its vector k of the row). Thread x of every row
// slot holds sums for the same columns, so the slots are added: slots
// blockDim.y - 1 down to 1 add theirs in turn into `shared` (cols
// accumulators), element e of vector i at e * nvec + i, where neighbouring
// threads touch neighbouring words (no bank conflicts; with i * kVec + e,
// 16-byte vectors put 8 threads on one bank); slot 0 then adds that total to
// its own sums and stores whole vectors. The order of the additions is fixed.
// Every thread of the block must call it.
template <int kVec, int kRegVecs, typename Acc>
__device__ __forceinline__ void store_partial_grad_weight(
    const Acc (&grad_weight_acc)[kRegVecs][kVec], int64_t nvec, Acc* partial,
    Acc* shared) {
  const int slots = static_cast<int>(blockDim.y);
  for (int slot = slots - 1; slot >= 1; --slot) {
    if (static_cast<int>(threadIdx.y) == slot) {
#pragma unroll
      for (int k = 0; k < kRegVecs; ++k) {
        const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
        if (i < nvec) {
#pragma unroll
          for (int e = 0; e < kVec; ++e) {
            Acc& sum = shared[e * nvec + i];
            sum = (slot == slots - 1 ? Acc(0) : sum) + grad_weight_acc[k][e];
          }
        }
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int k = 0; k < kRegVecs; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    if (threadIdx.y == 0 && i < nvec) {
      Vec<Acc, kVec> out;
#pragma unroll
      for (int e = 0; e < kVec; ++e)
        out.val[e] = slots > 1 ? grad_weight_acc[k][e] + shared[e * nvec + i]
                               : grad_weight_acc[k][e];
      reinterpret_cast<Vec<Acc, kVec>*>(partial)[i] = out;
    }
  }
}

template <typename T, int kVec, int kRegVecs>
__global__ void __launch_bounds__(kBackwardMaxThreads, 1) rms_norm_backward_kernel(
    const T* __restrict__ grad_y,                                 // [rows, cols], dense
    const T* __restrict__ x,                                      // [rows, cols], dense
    const T* __restrict__ weight,                                 // [cols]
    const typename AccType<T>::type* __restrict__ inv_rms,        // [rows]
    T* __restrict__ grad_x,                                       // [rows, cols], dense
    typename AccType<T>::type* __restrict__ grad_weight_partial,  // [blocks, cols]
    int64_t rows, int64_t cols) {
  using Acc = typename AccType<T>::type;
  using V = Vec<T, kVec>;
  // Two buffers: iteration i reduces in shared[i % 2], so a fast warp that
  // starts the next row cannot overwrite what a slow warp is still reading.
  __shared__ Acc shared[2][kMaxWarpsPerBlock];
  extern __shared__ __align__(16) unsigned char dynamic_shared[];
  wait_for_previous_grid();  // see common/launch.cuh
  allow_next_grid();
  const int64_t nvec = cols / kVec;
  const V* wv = reinterpret_cast<const V*>(weight);

  V w[kRegVecs];
  Acc grad_weight_acc[kRegVecs][kVec];
  start_slice(wv, nvec, w, grad_weight_acc);

  // Every thread of the block runs the same number of iterations (row_sum
  // synchronises the block); a slot past the last row just idles.
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.y;
  int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  V g[kRegVecs], xv[kRegVecs];
  if (row < rows) {
    load_row_slice(reinterpret_cast<const V*>(grad_y + row * cols), nvec, g);
    load_row_slice(reinterpret_cast<const V*>(x + row * cols), nvec, xv);
  }
  int parity = 0;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.y; base < rows;
       base += stride, row += stride, parity ^= 1) {
    const bool active = row < rows;
    const Acc r = active ? inv_rms[row] : Acc(0);
    Acc dot = active ? row_dot(g, w, xv, nvec) : Acc(0);
    // The next row's loads go out now and arrive while this row is reduced.
    V g_next[kRegVecs], x_next[kRegVecs];
    if (row + stride < rows) {
      load_row_slice(reinterpret_cast<const V*>(grad_y + (row + stride) * cols), nvec,
                     g_next);
      load_row_slice(reinterpret_cast<const V*>(x + (row + stride) * cols), nvec,
                     x_next);
    }
    dot = row_sum(dot, shared[parity]);
    if (active) {
      const Acc c = dot * r * r * r / static_cast<Acc>(cols);
      store_grad_x(g, w, xv, r, c, nvec, reinterpret_cast<V*>(grad_x + row * cols),
                   grad_weight_acc);
    }
#pragma unroll
    for (int k = 0; k < kRegVecs; ++k) {
      g[k] = g_next[k];
      xv[k] = x_next[k];
    }
  }

  // The block's partial grad_weight row: the slots' sums added in slot order.
  store_partial_grad_weight<kVec>(
      grad_weight_acc, nvec,
      grad_weight_partial + static_cast<int64_t>(blockIdx.x) * cols,
      reinterpret_cast<Acc*>(dynamic_shared));
}

// [pipelined-backward-kernel]
// The same backward with a deeper pipeline: each row slot keeps kStages rows
// of g and x in shared memory and has the next kStages - 1 rows' copies in
// flight while it computes one (cp.async, above). Each thread copies only the
// vectors it later reads itself, so waiting for its own copies is enough; no
// barrier guards the stages. Registers hold one row, the weight slice and the
// grad_weight sums, as in the kernel above.
// Shared memory: kStages x slots x 2 tensors x kRegVecs x blockDim.x vectors,
// laid out so that neighbouring threads read neighbouring 16-byte vectors.
// Knobs: kStages and kMinBlocks (PipelinedKnobs in rms_norm_config.h).
template <typename T, int kVec, int kRegVecs, typename Knobs = PipelinedKnobs>
__global__ void __launch_bounds__(kBackwardMaxThreads, Knobs::kMinBlocks)
    rms_norm_backward_pipelined_kernel(
        const T* __restrict__ grad_y,                           // [rows, cols], dense
        const T* __restrict__ x,                                // [rows, cols], dense
        const T* __restrict__ weight,                           // [cols]
        const typename AccType<T>::type* __restrict__ inv_rms,  // [rows]
        T* __restrict__ grad_x,                                 // [rows, cols], dense
        typename AccType<T>::type* __restrict__ grad_weight_partial,  // [blocks, cols]
        int64_t rows, int64_t cols) {
  constexpr int kStages = Knobs::kStages;
  static_assert(kStages >= 2, "a pipeline needs two stages or more");
  using Acc = typename AccType<T>::type;
  using V = Vec<T, kVec>;
  __shared__ Acc shared[2][kMaxWarpsPerBlock];
  extern __shared__ __align__(16) unsigned char dynamic_shared[];
  wait_for_previous_grid();  // see common/launch.cuh
  allow_next_grid();
  const int64_t nvec = cols / kVec;
  const V* wv = reinterpret_cast<const V*>(weight);
  // This thread's vector k of tensor t (0: g, 1: x) in stage s.
  V* const buffers = reinterpret_cast<V*>(dynamic_shared);
  const int per_stage =
      static_cast<int>(blockDim.y) * 2 * kRegVecs * static_cast<int>(blockDim.x);
  V* const mine = buffers + threadIdx.y * 2 * kRegVecs * blockDim.x + threadIdx.x;

  V w[kRegVecs];
  Acc grad_weight_acc[kRegVecs][kVec];
  start_slice(wv, nvec, w, grad_weight_acc);

  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.y;
  int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  // Queues the copies of row `r` into stage `s` (none past the last row) and
  // closes the group, so that every iteration commits exactly one group.
  auto fetch = [&](int64_t r, int s) {
    if (r < rows) {
      const V* gr = reinterpret_cast<const V*>(grad_y + r * cols);
      const V* xr = reinterpret_cast<const V*>(x + r * cols);
      copy_slice_async<T, kVec, kRegVecs>(gr, xr, mine + s * per_stage, nvec);
    }
    copy_async_commit();
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) fetch(row + s * stride, s);

  // inv_rms is loaded one row ahead, before the wait below: a load issued
  // after it would stall every row for a full memory latency.
  Acc r_next = row < rows ? inv_rms[row] : Acc(0);
  int stage = 0;
  int parity = 0;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.y; base < rows;
       base += stride, row += stride, parity ^= 1) {
    const Acc r = r_next;
    r_next = row + stride < rows ? inv_rms[row + stride] : Acc(0);
    // Refill the stage that the previous iteration used, then wait for this
    // row's group: the kStages - 1 newer groups may still be in flight.
    fetch(row + (kStages - 1) * stride, stage == 0 ? kStages - 1 : stage - 1);
    copy_async_wait<kStages - 1>();
    const bool active = row < rows;
    V g[kRegVecs], xv[kRegVecs];
    read_stage(mine + stage * per_stage, g, xv);
    stage = stage + 1 == kStages ? 0 : stage + 1;
    Acc dot = active ? row_dot(g, w, xv, nvec) : Acc(0);
    dot = row_sum(dot, shared[parity]);
    if (active) {
      const Acc c = dot * r * r * r / static_cast<Acc>(cols);
      store_grad_x(g, w, xv, r, c, nvec, reinterpret_cast<V*>(grad_x + row * cols),
                   grad_weight_acc);
    }
  }
  // No copy is in flight past the loop (rows past the end queue none), but
  // the stage buffers are reused below: drain and synchronise first.
  copy_async_wait<0>();
  __syncthreads();

  store_partial_grad_weight<kVec>(
      grad_weight_acc, nvec,
      grad_weight_partial + static_cast<int64_t>(blockIdx.x) * cols,
      reinterpret_cast<Acc*>(dynamic_shared));
}
// [pipelined-backward-kernel-end]

template <typename T>
__global__ void __launch_bounds__(kGradWeightCols* kGradWeightLanes)
    rms_norm_backward_grad_weight_kernel(
        const typename AccType<T>::type* __restrict__ partial,  // [parts, cols]
        int64_t parts, int64_t cols,
        T* __restrict__ grad_weight) {  // [cols]
  using Acc = typename AccType<T>::type;
  __shared__ Acc sums[kGradWeightLanes][kGradWeightCols + 1];
  wait_for_previous_grid();  // the partials are the previous kernel's output
  allow_next_grid();
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kGradWeightCols + threadIdx.x;
  Acc s[4] = {0, 0, 0, 0};
  if (j < cols) {
    int64_t p = threadIdx.y;
    for (; p + 3 * kGradWeightLanes < parts; p += 4 * kGradWeightLanes) {
#pragma unroll
      for (int u = 0; u < 4; ++u)
        s[u] += partial[(p + u * kGradWeightLanes) * cols + j];
    }
    for (; p < parts; p += kGradWeightLanes) s[0] += partial[p * cols + j];
  }
  sums[threadIdx.y][threadIdx.x] = (s[0] + s[1]) + (s[2] + s[3]);
  __syncthreads();
  if (threadIdx.y == 0 && j < cols) {
    Acc total = 0;
#pragma unroll
    for (int lane = 0; lane < kGradWeightLanes; ++lane)
      total += sums[lane][threadIdx.x];
    grad_weight[j] = from_acc<T>(total);
  }
}

}  // namespace opguide
