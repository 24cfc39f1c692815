// Loading and launching the Triton kernels compiled ahead of time (defined in
// triton_aot_launch.cu; CUDA and ROCm builds only). Torch-free, so that two
// libraries compile it: opguide's operators (triton_aot_cuda.cu) and the
// stable-ABI library's (stable/csrc/rms_norm_triton_aot.cu). Each passes its
// tensors' pointers and its current stream.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "plan.h"
#include "route.h"

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
// cudaStream_t, or hipStream_t): a grid of `grid` by `grid_y` programs, the
// kernel's arguments in `args`; the image is loaded on the first launch.
// Errors name the runtime call and the artifact's key.
void launch(int64_t index, int device, int64_t grid, void** args, void* stream,
            int64_t grid_y = 1);

// Where every direction needs another route before it plans: a dtype the
// kernels do not take (`dtype` is the key's word, "fp32", "fp16" or "bf16",
// or nullptr; `dtype_label` names it in the message), 2**31 rows or more
// (Triton passes M as i32 below that), a runtime without the library API.
bool before_plan(const char* dtype, const std::string& dtype_label, int64_t rows,
                 Fallback* why);

// Whether a pointer does not start on a 16-byte boundary (a view at an
// offset): the artifacts assume it does (tt.divisibility 16), as Triton's
// JIT specialises them. Each pointer comes with its argument's name.
bool misaligned(std::initializer_list<std::pair<const char*, const void*>> pointers,
                Fallback* why);

// The forward kernel one call launches: its Registers plan, key and index in
// the table.
struct ForwardPlan {
  Registers cfg{};
  std::string key;
  int64_t artifact = -1;
};

// Plans a forward of `rows` rows of `cols` elements (STORE_INV: the training
// forward, which writes inv_rms) as the JIT route does; false, with why,
// where the rows are longer than the Registers plans hold or the table has
// no artifact for the plan.
bool plan_forward(const char* dtype, int64_t itemsize, int64_t rows, int64_t cols,
                  bool store_inv, const DeviceInfo& d, ForwardPlan* plan, Fallback* why);

// Launches `plan` on dense rows: _rms_norm_forward_kernel(x, w, y, inv_rms,
// M, N, eps). `inv_rms` is null for the inference forward (whose kernel
// does not write it); `stream` as launch()'s.
void launch_forward(const ForwardPlan& plan, int device, const void* x, const void* w,
                    void* y, void* inv_rms, int64_t rows, int64_t cols, double eps,
                    void* stream);

}  // namespace opguide::triton_aot
