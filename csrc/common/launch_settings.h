// How the CUDA kernels launch on the current GPU, for the host entries of every
// operator (defined in launch_settings.cu; CUDA builds only). Torch-free.
#pragma once

namespace opguide {

// Whether kernels launch with programmatic dependent launch on the current GPU
// (see launch.cuh).
bool cuda_use_pdl();
// The current GPU's warp size (64 on AMD CDNA GPUs).
int cuda_warp_size();
// The most blocks per cluster the long-row kernels may use; 0: no clusters.
int cuda_max_cluster();

}  // namespace opguide
