// How a caller runs the fused residual-add + RMSNorm CUDA kernels: the plan
// for a call, then the launch of a plan, as for RMSNorm (rms_norm_launch.cuh;
// the words of common/launch.cuh):
//   fused_add_rms_norm_plan_for(pointers, rows, cols, settings)
//       the plan of plan_fused_add_rms_norm (fused_add_rms_norm_planner.cuh)
//       for this call on the current GPU;
//   launch_fused_add_rms_norm(plan, pointers, rows, cols, eps, settings)
//       runs exactly `plan` on settings.stream, and decides nothing.
// The fused operator has one direction: its backward is RMSNorm's.
// Torch-free.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../common/launch.cuh"
#include "../common/row_plan.cuh"
#include "fused_add_rms_norm_config.h"
#include "fused_add_rms_norm_planner.cuh"

namespace opguide {

// The fused kernel's plan for a call on the current GPU, with the most
// blocks per cluster that `settings` allows.
template <typename X, typename R, typename O, typename Acc>
RowPlan fused_add_rms_norm_plan_for(const X* x,         // [rows, cols], dense
                                    const R* residual,  // [rows, cols], dense
                                    const X* weight,    // [cols], or null
                                    const O* out,       // [rows, cols], dense
                                    int64_t rows, int64_t cols,
                                    const LaunchSettings& settings) {
  const FusedAddRmsNormProblem problem{rows, cols,
                                       fused_vectorized(cols, x, residual, weight, out),
                                       aligned_bytes_of(x, residual, weight, out)};
  return plan_fused_add_rms_norm<X, R, O, Acc>(problem, device_info(),
                                               settings.max_cluster);
}

// Launches the kernel of `plan` on settings.stream, with programmatic
// dependent launch when settings.pdl (common/launch.cuh), and returns the
// launch's error (cudaErrorInvalidValue for a plan no kernel of the table
// matches).
template <typename X, typename R, typename O, typename Acc>
cudaError_t launch_fused_add_rms_norm(const RowPlan& plan,
                                      const X* x,       // [rows, cols], dense
                                      R* residual,      // [rows, cols], dense, in place
                                      const X* weight,  // [cols], or null
                                      O* out,           // [rows, cols], dense
                                      Acc* inv_rms,     // [rows]
                                      int64_t rows, int64_t cols, Acc eps,
                                      const LaunchSettings& settings) {
  return launch_planned(fused_add_rms_norm_kernel_for<X, R, O, Acc>(plan), plan.grid,
                        plan.block, plan.shared_bytes, plan.cluster, settings.stream,
                        settings.pdl, x, residual, weight, out, inv_rms, rows, cols,
                        eps);
}

}  // namespace opguide
