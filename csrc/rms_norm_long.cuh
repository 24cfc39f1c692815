// RMSNorm for rows longer than one block holds, device code (torch-free, as
// rms_norm.cuh). Two ways, chosen by the launchers in rms_norm.cuh:
//
// * Clusters (sm_90 and later, CUDA only). A thread-block cluster is a group
//   of blocks that run at the same time on neighbouring multiprocessors and
//   can read each other's shared memory. Each block of a cluster takes one
//   slice of the row and keeps it in registers, as the one-block kernels do;
//   the row's sum is the sum of the blocks' sums, exchanged through shared
//   memory. So a row of 131072 elements is still read from memory once.
// * Two passes (every GPU, any alignment, any dtype): one block per row reads
//   the row once for the sum and again for the result, and the weight's
//   gradient is summed over column strips by a second kernel. Slower (the
//   second read may come from memory), but it has no limit and no condition.
//
// Step 11 ("Long rows") measures both against a copy of the same bytes.
#pragma once

#include "rms_norm.cuh"
#include "rms_norm_backward.cuh"

#if !defined(__HIP_PLATFORM_AMD__) && !defined(__HIP__) && defined(CUDART_VERSION) && \
    CUDART_VERSION >= 12000
#define OPGUIDE_HAVE_CLUSTERS 1
#include <cooperative_groups.h>
#include <type_traits>
#else
#define OPGUIDE_HAVE_CLUSTERS 0
#endif

namespace opguide {
namespace cuda {

// The most blocks in one cluster: 16 on sm_90 with the non-portable size
// allowed (allow_cluster_size below); 8 is the portable size.
constexpr int kMaxClusterBlocks = 16;

// [cluster-sum]
#if OPGUIDE_HAVE_CLUSTERS && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define OPGUIDE_CLUSTER_DEVICE 1
#else
#define OPGUIDE_CLUSTER_DEVICE 0
#endif

__device__ __forceinline__ unsigned cluster_rank() {
#if OPGUIDE_CLUSTER_DEVICE
  return cooperative_groups::this_cluster().block_rank();
#else
  return 0;
#endif
}

__device__ __forceinline__ unsigned cluster_blocks() {
#if OPGUIDE_CLUSTER_DEVICE
  return cooperative_groups::this_cluster().num_blocks();
#else
  return 1;
#endif
}

// Every thread of every block of the cluster waits here for all the others.
// It also orders shared memory: what a block wrote before it, the others see.
__device__ __forceinline__ void cluster_barrier() {
#if OPGUIDE_CLUSTER_DEVICE
  cooperative_groups::this_cluster().sync();
#else
  __syncthreads();
#endif
}

// The sum over the cluster's blocks of `block_total` (which every thread of
// a block holds). Block 0's thread 0 .. : each block publishes its total in
// its own `slot`; after the barrier, lane j of every warp reads block j's
// slot and the warp adds them in a fixed order, so every thread of every
// block gets the same, deterministic total. Slots alternate between calls
// (two of them, by `parity`): the barrier of the next call is what keeps a
// fast block from overwriting a slot that a slow one still reads.
template <typename Acc>
__device__ __forceinline__ Acc cluster_sum(Acc block_total, Acc* slot) {
#if OPGUIDE_CLUSTER_DEVICE
  auto cluster = cooperative_groups::this_cluster();
  if (threadIdx.x == 0 && threadIdx.y == 0) *slot = block_total;
  cluster.sync();
  const unsigned lane = threadIdx.x % kWarpSize;
  Acc v = 0;
  if (lane < cluster.num_blocks()) v = *cluster.map_shared_rank(slot, lane);
  return warp_sum(v);
#else
  (void)slot;
  return block_total;
#endif
}
// [cluster-sum-end]

// [cluster-push]
// The same sum without a cluster-wide barrier. cluster_sum makes every
// thread of every block wait for all the others (twice: __syncthreads in
// row_sum, then the cluster barrier), then reads the other blocks' totals
// from their shared memory, one more round trip. Here each warp instead
// pushes its own partial into a slot of every block of the cluster
// (st.async, an asynchronous store into another block's shared memory that
// counts its bytes on that block's mbarrier), and a block waits only until
// all kWarps * blocks partials have arrived in its own shared memory. Each
// warp then adds them in the same fixed order, so every thread of every
// block gets the same total, as with cluster_sum.
//
// Rows take turns over kSlots slots (row i of this block's rows: slot
// i % kSlots), each with its own mbarrier, whose phase flips each time its
// slot comes round. Two slots suffice when a block waits for row i before it
// pushes row i + 1 (push_sum): it cannot push row i + 2 into a slot that a
// neighbour still reads for row i, since it first waited for that
// neighbour's row i + 1, which the neighbour pushes only after reading row i.
// A block that pushes row i + 1 before it waits for row i (the backward
// below) needs four: when it pushes row i + 4 it has waited for row i + 2,
// so every neighbour has pushed row i + 2, which a neighbour does only after
// it has read row i from slot i % 4, the slot of row i + 4.
template <typename Acc, int kWarps, int kSlots = 2>
struct PushSlots {
  Acc partial[kSlots][kWarps * kMaxClusterBlocks];
  unsigned long long full[kSlots];
};

#if OPGUIDE_CLUSTER_DEVICE
__device__ __forceinline__ unsigned shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// The address of `p` (in this block's shared memory) in block `block`'s.
__device__ __forceinline__ unsigned in_block(const void* p, unsigned block) {
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(remote) : "r"(shared_address(p)), "r"(block));
  return remote;
}

__device__ __forceinline__ void push_to_block(unsigned block, const float* slot, float v,
                                              const unsigned long long* bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];"
               ::"r"(in_block(slot, block)), "r"(__float_as_uint(v)), "r"(in_block(bar, block))
               : "memory");
}

__device__ __forceinline__ void push_to_block(unsigned block, const double* slot, double v,
                                              const unsigned long long* bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b64 [%0], %1, [%2];"
               ::"r"(in_block(slot, block)), "l"(__double_as_longlong(v)),
               "r"(in_block(bar, block))
               : "memory");
}

__device__ __forceinline__ void wait_for_phase(const unsigned long long* bar, unsigned phase) {
  unsigned done = 0;
  do {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; "
        "selp.u32 %0, 1, 0, p; }"
        : "=r"(done) : "r"(shared_address(bar)), "r"(phase) : "memory");
  } while (!done);
}
#endif

// Once per kernel, before the first push: each block's mbarriers expect one
// arrival (its thread 0) per phase, and every block of the cluster must see
// them set up before anyone pushes.
template <typename Acc, int kWarps, int kSlots>
__device__ __forceinline__ void push_slots_init(PushSlots<Acc, kWarps, kSlots>& s) {
#if OPGUIDE_CLUSTER_DEVICE
  if (threadIdx.x < kSlots) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(&s.full[threadIdx.x]))
                 : "memory");
  }
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#else
  (void)s;
#endif
  cluster_barrier();
}

// The two halves of the sum for the iteration-th row this block takes (one
// value per thread, kWarps warps per block): push_partial sends this warp's
// partial to every block; wait_total returns the cluster's total.
template <typename Acc, int kWarps, int kSlots>
__device__ __forceinline__ void push_partial(Acc v, PushSlots<Acc, kWarps, kSlots>& s,
                                             int64_t iteration) {
  v = warp_sum(v);
#if OPGUIDE_CLUSTER_DEVICE
  const int slot = static_cast<int>(iteration % kSlots);
  const unsigned blocks = cluster_blocks();
  const unsigned lane = threadIdx.x % kWarpSize;
  const unsigned warp = threadIdx.x / kWarpSize;
  unsigned long long* bar = &s.full[slot];
  if (threadIdx.x == 0) {
    const unsigned bytes = blocks * kWarps * static_cast<unsigned>(sizeof(Acc));
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                 ::"r"(shared_address(bar)), "r"(bytes) : "memory");
  }
  if (lane < blocks) push_to_block(lane, &s.partial[slot][cluster_rank() * kWarps + warp], v, bar);
#else
  if (threadIdx.x % kWarpSize == 0) s.partial[0][threadIdx.x / kWarpSize] = v;
  (void)iteration;
#endif
}

template <typename Acc, int kWarps, int kSlots>
__device__ __forceinline__ Acc wait_total(PushSlots<Acc, kWarps, kSlots>& s, int64_t iteration) {
#if OPGUIDE_CLUSTER_DEVICE
  const int slot = static_cast<int>(iteration % kSlots);
  wait_for_phase(&s.full[slot], static_cast<unsigned>((iteration / kSlots) & 1));
  const unsigned count = cluster_blocks() * kWarps;
  const unsigned lane = threadIdx.x % kWarpSize;
  Acc total = 0;
#pragma unroll
  for (int i = 0; i < kMaxClusterBlocks * kWarps; i += kWarpSize) {
    if (i + lane < count) total += s.partial[slot][i + lane];
  }
  return warp_sum(total);
#else
  // Without clusters (never launched so; it keeps the code compiling).
  __syncthreads();
  Acc total = 0;
  for (int w = 0; w < kWarps; ++w) total += s.partial[0][w];
  (void)iteration;
  return total;
#endif
}

template <typename Acc, int kWarps, int kSlots>
__device__ __forceinline__ Acc push_sum(Acc v, PushSlots<Acc, kWarps, kSlots>& s,
                                        int64_t iteration) {
  push_partial(v, s, iteration);
  return wait_total(s, iteration);
}
// [cluster-push-end]

// The vectors [begin, end) of a row of nvec vectors that this block of the
// cluster takes: equal slices, the last one shorter when nvec does not divide.
struct Slice {
  int64_t begin;
  int64_t count;
};

__device__ __forceinline__ Slice cluster_slice(int64_t nvec) {
  const int64_t blocks = cluster_blocks();
  const int64_t per = (nvec + blocks - 1) / blocks;
  const int64_t begin = per * cluster_rank();
  const int64_t end = begin + per < nvec ? begin + per : nvec;
  return {begin, end > begin ? end - begin : 0};
}

// Threads per block of the cluster kernels, and vectors of a row per thread
// (the slice of a row one block takes is their product, so it sets the
// blocks per row). The backward keeps a thread's slice of the weight and of
// grad_w in registers and each row's g and x in shared memory, one stage per
// row in flight: two vectors per thread and four stages (128 KiB), or four
// vectors and three stages (192 KiB) for rows too long for 16 blocks of two
// (step 11, "Long rows", times the choices).
constexpr int kClusterThreads = 512;
constexpr int kClusterBackwardRegVecs = 2;
constexpr int kClusterBackwardRegVecsLong = 4;
constexpr int cluster_backward_stages(int reg_vecs) { return reg_vecs <= 2 ? 4 : 3; }

// [cluster-forward]
// Forward: one row per cluster of C blocks, block k of the cluster taking
// slice k of the row. Each thread copies its kVecs vectors of the slice into
// shared memory with cp.async and loads its vectors of the weight into
// registers meanwhile; the row's sum goes through push_sum; then each thread
// scales its own vectors, read back from shared memory. A block is small
// (kThreads threads, a 16 KiB slice for 128 x 8 vectors), so many blocks
// share a multiprocessor and keep many loads in flight, and a block that
// waits for its cluster's sum leaves the multiprocessor to the others.
// Persistent clusters that loop over rows, one block of 512 threads per
// multiprocessor holding its slice in registers, were 3 to 5 points of a
// copy slower from 32768 elements on (step 11, "Long rows", times both with
// tools/sweep_rms_norm_forward_cluster.cu).
template <typename T, int kVec, int kThreads, int kVecs>
__global__ void __launch_bounds__(kThreads) rms_norm_forward_cluster_kernel(
    const T* __restrict__ x, const T* __restrict__ weight, T* __restrict__ y,
    typename AccType<T>::type* __restrict__ inv_rms_out, int64_t rows, int64_t cols,
    int64_t x_row_stride, float eps) {
  using Acc = typename AccType<T>::type;
  using V = Vec<T, kVec>;
  constexpr int kWarps = kThreads / kWarpSize;
  __shared__ V xs[kThreads * kVecs];
  __shared__ PushSlots<Acc, kWarps, 1> push;
  wait_for_previous_grid();
  allow_next_grid();
  const int64_t row = blockIdx.x / cluster_blocks();
  const Slice s = cluster_slice(cols / kVec);
  const V* xr = reinterpret_cast<const V*>(x + row * x_row_stride) + s.begin;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int i = threadIdx.x + k * kThreads;
    if (i < s.count) copy_async(&xs[i], &xr[i]);
  }
  copy_async_commit();
  const V* wv = reinterpret_cast<const V*>(weight) + s.begin;
  V w[kVecs];
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int i = threadIdx.x + k * kThreads;
    if (i < s.count) w[k] = wv[i];
  }
  push_slots_init(push);  // overlaps the copies
  copy_async_wait<0>();   // a thread reads back only what it copied itself
  Acc sum_sq = 0;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int i = threadIdx.x + k * kThreads;
    if (i < s.count) {
      const V v = xs[i];
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        const Acc a = to_acc(v.val[e]);
        sum_sq += a * a;
      }
    }
  }
  sum_sq = push_sum(sum_sq, push, 0);
  const Acc inv_rms = Acc(1) / sqrt(sum_sq / static_cast<Acc>(cols) + static_cast<Acc>(eps));
  if (inv_rms_out != nullptr && cluster_rank() == 0 && threadIdx.x == 0)
    inv_rms_out[row] = inv_rms;
  V* yr = reinterpret_cast<V*>(y + row * cols) + s.begin;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int i = threadIdx.x + k * kThreads;
    if (i < s.count) {
      const V v = xs[i];
      const V wk = keep_packed(w[k]);  // else bfloat16 holds its weight as floats
      V out;
#pragma unroll
      for (int e = 0; e < kVec; ++e)
        out.val[e] = from_acc<T>(to_acc(v.val[e]) * inv_rms * to_acc(wk.val[e]));
      yr[i] = out;
    }
  }
}
// [cluster-forward-end]

// [cluster-backward]
// Backward: cluster c takes rows c, c + C, c + 2C, ... (C clusters, as many
// as fit on the GPU at once), each block the same slice of every row. A
// thread keeps its slice of the weight and of grad_w in registers across all
// its rows, and copies the next kStages - 1 rows' g and x into shared memory
// while it computes this one (cp.async, as the pipelined kernel in
// rms_norm_backward.cuh). At the end, cluster c writes row c of
// grad_w_partial, and rms_norm_backward_grad_w_kernel sums the C rows in a
// fixed order.
//
// With kAhead, a block pushes its partial sum of the next row before it
// waits for this row's total, so that a block can run one row ahead of the
// slowest block of its cluster: it reads this row's g and x again from
// shared memory for grad_x, and a row's stage is reused one row later. (kAhead,
// kThreads, kStages and kMinBlocks, blocks per multiprocessor, are
// parameters for tools/sweep_rms_norm_backward_cluster.cu, which times other
// choices; the library launches the defaults.)
template <typename T, int kVec, int kRegVecs, int kThreads = kClusterThreads,
          int kStages = cluster_backward_stages(kRegVecs), int kMinBlocks = 1,
          bool kAhead = true>
__global__ void __launch_bounds__(kThreads, kMinBlocks) rms_norm_backward_cluster_kernel(
    const T* __restrict__ grad_y, const T* __restrict__ x, const T* __restrict__ weight,
    const typename AccType<T>::type* __restrict__ inv_rms, T* __restrict__ grad_x,
    typename AccType<T>::type* __restrict__ grad_w_partial, int64_t rows, int64_t cols) {
  static_assert(kStages >= (kAhead ? 3 : 2), "too few stages for the pipeline");
  using Acc = typename AccType<T>::type;
  using V = Vec<T, kVec>;
  __shared__ PushSlots<Acc, kThreads / kWarpSize, kAhead ? 4 : 2> push;
  extern __shared__ __align__(16) unsigned char dynamic_shared[];
  wait_for_previous_grid();
  allow_next_grid();
  push_slots_init(push);
  const Slice s = cluster_slice(cols / kVec);
  const int64_t clusters = gridDim.x / cluster_blocks();
  const int64_t first_row = blockIdx.x / cluster_blocks();
  const V* wv = reinterpret_cast<const V*>(weight) + s.begin;
  V* const mine = reinterpret_cast<V*>(dynamic_shared) + threadIdx.x;
  const int per_stage = 2 * kRegVecs * static_cast<int>(blockDim.x);

  V w[kRegVecs];
  Acc dw[kRegVecs][kVec];
  start_slice(wv, s.count, w, dw);
  auto fetch = [&](int64_t r, int stage) {
    if (r < rows) {
      const V* gr = reinterpret_cast<const V*>(grad_y + r * cols) + s.begin;
      const V* xr = reinterpret_cast<const V*>(x + r * cols) + s.begin;
      copy_slice_async<T, kVec, kRegVecs>(gr, xr, mine + stage * per_stage, s.count);
    }
    copy_async_commit();
  };
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) fetch(first_row + st * clusters, st);

  if constexpr (kAhead) {
    // Row first_row + i * clusters lives in stage i % kStages from its fetch
    // until its grad_x is written.
    if (first_row < rows) {
      copy_async_wait<kStages - 2>();
      V g[kRegVecs], xv[kRegVecs];
      read_stage(mine, g, xv);
      push_partial(row_dot(g, w, xv, s.count), push, 0);
    }
    int64_t iteration = 0;
    for (int64_t row = first_row; row < rows; row += clusters, ++iteration) {
      const Acc r = inv_rms[row];
      const int stage = static_cast<int>(iteration % kStages);
      fetch(row + (kStages - 1) * clusters, stage == 0 ? kStages - 1 : stage - 1);
      if (row + clusters < rows) {
        copy_async_wait<kStages - 2>();
        V g[kRegVecs], xv[kRegVecs];
        read_stage(mine + (stage + 1 == kStages ? 0 : stage + 1) * per_stage, g, xv);
        push_partial(row_dot(g, w, xv, s.count), push, iteration + 1);
      }
      const Acc dot = wait_total(push, iteration);
      V g[kRegVecs], xv[kRegVecs];
      read_stage(mine + stage * per_stage, g, xv);
      const Acc c = dot * r * r * r / static_cast<Acc>(cols);
      store_grad_x(g, w, xv, r, c, s.count, reinterpret_cast<V*>(grad_x + row * cols) + s.begin,
                   dw);
    }
  } else {
    Acc r_next = first_row < rows ? inv_rms[first_row] : Acc(0);
    int stage = 0;
    int64_t iteration = 0;
    for (int64_t row = first_row; row < rows; row += clusters, ++iteration) {
      const Acc r = r_next;
      r_next = row + clusters < rows ? inv_rms[row + clusters] : Acc(0);
      fetch(row + (kStages - 1) * clusters, stage == 0 ? kStages - 1 : stage - 1);
      copy_async_wait<kStages - 1>();
      V g[kRegVecs], xv[kRegVecs];
      read_stage(mine + stage * per_stage, g, xv);
      stage = stage + 1 == kStages ? 0 : stage + 1;
      Acc dot = row_dot(g, w, xv, s.count);
      dot = push_sum(dot, push, iteration);
      const Acc c = dot * r * r * r / static_cast<Acc>(cols);
      store_grad_x(g, w, xv, r, c, s.count, reinterpret_cast<V*>(grad_x + row * cols) + s.begin,
                   dw);
    }
  }
  copy_async_wait<0>();
  Acc* partial = grad_w_partial + (first_row < clusters ? first_row : 0) * cols + s.begin * kVec;
#pragma unroll
  for (int k = 0; k < kRegVecs; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    if (i < s.count) {
      Vec<Acc, kVec> out;
#pragma unroll
      for (int e = 0; e < kVec; ++e) out.val[e] = dw[k][e];
      reinterpret_cast<Vec<Acc, kVec>*>(partial)[i] = out;
    }
  }
}
// [cluster-backward-end]

// [two-pass-backward]
// The backward with no condition: one block per row (grid-stride), one
// element per access. Pass 1 sums g * w * x over the row, pass 2 writes
// grad_x. grad_w is left to rms_norm_backward_grad_w_columns_kernel.
template <typename T>
__global__ void __launch_bounds__(1024) rms_norm_backward_rows_kernel(
    const T* __restrict__ grad_y, const T* __restrict__ x, const T* __restrict__ weight,
    const typename AccType<T>::type* __restrict__ inv_rms, T* __restrict__ grad_x, int64_t rows,
    int64_t cols) {
  using Acc = typename AccType<T>::type;
  __shared__ Acc shared[2][kMaxWarpsPerBlock];
  wait_for_previous_grid();
  allow_next_grid();
  int parity = 0;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x, parity ^= 1) {
    const T* gr = grad_y + row * cols;
    const T* xr = x + row * cols;
    Acc dot = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
      dot += to_acc(gr[j]) * to_acc(weight[j]) * to_acc(xr[j]);
    dot = row_sum(dot, shared[parity]);
    const Acc r = inv_rms[row];
    const Acc c = dot * r * r * r / static_cast<Acc>(cols);
    T* dxr = grad_x + row * cols;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
      dxr[j] = from_acc<T>(r * to_acc(gr[j]) * to_acc(weight[j]) - c * to_acc(xr[j]));
  }
}

// grad_w partial sums over column strips: block (bx, p) sums the rows
// p, p + P, ... (P = gridDim.y) of columns bx * blockDim.x + threadIdx.x into
// row p of `partial`. Neighbouring threads read neighbouring columns.
template <typename T>
__global__ void __launch_bounds__(256) rms_norm_backward_grad_w_columns_kernel(
    const T* __restrict__ grad_y, const T* __restrict__ x,
    const typename AccType<T>::type* __restrict__ inv_rms,
    typename AccType<T>::type* __restrict__ partial, int64_t rows, int64_t cols) {
  using Acc = typename AccType<T>::type;
  wait_for_previous_grid();
  allow_next_grid();
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= cols) return;
  Acc sum = 0;
  for (int64_t row = blockIdx.y; row < rows; row += gridDim.y)
    sum += to_acc(grad_y[row * cols + j]) * to_acc(x[row * cols + j]) * inv_rms[row];
  partial[static_cast<int64_t>(blockIdx.y) * cols + j] = sum;
}
// [two-pass-backward-end]

// [long-launch]
// Which backward kernel runs, beyond those of rms_norm_backward_config.
// [cluster-fused]
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
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(dst), "l"(global_src),
                 "n"(static_cast<int>(sizeof(V)))
                 : "memory");
#else
    *shared_dst = *global_src;
#endif
  }
}

template <typename X, typename R, typename O, int kVec, int kThreads, int kVecs>
__global__ void __launch_bounds__(kThreads) fused_add_rms_norm_cluster_kernel(
    const X* __restrict__ x, R* __restrict__ residual, const X* __restrict__ weight,
    O* __restrict__ out, float* __restrict__ inv_rms_out, int64_t rows, int64_t cols,
    float eps) {
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
  const XV* wv = weight == nullptr ? nullptr : reinterpret_cast<const XV*>(weight) + s.begin;
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
        for (int e = 0; e < kVec; ++e) o.val[e] = from_acc<O>(to_acc(h.val[e]) * inv_rms);
      }
      yr[i] = o;
    }
  }
}
// [cluster-fused-end]

constexpr int kBwdKernelCluster = 8;      // kClusterBackwardRegVecs
constexpr int kBwdKernelClusterLong = 9;  // kClusterBackwardRegVecsLong
constexpr int kBwdKernelTwoPass = -1;

// The number of blocks per cluster that gives each block of `threads`
// threads at most `reg_vecs` vectors each of a row of `nvec` vectors: a power
// of two, at least 2; 0 when more than `max_cluster` would be needed.
inline int cluster_size_for(int64_t nvec, int max_cluster, int threads, int reg_vecs) {
  const int64_t per_block = static_cast<int64_t>(threads) * reg_vecs;
  int size = 2;
  while (size * per_block < nvec) size *= 2;
  return size <= max_cluster ? size : 0;
}

// Clusters of more than 8 blocks must be allowed per kernel, once.
template <typename Kernel>
void allow_cluster_size(Kernel kernel, int cluster) {
#if OPGUIDE_HAVE_CLUSTERS
  if (cluster <= 8) return;
  static std::mutex mutex;
  static std::map<std::tuple<int, const void*>, bool> done;
  const auto key = std::make_tuple(current_device_index(), reinterpret_cast<const void*>(kernel));
  const std::lock_guard<std::mutex> lock(mutex);
  if (done[key]) return;
  if (cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                           cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess) {
    (void)cudaGetLastError();
  }
  done[key] = true;
#else
  (void)kernel, (void)cluster;
#endif
}

// How many clusters of `cluster` blocks fit on the GPU at once (cached).
template <typename Kernel>
int active_clusters(Kernel kernel, int cluster, int threads, size_t shared_bytes) {
  static std::mutex mutex;
  static std::map<std::tuple<int, const void*, int, int, size_t>, int> cache;
  const auto key = std::make_tuple(current_device_index(), reinterpret_cast<const void*>(kernel),
                                   cluster, threads, shared_bytes);
  const std::lock_guard<std::mutex> lock(mutex);
  const auto found = cache.find(key);
  if (found != cache.end()) return found->second;
  int count = 0;
#if OPGUIDE_HAVE_CLUSTERS
  const LaunchEx launch(dim3(static_cast<unsigned>(cluster)),
                            dim3(static_cast<unsigned>(threads)), shared_bytes, nullptr, cluster,
                            false);
  if (cudaOccupancyMaxActiveClusters(&count, kernel, &launch.config) != cudaSuccess) {
    (void)cudaGetLastError();
    count = 0;
  }
#else
  (void)kernel, (void)threads, (void)shared_bytes;
#endif
  cache.emplace(key, count);
  return count;
}

// The forward kernel for rows of more than kClusterForwardMinVecs vectors
// (32 KiB): rms_norm_forward_cluster_kernel with 128 threads x 8 vectors a
// block, or 256 x 8 for rows too long for 16 such blocks. Shorter rows, and
// every row when `max_cluster` (0 without clusters) or alignment rules
// clusters out, take the one-block kernel, which re-reads the rest of a row
// too long for it from L2 (launch_rms_norm_forward). At 2048 vectors and
// fewer the one-block kernel is as fast (step 11, "Long rows"). double rows
// take the one-block kernel too: there the division's slow path, a call,
// costs the cluster kernel a spill, and double is not what it is tuned for.
constexpr int64_t kClusterForwardMinVecs = 2048;
constexpr int kClusterForwardThreads = 128;
constexpr int kClusterForwardVecs = 8;

// The launch of the one-row-per-cluster kernels (forward and fused): blocks
// of kClusterForwardThreads threads, or twice that for rows too long for 16
// such blocks, each taking kClusterForwardVecs vectors a thread.
// `cluster` is 0 when neither fits the row, or when the grid's x dimension
// cannot hold rows * cluster blocks.
struct RowClusters {
  int cluster;
  int threads;
};

inline RowClusters row_clusters(int64_t nvec, int64_t rows, int max_cluster) {
  for (const int threads : {kClusterForwardThreads, 2 * kClusterForwardThreads}) {
    const int cluster = cluster_size_for(nvec, max_cluster, threads, kClusterForwardVecs);
    if (cluster > 0) return {rows <= 0x7fffffff / cluster ? cluster : 0, threads};
  }
  return {0, 0};
}

// Launches `kernel` with one cluster of rc.cluster blocks per row. Returns
// cudaErrorNotSupported, with the error cleared, when no such cluster fits
// on this GPU: the caller then launches a kernel that needs none.
template <typename... Params, typename... Args>
cudaError_t launch_rows_in_clusters(void (*kernel)(Params...), RowClusters rc, int64_t rows,
                                    size_t shared_bytes, cudaStream_t stream, bool pdl,
                                    Args... args) {
  allow_shared_bytes(kernel, shared_bytes);
  allow_cluster_size(kernel, rc.cluster);
  cudaError_t err = cudaErrorNotSupported;
  if (active_clusters(kernel, rc.cluster, rc.threads, shared_bytes) > 0) {
    err = launch_kernel_in_clusters(kernel, dim3(static_cast<unsigned>(rows * rc.cluster)),
                                    dim3(static_cast<unsigned>(rc.threads)), shared_bytes,
                                    stream, pdl, rc.cluster, args...);
  }
  if (err == cudaErrorNotSupported) (void)cudaGetLastError();
  return err;
}

template <typename T>
cudaError_t launch_rms_norm_forward_any(const T* x, const T* weight, T* y,
                                        typename AccType<T>::type* inv_rms, int64_t rows,
                                        int64_t cols, int64_t x_row_stride, float eps,
                                        int warp_size, int max_cluster, cudaStream_t stream,
                                        bool pdl = false) {
  constexpr int kWide = 16 / sizeof(T);
  const bool wide = forward_vector_width(x, weight, y, cols, x_row_stride) == kWide;
  const int64_t nvec = cols / kWide;
  if constexpr (sizeof(T) <= 4) {
    const RowClusters rc = wide && rows > 0 && nvec > kClusterForwardMinVecs
                               ? row_clusters(nvec, rows, max_cluster)
                               : RowClusters{0, 0};
    if (rc.cluster > 0) {
      constexpr int kSmall = kClusterForwardThreads, kLarge = 2 * kClusterForwardThreads;
      auto kernel = rc.threads == kSmall
                        ? rms_norm_forward_cluster_kernel<T, kWide, kSmall, kClusterForwardVecs>
                        : rms_norm_forward_cluster_kernel<T, kWide, kLarge, kClusterForwardVecs>;
      const cudaError_t err = launch_rows_in_clusters(kernel, rc, rows, 0, stream, pdl, x, weight,
                                                      y, inv_rms, rows, cols, x_row_stride, eps);
      if (err != cudaErrorNotSupported) return err;  // else the one-block kernel below
    }
  }
  return launch_rms_norm_forward<T>(x, weight, y, inv_rms, rows, cols, x_row_stride, eps,
                                    warp_size, stream, pdl);
}

// Rows that are not whole 16-byte vectors, or not 16-byte aligned, take the
// register kernel of rms_norm_backward.cuh with the widest narrower vectors
// they allow (step 11, "Odd row lengths"): four 8-byte vectors per thread,
// eight of 4 bytes, or eight single 16-bit elements (more spill). Rows
// longer than 512 threads hold that way take the two-pass kernels
// (tools/sweep_rms_norm_narrow.cu times other counts).
constexpr int kBwdKernelNarrow = 10;  // plus the access width in bytes

template <int kBytes>
constexpr int narrow_backward_regs() {
  return kBytes == 8 ? 4 : 8;
}

// The kernel id of the narrow kernel that moves kBytes at a time.
constexpr int narrow_backward_id(int bytes) { return kBwdKernelNarrow + bytes; }

// The plan for the narrow kernel of kBytes accesses, or one with blocks == 0
// when the rows do not allow it.
template <typename T, int kBytes>
BackwardConfig narrow_backward_config(int64_t rows, int64_t cols, int aligned_bytes,
                                      int warp_size, int sm_count) {
  BackwardConfig cfg;
  cfg.blocks = 0;
  if constexpr (kBytes >= static_cast<int>(sizeof(T))) {
    constexpr int kVec = kBytes / static_cast<int>(sizeof(T));
    constexpr int kRegs = narrow_backward_regs<kBytes>();
    if (cols % kVec != 0 || aligned_bytes % kBytes != 0 ||
        cols / kVec > static_cast<int64_t>(kBwdMaxThreads) * kRegs) {
      return cfg;
    }
    cfg = rms_norm_backward_config_for<T, kRegs, kVec>(rows, cols, warp_size, sm_count,
                                                       kBwdMinThreads);
    cfg.kernel = narrow_backward_id(kBytes);
  }
  return cfg;
}

// The backward's plan for any row: the kernels of rms_norm_backward_config
// when the row fits them, clusters for longer rows, narrower vectors for
// rows that are not whole 16-byte vectors, and the two-pass kernels when
// none of these can run (rows longer than the largest cluster, or longer
// than the narrow kernel holds). aligned_bytes: the largest power of two, at
// most 16, that divides every pointer's address. `cfg.blocks` is the number
// of partial grad_w rows to allocate.
template <typename T>
BackwardConfig rms_norm_backward_plan(int64_t rows, int64_t cols, int aligned_bytes,
                                      int warp_size, int sm_count, size_t max_shared_bytes,
                                      int max_cluster) {
  constexpr int kVec = 16 / sizeof(T);
  using Acc = typename AccType<T>::type;
  const int64_t nvec = cols / kVec;
  const bool wide = aligned_bytes % 16 == 0 && cols % kVec == 0 && rows > 0;
  if (wide && nvec <= static_cast<int64_t>(kBwdMaxThreads) * 4) {
    BackwardConfig cfg =
        rms_norm_backward_config<T>(rows, cols, warp_size, sm_count, max_shared_bytes);
    if (cfg.kernel != 0 || nvec <= static_cast<int64_t>(kBwdMaxThreads) * kBwdRegVecs) return cfg;
  }
  if (!wide && rows > 0) {
    BackwardConfig narrow =
        narrow_backward_config<T, 8>(rows, cols, aligned_bytes, warp_size, sm_count);
    if (narrow.blocks == 0)
      narrow = narrow_backward_config<T, 4>(rows, cols, aligned_bytes, warp_size, sm_count);
    if (narrow.blocks == 0)
      narrow = narrow_backward_config<T, 2>(rows, cols, aligned_bytes, warp_size, sm_count);
    if (narrow.blocks > 0) return narrow;
  }
  BackwardConfig cfg;
  // Clusters of blocks with two vectors per thread, or with four when a row
  // is too long for that.
  const auto try_clusters = [&](auto kernel, int reg_vecs, int kernel_id) {
    const int cluster = wide ? cluster_size_for(nvec, max_cluster, kClusterThreads, reg_vecs) : 0;
    if (cluster == 0) return false;
    const size_t shared = static_cast<size_t>(cluster_backward_stages(reg_vecs)) * 2 * reg_vecs *
                          kClusterThreads * 16;
    const size_t static_bytes = sizeof(PushSlots<Acc, kClusterThreads / kWarpSize, 4>);
    if (shared + static_bytes > max_shared_bytes) return false;
    allow_shared_bytes(kernel, shared);
    allow_cluster_size(kernel, cluster);
    const int fit = active_clusters(kernel, cluster, kClusterThreads, shared);
    if (fit == 0) return false;
    cfg.kernel = kernel_id;
    cfg.cluster = cluster;
    cfg.block = dim3(kClusterThreads);
    cfg.shared_bytes = shared;
    cfg.blocks = rows < fit ? rows : fit;  // clusters, one partial row each
    cfg.grid = cfg.blocks * cluster;
    return true;
  };
  if (try_clusters(rms_norm_backward_cluster_kernel<T, kVec, kClusterBackwardRegVecs>,
                   kClusterBackwardRegVecs, kBwdKernelCluster) ||
      try_clusters(rms_norm_backward_cluster_kernel<T, kVec, kClusterBackwardRegVecsLong>,
                   kClusterBackwardRegVecsLong, kBwdKernelClusterLong)) {
    return cfg;
  }
  // Two passes: a block of 512 threads per row, a few blocks per SM; grad_w
  // over strips of 256 columns, with enough row groups to fill the GPU.
  cfg.kernel = kBwdKernelTwoPass;
  cfg.block = dim3(512);
  const int64_t fit = static_cast<int64_t>(sm_count) * 4;
  cfg.grid = rows < fit ? (rows > 0 ? rows : 1) : fit;
  const int64_t strips = (cols + 255) / 256;
  int64_t parts = (fit + strips - 1) / strips;
  if (parts > rows) parts = rows;
  cfg.blocks = parts > 0 ? parts : 1;
  return cfg;
}

// Launches the backward as `cfg` (from rms_norm_backward_plan) says.
// grad_w_partial must hold cfg.blocks * cols accumulators.
template <typename T>
cudaError_t launch_rms_norm_backward_any(const T* grad_y, const T* x, const T* weight,
                                         const typename AccType<T>::type* inv_rms, T* grad_x,
                                         typename AccType<T>::type* grad_w_partial, T* grad_w,
                                         int64_t rows, int64_t cols, const BackwardConfig& cfg,
                                         cudaStream_t stream, bool pdl = false) {
  constexpr int kVec = 16 / sizeof(T);
  cudaError_t err = cudaSuccess;
  if (cfg.kernel == kBwdKernelCluster || cfg.kernel == kBwdKernelClusterLong) {
    err = launch_kernel_in_clusters(
        cfg.kernel == kBwdKernelCluster
            ? rms_norm_backward_cluster_kernel<T, kVec, kClusterBackwardRegVecs>
            : rms_norm_backward_cluster_kernel<T, kVec, kClusterBackwardRegVecsLong>,
        dim3(static_cast<unsigned>(cfg.grid)), cfg.block, cfg.shared_bytes, stream, pdl,
        cfg.cluster, grad_y, x, weight, inv_rms, grad_x, grad_w_partial, rows, cols);
  } else if (cfg.kernel > kBwdKernelNarrow) {
    const auto narrow = [&](auto bytes) {
      constexpr int kBytes = decltype(bytes)::value;
      if constexpr (kBytes >= static_cast<int>(sizeof(T))) {
        return launch_backward_pair(
            rms_norm_backward_kernel<T, kBytes / sizeof(T), narrow_backward_regs<kBytes>()>,
            grad_y, x, weight, inv_rms, grad_x, grad_w_partial, grad_w, rows, cols, cfg, stream,
            pdl);
      } else {
        return cudaErrorInvalidValue;  // never planned: no access narrower than one element
      }
    };
    if (cfg.kernel == narrow_backward_id(8)) return narrow(std::integral_constant<int, 8>{});
    if (cfg.kernel == narrow_backward_id(4)) return narrow(std::integral_constant<int, 4>{});
    return narrow(std::integral_constant<int, 2>{});
  } else if (cfg.kernel == kBwdKernelTwoPass) {
    if (rows > 0) {
      err = launch_kernel(rms_norm_backward_rows_kernel<T>, dim3(static_cast<unsigned>(cfg.grid)),
                          cfg.block, 0, stream, pdl, grad_y, x, weight, inv_rms, grad_x, rows,
                          cols);
      if (err != cudaSuccess) return err;
      err = launch_kernel(rms_norm_backward_grad_w_columns_kernel<T>,
                          dim3(static_cast<unsigned>((cols + 255) / 256),
                               static_cast<unsigned>(cfg.blocks)),
                          dim3(256), 0, stream, pdl, grad_y, x, inv_rms, grad_w_partial, rows,
                          cols);
    }
  } else {
    return launch_rms_norm_backward<T>(grad_y, x, weight, inv_rms, grad_x, grad_w_partial, grad_w,
                                       rows, cols, cfg, stream, pdl);
  }
  if (err != cudaSuccess) return err;
  return launch_grad_w_sum(grad_w_partial, rows > 0 ? cfg.blocks : int64_t{0}, cols, grad_w,
                           stream, pdl);
}
// [long-launch-end]

// The fused kernel's rows of more than kClusterFusedMinVecs vectors go to
// clusters: below that, the one-block kernel's second read of a row comes
// from L2 (step 11's sweep: 95% of the copy at bfloat16 N = 32768); above it,
// from memory. Returns false, having launched nothing, for rows it does not
// take: too short, too long for the largest cluster, no clusters on this GPU,
// or none that fit. vectorized: every row is whole, aligned vectors of kVec
// elements, 16 bytes of the widest type (fused::fused_vector_width).
constexpr int64_t kClusterFusedMinVecs = 4096;

template <typename X, typename R, typename O, int kVec>
bool launch_fused_add_rms_norm_cluster(const X* x, R* residual, const X* weight, O* out,
                                       float* inv_rms, int64_t rows, int64_t cols, float eps,
                                       bool vectorized, int max_cluster, cudaStream_t stream,
                                       bool pdl, cudaError_t* error) {
  const int64_t nvec = cols / kVec;
  if (!vectorized || rows == 0 || nvec <= kClusterFusedMinVecs) return false;
  const RowClusters rc = row_clusters(nvec, rows, max_cluster);
  if (rc.cluster == 0) return false;
  constexpr int kSmall = kClusterForwardThreads, kLarge = 2 * kClusterForwardThreads;
  auto kernel =
      rc.threads == kSmall
          ? fused_add_rms_norm_cluster_kernel<X, R, O, kVec, kSmall, kClusterForwardVecs>
          : fused_add_rms_norm_cluster_kernel<X, R, O, kVec, kLarge, kClusterForwardVecs>;
  // Dynamic shared memory: each thread's vectors of h and of x.
  const size_t shared = static_cast<size_t>(rc.threads) * kClusterForwardVecs *
                        (sizeof(Vec<X, kVec>) + sizeof(Vec<R, kVec>));
  const cudaError_t err = launch_rows_in_clusters(kernel, rc, rows, shared, stream, pdl, x,
                                                  residual, weight, out, inv_rms, rows, cols, eps);
  if (err == cudaErrorNotSupported) return false;  // the caller's kernel runs instead
  *error = err;
  return true;
}

}  // namespace cuda
}  // namespace opguide
