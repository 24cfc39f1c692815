// Kernel launch with programmatic dependent launch (PDL), the per-device
// facts a planner asks (cached: a driver query costs more than a small
// launch), and the one launch every planned kernel goes through. The plan
// that the row kernels share is in row_plan.cuh. Device code and host code,
// torch-free like the kernels that use it.
//
// The words every planner, launcher and kernel of opguide uses, CUDA and
// Triton alike (the guide's glossary, docs/index.md, defines the same ones):
//   rows, cols      the problem: rows rows of cols elements (x viewed 2-D);
//                   M and N in Triton kernels, whose rows and cols are the
//                   index vectors of a tile
//   x, weight, y    input, scale [cols], output; inv_rms [rows] is 1/rms
//   grad_y          the incoming gradient (of y); grad_x, grad_weight the
//                   outgoing ones, named after the inputs they belong to
//   grad_weight_partial  [blocks, cols] partial grad_weight sums, one row per
//                   block (per program in Triton)
//   vec             elements per access (16 bytes, or narrower for odd rows)
//   reg_vecs        accesses of its row a thread keeps in registers
//   plan            a plain struct naming the kernel family, grid, block,
//                   cluster, shared bytes, vec and every knob. For each
//                   operator and direction, plan_<op>_<direction>(problem,
//                   device) chooses it, <op>_<direction>_plan_for(pointers,
//                   rows, cols, settings) asks that for a call on the
//                   current GPU, and launch_<op>_<direction>(plan, ...) runs
//                   exactly that plan, or one a caller made (a forced plan)
// Kernel families (RowKernel, BackwardKernel; Triton's Registers, Split and
// Chunked):
//   registers       one block per row (or several rows per block), the whole
//                   row in registers
//   chunked         one block per row whose row is longer than its registers
//                   hold: the row is read in pieces and read again (the
//                   forward re-reads the rest from L2; the backward takes
//                   grad_x by rows, then grad_weight by column strips)
//   pipelined       backward, rows staged through shared memory (cp.async)
//   narrow          backward of rows that are not whole 16-byte vectors
//   cluster         one thread-block cluster per row (sm_90 and later), its
//                   blocks exchanging partial sums through distributed shared
//                   memory
//   split           (Triton) one row over several programs, which exchange
//                   partial sums through global memory
//
// Back-to-back kernels on one stream normally run strictly one after the
// other: the next kernel's blocks are only scheduled once the previous kernel
// has finished, so every launch pays for the GPU ramping down and up again.
// On Hopper (sm_90) and later, a kernel launched with the
// "programmatic stream serialization" attribute may be scheduled while the
// previous kernel is still running its last blocks. It must then wait, with
// `griddepcontrol.wait`, before it touches memory that the previous kernel
// may write: that wait returns once the previous grid has completed and its
// writes are visible. Our kernels call wait_for_previous_grid() before their
// first global memory access, so the overlap covers only scheduling and
// set-up, never data.
//
// On older GPUs, on ROCm, and with OPGUIDE_NO_PDL defined, the helpers do
// nothing and kernels launch with <<<...>>>.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

// cudaLaunchKernelEx and its attributes: CUDA 12 and later.
#if !defined(__HIP_PLATFORM_AMD__) && !defined(__HIP__) && defined(CUDART_VERSION) && \
    CUDART_VERSION >= 12000
#define OPGUIDE_HAVE_LAUNCH_EX 1
#else
#define OPGUIDE_HAVE_LAUNCH_EX 0
#endif
#if OPGUIDE_HAVE_LAUNCH_EX && !defined(OPGUIDE_NO_PDL)
#define OPGUIDE_HAVE_PDL 1
#else
#define OPGUIDE_HAVE_PDL 0
#endif

#include "cluster.cuh"

namespace opguide {

// [pdl-device]
// Waits until the grid this kernel depends on has completed (a no-op when the
// kernel was launched without PDL or the previous grid is already done).
__device__ __forceinline__ void wait_for_previous_grid() {
#if OPGUIDE_HAVE_PDL && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next PDL kernel on the stream be scheduled once every block of
// this grid has called it (or exited). Safe at any point: the next kernel
// still waits for this one to complete before it reads memory.
__device__ __forceinline__ void allow_next_grid() {
#if OPGUIDE_HAVE_PDL && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}
// [pdl-device-end]

// The configuration of one cudaLaunchKernelEx: its attributes are a cluster
// dimension along x (when `cluster` > 1) and programmatic stream
// serialisation (when `pdl`). The attributes live in the object, so it is
// neither copied nor moved. Also used to ask how many clusters fit.
#if OPGUIDE_HAVE_LAUNCH_EX
struct LaunchEx {
  cudaLaunchAttribute attributes[2];
  cudaLaunchConfig_t config = {};

  LaunchEx(dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream, int cluster,
           bool pdl) {
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = shared_bytes;
    config.stream = stream;
    config.attrs = attributes;
    if (cluster > 1) {
      cudaLaunchAttribute& a = attributes[config.numAttrs++];
      a.id = cudaLaunchAttributeClusterDimension;
      a.val.clusterDim.x = static_cast<unsigned>(cluster);
      a.val.clusterDim.y = 1;
      a.val.clusterDim.z = 1;
    }
    if (pdl) {
      cudaLaunchAttribute& a = attributes[config.numAttrs++];
      a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
      a.val.programmaticStreamSerializationAllowed = 1;
    }
  }
  LaunchEx(const LaunchEx&) = delete;
  LaunchEx& operator=(const LaunchEx&) = delete;
};
#endif

// Launches kernel<<<grid, block, shared_bytes, stream>>>(args...), with PDL
// when `pdl` is true and the toolchain has it. Returns the launch's error.
template <typename... Params, typename... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block,
                          size_t shared_bytes, cudaStream_t stream, bool pdl,
                          Args... args) {
#if OPGUIDE_HAVE_PDL
  if (pdl) {
    LaunchEx launch(grid, block, shared_bytes, stream, 1, true);
    return cudaLaunchKernelEx(&launch.config, kernel, static_cast<Params>(args)...);
  }
#else
  (void)pdl;
#endif
  kernel<<<grid, block, shared_bytes, stream>>>(static_cast<Params>(args)...);
  return cudaGetLastError();
}

// Launches `kernel` in thread-block clusters of `cluster` blocks along x
// (sm_90 and later; grid.x must be a multiple of `cluster`), with PDL when
// `pdl` is true. Clusters of more than 8 blocks must be allowed for the
// kernel first (cudaFuncAttributeNonPortableClusterSizeAllowed).
template <typename... Params, typename... Args>
cudaError_t launch_kernel_in_clusters(void (*kernel)(Params...), dim3 grid, dim3 block,
                                      size_t shared_bytes, cudaStream_t stream,
                                      bool pdl, int cluster, Args... args) {
#if OPGUIDE_HAVE_PDL
  LaunchEx launch(grid, block, shared_bytes, stream, cluster, pdl);
  return cudaLaunchKernelEx(&launch.config, kernel, static_cast<Params>(args)...);
#else
  (void)kernel, (void)grid, (void)block, (void)shared_bytes, (void)stream, (void)pdl;
  (void)cluster;
  ((void)args, ...);
  return cudaErrorNotSupported;
#endif
}

// The shared memory a block may have (static and dynamic together) without
// opting in to more with cudaFuncAttributeMaxDynamicSharedMemorySize.
constexpr size_t kDefaultSharedBytes = 48 * 1024;

// An occupancy query or a function attribute costs a driver call of a few
// microseconds: more than the whole host side of a small call. Both depend
// only on the kernel, its block and the device, so each is asked once per
// device and remembered (python -m guidekit.benchmark times the eager call;
// docs/recorded/eager_bf16_h200.json).
inline int current_device_index() {
  int device = 0;
  (void)cudaGetDevice(&device);
  return device;
}

// What the planners ask of a device, read once per device and process (a
// cudaGetDeviceProperties call costs far more than a small launch).
struct DeviceInfo {
  int index = 0;
  int sm_count = 1;
  int warp_size = 32;  // 64 on AMD CDNA GPUs
  int compute_major = 0;
  size_t max_shared_bytes = 0;  // per block, opted in (past the 48 KiB default)
  bool cluster_launch = false;  // thread-block clusters (sm_90 and later)
};

inline DeviceInfo read_device_info(int device) {
  DeviceInfo info;
  info.index = device;
  const auto attribute = [device](cudaDeviceAttr what, int fallback) {
    int value = 0;
    if (cudaDeviceGetAttribute(&value, what, device) != cudaSuccess) {
      (void)cudaGetLastError();
      return fallback;
    }
    return value;
  };
  info.sm_count = attribute(cudaDevAttrMultiProcessorCount, 1);
  info.warp_size = attribute(cudaDevAttrWarpSize, 32);
  info.compute_major = attribute(cudaDevAttrComputeCapabilityMajor, 0);
  info.max_shared_bytes = static_cast<size_t>(attribute(
      cudaDevAttrMaxSharedMemoryPerBlockOptin, static_cast<int>(kDefaultSharedBytes)));
#if OPGUIDE_HAVE_CLUSTERS
  info.cluster_launch = attribute(cudaDevAttrClusterLaunch, 0) != 0;
#endif
  return info;
}

// The facts of `device` (the current device when negative), read on its
// first use and then answered from a table without a lock.
inline const DeviceInfo& device_info(int device = -1) {
  constexpr int kDevices = 64;
  static std::once_flag once[kDevices];
  static DeviceInfo infos[kDevices];
  if (device < 0) device = current_device_index();
  if (device >= kDevices) {  // more GPUs than the table holds: read every time
    thread_local DeviceInfo other;
    other = read_device_info(device);
    return other;
  }
  std::call_once(once[device], [device] { infos[device] = read_device_info(device); });
  return infos[device];
}

// The largest power of two, at most 16, that divides every address given
// (null pointers aside): the widest access all of them allow.
template <typename... Pointers>
int aligned_bytes_of(const Pointers*... pointers) {
  std::uintptr_t bits = 16;
  ((bits |= reinterpret_cast<std::uintptr_t>(pointers) == 0
                ? 0
                : reinterpret_cast<std::uintptr_t>(pointers)),
   ...);
  return static_cast<int>(bits & (~bits + 1));
}

template <typename Kernel>
int blocks_per_sm(Kernel kernel, int threads, size_t shared_bytes) {
  static std::mutex mutex;
  static std::map<std::tuple<int, const void*, int, size_t>, int> cache;
  const auto key =
      std::make_tuple(current_device_index(), reinterpret_cast<const void*>(kernel),
                      threads, shared_bytes);
  const std::lock_guard<std::mutex> lock(mutex);
  const auto found = cache.find(key);
  if (found != cache.end()) return found->second;
  int blocks = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads,
                                                    shared_bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    blocks = 1;
  }
  cache.emplace(key, blocks);
  return blocks;
}

// Lets `kernel` use `bytes` of dynamic shared memory (needed past 48 KiB).
// A failure (more than the GPU has) shows up as the launch's error.
template <typename Kernel>
void allow_shared_bytes(Kernel kernel, size_t bytes) {
  static std::mutex mutex;
  static std::map<std::tuple<int, const void*>, size_t> allowed;
  const auto key =
      std::make_tuple(current_device_index(), reinterpret_cast<const void*>(kernel));
  const std::lock_guard<std::mutex> lock(mutex);
  size_t& done = allowed[key];
  if (bytes <= done) return;
  if (cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(bytes)) == cudaSuccess) {
    done = bytes;
  } else {
    (void)cudaGetLastError();
  }
}

// The number of blocks per cluster that gives each block of `threads`
// threads at most `reg_vecs` vectors each of a row of `nvec` vectors: a power
// of two, at least 2; 0 when more than `max_cluster` would be needed.
inline int cluster_size_for(int64_t nvec, int max_cluster, int threads, int reg_vecs) {
  const int64_t per_block = static_cast<int64_t>(threads) * reg_vecs;
  int size = 2;
  while (size * per_block < nvec) size *= 2;
  return size <= max_cluster ? size : 0;
}

// Clusters of more than 8 blocks must be allowed per kernel, once.
template <typename Kernel>
void allow_cluster_size(Kernel kernel, int cluster) {
#if OPGUIDE_HAVE_CLUSTERS
  if (cluster <= 8) return;
  static std::mutex mutex;
  static std::map<std::tuple<int, const void*>, bool> done;
  const auto key =
      std::make_tuple(current_device_index(), reinterpret_cast<const void*>(kernel));
  const std::lock_guard<std::mutex> lock(mutex);
  if (done[key]) return;
  if (cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                           cudaFuncAttributeNonPortableClusterSizeAllowed,
                           1) != cudaSuccess) {
    (void)cudaGetLastError();
  }
  done[key] = true;
#else
  (void)kernel, (void)cluster;
#endif
}

// How many clusters of `cluster` blocks fit on the GPU at once (cached).
template <typename Kernel>
int active_clusters(Kernel kernel, int cluster, int threads, size_t shared_bytes) {
  static std::mutex mutex;
  static std::map<std::tuple<int, const void*, int, int, size_t>, int> cache;
  const auto key =
      std::make_tuple(current_device_index(), reinterpret_cast<const void*>(kernel),
                      cluster, threads, shared_bytes);
  const std::lock_guard<std::mutex> lock(mutex);
  const auto found = cache.find(key);
  if (found != cache.end()) return found->second;
  int count = 0;
#if OPGUIDE_HAVE_CLUSTERS
  const LaunchEx launch(dim3(static_cast<unsigned>(cluster)),
                        dim3(static_cast<unsigned>(threads)), shared_bytes, nullptr,
                        cluster, false);
  if (cudaOccupancyMaxActiveClusters(&count, kernel, &launch.config) != cudaSuccess) {
    (void)cudaGetLastError();
    count = 0;
  }
#else
  (void)kernel, (void)threads, (void)shared_bytes;
#endif
  cache.emplace(key, count);
  return count;
}

// How a call launches: its stream, programmatic dependent launch (above),
// and the most blocks per cluster (0: no clusters).
struct LaunchSettings {
  cudaStream_t stream = nullptr;
  bool pdl = false;
  int max_cluster = kMaxClusterBlocks;
};

// The one launch of every planned kernel: in clusters of `cluster` blocks
// along x when cluster > 1, else a plain launch; with PDL when `pdl`. A
// forced plan may not have been through a planner, so the kernel is allowed
// its shared memory and cluster size here too (a cached look-up once done).
template <typename... Params, typename... Args>
cudaError_t launch_planned(void (*kernel)(Params...), dim3 grid, dim3 block,
                           size_t shared_bytes, int cluster, cudaStream_t stream,
                           bool pdl, Args... args) {
  if (kernel == nullptr) return cudaErrorInvalidValue;  // a plan no table entry has
  if (shared_bytes > kDefaultSharedBytes) allow_shared_bytes(kernel, shared_bytes);
  if (cluster > 8) allow_cluster_size(kernel, cluster);
  if (cluster > 1)
    return launch_kernel_in_clusters(kernel, grid, block, shared_bytes, stream, pdl,
                                     cluster, args...);
  return launch_kernel(kernel, grid, block, shared_bytes, stream, pdl, args...);
}

}  // namespace opguide
