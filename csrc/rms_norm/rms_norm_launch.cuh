// How a caller runs the RMSNorm CUDA kernels: for each direction, the plan
// for a call, then the launch of a plan. Forward and backward take the same
// two steps (the words of common/launch.cuh):
//   rms_norm_<direction>_plan_for(pointers, rows, cols, ..., settings)
//       the plan of plan_rms_norm_<direction> (rms_norm_forward_planner.cuh,
//       rms_norm_backward_planner.cuh) for this call on the current GPU;
//   launch_rms_norm_<direction>(plan, pointers, rows, cols, ..., settings)
//       runs exactly `plan` on settings.stream, and decides nothing.
// Between the two a caller allocates what the plan needs (the backward's
// plan.blocks partial grad_weight rows), or hands the launch a plan of its
// own (a forced plan: the sweep tools, tools/sweep_*.cu). The host wrapper
// (rms_norm_cuda.cu) and the sweep tools call these. Torch-free.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../common/launch.cuh"
#include "../common/row_plan.cuh"
#include "rms_norm_backward_planner.cuh"
#include "rms_norm_config.h"
#include "rms_norm_forward_planner.cuh"

namespace opguide {

// The forward's plan for a call on the current GPU, with the most blocks per
// cluster that `settings` allows.
template <typename T>
RowPlan rms_norm_forward_plan_for(
    const T* x,       // [rows, cols], row r at x + r * x_row_stride
    const T* weight,  // [cols]
    const T* y,       // [rows, cols], dense
    int64_t rows, int64_t cols, int64_t x_row_stride, const LaunchSettings& settings) {
  const RmsNormForwardProblem problem{rows, cols, x_row_stride,
                                      aligned_bytes_of(x, weight, y)};
  return plan_rms_norm_forward<T>(problem, device_info(), settings.max_cluster);
}

// Launches the forward kernel of `plan` (none when there are no rows).
// inv_rms (one value per row, may be null) receives 1/rms for the backward.
// eps is in the accumulation type, as the CPU kernel takes it: a float would
// round it for double rows. Returns the launch's error code
// (cudaErrorInvalidValue for a plan no kernel of the table matches).
template <typename T>
cudaError_t launch_rms_norm_forward(
    const RowPlan& plan,
    const T* x,                          // [rows, cols], row r at x + r * x_row_stride
    const T* weight,                     // [cols]
    T* y,                                // [rows, cols], dense
    typename AccType<T>::type* inv_rms,  // [rows], or null
    int64_t rows, int64_t cols, int64_t x_row_stride, typename AccType<T>::type eps,
    const LaunchSettings& settings) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  return launch_planned(rms_norm_forward_kernel_for<T>(plan), plan.grid, plan.block,
                        plan.shared_bytes, plan.cluster, settings.stream, settings.pdl,
                        x, weight, y, inv_rms, rows, cols, x_row_stride, eps);
}

// The backward's plan for a call on the current GPU, with the most blocks
// per cluster that `settings` allows. The caller allocates plan.blocks * cols
// accumulators for grad_weight_partial from it.
template <typename T>
RmsNormBackwardPlan rms_norm_backward_plan_for(const T* grad_y,  // [rows, cols]
                                               const T* x,       // [rows, cols]
                                               const T* weight,  // [cols]
                                               int64_t rows, int64_t cols,
                                               const LaunchSettings& settings) {
  const RmsNormBackwardProblem problem{rows, cols, aligned_bytes_of(grad_y, x, weight)};
  return plan_rms_norm_backward<T>(problem, device_info(), settings.max_cluster);
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
// the table's kernel, then the grad_weight sum. grad_weight_partial must
// hold plan.blocks * cols accumulators. Returns the first launch error
// (cudaErrorInvalidValue for a plan no kernel of the table matches).
template <typename T>
cudaError_t launch_rms_norm_backward(
    const RmsNormBackwardPlan& plan,
    const T* grad_y,                                 // [rows, cols], dense
    const T* x,                                      // [rows, cols], dense
    const T* weight,                                 // [cols]
    const typename AccType<T>::type* inv_rms,        // [rows]
    T* grad_x,                                       // [rows, cols], dense
    typename AccType<T>::type* grad_weight_partial,  // [plan.blocks, cols]
    T* grad_weight,                                  // [cols]
    int64_t rows, int64_t cols, const LaunchSettings& settings) {
  switch (plan.kernel) {
    case BackwardKernel::kChunked:
      return launch_backward_chunked(grad_y, x, weight, inv_rms, grad_x,
                                     grad_weight_partial, grad_weight, rows, cols, plan,
                                     settings.stream, settings.pdl);
    default:
      return launch_backward_pair(rms_norm_backward_kernel_for<T>(plan.kernel), grad_y,
                                  x, weight, inv_rms, grad_x, grad_weight_partial,
                                  grad_weight, rows, cols, plan, settings.stream,
                                  settings.pdl);
  }
}

}  // namespace opguide
