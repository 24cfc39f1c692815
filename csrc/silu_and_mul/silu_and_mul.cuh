// The silu_and_mul CUDA kernels, forward and backward, and their launch from
// a plan (silu_and_mul_config.h). Torch-free device code: it compiles alone
// with nvcc, and with hipcc after hipify.
//
// x is [rows, 2 * cols]: the gate a = x[:, :cols], the up projection
// b = x[:, cols:]. With s = sigmoid(a):
//   forward   y      = a * s * b                                [rows, cols]
//   backward  grad_a = grad_y * b * s * (1 + a * (1 - s))       [rows, cols]
//             grad_b = grad_y * a * s                           [rows, cols]
// computed in float (double for double) and rounded once. Every index into a
// tensor is 64-bit: row * 2 * cols passes 2**31 for tensors of 2**31 elements.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../common/device.cuh"
#include "silu_and_mul_config.h"

namespace opguide {

// expf, not the faster __expf: __expf's error (2 + 1.16 * |x| ulp) would
// show in float32 results, and these kernels wait on memory, not arithmetic.
__device__ __forceinline__ float acc_exp(float v) { return expf(v); }
__device__ __forceinline__ double acc_exp(double v) { return exp(v); }

// 1 / (1 + exp(-a)): 0 for a very negative (exp overflows to inf), 1 for a
// very positive, never NaN for finite a.
template <typename Acc>
__device__ __forceinline__ Acc sigmoid(Acc a) {
  return Acc(1) / (Acc(1) + acc_exp(-a));
}

// Each block row (threadIdx.y) takes rows row, row + stride, ...; its
// blockDim.x threads walk the row's vectors kSiluForwardUnroll (kSiluBackwardUnroll)
// at a time, loading
// all of them before computing any.
template <typename T, int kVec>
__global__ void __launch_bounds__(kSiluThreads, kSiluBlocksPerSm)
    silu_and_mul_forward_kernel(const T* __restrict__ x,  // [rows, 2 * cols]
                                T* __restrict__ y,        // [rows, cols]
                                int64_t rows, int64_t cols) {
  using Acc = typename AccType<T>::type;
  using V = Vec<T, kVec>;
  const int64_t vecs = cols / kVec;  // vectors per half-row
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.y;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
       row < rows; row += stride) {
    const V* a = reinterpret_cast<const V*>(x + row * 2 * cols);
    const V* b = reinterpret_cast<const V*>(x + row * 2 * cols + cols);
    V* y_row = reinterpret_cast<V*>(y + row * cols);
    for (int64_t first = threadIdx.x; first < vecs;
         first += static_cast<int64_t>(kSiluForwardUnroll) * blockDim.x) {
      V av[kSiluForwardUnroll], bv[kSiluForwardUnroll];
#pragma unroll
      for (int u = 0; u < kSiluForwardUnroll; ++u) {
        const int64_t v = first + static_cast<int64_t>(u) * blockDim.x;
        if (v < vecs) {
          av[u] = a[v];
          bv[u] = b[v];
        }
      }
#pragma unroll
      for (int u = 0; u < kSiluForwardUnroll; ++u) {
        const int64_t v = first + static_cast<int64_t>(u) * blockDim.x;
        if (v < vecs) {
          V out;
#pragma unroll
          for (int k = 0; k < kVec; ++k) {
            const Acc ak = to_acc(av[u].val[k]);
            out.val[k] = from_acc<T>(ak * sigmoid(ak) * to_acc(bv[u].val[k]));
          }
          y_row[v] = out;
        }
      }
    }
  }
}

template <typename T, int kVec>
__global__ void __launch_bounds__(kSiluThreads, kSiluBlocksPerSm)
    silu_and_mul_backward_kernel(const T* __restrict__ grad_y,  // [rows, cols]
                                 const T* __restrict__ x,       // [rows, 2 * cols]
                                 T* __restrict__ grad_x,        // [rows, 2 * cols]
                                 int64_t rows, int64_t cols) {
  using Acc = typename AccType<T>::type;
  using V = Vec<T, kVec>;
  const int64_t vecs = cols / kVec;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.y;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
       row < rows; row += stride) {
    const V* g = reinterpret_cast<const V*>(grad_y + row * cols);
    const V* a = reinterpret_cast<const V*>(x + row * 2 * cols);
    const V* b = reinterpret_cast<const V*>(x + row * 2 * cols + cols);
    V* grad_a = reinterpret_cast<V*>(grad_x + row * 2 * cols);
    V* grad_b = reinterpret_cast<V*>(grad_x + row * 2 * cols + cols);
    for (int64_t first = threadIdx.x; first < vecs;
         first += static_cast<int64_t>(kSiluBackwardUnroll) * blockDim.x) {
      V gv[kSiluBackwardUnroll], av[kSiluBackwardUnroll], bv[kSiluBackwardUnroll];
#pragma unroll
      for (int u = 0; u < kSiluBackwardUnroll; ++u) {
        const int64_t v = first + static_cast<int64_t>(u) * blockDim.x;
        if (v < vecs) {
          gv[u] = g[v];
          av[u] = a[v];
          bv[u] = b[v];
        }
      }
#pragma unroll
      for (int u = 0; u < kSiluBackwardUnroll; ++u) {
        const int64_t v = first + static_cast<int64_t>(u) * blockDim.x;
        if (v < vecs) {
          V out_a, out_b;
#pragma unroll
          for (int k = 0; k < kVec; ++k) {
            const Acc gk = to_acc(gv[u].val[k]);
            const Acc ak = to_acc(av[u].val[k]);
            const Acc s = sigmoid(ak);
            out_a.val[k] = from_acc<T>(gk * to_acc(bv[u].val[k]) * s *
                                       (Acc(1) + ak * (Acc(1) - s)));
            out_b.val[k] = from_acc<T>(gk * ak * s);
          }
          grad_a[v] = out_a;
          grad_b[v] = out_b;
        }
      }
    }
  }
}

// Launches the forward as `plan` says, on `stream`. Returns
// cudaErrorInvalidValue for a plan whose vector width no instance has; the
// caller checks the launch itself (cudaGetLastError).
template <typename T>
cudaError_t launch_silu_and_mul_forward(const SiluAndMulPlan& plan, const T* x, T* y,
                                        int64_t rows, int64_t cols,
                                        cudaStream_t stream) {
  constexpr int kWide = kSiluAccessBytes / sizeof(T);
  if (plan.grid == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(plan.grid));
  if (plan.vec == kWide) {
    silu_and_mul_forward_kernel<T, kWide>
        <<<grid, plan.block, 0, stream>>>(x, y, rows, cols);
  } else if (plan.vec == 1) {
    silu_and_mul_forward_kernel<T, 1>
        <<<grid, plan.block, 0, stream>>>(x, y, rows, cols);
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

template <typename T>
cudaError_t launch_silu_and_mul_backward(const SiluAndMulPlan& plan, const T* grad_y,
                                         const T* x, T* grad_x, int64_t rows,
                                         int64_t cols, cudaStream_t stream) {
  constexpr int kWide = kSiluAccessBytes / sizeof(T);
  if (plan.grid == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(plan.grid));
  if (plan.vec == kWide) {
    silu_and_mul_backward_kernel<T, kWide>
        <<<grid, plan.block, 0, stream>>>(grad_y, x, grad_x, rows, cols);
  } else if (plan.vec == 1) {
    silu_and_mul_backward_kernel<T, 1>
        <<<grid, plan.block, 0, stream>>>(grad_y, x, grad_x, rows, cols);
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

}  // namespace opguide
