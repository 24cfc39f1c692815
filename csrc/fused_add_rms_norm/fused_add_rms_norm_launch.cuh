// The launcher of the fused residual-add + RMSNorm CUDA kernels: it runs a
// plan of fused_add_rms_norm_planner.cuh, and run_fused_add_rms_norm plans
// (or takes a forced plan) and launches. Torch-free.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../common/launch.cuh"
#include "fused_add_rms_norm_config.h"
#include "fused_add_rms_norm_planner.cuh"

namespace opguide {

// Launches the kernel of `plan` on `stream` and returns the launch's error
// (cudaErrorInvalidValue for a plan no kernel of the table matches); with
// programmatic dependent launch when `pdl` (common/launch.cuh).
template <typename X, typename R, typename O, typename Acc>
cudaError_t launch_fused_add_rms_norm(const RowPlan& plan, const X* x, R* residual,
                                      const X* weight, O* out, Acc* inv_rms,
                                      int64_t rows, int64_t cols, Acc eps,
                                      cudaStream_t stream, bool pdl = false) {
  return launch_planned(fused_add_rms_norm_kernel_for<X, R, O, Acc>(plan), plan.grid,
                        plan.block, plan.shared_bytes, plan.cluster, stream, pdl, x,
                        residual, weight, out, inv_rms, rows, cols, eps);
}

// The fused residual-add + RMSNorm: plans it for the current device (or
// takes `forced`) and launches it on settings.stream.
template <typename X, typename R, typename O, typename Acc>
cudaError_t run_fused_add_rms_norm(const X* x,       // [rows, cols], dense
                                   R* residual,      // [rows, cols], dense, in place
                                   const X* weight,  // [cols], or null
                                   O* out,           // [rows, cols], dense
                                   Acc* inv_rms,     // [rows]
                                   int64_t rows, int64_t cols, Acc eps,
                                   const LaunchSettings& settings,
                                   const RowPlan* forced = nullptr) {
  const RowPlan plan =
      forced != nullptr
          ? *forced
          : plan_fused_add_rms_norm<X, R, O, Acc>(
                {rows, cols, fused_vectorized(cols, x, residual, weight, out),
                 aligned_bytes_of(x, residual, weight, out)},
                device_info(), settings.max_cluster);
  return launch_fused_add_rms_norm(plan, x, residual, weight, out, inv_rms, rows, cols,
                                   eps, settings.stream, settings.pdl);
}

}  // namespace opguide
