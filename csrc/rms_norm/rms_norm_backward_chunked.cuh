// RMSNorm backward for any row: two passes over each row, grad_weight by column strips.
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

#include "../common/launch.cuh"
#include "../common/reduce.cuh"
#include "../common/vec.cuh"
#include "rms_norm_config.h"

namespace opguide {

// The backward with no condition: one block per row (grid-stride), one
// element per access. Pass 1 sums g * w * x over the row, pass 2 writes
// grad_x. grad_weight is left to rms_norm_backward_grad_weight_columns_kernel.
template <typename T>
__global__ void __launch_bounds__(1024) rms_norm_backward_chunked_kernel(
    const T* __restrict__ grad_y,                           // [rows, cols], dense
    const T* __restrict__ x,                                // [rows, cols], dense
    const T* __restrict__ weight,                           // [cols]
    const typename AccType<T>::type* __restrict__ inv_rms,  // [rows]
    T* __restrict__ grad_x,                                 // [rows, cols], dense
    int64_t rows, int64_t cols) {
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

// grad_weight partial sums over column strips: block (bx, p) sums the rows
// p, p + P, ... (P = gridDim.y) of columns bx * blockDim.x + threadIdx.x into
// row p of `partial`. Neighbouring threads read neighbouring columns.
template <typename T>
__global__ void __launch_bounds__(256) rms_norm_backward_grad_weight_columns_kernel(
    const T* __restrict__ grad_y,                           // [rows, cols], dense
    const T* __restrict__ x,                                // [rows, cols], dense
    const typename AccType<T>::type* __restrict__ inv_rms,  // [rows]
    typename AccType<T>::type* __restrict__ partial,        // [gridDim.y, cols]
    int64_t rows, int64_t cols) {
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

}  // namespace opguide
