// Accumulation types, conversions to and from them, and vectors of kVec
// elements moved as one access, with streaming loads and stores. Torch-free.
#pragma once

#include "platform.cuh"

namespace opguide {

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
// by less than a point: docs/recorded/cuda_forward_hints_off_h100.json); the
// forward does not use them for x and y: with L2 full of other data at the
// start of each batch they cost it one to two points
// (docs/recorded/cuda_forward_hints_on_h100.json against
// cuda_forward_hints_off_h100.json). OPGUIDE_STREAMING_HINTS=0 turns them
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

}  // namespace opguide
