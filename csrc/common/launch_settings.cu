// How the CUDA kernels of every operator launch on the current GPU: with
// programmatic dependent launch or not, its warp size, and the most blocks a
// thread-block cluster may hold. Declared in launch_settings.h; the host
// entries of each operator (rms_norm_cuda.cu, fused_add_rms_norm_cuda.cu)
// read them into the LaunchSettings they plan with. Torch-free.
#include <cstdlib>
#include <cstring>

#include "cluster.cuh"
#include "launch.cuh"
#include "launch_settings.h"

namespace opguide {

// Whether to launch with programmatic dependent launch (csrc/common/launch.cuh): on
// GPUs of compute capability 9.0 (Hopper) and later, unless the environment
// sets OPGUIDE_PDL=0 (read once per process), for example to compare timings.
bool cuda_use_pdl() {
  static const bool enabled = [] {
    const char* v = std::getenv("OPGUIDE_PDL");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return enabled && device_info().compute_major >= 9;
}

int cuda_warp_size() { return device_info().warp_size; }

// [max-cluster]
// The most blocks per thread-block cluster the long-row kernels may use
// (rms_norm_forward.cuh, rms_norm_backward_long_rows.cuh): 16 on GPUs that
// launch clusters (compute capability 9.0 and later), 0 (no clusters) before, on
// ROCm, or when the environment sets OPGUIDE_CLUSTERS=0 (read once per process),
// for example to compare timings.
int cuda_max_cluster() {
#if OPGUIDE_HAVE_CLUSTERS
  static const bool enabled = [] {
    const char* v = std::getenv("OPGUIDE_CLUSTERS");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return enabled && device_info().cluster_launch ? kMaxClusterBlocks : 0;
#else
  return 0;
#endif
}
// [max-cluster-end]

}  // namespace opguide
