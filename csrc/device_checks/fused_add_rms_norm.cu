// Instantiates the plan and launch functions of fused_add_rms_norm_launch.cuh
// for the dtype combinations the host wrapper uses, so that a compiler with
// no torch at hand checks all of the device code: nvcc as is, hipcc after
// torch's hipify. Not part of the extension (setup.py builds the operator
// folders only).
#include "../fused_add_rms_norm/fused_add_rms_norm_launch.cuh"

#define OPGUIDE_INSTANTIATE_FUSED(X, R, O, A)                                          \
  template opguide::RowPlan opguide::fused_add_rms_norm_plan_for<X, R, O, A>(          \
      const X*, const R*, const X*, const O*, int64_t, int64_t,                        \
      const opguide::LaunchSettings&);                                                 \
  template cudaError_t opguide::launch_fused_add_rms_norm<X, R, O, A>(                 \
      const opguide::RowPlan&, const X*, R*, const X*, O*, A*, int64_t, int64_t, A,    \
      const opguide::LaunchSettings&);

// x and residual of one dtype, output in that dtype or float32.
OPGUIDE_INSTANTIATE_FUSED(float, float, float, float)
OPGUIDE_INSTANTIATE_FUSED(__half, __half, __half, float)
OPGUIDE_INSTANTIATE_FUSED(double, double, double, double)
OPGUIDE_INSTANTIATE_FUSED(double, double, __half, double)
// A float32 residual stream under half-precision activations.
OPGUIDE_INSTANTIATE_FUSED(__half, float, __half, float)
OPGUIDE_INSTANTIATE_FUSED(__half, float, double, float)
#if !defined(OPGUIDE_NO_BF16)
OPGUIDE_INSTANTIATE_FUSED(__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float)
OPGUIDE_INSTANTIATE_FUSED(__nv_bfloat16, float, __nv_bfloat16, float)
OPGUIDE_INSTANTIATE_FUSED(float, float, __nv_bfloat16, float)
#endif
