// The silu_and_mul row loops on the CPU, plain C++ templated on the element
// type T and the accumulation type Acc (float for float, half and bfloat16;
// double for double). No torch: silu_and_mul_cpu.cpp runs them over threads.
//
// With a = x[..., :d], b = x[..., d:] and s = sigmoid(a) = 1 / (1 + exp(-a)):
//   forward   y      = a * s * b                    (silu(a) * b)
//   backward  grad_a = grad_y * b * s * (1 + a * (1 - s))
//             grad_b = grad_y * a * s
// each computed in Acc and rounded once to T.
#pragma once

#include <cmath>
#include <cstdint>

namespace opguide {

// Rows [row_begin, row_end) of y; x is [rows, 2 * cols] and y [rows, cols],
// both dense. The inner loops have no dependence between iterations, so the
// compiler vectorises the conversions and multiplies around std::exp.
template <typename T, typename Acc>
void silu_and_mul_rows(const T* x,  // [rows, 2 * cols], dense
                       T* y,        // [rows, cols], dense
                       int64_t row_begin, int64_t row_end, int64_t cols) {
  for (int64_t row = row_begin; row < row_end; ++row) {
    const T* a = x + row * 2 * cols;
    const T* b = a + cols;
    T* yr = y + row * cols;
    for (int64_t j = 0; j < cols; ++j) {
      const Acc av = static_cast<Acc>(a[j]);
      const Acc s = Acc(1) / (Acc(1) + std::exp(-av));
      yr[j] = static_cast<T>(av * s * static_cast<Acc>(b[j]));
    }
  }
}

// Rows [row_begin, row_end) of grad_x; grad_y is [rows, cols], x and grad_x
// [rows, 2 * cols], all dense.
template <typename T, typename Acc>
void silu_and_mul_backward_rows(const T* grad_y,  // [rows, cols], dense
                                const T* x,       // [rows, 2 * cols], dense
                                T* grad_x,        // [rows, 2 * cols], dense
                                int64_t row_begin, int64_t row_end, int64_t cols) {
  for (int64_t row = row_begin; row < row_end; ++row) {
    const T* g = grad_y + row * cols;
    const T* a = x + row * 2 * cols;
    const T* b = a + cols;
    T* grad_a = grad_x + row * 2 * cols;
    T* grad_b = grad_a + cols;
    for (int64_t j = 0; j < cols; ++j) {
      const Acc av = static_cast<Acc>(a[j]);
      const Acc gv = static_cast<Acc>(g[j]);
      const Acc s = Acc(1) / (Acc(1) + std::exp(-av));
      grad_a[j] = static_cast<T>(gv * static_cast<Acc>(b[j]) * s *
                                 (Acc(1) + av * (Acc(1) - s)));
      grad_b[j] = static_cast<T>(gv * av * s);
    }
  }
}

}  // namespace opguide
