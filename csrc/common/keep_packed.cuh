
#pragma once

namespace opguide {

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

}  // namespace opguide
