// The device code every kernel shares, torch-free: it compiles alone with
// nvcc, and with hipcc after torch's hipify. In order:
//   the platform     the CUDA headers (or their HIP equivalents after
//                    hipify), the warp width and the warp shuffles with
//                    their HIP shim;
//   conversions      the accumulation type of each dtype, to_acc and from_acc;
//   vectors          kVec elements moved as one access, with streaming hints;
//   keep_packed      a register helper for 16-bit values held across a sum;
//   sums             over a warp and over the rows of a block;
//   async copies     global to shared memory with cp.async.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>
// OPGUIDE_NO_BF16 leaves bfloat16 out, for toolchains that predate its header
// (ROCm before 5.7 has no hip_bf16.h). Normal builds never set it.
#if !defined(OPGUIDE_NO_BF16)
#include <cuda_bf16.h>
#endif

#include <cstdint>

namespace opguide {

// [portability]
// A warp is 32 threads on NVIDIA GPUs; on AMD GPUs a wavefront is 64 threads
// on CDNA (MI200/MI300, gfx90a/gfx94x) and 32 on RDNA. kWarpSize is the
// compiler's __AMDGCN_WAVEFRONT_SIZE where it defines it, else 64 (CDNA). LLVM
// removed the macro
// (llvm/llvm-project#157463), so a wave32 (RDNA) build with a compiler that
// lacks it needs kWarpSize set to 32.
#if defined(__HIP_PLATFORM_AMD__) || defined(__HIP__)
#if defined(__AMDGCN_WAVEFRONT_SIZE)
constexpr int kWarpSize = __AMDGCN_WAVEFRONT_SIZE;
#else
constexpr int kWarpSize = 64;
#endif
// HIP's shuffles take no mask: a wavefront always runs in lock step here.
template <typename T>
__device__ __forceinline__ T shfl_xor(T v, int lane_mask) {
  return __shfl_xor(v, lane_mask);
}
#else
constexpr int kWarpSize = 32;
template <typename T>
__device__ __forceinline__ T shfl_xor(T v, int lane_mask) {
  return __shfl_xor_sync(0xffffffffu, v, lane_mask);
}
#endif
// The most warps a block of 1024 threads can hold.
constexpr int kMaxWarpsPerBlock = 1024 / kWarpSize;
// [portability-end]

// Accumulate in float, or in double for double inputs.
template <typename T>
struct AccType {
  using type = float;
};
template <>
struct AccType<double> {
  using type = double;
};

__device__ __forceinline__ float to_acc(float v) { return v; }
__device__ __forceinline__ double to_acc(double v) { return v; }
__device__ __forceinline__ float to_acc(__half v) { return __half2float(v); }
#if !defined(OPGUIDE_NO_BF16)
__device__ __forceinline__ float to_acc(__nv_bfloat16 v) { return __bfloat162float(v); }
#endif

// from_acc<T>(v): v (float or double) rounded once to T. Explicit, because
// PyTorch builds CUDA code with __CUDA_NO_HALF_CONVERSIONS__ (no implicit
// casts to and from __half and bfloat16).
template <typename T>
struct FromAcc {  // float and double
  template <typename A>
  __device__ static T from(A v) {
    return static_cast<T>(v);
  }
};
template <>
struct FromAcc<__half> {
  template <typename A>
  __device__ static __half from(A v) {
    return __float2half_rn(static_cast<float>(v));
  }
};
#if !defined(OPGUIDE_NO_BF16)
template <>
struct FromAcc<__nv_bfloat16> {
  template <typename A>
  __device__ static __nv_bfloat16 from(A v) {
    return __float2bfloat16_rn(static_cast<float>(v));
  }
};
#endif
template <typename T, typename A>
__device__ __forceinline__ T from_acc(A v) {
  return FromAcc<T>::from(v);
}

// kVec elements moved by one load or store instruction. With kVec * sizeof(T)
// == 16 this is one 128-bit access, the widest a thread can issue.
template <typename T, int kVec>
struct alignas(sizeof(T) * kVec) Vec {
  T val[kVec];
};

// Accesses with the .cs ("cache streaming") hints, which tell L2 not to keep
// those lines. The backward writes grad_x with them (without them it changes
// by less than a point: docs/recorded/cuda_forward_hints_off_<gpu>.json); the
// forward does not use them for x and y: with L2 full of other data at the
// start of each batch they cost it one to two points
// (docs/recorded/cuda_forward_hints_on_<gpu>.json against
// cuda_forward_hints_off_<gpu>.json). OPGUIDE_STREAMING_HINTS=0 turns them
// off, for such comparisons. HIP has no such intrinsics; plain accesses there.
#ifndef OPGUIDE_STREAMING_HINTS
#define OPGUIDE_STREAMING_HINTS 1
#endif

template <typename V>
__device__ __forceinline__ V load_streaming(const V* p) {
#if OPGUIDE_STREAMING_HINTS && !defined(__HIP_PLATFORM_AMD__) && !defined(__HIP__)
  if constexpr (sizeof(V) == 16) {
    const uint4 raw = __ldcs(reinterpret_cast<const uint4*>(p));
    V v;
    __builtin_memcpy(&v, &raw, sizeof(V));
    return v;
  }
#endif
  return *p;
}

template <typename V>
__device__ __forceinline__ void store_streaming(V* p, const V& v) {
#if OPGUIDE_STREAMING_HINTS && !defined(__HIP_PLATFORM_AMD__) && !defined(__HIP__)
  if constexpr (sizeof(V) == 16) {
    uint4 raw;
    __builtin_memcpy(&raw, &v, sizeof(V));
    __stcs(reinterpret_cast<uint4*>(p), raw);
    return;
  }
#endif
  *p = v;
}

// Returns v unchanged, through an empty asm statement that the compiler must
// treat as a new value. A kernel that holds 16-bit values in registers
// across a row's reduction converts each of them to float twice: once for
// the sum of squares, once for the output. For bfloat16 that conversion is a
// bit shift, and without this barrier the compiler keeps the floats of the
// first conversion alive across the reduction, twice the registers of the
// packed values. In the forward kernel, with the weight held too, that is
// more than the 64 registers per thread that __launch_bounds__(1024) allows:
// spills, and a kernel far from the copy (tests/test_compile_checks.py
// checks the spill without keep_packed). The fused kernel
// (fused_add_rms_norm/fused_add_rms_norm.cuh) holds h and the weight the same way; with
// one vector each per thread it needs it less, but with two it spilled.
// OPGUIDE_KEEP_PACKED=0 turns it off for comparisons; HIP returns v as it is.
#ifndef OPGUIDE_KEEP_PACKED
#define OPGUIDE_KEEP_PACKED 1
#endif

template <typename V>
__device__ __forceinline__ V keep_packed(V v) {
#if OPGUIDE_KEEP_PACKED && !defined(__HIP_PLATFORM_AMD__) && !defined(__HIP__)
  if constexpr (sizeof(V) % 4 ==
                0) {  // whole registers; single 16-bit elements pass as they are
    unsigned words[sizeof(V) / 4];
    __builtin_memcpy(words, &v, sizeof(V));
#pragma unroll
    for (int j = 0; j < static_cast<int>(sizeof(V) / 4); ++j) asm("" : "+r"(words[j]));
    __builtin_memcpy(&v, words, sizeof(V));
  }
#endif
  return v;
}

// Sums over a warp and over the rows of a block.
template <typename Acc>
__device__ __forceinline__ Acc warp_sum(Acc v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += shfl_xor(v, offset);
  return v;
}

// Sums v over the threads of one row: blockDim.x threads, a multiple of the
// warp size (warps never straddle two rows), or a power of two below it (a
// warp then holds several whole rows, summed apart by shuffles within each
// group of blockDim.x lanes). Every thread gets its row's total.
//
// The warps' partials go through shared memory and are added in a fixed
// order, by a loop (kShuffleTotal false) or by each warp with shuffles (one
// load per thread instead of a chain of loads). Shuffles make smaller code;
// in the cluster backward they cost spills and long-row speed, so the RMSNorm
// kernels loop and the fused kernels shuffle (python -m guidekit.benchmark
// --sweep compares them).
template <typename Acc, bool kShuffleTotal = false>
__device__ __forceinline__ Acc row_sum(Acc v, Acc* shared) {
  if (blockDim.x < kWarpSize) {
    for (int offset = blockDim.x / 2; offset > 0; offset /= 2) v += shfl_xor(v, offset);
    return v;
  }
  v = warp_sum(v);
  const int warps_per_row = blockDim.x / kWarpSize;
  if (warps_per_row == 1) return v;
  const int lane = threadIdx.x % kWarpSize;
  const int first_warp = threadIdx.y * warps_per_row;
  if (lane == 0) shared[first_warp + threadIdx.x / kWarpSize] = v;
  __syncthreads();
  if constexpr (kShuffleTotal) {
    return warp_sum(lane < warps_per_row ? shared[first_warp + lane] : Acc(0));
  }
  Acc total = 0;
  for (int w = 0; w < warps_per_row; ++w) total += shared[first_warp + w];
  return total;
}

// Asynchronous 16-byte copies from global to shared memory (cp.async, sm_80
// and later): the copy is queued and the thread goes on; commit closes a
// group of copies, and wait<N> returns once at most N of this thread's
// groups are still in flight. The copies bypass L1 (.cg): the data is read
// once. Elsewhere (HIP, older GPUs) the copy is an ordinary load and store,
// which is correct, only not asynchronous.
#if !defined(__HIP_PLATFORM_AMD__) && !defined(__HIP__) && defined(__CUDA_ARCH__) && \
    __CUDA_ARCH__ >= 800
#define OPGUIDE_HAVE_CP_ASYNC 1
#else
#define OPGUIDE_HAVE_CP_ASYNC 0
#endif

template <typename V>
__device__ __forceinline__ void copy_async(V* shared_dst, const V* global_src) {
  static_assert(sizeof(V) == 16, "copy_async moves 16-byte vectors");
#if OPGUIDE_HAVE_CP_ASYNC
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(shared_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(global_src)
               : "memory");
#else
  *shared_dst = *global_src;
#endif
}

__device__ __forceinline__ void copy_async_commit() {
#if OPGUIDE_HAVE_CP_ASYNC
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}

template <int kInFlight>
__device__ __forceinline__ void copy_async_wait() {
#if OPGUIDE_HAVE_CP_ASYNC
  asm volatile("cp.async.wait_group %0;" ::"n"(kInFlight) : "memory");
#endif
}

}  // namespace opguide
