// The launchers of the RMSNorm CUDA kernels: each launches what
// rms_norm_planner.cuh chose. The host wrapper (rms_norm_cuda.cu) calls
// these. Torch-free.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "../common/launch.cuh"
#include "rms_norm_backward.cuh"
#include "rms_norm_backward_cluster.cuh"
#include "rms_norm_backward_two_pass.cuh"
#include "rms_norm_config.h"
#include "rms_norm_forward.cuh"
#include "rms_norm_forward_cluster.cuh"
#include "rms_norm_planner.cuh"

namespace opguide {

template <typename T, int kVec>
cudaError_t launch_rms_norm_forward_vec(const T* x, const T* weight, T* y,
                                        typename AccType<T>::type* inv_rms,
                                        int64_t rows, int64_t cols,
                                        int64_t x_row_stride, float eps, int warp_size,
                                        cudaStream_t stream, bool pdl) {
  constexpr int kRegs = forward_reg_vecs<T, kVec>();
  const LaunchConfig cfg = rms_norm_forward_config(rows, cols, kVec, warp_size, kRegs);
  auto kernel = cfg.long_rows ? rms_norm_forward_kernel<T, kVec, kRegs, true>
                              : rms_norm_forward_kernel<T, kVec, kRegs, false>;
  return launch_kernel(kernel, cfg.grid, cfg.block, 0, stream, pdl, x, weight, y,
                       inv_rms, rows, cols, x_row_stride, eps);
}

// Launches the forward kernel on `stream`, with the widest accesses that
// forward_vector_width allows. inv_rms (one value per row, may be null)
// receives 1/rms for the backward. pdl: launch with programmatic dependent
// launch (common/launch.cuh). Returns the launch's error code (cudaSuccess when it
// was queued).
template <typename T>
cudaError_t launch_rms_norm_forward(const T* x, const T* weight, T* y,
                                    typename AccType<T>::type* inv_rms, int64_t rows,
                                    int64_t cols, int64_t x_row_stride, float eps,
                                    int warp_size, cudaStream_t stream,
                                    bool pdl = false) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  constexpr int kWide = 16 / sizeof(T);
  const auto launch = [&](auto width) {
    return launch_rms_norm_forward_vec<T, decltype(width)::value>(
        x, weight, y, inv_rms, rows, cols, x_row_stride, eps, warp_size, stream, pdl);
  };
  const int vec = forward_vector_width(x, weight, y, cols, x_row_stride);
  if (vec == kWide) return launch(std::integral_constant<int, kWide>{});
  if constexpr (kWide >= 4) {
    if (vec == kWide / 2) return launch(std::integral_constant<int, kWide / 2>{});
  }
  if constexpr (kWide >= 8) {
    if (vec == kWide / 4) return launch(std::integral_constant<int, kWide / 4>{});
  }
  return launch(std::integral_constant<int, 1>{});
}

// Launches the forward: over clusters for the long rows that
// rms_norm_forward_clusters gives them, else (and when no cluster fits on
// this GPU) the one-block kernel.
template <typename T>
cudaError_t launch_rms_norm_forward_any(const T* x, const T* weight, T* y,
                                        typename AccType<T>::type* inv_rms,
                                        int64_t rows, int64_t cols,
                                        int64_t x_row_stride, float eps, int warp_size,
                                        int max_cluster, cudaStream_t stream,
                                        bool pdl = false) {
  constexpr int kWide = 16 / sizeof(T);
  const bool wide = forward_vector_width(x, weight, y, cols, x_row_stride) == kWide;
  if constexpr (sizeof(T) <= 4) {
    const RowClusters rc =
        rms_norm_forward_clusters<T>(wide, rows, cols / kWide, max_cluster);
    if (rc.cluster > 0) {
      constexpr int kSmall = kClusterForwardThreads,
                    kLarge = 2 * kClusterForwardThreads;
      auto kernel =
          rc.threads == kSmall
              ? rms_norm_forward_cluster_kernel<T, kWide, kSmall, kClusterForwardVecs>
              : rms_norm_forward_cluster_kernel<T, kWide, kLarge, kClusterForwardVecs>;
      const cudaError_t err =
          launch_rows_in_clusters(kernel, rc, rows, 0, stream, pdl, x, weight, y,
                                  inv_rms, rows, cols, x_row_stride, eps);
      if (err != cudaErrorNotSupported) return err;  // else the one-block kernel below
    }
  }
  return launch_rms_norm_forward<T>(x, weight, y, inv_rms, rows, cols, x_row_stride,
                                    eps, warp_size, stream, pdl);
}

// The grad_w sum: grad_w from the `parts` partial rows that a backward
// kernel wrote.
template <typename T>
cudaError_t launch_grad_w_sum(const typename AccType<T>::type* partial, int64_t parts,
                              int64_t cols, T* grad_w, cudaStream_t stream, bool pdl) {
  return launch_kernel(
      rms_norm_backward_grad_w_kernel<T>,
      dim3(static_cast<unsigned>((cols + kGradWCols - 1) / kGradWCols)),
      dim3(kGradWCols, kGradWLanes), 0, stream, pdl, partial, parts, cols, grad_w);
}

// A backward kernel of the shape `cfg` over the rows (none when there are no
// rows), then the grad_w sum of the cfg.blocks partial rows it wrote.
template <typename T>
cudaError_t launch_backward_pair(
    void (*kernel)(const T*, const T*, const T*, const typename AccType<T>::type*, T*,
                   typename AccType<T>::type*, int64_t, int64_t),
    const T* grad_y, const T* x, const T* weight,
    const typename AccType<T>::type* inv_rms, T* grad_x,
    typename AccType<T>::type* grad_w_partial, T* grad_w, int64_t rows, int64_t cols,
    const BackwardConfig& cfg, cudaStream_t stream, bool pdl) {
  if (rows > 0) {
    const cudaError_t err = launch_kernel(
        kernel, dim3(static_cast<unsigned>(cfg.blocks)), cfg.block, cfg.shared_bytes,
        stream, pdl, grad_y, x, weight, inv_rms, grad_x, grad_w_partial, rows, cols);
    if (err != cudaSuccess) return err;
  }
  return launch_grad_w_sum(grad_w_partial, rows > 0 ? cfg.blocks : int64_t{0}, cols,
                           grad_w, stream, pdl);
}

// Launches both backward kernels on `stream`, as `cfg` (from
// rms_norm_backward_config) says. grad_w_partial must hold `cfg.blocks *
// cols` accumulators. All pointers must be 16-byte aligned and cols a
// multiple of 16 / sizeof(T): rms_norm_backward_plan (rms_norm_planner.cuh)
// checks both and sends other rows to the two-pass kernels.
template <typename T>
cudaError_t launch_rms_norm_backward(const T* grad_y, const T* x, const T* weight,
                                     const typename AccType<T>::type* inv_rms,
                                     T* grad_x,
                                     typename AccType<T>::type* grad_w_partial,
                                     T* grad_w, int64_t rows, int64_t cols,
                                     const BackwardConfig& cfg, cudaStream_t stream,
                                     bool pdl = false) {
  constexpr int kVec = 16 / sizeof(T);
  const auto kernel = cfg.kernel == BackwardKernel::kPipelined4
                          ? rms_norm_backward_pipelined_kernel<T, kVec, 4>
                      : cfg.kernel == BackwardKernel::kPipelined2
                          ? rms_norm_backward_pipelined_kernel<T, kVec, 2>
                          : rms_norm_backward_kernel<T, kVec, kBwdRegVecs>;
  return launch_backward_pair(kernel, grad_y, x, weight, inv_rms, grad_x,
                              grad_w_partial, grad_w, rows, cols, cfg, stream, pdl);
}

// Launches the backward as `cfg` (from rms_norm_backward_plan) says.
// grad_w_partial must hold cfg.blocks * cols accumulators.
template <typename T>
cudaError_t launch_rms_norm_backward_any(const T* grad_y, const T* x, const T* weight,
                                         const typename AccType<T>::type* inv_rms,
                                         T* grad_x,
                                         typename AccType<T>::type* grad_w_partial,
                                         T* grad_w, int64_t rows, int64_t cols,
                                         const BackwardConfig& cfg, cudaStream_t stream,
                                         bool pdl = false) {
  constexpr int kVec = 16 / sizeof(T);
  cudaError_t err = cudaSuccess;
  if (cfg.kernel == BackwardKernel::kCluster ||
      cfg.kernel == BackwardKernel::kClusterLong) {
    err = launch_kernel_in_clusters(
        cfg.kernel == BackwardKernel::kCluster
            ? rms_norm_backward_cluster_kernel<T, kVec, kClusterBackwardRegVecs>
            : rms_norm_backward_cluster_kernel<T, kVec, kClusterBackwardRegVecsLong>,
        dim3(static_cast<unsigned>(cfg.grid)), cfg.block, cfg.shared_bytes, stream, pdl,
        cfg.cluster, grad_y, x, weight, inv_rms, grad_x, grad_w_partial, rows, cols);
  } else if (cfg.kernel == BackwardKernel::kNarrow8 ||
             cfg.kernel == BackwardKernel::kNarrow4 ||
             cfg.kernel == BackwardKernel::kNarrow2) {
    const auto narrow = [&](auto bytes) {
      constexpr int kBytes = decltype(bytes)::value;
      if constexpr (kBytes >= static_cast<int>(sizeof(T))) {
        return launch_backward_pair(
            rms_norm_backward_kernel<T, kBytes / sizeof(T),
                                     narrow_backward_regs<kBytes>()>,
            grad_y, x, weight, inv_rms, grad_x, grad_w_partial, grad_w, rows, cols, cfg,
            stream, pdl);
      } else {
        return cudaErrorInvalidValue;  // never planned: no access narrower than one
                                       // element
      }
    };
    if (cfg.kernel == BackwardKernel::kNarrow8)
      return narrow(std::integral_constant<int, 8>{});
    if (cfg.kernel == BackwardKernel::kNarrow4)
      return narrow(std::integral_constant<int, 4>{});
    return narrow(std::integral_constant<int, 2>{});
  } else if (cfg.kernel == BackwardKernel::kTwoPass) {
    if (rows > 0) {
      err = launch_kernel(rms_norm_backward_rows_kernel<T>,
                          dim3(static_cast<unsigned>(cfg.grid)), cfg.block, 0, stream,
                          pdl, grad_y, x, weight, inv_rms, grad_x, rows, cols);
      if (err != cudaSuccess) return err;
      err = launch_kernel(rms_norm_backward_grad_w_columns_kernel<T>,
                          dim3(static_cast<unsigned>((cols + kTwoPassStripCols - 1) /
                                                     kTwoPassStripCols),
                               static_cast<unsigned>(cfg.blocks)),
                          dim3(kTwoPassStripCols), 0, stream, pdl, grad_y, x, inv_rms,
                          grad_w_partial, rows, cols);
    }
  } else {
    return launch_rms_norm_backward<T>(grad_y, x, weight, inv_rms, grad_x,
                                       grad_w_partial, grad_w, rows, cols, cfg, stream,
                                       pdl);
  }
  if (err != cudaSuccess) return err;
  return launch_grad_w_sum(grad_w_partial, rows > 0 ? cfg.blocks : int64_t{0}, cols,
                           grad_w, stream, pdl);
}

}  // namespace opguide
