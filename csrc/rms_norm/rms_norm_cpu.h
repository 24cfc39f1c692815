// The RMSNorm row loop on the CPU, plain C++ templated on the element type
// (no torch), so that any caller can run it on its own buffers:
// rms_norm_cpu.cpp runs it over threads with at::parallel_for.
#pragma once

#include <cmath>
#include <cstdint>

namespace opguide {

// A wheel is built for the oldest x86-64 CPUs, whose vectors are 4 floats
// wide (SSE2). With GCC on x86-64 Linux, target_clones compiles the function
// a second time for AVX2 (8 floats) and the loader picks the copy that the
// CPU running it supports. Elsewhere (and with Clang, which does not accept
// it on templates) the attribute is left out.
#if defined(__linux__) && defined(__x86_64__) && defined(__GNUC__) && \
    !defined(__clang__)
#define OPGUIDE_CPU_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define OPGUIDE_CPU_CLONES
#endif

// Rows [row_begin, row_end) of y = x / rms(x) * weight, with T the element
// type and Acc the accumulation type (float for float, half and bfloat16;
// double for double). inv_rms may be null; else it receives 1/rms per row.
template <typename T, typename Acc>
OPGUIDE_CPU_CLONES void rms_norm_rows(const T* x,       // [rows, cols], dense
                                      const T* weight,  // [cols]
                                      T* y,             // [rows, cols], dense
                                      Acc* inv_rms,     // [rows] or null
                                      int64_t row_begin, int64_t row_end, int64_t cols,
                                      double eps) {
  // Independent partial sums let the compiler keep several SIMD lanes busy;
  // a single accumulator would serialise every add on the previous one.
  constexpr int64_t kLanes = 16;
  for (int64_t row = row_begin; row < row_end; ++row) {
    const T* xr = x + row * cols;
    T* yr = y + row * cols;
    Acc partial[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= cols; i += kLanes) {
      for (int64_t l = 0; l < kLanes; ++l) {
        const Acc v = static_cast<Acc>(xr[i + l]);
        partial[l] += v * v;
      }
    }
    Acc sum_sq = 0;
    for (; i < cols; ++i) {  // the tail when cols is not a multiple of kLanes
      const Acc v = static_cast<Acc>(xr[i]);
      sum_sq += v * v;
    }
    for (int64_t l = 0; l < kLanes; ++l) sum_sq += partial[l];
    const Acc inv_row =
        Acc(1) / std::sqrt(sum_sq / static_cast<Acc>(cols) + static_cast<Acc>(eps));
    // rms_norm_forward keeps the statistic for the backward pass.
    if (inv_rms != nullptr) inv_rms[row] = inv_row;
    // The row was just read, so this second loop reads it from L1/L2, not DRAM.
    for (int64_t j = 0; j < cols; ++j) {
      yr[j] = static_cast<T>(static_cast<Acc>(xr[j]) * inv_row *
                             static_cast<Acc>(weight[j]));
    }
  }
}

}  // namespace opguide
