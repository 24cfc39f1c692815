// Thread-block clusters (sm_90 and later, CUDA only): the block's rank in its
// cluster, the sum of a value over every block of a cluster through
// distributed shared memory, and the slice of a row each block takes. On
// other targets a cluster is one block and the helpers reduce to that.
// Torch-free.
#pragma once

#include "device.cuh"

#if !defined(__HIP_PLATFORM_AMD__) && !defined(__HIP__) && defined(CUDART_VERSION) && \
    CUDART_VERSION >= 12000
#define OPGUIDE_HAVE_CLUSTERS 1
#include <cooperative_groups.h>
#else
#define OPGUIDE_HAVE_CLUSTERS 0
#endif

namespace opguide {

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
// a block holds). Thread 0 of each block publishes its block's total in its
// own `slot` (in its shared memory); after the barrier, lane j of every warp
// reads block j's slot and the warp adds them in a fixed order, so every
// thread of every block gets the same, deterministic total. A caller that
// sums several rows alternates between two slots (&slots[parity] in
// tools/sweep_rms_norm_forward_cluster.cu): the barrier of the next call is
// what keeps a fast block from overwriting a slot that a slow one still reads.
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
               : "=r"(remote)
               : "r"(shared_address(p)), "r"(block));
  return remote;
}

__device__ __forceinline__ void push_to_block(unsigned block, const float* slot,
                                              float v, const unsigned long long* bar) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(
          in_block(slot, block)),
      "r"(__float_as_uint(v)), "r"(in_block(bar, block))
      : "memory");
}

__device__ __forceinline__ void push_to_block(unsigned block, const double* slot,
                                              double v, const unsigned long long* bar) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.b64 [%0], %1, [%2];" ::"r"(
          in_block(slot, block)),
      "l"(__double_as_longlong(v)), "r"(in_block(bar, block))
      : "memory");
}

__device__ __forceinline__ void wait_for_phase(const unsigned long long* bar,
                                               unsigned phase) {
  unsigned done = 0;
  do {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; "
        "selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(shared_address(bar)), "r"(phase)
        : "memory");
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
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(
                     shared_address(&s.full[threadIdx.x]))
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
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(
                     shared_address(bar)),
                 "r"(bytes)
                 : "memory");
  }
  if (lane < blocks)
    push_to_block(lane, &s.partial[slot][cluster_rank() * kWarps + warp], v, bar);
#else
  if (threadIdx.x % kWarpSize == 0) s.partial[0][threadIdx.x / kWarpSize] = v;
  (void)iteration;
#endif
}

template <typename Acc, int kWarps, int kSlots>
__device__ __forceinline__ Acc wait_total(PushSlots<Acc, kWarps, kSlots>& s,
                                          int64_t iteration) {
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

}  // namespace opguide
