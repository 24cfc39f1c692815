// Loading and launching the Triton kernels compiled ahead of time (defined in
// triton_aot_launch.cu; CUDA and ROCm builds only), for the operators of
// triton_aot_cuda.cu.
#pragma once

#include <cstdint>
#include <string>

#include "route.h"
#include "triton_aot.h"

namespace opguide::triton_aot {

// route.h's Device of a GPU, read once per device.
struct DeviceInfo : Device {
  bool pdl_off = false;  // a GPU that takes PDL, with OPGUIDE_PDL=0
};

const DeviceInfo& device_info(int device);

// Whether this build's runtime loads and launches the artifacts: CUDA 12.4
// and later (its library API takes a cubin no nvcc of the build compiled), or
// ROCm.
bool can_launch();

// The targets of the build's table, "sm_90, gfx942"; empty for none.
const std::string& table_targets();

// The index in artifacts() of the artifact of `key`; -1, with why there is
// none, where the table does not hold it.
int64_t find(const std::string& key, const DeviceInfo& d, Fallback* why);

// Launches artifacts()[index] on `device` (the current GPU) on `stream` (a
// cudaStream_t, or hipStream_t): `grid` programs, the kernel's arguments in
// `args`; the image is loaded on the first launch. Errors name the runtime
// call and the artifact's key.
void launch(int64_t index, int device, int64_t grid, void** args, void* stream);

}  // namespace opguide::triton_aot
