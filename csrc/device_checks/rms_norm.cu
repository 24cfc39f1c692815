// Instantiates every RMSNorm kernel, through the plan and launch functions of
// rms_norm_launch.cuh, for every dtype, so that a compiler with no torch at
// hand checks all of the device code: nvcc as is, hipcc after torch's hipify.
// Not part of the extension (setup.py builds the operator folders only);
// guidekit.compile_checks compiles it.
#include "../rms_norm/rms_norm_launch.cuh"

#define OPGUIDE_INSTANTIATE_RMS_NORM(T)                                                 \
  template opguide::RowPlan opguide::rms_norm_forward_plan_for<T>(                      \
      const T*, const T*, const T*, int64_t, int64_t, int64_t,                          \
      const opguide::LaunchSettings&);                                                  \
  template cudaError_t opguide::launch_rms_norm_forward<T>(                             \
      const opguide::RowPlan&, const T*, const T*, T*, opguide::AccType<T>::type*,      \
      int64_t, int64_t, int64_t, opguide::AccType<T>::type,                             \
      const opguide::LaunchSettings&);                                                  \
  template opguide::RmsNormBackwardPlan opguide::rms_norm_backward_plan_for<T>(         \
      const T*, const T*, const T*, int64_t, int64_t, const opguide::LaunchSettings&);  \
  template cudaError_t opguide::launch_rms_norm_backward<T>(                            \
      const opguide::RmsNormBackwardPlan&, const T*, const T*, const T*,                \
      const opguide::AccType<T>::type*, T*, opguide::AccType<T>::type*, T*, int64_t,    \
      int64_t, const opguide::LaunchSettings&);

OPGUIDE_INSTANTIATE_RMS_NORM(float)
OPGUIDE_INSTANTIATE_RMS_NORM(double)
OPGUIDE_INSTANTIATE_RMS_NORM(__half)
#if !defined(OPGUIDE_NO_BF16)
OPGUIDE_INSTANTIATE_RMS_NORM(__nv_bfloat16)
#endif
