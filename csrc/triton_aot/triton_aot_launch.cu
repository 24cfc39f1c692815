// Loading and launching the Triton kernels compiled ahead of time, on CUDA
// (and on ROCm after hipify), for the operators of triton_aot_cuda.cu and of
// the stable-ABI library (declared in triton_aot_launch.h; torch-free but for
// the error check of check.h): the GPU's properties the plans read,
// the build's table (artifacts.h) indexed by key, each artifact's image
// loaded once, and each launch made as Triton's own launcher makes it
// (backends/nvidia/driver.c: the non-constexpr arguments in order, then the
// global and profile scratch pointers, null here since no library kernel
// uses scratch; block = threads_per_warp * num_warps; dynamic shared memory =
// Triton's "shared"; programmatic stream serialisation where it was compiled
// with launch_pdl).
#if defined(USE_ROCM)
#include <hip/hip_runtime.h>
#else
#include <cuda_runtime.h>
#endif

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "artifacts.h"
#include "check.h"
#include "triton_aot_launch.h"

// The CUDA runtime's library API (cudaLibraryLoadData, cudaLibraryGetKernel,
// cudaKernelSetAttributeForDevice) and cudaLaunchKernelExC, which take a
// cubin that no nvcc of this build compiled. An older runtime builds the
// operators, and every call takes the JIT route.
#if defined(USE_ROCM) || (defined(CUDART_VERSION) && CUDART_VERSION >= 12040)
#define OPGUIDE_TRITON_AOT_LAUNCH 1
#else
#define OPGUIDE_TRITON_AOT_LAUNCH 0
#endif

namespace opguide::triton_aot {
namespace {

// Device indices the caches hold (torch's C10_COMPILE_TIME_MAX_GPUS is lower).
constexpr int kMaxDevices = 128;

// launch.pdl_options: NVIDIA GPUs of compute capability 9.0 and later, unless
// OPGUIDE_PDL=0 (read once per process, as launch.py reads it at import).
bool pdl_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("OPGUIDE_PDL");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return enabled;
}

// ---------------------------------------------------------------------------
// The build's table, indexed by key once.

struct Table {
  std::unordered_map<std::string_view, size_t> by_key;  // key -> index in artifacts()
  std::unordered_set<std::string> targets;
  std::string listed;  // the targets, for messages: "sm_90, gfx942"
  bool turned_off = false;
};

// OPGUIDE_TRITON_AOT_TABLE=0 (read once per process) leaves the table empty,
// as in a build that named no target: every call takes the JIT route, for
// comparisons and for tests of that route.
const Table& table() {
  static const Table t = [] {
    Table made;
    const char* v = std::getenv("OPGUIDE_TRITON_AOT_TABLE");
    if (v != nullptr && std::strcmp(v, "0") == 0) {
      made.turned_off = true;
      return made;
    }
    const Artifact* all = artifacts();
    const size_t count = artifact_count();
    made.by_key.reserve(count);
    for (size_t i = 0; i < count; ++i) {
      made.by_key.emplace(all[i].key, i);
      if (made.targets.insert(all[i].target).second) {
        made.listed += (made.listed.empty() ? "" : ", ") + std::string(all[i].target);
      }
    }
    return made;
  }();
  return t;
}

// ---------------------------------------------------------------------------
// Loading: each artifact's image once, and per device what it needs there.

#if OPGUIDE_TRITON_AOT_LAUNCH
#if defined(USE_ROCM)
using KernelHandle = hipFunction_t;
using RtError = hipError_t;
constexpr RtError kSuccess = hipSuccess;
const char* error_string(RtError e) { return hipGetErrorString(e); }
const char* error_name(RtError e) { return hipGetErrorName(e); }
#else
using KernelHandle = cudaKernel_t;
using RtError = cudaError_t;
constexpr RtError kSuccess = cudaSuccess;
const char* error_string(RtError e) { return cudaGetErrorString(e); }
const char* error_name(RtError e) { return cudaGetErrorName(e); }
#endif

// A failed runtime call, with the call and the artifact named. The error is
// also taken off the runtime's last-error slot, so that it is not reported
// again by the next unrelated check.
void check(RtError err, const char* call, const Artifact& a, int device) {
  if (err == kSuccess) return;
#if defined(USE_ROCM)
  (void)hipGetLastError();
#else
  (void)cudaGetLastError();
#endif
  OPGUIDE_AOT_CHECK(false, "opguide triton_aot launcher: ", call,
                    " failed for the kernel compiled ahead of time ", a.key, " (symbol ",
                    a.function, ", ", a.image_size, " bytes) on cuda:", device, ": ",
                    error_name(err), ": ", error_string(err));
}

// The kernel of one artifact on each device: ready[d] says handle[d] is set.
// CUDA loads a library once for every device (cudaLibraryLoadData is
// context-independent) and sets the shared-memory limit per device; HIP
// loads a module per device.
struct Loaded {
#if !defined(USE_ROCM)
  cudaLibrary_t library = nullptr;
  cudaKernel_t kernel = nullptr;
#endif
  std::array<KernelHandle, kMaxDevices> handle{};
  std::array<std::atomic<bool>, kMaxDevices> ready{};
};

// The loaded kernel of artifacts()[index] on `device`. After the first call
// for a device, a call reads two atomics and takes no lock: entries are never
// removed, and ready[device] is set after handle[device].
KernelHandle load(int64_t index, int device) {
  static const std::unique_ptr<std::atomic<Loaded*>[]> entries(
      new std::atomic<Loaded*>[artifact_count() + 1]());
  static std::mutex mutex;
  Loaded* entry = entries[index].load(std::memory_order_acquire);
  if (entry != nullptr && entry->ready[device].load(std::memory_order_acquire)) {
    return entry->handle[device];
  }
  const std::lock_guard<std::mutex> lock(mutex);
  entry = entries[index].load(std::memory_order_acquire);
  if (entry == nullptr) {
    entry = new Loaded();  // kept for the life of the process, as the image is
    entries[index].store(entry, std::memory_order_release);
  }
  if (entry->ready[device].load(std::memory_order_acquire))
    return entry->handle[device];
  const Artifact& a = artifacts()[index];
#if defined(USE_ROCM)
  hipModule_t module = nullptr;
  check(hipModuleLoadData(&module, a.image), "hipModuleLoadData", a, device);
  hipFunction_t function = nullptr;
  check(hipModuleGetFunction(&function, module, a.function), "hipModuleGetFunction", a,
        device);
  entry->handle[device] = function;
#else
  if (entry->library == nullptr) {
    cudaLibrary_t library = nullptr;
    check(cudaLibraryLoadData(&library, a.image, nullptr, nullptr, 0, nullptr, nullptr,
                              0),
          "cudaLibraryLoadData", a, device);
    check(cudaLibraryGetKernel(&entry->kernel, library, a.function),
          "cudaLibraryGetKernel", a, device);
    entry->library = library;
  }
  // Above 48 KiB of dynamic shared memory a kernel must opt in, per device
  // (the backward's three stages take up to 135 KB on sm_90).
  if (a.shared_bytes > 48 * 1024) {
    check(
        cudaKernelSetAttributeForDevice(entry->kernel,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        a.shared_bytes, device),
        "cudaKernelSetAttributeForDevice(cudaFuncAttributeMaxDynamicSharedMemorySize)",
        a, device);
  }
  entry->handle[device] = entry->kernel;
#endif
  entry->ready[device].store(true, std::memory_order_release);
  return entry->handle[device];
}

// One launch of a loaded kernel on `stream`: grid x grid_y programs of
// threads_per_warp * num_warps threads, as Triton's launcher makes it.
void launch_on(int64_t index, int device, int64_t grid, int64_t grid_y, void** args,
               cudaStream_t stream) {
  const Artifact& a = artifacts()[index];
  const KernelHandle kernel = load(index, device);
  const unsigned block = static_cast<unsigned>(a.threads_per_warp * a.num_warps);
#if defined(USE_ROCM)
  check(hipModuleLaunchKernel(kernel, static_cast<unsigned>(grid),
                              static_cast<unsigned>(grid_y), 1, block, 1, 1,
                              static_cast<unsigned>(a.shared_bytes), stream, args,
                              nullptr),
        "hipModuleLaunchKernel", a, device);
#else
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(grid), static_cast<unsigned>(grid_y), 1);
  config.blockDim = dim3(block, 1, 1);
  config.dynamicSmemBytes = static_cast<size_t>(a.shared_bytes);
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  if (a.launch_pdl) {
    // The kernel was compiled with GDC: it waits for the previous kernel's
    // results itself, so it may be scheduled while that kernel drains.
    attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[0].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attribute;
    config.numAttrs = 1;
  }
  check(cudaLaunchKernelExC(&config, reinterpret_cast<const void*>(kernel), args),
        "cudaLaunchKernelExC", a, device);
#endif
}
#endif  // OPGUIDE_TRITON_AOT_LAUNCH

}  // namespace

// ---------------------------------------------------------------------------
// The device: what the plans and the keys read, once per GPU.

const DeviceInfo& device_info(int device) {
  static std::array<std::atomic<const DeviceInfo*>, kMaxDevices> infos{};
  static std::mutex mutex;
  OPGUIDE_AOT_CHECK(device >= 0 && device < kMaxDevices,
                    "opguide triton_aot launcher: device index ", device,
                    " is beyond the ", kMaxDevices, " this build's cache holds");
  if (const DeviceInfo* info = infos[device].load(std::memory_order_acquire))
    return *info;
  const std::lock_guard<std::mutex> lock(mutex);
  if (const DeviceInfo* info = infos[device].load(std::memory_order_acquire))
    return *info;
  cudaDeviceProp prop;
  const cudaError_t err = cudaGetDeviceProperties(&prop, device);
  OPGUIDE_AOT_CHECK(err == cudaSuccess,
                    "opguide triton_aot launcher: cudaGetDeviceProperties(", device,
                    ") failed: ", cudaGetErrorString(err));
  auto* info = new DeviceInfo();  // kept for the life of the process
#if defined(USE_ROCM)
  const std::string arch = prop.gcnArchName;
  info->target = arch.substr(0, arch.find(':'));
  info->gdc = false;  // Triton's AMD backend has no programmatic dependent launch
  info->pdl_off = false;
#else
  info->target = "sm_" + std::to_string(prop.major) + std::to_string(prop.minor);
  info->gdc = pdl_enabled() && prop.major >= 9;
  info->pdl_off = !pdl_enabled() && prop.major >= 9;
#endif
  info->sm_count = prop.multiProcessorCount;
#if defined(USE_ROCM) && HIP_VERSION_MAJOR < 6
  info->smem_optin =
      0;  // not reported: the planner's 96 KiB, as launch.py's getattr fallback
#else
  info->smem_optin = static_cast<int64_t>(prop.sharedMemPerBlockOptin);
#endif
  infos[device].store(info, std::memory_order_release);
  return *info;
}

bool can_launch() { return OPGUIDE_TRITON_AOT_LAUNCH != 0; }

const std::string& table_targets() { return table().listed; }

// The index in artifacts() of the artifact of `key`; -1, with why there is
// none, where the table does not hold it.
int64_t find(const std::string& key, const DeviceInfo& d, Fallback* why) {
  const Table& t = table();
  const auto it = t.by_key.find(key);
  if (it != t.by_key.end()) return static_cast<int64_t>(it->second);
  if (t.turned_off) {
    *why = {"empty",
            "OPGUIDE_TRITON_AOT_TABLE=0 turns the table of kernels compiled ahead of "
            "time off"};
  } else if (t.targets.empty()) {
    *why = {"empty",
            "this build holds no kernels compiled ahead of time (it named no target)"};
  } else if (t.targets.count(d.target) == 0) {
    *why = {"target", "no artifact for " + d.target + " in this build (it holds " +
                          t.listed + ")"};
  } else {
    // The build compiles the launches of an eager call with PDL on: GDC=1 on
    // sm_90 and later, which OPGUIDE_PDL=0 turns off.
    *why = {"artifact",
            "no artifact " + key + " in this build" +
                (d.pdl_off ? " (OPGUIDE_PDL=0 asks for kernels without GDC)" : "")};
  }
  return -1;
}

#if OPGUIDE_TRITON_AOT_LAUNCH
void launch(int64_t index, int device, int64_t grid, void** args, void* stream,
            int64_t grid_y) {
  launch_on(index, device, grid, grid_y, args, static_cast<cudaStream_t>(stream));
}
#else
void launch(int64_t, int, int64_t, void**, void*, int64_t) {
  OPGUIDE_AOT_CHECK(false,
                    "opguide triton_aot launcher: this build cannot launch kernels "
                    "compiled ahead of time");
}
#endif

// ---------------------------------------------------------------------------
// Planning and launching a forward, for both libraries' operators.

bool before_plan(const char* dtype, const std::string& dtype_label, int64_t rows,
                 Fallback* why) {
  if (dtype == nullptr) {
    *why = {"dtype", "x is " + dtype_label +
                         ", and the kernels compiled ahead of time take float32, "
                         "float16 and bfloat16"};
    return true;
  }
  if (rows > std::numeric_limits<int32_t>::max()) {
    *why = {"rows",
            "x has " + std::to_string(rows) +
                " rows, and the kernels compiled ahead of time take fewer than 2**31"};
    return true;
  }
  if (!can_launch()) {
    *why = {"runtime",
            "this build's CUDA runtime predates 12.4, whose library API loads the "
            "kernels compiled ahead of time"};
    return true;
  }
  return false;
}

bool misaligned(std::initializer_list<std::pair<const char*, const void*>> pointers,
                Fallback* why) {
  for (const auto& [name, pointer] : pointers) {
    if (reinterpret_cast<uintptr_t>(pointer) % 16 != 0) {
      *why = {"aligned",
              std::string(name) +
                  " does not start on a 16-byte boundary (a view at an offset), and "
                  "the kernels compiled ahead of time assume it does"};
      return true;
    }
  }
  return false;
}

bool plan_forward(const char* dtype, int64_t itemsize, int64_t rows, int64_t cols,
                  bool store_inv, const DeviceInfo& d, ForwardPlan* plan, Fallback* why) {
  if (!forward_registers(rows, cols, itemsize, &plan->cfg)) {
    *why = {"long", "rows of " + std::to_string(cols) +
                        " elements are longer than the " +
                        std::to_string(kMaxRegisterRow) +
                        " that the forward compiled ahead of time keeps in registers"};
    return false;
  }
  plan->key = forward_key(d, dtype, plan->cfg, store_inv, cols);
  plan->artifact = find(plan->key, d, why);
  return plan->artifact >= 0;
}

void launch_forward(const ForwardPlan& plan, int device, const void* x, const void* w,
                    void* y, void* inv_rms, int64_t rows, int64_t cols, double eps,
                    void* stream) {
  // The JIT route passes y for inv_rms when it does not keep it: the kernel
  // compiled with STORE_INV=0 does not write it.
  void* x_ptr = const_cast<void*>(x);
  void* w_ptr = const_cast<void*>(w);
  void* y_ptr = y;
  void* inv_ptr = inv_rms != nullptr ? inv_rms : y;
  int32_t m = static_cast<int32_t>(rows);
  int32_t n = static_cast<int32_t>(cols);
  // Triton's fp32 argument, rounded as its launcher rounds it.
  float eps32 = static_cast<float>(eps);
  void* global_scratch = nullptr;
  void* profile_scratch = nullptr;
  void* with_n[] = {&x_ptr, &w_ptr, &y_ptr,          &inv_ptr,        &m,
                    &n,     &eps32, &global_scratch, &profile_scratch};
  // N == 1 is a constexpr of the compiled kernel, not an argument.
  void* without_n[] = {&x_ptr, &w_ptr, &y_ptr,          &inv_ptr,
                       &m,     &eps32, &global_scratch, &profile_scratch};
  launch(plan.artifact, device, cdiv(rows, plan.cfg.rows), cols == 1 ? without_n : with_n,
         stream);
}

}  // namespace opguide::triton_aot
