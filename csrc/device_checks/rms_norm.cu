// Instantiates every RMSNorm kernel, through the launchers of
// rms_norm_launch.cuh, for every dtype, so that a compiler with no torch at
// hand checks all of the device code: nvcc as is, hipcc after torch's hipify.
// Not part of the extension (setup.py builds the operator folders only);
// guidekit.compile_checks compiles it.
#include "../rms_norm/rms_norm_launch.cuh"

#define OPGUIDE_INSTANTIATE_RMS_NORM_FORWARD(T)                                             \
  template cudaError_t opguide::launch_rms_norm_forward<T>(                           \
      const T*, const T*, T*, opguide::AccType<T>::type*, int64_t, int64_t, int64_t,  \
      float, int, cudaStream_t, bool);                                                      \
  template cudaError_t opguide::launch_rms_norm_backward<T>(                          \
      const T*, const T*, const T*, const opguide::AccType<T>::type*, T*,             \
      opguide::AccType<T>::type*, T*, int64_t, int64_t,                               \
      const opguide::BackwardConfig&, cudaStream_t, bool);                            \
  template opguide::BackwardConfig opguide::rms_norm_backward_config<T>(        \
      int64_t, int64_t, int, int, size_t);                                                  \
  template cudaError_t opguide::launch_rms_norm_forward_any<T>(                       \
      const T*, const T*, T*, opguide::AccType<T>::type*, int64_t, int64_t, int64_t,  \
      float, int, int, cudaStream_t, bool);                                                 \
  template opguide::BackwardConfig opguide::rms_norm_backward_plan<T>(          \
      int64_t, int64_t, int, int, int, size_t, int);                                       \
  template cudaError_t opguide::launch_rms_norm_backward_any<T>(                      \
      const T*, const T*, const T*, const opguide::AccType<T>::type*, T*,             \
      opguide::AccType<T>::type*, T*, int64_t, int64_t,                               \
      const opguide::BackwardConfig&, cudaStream_t, bool);

OPGUIDE_INSTANTIATE_RMS_NORM_FORWARD(float)
OPGUIDE_INSTANTIATE_RMS_NORM_FORWARD(double)
OPGUIDE_INSTANTIATE_RMS_NORM_FORWARD(__half)
#if !defined(OPGUIDE_NO_BF16)
OPGUIDE_INSTANTIATE_RMS_NORM_FORWARD(__nv_bfloat16)
#endif
