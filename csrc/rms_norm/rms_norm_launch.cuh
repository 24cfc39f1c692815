// The launchers of the RMSNorm CUDA kernels: each runs a plan of
// rms_norm_planner.cuh. run_rms_norm_forward plans the forward (or takes a
// forced plan) and launches it; the backward is planned by
// rms_norm_backward_plan_for, so that the caller can allocate the grad_weight
// partial rows the plan needs, then launched by launch_rms_norm_backward. The
// host wrapper (rms_norm_cuda.cu) and the sweep tools (tools/sweep_*.cu) call
// these. Torch-free.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../common/launch.cuh"
#include "rms_norm_config.h"
#include "rms_norm_planner.cuh"

namespace opguide {

// Launches the forward kernel of `plan`. inv_rms (one value per row, may be
// null) receives 1/rms for the backward. Returns the launch's error code
// (cudaErrorInvalidValue for a plan no kernel of the table matches).
template <typename T>
cudaError_t launch_rms_norm_forward(const RowPlan& plan, const T* x, const T* weight,
                                    T* y, typename AccType<T>::type* inv_rms,
                                    int64_t rows, int64_t cols, int64_t x_row_stride,
                                    float eps, cudaStream_t stream, bool pdl = false) {
  return launch_planned(rms_norm_forward_kernel_for<T>(plan), plan.grid, plan.block,
                        plan.shared_bytes, plan.cluster, stream, pdl, x, weight, y,
                        inv_rms, rows, cols, x_row_stride, eps);
}

// The forward: plans it for the current device (or takes `forced`) and
// launches it on settings.stream.
template <typename T>
cudaError_t run_rms_norm_forward(
    const T* x,                          // [rows, cols], row r at x + r * x_row_stride
    const T* weight,                     // [cols]
    T* y,                                // [rows, cols], dense
    typename AccType<T>::type* inv_rms,  // [rows], or null
    int64_t rows, int64_t cols, int64_t x_row_stride, float eps,
    const LaunchSettings& settings, const RowPlan* forced = nullptr) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  const RowPlan plan =
      forced != nullptr ? *forced
                        : plan_rms_norm_forward<T>({rows, cols, x_row_stride,
                                                    aligned_bytes_of(x, weight, y)},
                                                   device_info(), settings.max_cluster);
  return launch_rms_norm_forward<T>(plan, x, weight, y, inv_rms, rows, cols,
                                    x_row_stride, eps, settings.stream, settings.pdl);
}

// The grad_weight sum: grad_weight from the `parts` partial rows that a backward
// kernel wrote.
template <typename T>
cudaError_t launch_grad_weight_sum(const typename AccType<T>::type* partial,
                                   int64_t parts, int64_t cols, T* grad_weight,
                                   cudaStream_t stream, bool pdl) {
  return launch_kernel(
      rms_norm_backward_grad_weight_kernel<T>,
      dim3(static_cast<unsigned>((cols + kGradWeightCols - 1) / kGradWeightCols)),
      dim3(kGradWeightCols, kGradWeightLanes), 0, stream, pdl, partial, parts, cols,
      grad_weight);
}

// A backward kernel of the shape `plan` over the rows (none when there are
// no rows; in clusters when plan.cluster > 1), then the grad_weight sum of the
// plan.blocks partial rows it wrote. Also launches the sweep tools' own
// instances.
template <typename T>
cudaError_t launch_backward_pair(BackwardKernelFn<T> kernel, const T* grad_y,
                                 const T* x, const T* weight,
                                 const typename AccType<T>::type* inv_rms, T* grad_x,
                                 typename AccType<T>::type* grad_weight_partial,
                                 T* grad_weight, int64_t rows, int64_t cols,
                                 const RmsNormBackwardPlan& plan, cudaStream_t stream,
                                 bool pdl) {
  if (rows > 0) {
    const int64_t grid = plan.cluster > 1 ? plan.grid : plan.blocks;
    const cudaError_t err =
        launch_planned(kernel, dim3(static_cast<unsigned>(grid)), plan.block,
                       plan.shared_bytes, plan.cluster, stream, pdl, grad_y, x, weight,
                       inv_rms, grad_x, grad_weight_partial, rows, cols);
    if (err != cudaSuccess) return err;
  }
  return launch_grad_weight_sum(grad_weight_partial,
                                rows > 0 ? plan.blocks : int64_t{0}, cols, grad_weight,
                                stream, pdl);
}

// The chunked backward: grad_x by rows, the grad_weight partial sums by column
// strips, then their sum.
template <typename T>
cudaError_t launch_backward_chunked(const T* grad_y, const T* x, const T* weight,
                                    const typename AccType<T>::type* inv_rms, T* grad_x,
                                    typename AccType<T>::type* grad_weight_partial,
                                    T* grad_weight, int64_t rows, int64_t cols,
                                    const RmsNormBackwardPlan& plan,
                                    cudaStream_t stream, bool pdl) {
  if (rows > 0) {
    cudaError_t err = launch_kernel(
        rms_norm_backward_chunked_kernel<T>, dim3(static_cast<unsigned>(plan.grid)),
        plan.block, 0, stream, pdl, grad_y, x, weight, inv_rms, grad_x, rows, cols);
    if (err != cudaSuccess) return err;
    err = launch_kernel(
        rms_norm_backward_grad_weight_columns_kernel<T>,
        dim3(static_cast<unsigned>((cols + kChunkedStripCols - 1) / kChunkedStripCols),
             static_cast<unsigned>(plan.blocks)),
        dim3(kChunkedStripCols), 0, stream, pdl, grad_y, x, inv_rms,
        grad_weight_partial, rows, cols);
    if (err != cudaSuccess) return err;
  }
  return launch_grad_weight_sum(grad_weight_partial,
                                rows > 0 ? plan.blocks : int64_t{0}, cols, grad_weight,
                                stream, pdl);
}

// Launches the backward as `plan` says: one switch, the chunked family or
// the table's kernel. grad_weight_partial must hold plan.blocks * cols
// accumulators.
template <typename T>
cudaError_t launch_rms_norm_backward(const RmsNormBackwardPlan& plan, const T* grad_y,
                                     const T* x, const T* weight,
                                     const typename AccType<T>::type* inv_rms,
                                     T* grad_x,
                                     typename AccType<T>::type* grad_weight_partial,
                                     T* grad_weight, int64_t rows, int64_t cols,
                                     cudaStream_t stream, bool pdl = false) {
  switch (plan.kernel) {
    case BackwardKernel::kChunked:
      return launch_backward_chunked(grad_y, x, weight, inv_rms, grad_x,
                                     grad_weight_partial, grad_weight, rows, cols, plan,
                                     stream, pdl);
    default:
      return launch_backward_pair(rms_norm_backward_kernel_for<T>(plan.kernel), grad_y,
                                  x, weight, inv_rms, grad_x, grad_weight_partial,
                                  grad_weight, rows, cols, plan, stream, pdl);
  }
}

// The backward's plan for a call on the current device, or `forced`: the
// caller allocates plan.blocks * cols accumulators for grad_weight_partial from it,
// then launches it with launch_rms_norm_backward.
template <typename T>
RmsNormBackwardPlan rms_norm_backward_plan_for(
    const T* grad_y, const T* x, const T* weight, int64_t rows, int64_t cols,
    const LaunchSettings& settings, const RmsNormBackwardPlan* forced = nullptr) {
  if (forced != nullptr) return *forced;
  return plan_rms_norm_backward<T>({rows, cols, aligned_bytes_of(grad_y, x, weight)},
                                   device_info(), settings.max_cluster);
}

}  // namespace opguide
