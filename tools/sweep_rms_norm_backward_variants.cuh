// The RMSNorm backward kernels of csrc/rms_norm/rms_norm_backward.cuh with every knob
// a template parameter, for tools/sweep_rms_norm_backward.cu. The library's
// kernels fix these knobs to the values this sweep chose (the kBwd* block of
// rms_norm_backward.cuh); this copy keeps the other values measurable:
//   backward_kernel: kPrefetch (load the next row before reducing this one),
//     kMinBlocks (the second argument of __launch_bounds__), kDwShared
//     (grad_w sums in shared memory instead of registers), kWRegs (the weight
//     slice in registers, or re-read from L1 each row);
//   backward_pipelined_kernel: kStages (rows in flight through shared memory)
//     and kMinBlocks.
// With the library's values each compiles to the library's kernel.
#pragma once

#include "rms_norm/rms_norm_backward.cuh"  // -Icsrc, as the sweeps are built

namespace opguide {
namespace sweep {

using namespace opguide;

template <typename T, int kVec, int kRegVecs, bool kPrefetch, int kMinBlocks, bool kDwShared,
          bool kWRegs>
__global__ void __launch_bounds__(kBwdMaxThreads, kMinBlocks) backward_kernel(
    const T* __restrict__ grad_y, const T* __restrict__ x, const T* __restrict__ weight,
    const typename AccType<T>::type* __restrict__ inv_rms, T* __restrict__ grad_x,
    typename AccType<T>::type* __restrict__ grad_w_partial, int64_t rows, int64_t cols) {
  using Acc = typename AccType<T>::type;
  using V = Vec<T, kVec>;
  // Two buffers: iteration i reduces in shared[i % 2], so a fast warp that
  // starts the next row cannot overwrite what a slow warp is still reading.
  __shared__ Acc shared[2][kMaxWarpsPerBlock];
  extern __shared__ __align__(16) unsigned char dynamic_shared[];
  wait_for_previous_grid();  // see launch.cuh
  allow_next_grid();
  const int64_t nvec = cols / kVec;
  const V* wv = reinterpret_cast<const V*>(weight);
  // kDwShared: this slot's grad_w sums live in shared memory, element e of
  // vector i at e * nvec + i (neighbouring threads, neighbouring banks).
  Acc* dw_s = reinterpret_cast<Acc*>(dynamic_shared) + threadIdx.y * cols;

  V w[kRegVecs];
  Acc dw[kDwShared ? 1 : kRegVecs][kVec];
#pragma unroll
  for (int k = 0; k < kRegVecs; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    if (kWRegs && i < nvec) w[k] = wv[i];
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      if constexpr (kDwShared) {
        if (i < nvec) dw_s[e * nvec + i] = 0;
      } else {
        dw[k][e] = 0;
      }
    }
  }

  // Every thread of the block runs the same number of iterations (row_sum
  // synchronises the block); a slot past the last row just idles.
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.y;
  int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  V g[kRegVecs], xv[kRegVecs];
  if (kPrefetch && row < rows) {
    load_row_slice(reinterpret_cast<const V*>(grad_y + row * cols), nvec, g);
    load_row_slice(reinterpret_cast<const V*>(x + row * cols), nvec, xv);
  }
  int parity = 0;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.y; base < rows;
       base += stride, row += stride, parity ^= 1) {
    const bool active = row < rows;
    if (!kPrefetch && active) {
      load_row_slice(reinterpret_cast<const V*>(grad_y + row * cols), nvec, g);
      load_row_slice(reinterpret_cast<const V*>(x + row * cols), nvec, xv);
    }
    const Acc r = active ? inv_rms[row] : Acc(0);
    Acc dot = 0;
    if (active) {
#pragma unroll
      for (int k = 0; k < kRegVecs; ++k) {
        const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
        if (i < nvec) {
          const V wk = kWRegs ? w[k] : wv[i];
#pragma unroll
          for (int e = 0; e < kVec; ++e)
            dot += to_acc(g[k].val[e]) * to_acc(wk.val[e]) * to_acc(xv[k].val[e]);
        }
      }
    }
    // The next row's loads go out now and arrive while this row is reduced.
    V g_next[kRegVecs], x_next[kRegVecs];
    if (kPrefetch && row + stride < rows) {
      load_row_slice(reinterpret_cast<const V*>(grad_y + (row + stride) * cols), nvec, g_next);
      load_row_slice(reinterpret_cast<const V*>(x + (row + stride) * cols), nvec, x_next);
    }
    dot = row_sum(dot, shared[parity]);
    if (active) {
      const Acc c = dot * r * r * r / static_cast<Acc>(cols);
      V* dxr = reinterpret_cast<V*>(grad_x + row * cols);
#pragma unroll
      for (int k = 0; k < kRegVecs; ++k) {
        const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
        if (i < nvec) {
          const V wk = kWRegs ? w[k] : wv[i];
          V out;
#pragma unroll
          for (int e = 0; e < kVec; ++e) {
            const Acc gv = to_acc(g[k].val[e]);
            const Acc xe = to_acc(xv[k].val[e]);
            out.val[e] = from_acc<T>(r * gv * to_acc(wk.val[e]) - c * xe);
            if constexpr (kDwShared) {
              dw_s[e * nvec + i] += gv * xe * r;
            } else {
              dw[k][e] += gv * xe * r;
            }
          }
          store_streaming(dxr + i, out);
        }
      }
    }
    if constexpr (kPrefetch) {
#pragma unroll
      for (int k = 0; k < kRegVecs; ++k) {
        g[k] = g_next[k];
        xv[k] = x_next[k];
      }
    }
  }

  // The block's partial grad_w row: the slots' sums added in slot order.
  Acc* partial = grad_w_partial + static_cast<int64_t>(blockIdx.x) * cols;
  if constexpr (kDwShared) {
    __syncthreads();
    const int threads = blockDim.x * blockDim.y;
    for (int64_t j = threadIdx.y * blockDim.x + threadIdx.x; j < cols; j += threads) {
      const int64_t at = (j % kVec) * nvec + j / kVec;
      Acc total = 0;
      for (int slot = 0; slot < static_cast<int>(blockDim.y); ++slot)
        total += reinterpret_cast<Acc*>(dynamic_shared)[slot * cols + at];
      partial[j] = total;
    }
  } else {
    store_partial_grad_w<kVec>(dw, nvec, partial, reinterpret_cast<Acc*>(dynamic_shared));
  }
}

template <typename T, int kVec, int kRegVecs, int kStages, int kMinBlocks>
__global__ void __launch_bounds__(kBwdMaxThreads, kMinBlocks) backward_pipelined_kernel(
    const T* __restrict__ grad_y, const T* __restrict__ x, const T* __restrict__ weight,
    const typename AccType<T>::type* __restrict__ inv_rms, T* __restrict__ grad_x,
    typename AccType<T>::type* __restrict__ grad_w_partial, int64_t rows, int64_t cols) {
  static_assert(kStages >= 2, "a pipeline needs two stages or more");
  using Acc = typename AccType<T>::type;
  using V = Vec<T, kVec>;
  __shared__ Acc shared[2][kMaxWarpsPerBlock];
  extern __shared__ __align__(16) unsigned char dynamic_shared[];
  wait_for_previous_grid();  // see launch.cuh
  allow_next_grid();
  const int64_t nvec = cols / kVec;
  const V* wv = reinterpret_cast<const V*>(weight);
  // This thread's vector k of tensor t (0: g, 1: x) in stage s.
  V* const buffers = reinterpret_cast<V*>(dynamic_shared);
  const int per_stage = static_cast<int>(blockDim.y) * 2 * kRegVecs * static_cast<int>(blockDim.x);
  V* const mine = buffers + threadIdx.y * 2 * kRegVecs * blockDim.x + threadIdx.x;

  V w[kRegVecs];
  Acc dw[kRegVecs][kVec];
  start_slice(wv, nvec, w, dw);

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
      store_grad_x(g, w, xv, r, c, nvec, reinterpret_cast<V*>(grad_x + row * cols), dw);
    }
  }
  // No copy is in flight past the loop (rows past the end queue none), but
  // the stage buffers are reused below: drain and synchronise first.
  copy_async_wait<0>();
  __syncthreads();

  store_partial_grad_w<kVec>(dw, nvec, grad_w_partial + static_cast<int64_t>(blockIdx.x) * cols,
                             reinterpret_cast<Acc*>(dynamic_shared));
}
template <typename T, int kRegs, bool kPrefetch, int kMinBlocks, bool kDwShared, bool kWRegs>
BackwardConfig backward_config_for(int64_t rows, int64_t cols, int warp_size,
                                            int sm_count, int min_threads) {
  constexpr int kVec = 16 / sizeof(T);
  using Acc = typename AccType<T>::type;
  BackwardConfig cfg;
  cfg.block = backward_block(cols / kVec, kRegs, warp_size, min_threads);
  const int64_t slots = cfg.block.y;
  cfg.shared_bytes = kDwShared ? static_cast<size_t>(slots * cols) * sizeof(Acc)
                              : (slots > 1 ? static_cast<size_t>(cols) * sizeof(Acc) : 0);
  const int per_sm = blocks_per_sm(
      backward_kernel<T, kVec, kRegs, kPrefetch, kMinBlocks, kDwShared, kWRegs>,
      static_cast<int>(cfg.block.x * cfg.block.y), cfg.shared_bytes);
  cfg.blocks = backward_grid(rows, slots, per_sm, sm_count);
  return cfg;
}

template <typename T, int kRegs, bool kPrefetch, int kMinBlocks, bool kDwShared, bool kWRegs>
cudaError_t launch_backward_for(const T* grad_y, const T* x, const T* weight,
                                         const typename AccType<T>::type* inv_rms, T* grad_x,
                                         typename AccType<T>::type* grad_w_partial, T* grad_w,
                                         int64_t rows, int64_t cols, const BackwardConfig& cfg,
                                         cudaStream_t stream, bool pdl = false) {
  constexpr int kVec = 16 / sizeof(T);
  return launch_backward_pair(backward_kernel<T, kVec, kRegs, kPrefetch, kMinBlocks, kDwShared, kWRegs>, grad_y, x, weight, inv_rms,
                              grad_x, grad_w_partial, grad_w, rows, cols, cfg, stream, pdl);
}

// The launch shape of a pipelined backward instance: like the one above, with
// the stage buffers in dynamic shared memory. Past 48 KiB (static and
// dynamic together) a kernel must be allowed more shared memory before it is
// launched, which this does.
template <typename T, int kRegs, int kStages, int kMinBlocks>
BackwardConfig backward_pipelined_config_for(int64_t rows, int64_t cols, int warp_size,
                                                      int sm_count, int min_threads,
                                                      int max_blocks_per_sm = 0,
                                                      size_t max_shared_bytes = 227 * 1024) {
  constexpr int kVec = 16 / sizeof(T);
  using Acc = typename AccType<T>::type;
  auto kernel = backward_pipelined_kernel<T, kVec, kRegs, kStages, kMinBlocks>;
  BackwardConfig cfg;
  cfg.block = backward_block(cols / kVec, kRegs, warp_size, min_threads);
  const int64_t slots = cfg.block.y;
  const int64_t threads = static_cast<int64_t>(cfg.block.x) * cfg.block.y;
  const size_t stages = static_cast<size_t>(kStages * 2 * kRegs * threads) * 16;
  const size_t sums = slots > 1 ? static_cast<size_t>(cols) * sizeof(Acc) : 0;
  cfg.shared_bytes = stages > sums ? stages : sums;
  // The 48 KiB default covers static and dynamic shared memory together.
  const size_t static_bytes = sizeof(Acc) * 2 * kMaxWarpsPerBlock;
  if (cfg.shared_bytes + static_bytes > max_shared_bytes) {
    cfg.blocks = 0;  // more than one block may have on this GPU
    return cfg;
  }
  if (cfg.shared_bytes + static_bytes > 48 * 1024) allow_shared_bytes(kernel, cfg.shared_bytes);
  int per_sm = blocks_per_sm(kernel, static_cast<int>(threads), cfg.shared_bytes);
  if (max_blocks_per_sm > 0 && per_sm > max_blocks_per_sm) per_sm = max_blocks_per_sm;
  cfg.blocks = backward_grid(rows, slots, per_sm, sm_count);
  return cfg;
}

template <typename T, int kRegs, int kStages, int kMinBlocks>
cudaError_t launch_backward_pipelined_for(
    const T* grad_y, const T* x, const T* weight, const typename AccType<T>::type* inv_rms,
    T* grad_x, typename AccType<T>::type* grad_w_partial, T* grad_w, int64_t rows, int64_t cols,
    const BackwardConfig& cfg, cudaStream_t stream, bool pdl = false) {
  constexpr int kVec = 16 / sizeof(T);
  return launch_backward_pair(backward_pipelined_kernel<T, kVec, kRegs, kStages, kMinBlocks>, grad_y, x, weight, inv_rms,
                              grad_x, grad_w_partial, grad_w, rows, cols, cfg, stream, pdl);
}

}  // namespace sweep
}  // namespace opguide
